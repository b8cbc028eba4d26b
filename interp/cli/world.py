"""``interp worlds``, ``interp data``, ``interp train``, ``interp run``: worlds, their data, training runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_worlds(args: argparse.Namespace) -> int:
    from interp.worlds import WORLD_KINDS

    width = max(map(len, WORLD_KINDS))
    for kind, (_, _, text) in WORLD_KINDS.items():
        print(f"{kind:<{width}}  {text}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.results import write_json
    from interp.worlds import parse_world
    from interp.worlds.io import write_sequences
    from interp.worlds.split import split_sequences

    missing = [o for o, v in (("--world", args.world), ("--out", args.out)) if not v]
    if missing:
        raise ValueError(
            f"interp data needs {' and '.join(missing)} (a world's sequences), or a sub-command: "
            "interp data ioi --model M --out FILE.jsonl"
        )
    world = parse_world(args.world)
    sequences = world.generate(args.n, np.random.default_rng(args.seed))
    train, test = split_sequences(world, sequences, args.test_fraction, args.seed)
    out = Path(args.out)
    write_sequences(out / "train.txt", train)
    write_sequences(out / "test.txt", test)
    write_json(out / "world.json", world.spec())
    write_json(
        out / "data.json",
        {
            "world": world.describe(),
            "seed": args.seed,
            "drawn": len(sequences),
            "train": len(train),
            "test": len(test),
            "test_fraction": args.test_fraction,
        },
    )
    print(f"{world.describe()}\nwrote {len(train)} train and {len(test)} test sequences to {out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from interp.config.runs import MainRun
    from interp.jobs.experiment import load_experiment, run_experiment

    run = MainRun.from_args(args)
    cfg, base = load_experiment(args.config)
    results = run_experiment(cfg, base, fresh=run.fresh, progress=not run.no_progress, retrain=run.retrain)
    print(results["run_dir"])
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from interp.config import config_job
    from interp.config.runs import MainRun
    from interp.jobs.experiment import load_experiment
    from interp.jobs.pipeline import run_main_job

    run = MainRun.from_args(args)
    if args.config is not None and config_job(args.config) == "pragworld":  # a pretrained model on PragWorld
        from interp.jobs.pragworld import load_job_config, run_pragworld_job

        results = run_pragworld_job(load_job_config(args.config), fresh=run.fresh, progress=not run.no_progress)
        print(results["run_dir"])
        return 0
    cfg, base = load_experiment(args.config)
    results = run_main_job(cfg, base, fresh=run.fresh, progress=not run.no_progress, retrain=run.retrain)
    print(results["run_dir"])
    return 0
