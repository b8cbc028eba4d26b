"""Planted harm at depth: a 12-layer GPT-2, harm planted in two layers' MLPs, found by which rule?

Trains a 12-layer GPT-2 (64 wide) on random walks of the tiny city (``experiments/configs/tiny.toml``
with 12 layers and more steps), plants harm (30 % random turns) in the MLPs of two layers
(:func:`interp.train.plant.plant_harm`), and sweeps MLP zero-out on held-out routes. Each planted
model's layers are judged by the shipped verdict rule (``interp.layer_verdicts/2``: groups, a
simultaneous band over the 12 layers, the 0.01-nat margin) and by the /1 rule it replaced (rows, a
per-layer 95 % interval, no margin), on the same sweep; per rule: planted layers found, false
alarms among the other layers, and the unplanted model's false alarms. Issue 20.

    python experiments/planted_deep.py                     # ≈ 5 min on 2 cores
    python experiments/planted_deep.py --plant 2,9 --plant 5,6 --seeds 0 1

Writes ``--out`` (default ``runs/planted_deep``): the base run, one folder per planting (the
checkpoint and its sweep), ``planted_deep.csv`` and ``planted_deep.md``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/planted_deep")
    ap.add_argument("--plant", action="append", help="two planted layers, e.g. 3,8 (repeatable; default 3,8)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="planting seeds (default 0)")
    ap.add_argument("--steps", type=int, default=1500, help="training steps of the base model (default 1500)")
    ap.add_argument("--n", type=int, default=200, help="held-out routes of each sweep (default 200)")
    args = ap.parse_args()
    from interp.analysis.verdicts.layers import legacy_verdicts
    from interp.jobs.experiment import load_experiment, run_experiment
    from interp.jobs.sweep import run_sweep
    from interp.models import ModelConfig
    from interp.train.plant import PlantSpec, plant_harm

    out = Path(args.out).resolve()
    cfg, base = load_experiment(REPO / "experiments" / "configs" / "tiny.toml")
    cfg = replace(
        cfg,
        name="base",
        runs_dir=str(out),
        model=ModelConfig(n_layer=12, d_model=64, n_head=2, n_ctx=32),
        train=replace(cfg.train, steps=args.steps, eval_every=500),
    )
    if not (out / "base" / "results.json").exists():
        run_experiment(cfg, base, progress=False, retrain=True)
    best = out / "base" / "best"
    plantings = [tuple(int(x) for x in p.split(",")) for p in (args.plant or ["3,8"])]
    rows = []
    jobs = [("unplanted", (), None)] + [(f"L{'_'.join(map(str, p))}_s{s}", p, s) for p in plantings for s in args.seeds]
    for name, layers, seed in jobs:
        model = (
            best
            if seed is None
            else plant_harm(
                best, out / name, PlantSpec(layers=layers, seed=seed), progress=False, log=lambda *_: None
            ).model
        )
        run = run_sweep(model, kind="mlp-zero", n=args.n, seed=0, out=out / name / "sweep", log=lambda *_: None)
        for rule, verdicts in (("/2 (shipped)", run.verdicts), ("/1 (replaced)", legacy_verdicts(run.sweep))):
            harmful = set(verdicts.harmful)
            rows.append(
                {
                    "model": name,
                    "rule": rule,
                    "planted": sorted(layers),
                    "harmful": sorted(harmful),
                    "found": len(harmful & set(layers)),
                    "false alarms": len(harmful - set(layers)),
                }
            )
        print(
            f"{name}: planted {sorted(layers)}; /2 harmful {rows[-2]['harmful']}, /1 harmful {rows[-1]['harmful']}",
            flush=True,
        )
    df = pd.DataFrame(rows)
    df.to_csv(out / "planted_deep.csv", index=False)
    summary = []
    for rule, g in df.groupby("rule", sort=False):
        pl, ctl = g[g.model != "unplanted"], g[g.model == "unplanted"]
        tp, fp = int(pl["found"].sum()), int(pl["false alarms"].sum())
        summary.append(
            {
                "rule": rule,
                "planted layers": int(pl.planted.map(len).sum()),
                "found": tp,
                "false alarms (planted models)": fp,
                "false alarms (unplanted)": int(ctl["false alarms"].sum()),
                "precision": tp / (tp + fp) if tp + fp else float("nan"),
                "recall": tp / int(pl.planted.map(len).sum()),
                "exact plantings": f"{int((pl.found == pl.planted.map(len)).mul(pl['false alarms'] == 0).sum())}/{len(pl)}",
            }
        )
    table = pd.DataFrame(summary).to_markdown(index=False, floatfmt=".2f")
    (out / "planted_deep.md").write_text(df.to_markdown(index=False) + "\n\n" + table + "\n")
    print(df.to_string(index=False), "\n", table, sep="")


if __name__ == "__main__":
    main()
