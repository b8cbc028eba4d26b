"""Reproduce the finding of Vafa et al. (2024), Table 1 and Table 2, at small scale.

Three GPT-2s of the same size are trained on the same synthetic city from three traversal
distributions — shortest paths, noisy shortest paths, random walks (App. F) — with the same
token budget (the same number of training tokens per step and the same steps), each after the
demo's curriculum (``--curriculum``: 1,000 steps on routes of ≤ 20 turns, 1,000 on ≤ 40; same
batch, fewer tokens; lr 2e-3 → 2e-5 cosine per stage). Each model, an
untrained one and the true world model (oracle) are then scored on the same held-out material:

- the next-token test and the current-state probe (after the final LayerNorm, the reference's
  last layer), both on held-out routes of the model's own traversal distribution (random walks for
  the untrained model), and the Myhill–Nerode compression and distinction metrics (ε = 0.01,
  depth 5, the same state pairs for every model);
- detours (Table 2): valid-route rate under random and adversarial detours, each model on the
  (origin, destination) pairs of its own held-out routes (as the reference's ``detour_analysis.py``).

Reference rows beside the trained models: the ideal predictors of the random-walk and the
shortest-path data (:class:`~interp.models.lm.IdealLM`, the ceiling a model trained on that data
can reach) and the true world model.

The Myhill–Nerode metrics are computed with both estimators: ``exact`` (enumerated boundaries)
and ``sampled`` (the paper's procedure, M = 30). Writes ``<out>/table1_{exact,sampled}.{csv,md}``, ``<out>/detours.{csv,md}``, ``<out>/results.json`` and
``figures/table1.png``. Training resumes from ``<out>/<kind>/last`` when present.

The run: :func:`interp.jobs.table1.run_table1`.

    python experiments/table1.py                      # the README's numbers
    python experiments/table1.py --quick              # a few minutes: smaller budget and pairs
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from interp.jobs.table1 import Table1Config, run_table1

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(REPO / "runs" / "table1"))
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1_600_000, help="training-data token budget per model")
    ap.add_argument(
        "--steps",
        type=int,
        default=3000,
        help="training steps per model (the demo's 3,000: 900, the earlier default, left "
        "the random-walks model far from its ideal predictor)",
    )
    ap.add_argument("--tokens-per-step", type=int, default=2048)
    ap.add_argument(
        "--curriculum",
        default=None,
        help="short routes first, as the demo: MAX_TOKENS:STEPS stages before the main "
        "training (interp.jobs.experiment.CurriculumConfig; default 23:1000,43:1000, "
        "with --quick 23:100,43:100); '' for none",
    )
    ap.add_argument("--max-directions", type=int, default=60)
    ap.add_argument("--pairs", type=int, default=300, help="state pairs for the Myhill–Nerode metrics")
    ap.add_argument("--routes", type=int, default=300, help="origin–destination pairs for detours")
    ap.add_argument(
        "--max-nodes",
        type=int,
        default=1024,
        help="exact estimator: skip (and count) a pair whose suffix tree exceeds this many nodes "
        "at one depth; an untrained model accepts ~every token, so its pairs are skipped",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="budget 150k tokens, 300 steps, 60 pairs")
    args = ap.parse_args(argv)
    run_table1(Table1Config(**vars(args)), REPO / "figures" / "table1.png", say=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
