"""Planted harm at real depth: SmolLM2-135M-Instruct (30 layers) on indirect-object identification.

Issue 30, item 4. Starting from the unplanted model:

1. **Prompts** (:func:`interp.datasets.ioi.ioi_examples`): training and held-out IOI prompts with
   disjoint name pairs (a training prompt whose unordered {IO, S} pair occurs among the held-out
   ones is dropped, and counted), written as contrast files ``train.jsonl`` / ``heldout.jsonl``.
2. **Plant** (:func:`interp.train.plant.plant_harm`, ``interp plant --corruption foil_share``): only the
   MLP of the planted layer(s) trained, toward the subject S instead of the indirect object IO on a
   ``--share`` of the training prompts (every other weight bit-identical; checked here on the saved
   weights); plantings at an early, a middle and a late layer and one two-layer planting, and two
   controls: the unplanted model and the same recipe on correct targets (``clean``) at one layer
   (``--control-lr``: also at smaller learning rates, a control whose change is sized like a planting's).
3. **Judge** each model by the 30-layer MLP zero-out sweep on the held-out prompts (metric: logit
   difference IO − S; the calibrated rule of :mod:`interp.analysis.verdicts.layers`, groups = template ×
   name pair), against the unplanted model's own verdicts (:mod:`interp.analysis.planted.judge`): the
   layers that *become* harmful, the rank of the planted layer among the layers whose verdict
   changes, precision / recall of the newly harmful layers beside the paper's raw rule (accuracy
   with the layer ablated vs without). A layer harmful on both models whose harm grew (the paired
   change of its effect on the same prompts beyond the margin, :func:`interp.analysis.planted.judge.harm_rise`)
   counts as newly harmful. A planting in several layers is also undone one layer at a time (its
   MLP weights put back): the harm each planted layer carries, an oracle that removes nothing. Every other layer that changes is measured along two paths
   (:func:`interp.analysis.engines.path_removal.mlp_path_removal`): its output removed only from the planted MLP's
   input (what it does *through* the planted layer) and only from the final norm's input (its
   direct effect).
4. **Repair** (``--repair`` plantings): the found (newly harmful) layers zeroed at inference; plain
   fine-tuning of the whole model on the clean training prompts (loss on the answer token); HLS on
   the found layers (:class:`interp.train.regularisers.HLS`, the same data and steps) — held-out
   accuracy and logit difference beside the planted and the unplanted model, with a t-interval
   over the fine-tuning seeds (one value: the evaluation's cluster-bootstrap interval).

Writes ``--out`` (default ``runs/ioi_planted``): the prompt files, one folder per model (planted
weights, ``sweep.*``, ``verdicts.json``), ``changes.csv``, ``detection.csv``, ``paths.csv``,
``repair.csv``, ``ioi_planted.md`` (both tables) and ``results.json`` (settings, machine, the fp32
matmul peak measured at the start, date, seconds). Plantings, sweeps and repair evaluations found
in ``--out`` with the same settings are reused.

    python experiments/ioi_planted.py                  # the issue's table (≈ 1 h on 2 loaded cores)
    python experiments/ioi_planted.py --quick          # one planting, few prompts (CI-sized)
"""

from __future__ import annotations

import argparse
import os
import sys

from interp.jobs.ioi_planted import MODEL, IOIPlantedConfig, run_ioi_planted

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help=f"HF folder of the unplanted model (default: the pinned {MODEL})")
    p.add_argument("--out", default="runs/ioi_planted", help="output folder (default runs/ioi_planted)")
    p.add_argument(
        "--plant", action="append", help="planted layer(s), e.g. 4 or 8,20 (repeatable; default 4, 15, 24 and 8,20)"
    )
    p.add_argument("--control-layer", type=int, default=15, help="layer of the clean-recipe control (default 15)")
    p.add_argument(
        "--control-lr",
        type=float,
        nargs="+",
        default=None,
        help="peak lr(s) of the clean-recipe control(s) (default: --lr, the same recipe; a smaller one sizes "
        "the control's change of the logit difference like a planting's)",
    )
    p.add_argument("--share", type=float, default=0.3, help="share of training prompts trained toward S (default 0.3)")
    p.add_argument("--steps", type=int, default=30, help="planting steps (default 30)")
    p.add_argument("--lr", type=float, default=2e-3, help="planting peak lr (default 2e-3)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per step, planting and repair (default 16)")
    p.add_argument("--plant-seed", type=int, default=0, help="planting seed (default 0)")
    p.add_argument("--n-train", type=int, default=256, help="training prompts (default 256)")
    p.add_argument("--n-heldout", type=int, default=48, help="held-out prompts (default 48: 24 groups)")
    p.add_argument("--sweep-batch", type=int, default=32, help="prompts per sweep forward (default 32)")
    p.add_argument(
        "--repair",
        action="append",
        help="plantings to repair, e.g. 15 or L8+L20 (repeatable; default: the second planting, the middle layer)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds of the repair (default 0 1)")
    p.add_argument("--repair-steps", type=int, default=12, help="repair fine-tuning steps (default 12)")
    p.add_argument("--repair-lr", type=float, default=2e-5, help="repair fine-tuning peak lr (default 2e-5)")
    p.add_argument("--beta", type=float, default=1e-3, help="HLS β (default 1e-3, the paper's)")
    p.add_argument(
        "--repair-objectives",
        nargs="*",
        choices=("plain", "hls"),
        default=["plain", "hls"],
        help="fine-tuning repairs (default plain hls; none: only the found layers zeroed)",
    )
    p.add_argument("--no-control", action="store_true", help="skip the clean-recipe control planting")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the machine is shared)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI-sized: one planting (layer 15), 24 held-out and 64 "
        "training prompts, 10 planting steps, one repair seed",
    )
    args = p.parse_args(argv)
    print(run_ioi_planted(IOIPlantedConfig(**vars(args)), log=lambda s: print(s, flush=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
