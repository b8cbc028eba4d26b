"""Ground truth for the removal kinds (issue 31, items 1 and 5): are planted layers harmful under zero,
mean, resample and scale, and the unplanted ones under none?

On the shipped demo model (``interp/demo_model/``, 4 layers, with the data it was trained on drawn
again from the embedded default's seed — byte-identical, checked by SHA-256), plant harm with
``interp plant`` (only one layer's MLP fine-tuned, 150 steps; PlantSpec defaults) in each of layers
0, 1, 2 and 3 with 30 % random turns, and in layer 2 with the mirrored half-map (an
input-dependent corruption: a consistent wrong map of the west of the city); then run the MLP sweep
of each model (and of the unplanted one) with ``--ablation zero,mean,resample,scale`` on 200
held-out routes, the shipped verdict rule. Writes ``--out`` (default ``runs/removal_ground_truth``):
the demo run folder, one folder per planting and per sweep, ``ground_truth.csv`` /
``ground_truth.md`` (per model and removal, the layers called harmful and useful; the planted
layer's effect, interval and dose-response shape) and ``results.json``.

    python experiments/removal_ground_truth.py                 # ≈ 25 min on 2 loaded cores
    python experiments/removal_ground_truth.py --only L1_turns # one planting (and the unplanted model)
    python experiments/removal_ground_truth.py --confirm       # and each verdict confirmed on held-out groups
"""

from __future__ import annotations

import argparse
import os
import sys

from interp.jobs.removal_truth import RemovalTruthConfig, run_removal_ground_truth

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/removal_ground_truth")
    ap.add_argument("--n", type=int, default=200, help="held-out routes per sweep")
    ap.add_argument("--only", help="comma-separated plantings (default all)")
    ap.add_argument("--draws", type=int, default=3)
    ap.add_argument(
        "--confirm",
        action="store_true",
        help="also confirm the verdicts on held-out groups (--folds 2: discovery and confirmation halves)",
    )
    args = ap.parse_args(argv)
    table = run_removal_ground_truth(
        RemovalTruthConfig(**vars(args)), log=lambda m: print(m, file=sys.stderr, flush=True)
    )
    print(table.to_markdown(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
