"""Planted harm: do the layer verdicts find harm planted in known layers, and which repair removes it?

Issue 14. Starting from a trained streets checkpoint (default ``runs/demo/best``):

1. **Plant** (:func:`interp.train.plant.plant_harm`): fine-tune only chosen layers' MLPs on
   corrupted training routes — several layers, corruptions and seeds — plus two controls: the
   unplanted model, and the same recipe on *clean* routes (a layer fine-tuned hard must not be
   called harmful just for having been fine-tuned).
2. **Detect**, on every model, with three verdict sources: the MLP zero-out sweep (PragWorld §6.2,
   per-sequence next-token loss, paired bootstrap), direct-effect patching of one-token
   state-changing edits (§6.1), and the current-state probes (the change of held-out probe
   accuracy across each block, :func:`interp.analysis.verdicts.probes.probe_verdicts`). Per source:
   precision and recall of the planted layers over the plantings, and the false-positive rate
   (layers called harmful) on the controls.
3. **Repair** the issue's recipe planting (layer 3, 30 % random turns), on the MLP zero-out verdict
   file's harmful layers: (a) zeroing them at inference through the intervention context; (b) HLS
   fine-tuning on the clean routes over a β grid, against plain fine-tuning on the same data,
   steps and seeds, and ULA on the verdict file's useful layers; held-out loss, next-token test and
   Myhill–Nerode metrics of each beside the planted and the unplanted model, with 95 % intervals
   over seeds (t) or of the evaluation (±1.96 SE, one seed). β is in the regulariser's
   convention: ``loss = L + β · Σ_{ℓ∈H} mean(MLP_out_ℓ²)`` (a single harmful layer: sum = mean).

Writes ``--out`` (default ``runs/planted_harm``): one folder per model (checkpoint, sweeps,
probe verdicts), ``detection.csv`` / ``detection_summary.csv`` / ``repair.csv``, the Markdown
tables ``planted_harm.md`` and ``results.json``.

The run: :func:`interp.jobs.planted_harm.run_planted_harm` (scores:
:mod:`interp.analysis.planted.world`; tables: :mod:`interp.viz.planted_tables`).

    python experiments/planted_harm.py                       # ≈ 15–20 min on 2 cores
    python experiments/planted_harm.py --quick               # fewer plantings and β values
"""

from __future__ import annotations

import argparse
import os
import sys

from interp.jobs.planted_harm import PlantedHarmConfig, run_planted_harm

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="runs/demo/best", help="trained streets checkpoint (default runs/demo/best)")
    p.add_argument("--out", default="runs/planted_harm", help="output folder (default runs/planted_harm)")
    p.add_argument("--n", type=int, default=200, help="held-out sequences of each sweep (default 200)")
    p.add_argument("--probe-train", type=int, default=100, help="probe training sequences (default 100)")
    p.add_argument("--probe-test", type=int, default=100, help="probe test sequences (default 100)")
    p.add_argument("--betas", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2, 1e-1], help="HLS β grid")
    p.add_argument("--alpha", type=float, default=1e-3, help="ULA α (default 1e-3, the paper's)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds (default 0 1)")
    p.add_argument("--steps", type=int, default=100, help="fine-tuning steps of every repair run (default 100)")
    p.add_argument("--lr", type=float, default=3e-4, help="fine-tuning peak lr (default 3e-4)")
    p.add_argument("--n-eval", type=int, default=200, help="held-out sequences of the repair metrics")
    p.add_argument("--mn-pairs", type=int, default=50, help="Myhill–Nerode states / state pairs (default 50)")
    p.add_argument("--mn-depth", type=int, default=3, help="Myhill–Nerode suffix depth (default 3)")
    p.add_argument(
        "--routes",
        type=int,
        default=100,
        help="greedy routes of the planted, zeroed and unplanted models (default 100; 0: none)",
    )
    p.add_argument(
        "--reuse-detection",
        action="store_true",
        help="read the verdict files of an earlier run in --out instead of "
        "sweeping again (plantings and finished fine-tuning runs are always reused)",
    )
    p.add_argument("--detect-only", action="store_true", help="plant and detect; no repair")
    p.add_argument("--quick", action="store_true", help="3 plantings, 1 control, β 1e-3 and 1e-1, one seed")
    args = p.parse_args(argv)
    command = f"python experiments/planted_harm.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    print(run_planted_harm(PlantedHarmConfig(**vars(args)), command, say=lambda s: print(s, flush=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
