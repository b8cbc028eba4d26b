"""Train the demo model and ship it: ``make demo-model``.

Trains the embedded default (:class:`interp.jobs.experiment.ExperimentConfig`, seed 1: the recipe
``interp run`` starts from) into ``--run`` through :func:`interp.jobs.experiment.run_experiment` — the
path of ``interp train`` — and copies its ``best/`` checkpoint, training log and manifest into
``interp/demo_model/`` (:func:`interp.jobs.experiment.package_model`), which ``interp run`` then
starts from on every machine. ``--from RUN`` packages a finished run instead of training, after
checking that its recipe is the embedded default's (e.g. seed 1 of ``experiments/demo_seeds.py``,
which trains that same recipe).

    python experiments/demo_model.py                          # ≈ 22 min on 2 cores, then packages
    python experiments/demo_model.py --from runs/demo_seeds/seed1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from interp.jobs.experiment import DEMO_MODEL, ExperimentConfig, package_model, run_experiment, training_recipe

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="runs/demo_model", help="training run folder (default runs/demo_model)")
    ap.add_argument("--from", dest="source", help="package this finished run instead of training")
    ap.add_argument("--out", default=str(DEMO_MODEL), help=f"shipped folder (default {DEMO_MODEL})")
    args = ap.parse_args()
    cfg = ExperimentConfig()
    if args.source:
        run = Path(args.source)
        recipe = json.loads((run / "results.json").read_text())["config"]
        if {k: recipe[k] for k in training_recipe(cfg)} != training_recipe(cfg):
            sys.exit(f"{run} was not trained with the embedded default's recipe: not packaged")
        command = f"python experiments/demo_model.py --from {run}"
    else:
        run = Path(args.run)
        cfg = replace(cfg, name=run.name, runs_dir=str(run.parent))
        run_experiment(cfg, REPO, fresh=True, retrain=True)
        command = "make demo-model"
    out = package_model(run, Path(args.out), command=command)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"shipped {out} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
