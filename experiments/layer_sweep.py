"""Layer sweep of a trained checkpoint: which layers help or hurt next-token prediction?

Runs :func:`interp.jobs.sweep.run_sweep` (the code behind ``interp sweep``) on a checkpoint:
``mlp-zero`` zeroes each layer's MLP output in turn and scores the per-example next-token loss on
the run's held-out sequences (``<checkpoint>/../data/test.txt``); ``direct-effect`` patches the
residual stream of a one-token state-changing edit into the original route, layer by layer. Writes
``sweep.csv``, ``sweep_layers.csv``, ``sweep.json``, ``verdicts.json``, ``layers.png`` and
``run.json`` to ``--out`` (default ``<checkpoint>/../sweep_<kind>/``) and prints the layer table.

    python experiments/layer_sweep.py                          # runs/demo/best, MLP zero-out
    python experiments/layer_sweep.py runs/demo/best --kind direct-effect --n 100
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from interp.analysis.engines.sweep_options import KINDS, parse_layers
from interp.analysis.engines.sweeps import METHODS
from interp.jobs.sweep import run_sweep

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint", nargs="?", default="runs/demo/best", help="checkpoint folder (default runs/demo/best)")
    p.add_argument("--kind", choices=KINDS, default="mlp-zero")
    p.add_argument("--method", choices=METHODS, default="reuse")
    p.add_argument("--n", type=int, default=200, help="at most this many held-out sequences (default 200)")
    p.add_argument("--layers", help="comma-separated layers (default: all)")
    p.add_argument("--out", help="output folder (default: <checkpoint>/../sweep_<kind>/)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    run = run_sweep(
        args.checkpoint,
        kind=args.kind,
        n=args.n,
        method=args.method,
        layers=parse_layers(args.layers),
        out=args.out,
        seed=args.seed,
    )
    print(f"{args.kind} sweep of {args.checkpoint} on {run.info['data']}")
    print(run.table())
    if hasattr(run, "verdicts"):
        print(f"useful: {run.verdicts.useful}  harmful: {run.verdicts.harmful}")
    print(f"wrote {run.out}")


if __name__ == "__main__":
    main()
