"""``interp sweep``, ``finetune``, ``plant``, ``report``: layer verdicts, regularised fine-tuning,
planted harm, the run report."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from interp.cli.common import placement_from_args


def _run_sweep(args: argparse.Namespace, job: Any) -> Any:
    from interp.analysis.engines.unitstore import LongRun
    from interp.jobs.sweep import run_sweep
    from interp.worlds import parse_world

    return run_sweep(
        args.model,
        job,
        data=args.data,
        world=parse_world(args.world) if args.world else None,
        out=args.out,
        placement=placement_from_args(args),
        log=sys.stderr,
        control=LongRun(max_memory=args.max_memory, overwrite=args.overwrite, progress=False if args.quiet else None),
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from interp.analysis.config.sweep_job import SweepJob
    from interp.jobs.sweep import PatchingRun

    job = SweepJob.from_args(args)  # every setting checked, before any model loads
    if args.max_memory is not None:
        from interp.analysis.engines.budget import parse_memory

        parse_memory(args.max_memory, free=1)  # a bad size fails before the model loads
    info = sys.stderr if args.json else sys.stdout
    try:
        run = _run_sweep(args, job)
    except KeyboardInterrupt:
        from interp.analysis.engines.unitstore import resume_hint

        hint = resume_hint(args.out)
        if hint:
            print(f"interrupted: {hint}", file=sys.stderr)
        raise
    if int(os.environ.get("RANK", "0")) != 0:  # under accelerate launch / torchrun the first process reports
        return 0
    s = run.summary()
    extra = f"; {s['n_pairs']} pairs, {s['n_failed']} sequences without one" if "n_pairs" in s else ""
    if "skipped" in s:  # PragWorld pairs: the reasons
        extra = f"; {s['n_pairs']} pairs patched, {s['n_failed']} skipped {s['skipped']}"
    print(f"model {args.model}: {args.kind} sweep on {s['data']}{extra}", file=info)
    print(run.table(), file=info)
    if isinstance(run, PatchingRun):  # --kind activation-patching
        print(
            f"wrote {run.out}/patching_resid_pre.csv, patching_heads.csv (+ _mean.csv, .json), "
            f"{', '.join(f.name for f in run.figures)}",
            file=info,
        )
    else:
        print(f"wrote {run.out}/sweep.csv, sweep_layers.csv, sweep.json, verdicts.json, {run.figure.name}", file=info)
        if s.get("agreement"):
            print(
                f"wrote {run.out}/verdicts_<removal>.json for {', '.join(s['ablation'])}; agreement.csv, agreement.md"
                + ("; dose_response.csv, dose_response.png" if (run.out / "dose_response.png").exists() else ""),
                file=info,
            )
    if args.json:
        print(json.dumps(s, default=str))
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    from interp.config import FinetuneConfig
    from interp.config.runs import FinetuneRun
    from interp.train.finetune import finetune_worker, run_finetune

    cfg = FinetuneConfig.from_args(args)  # the file and the flags given: errors before any process starts
    run = FinetuneRun.from_args(args)  # --processes checked
    given = FinetuneConfig.given_flags(args)  # the placement flags given, in place of the file's settings
    if given and run.processes > 1:
        raise ValueError(
            f"--processes {run.processes} reads the settings from the config file: set "
            f"{', '.join(given)} there instead of on the command line"
        )
    if "device_map" in given:
        from interp.models.device import resolve_device_map

        resolve_device_map(given["device_map"])  # a bad map fails here, before any model loads
    if run.processes > 1:
        from interp.models.parallel import launch_local

        launch_local(finetune_worker, run.processes, str(args.config), run.fresh, not run.no_progress)
        print((cfg.out_dir / "finetune_table.md").read_text(), end="")
        print(cfg.out_dir)
        return 0
    report = run_finetune(cfg, fresh=run.fresh, progress=not run.no_progress)
    if report is not None:  # under `accelerate launch` / `torchrun` only the main process reports
        print(report.markdown())
        figure = f"{report.figure.name}, " if report.figure is not None else ""
        print(f"wrote {report.out}/finetune_table.csv, finetune_table.md, {figure}results.json", file=sys.stderr)
        print(report.out)
    return 0


def cmd_plant(args: argparse.Namespace) -> int:
    from interp.analysis.engines.sweep_options import parse_layers
    from interp.train.plant import PlantSpec, plant_harm

    layers = parse_layers(args.layers)
    if not layers:
        raise ValueError("--layers: give the layers whose MLPs learn the corruption, e.g. 3")
    spec = PlantSpec(
        layers=tuple(layers),
        corruption=args.corruption,
        share=args.share,
        word=args.word,
        category=args.category,
        seed=args.seed,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
    )
    result = plant_harm(
        args.model,
        args.out,
        spec,
        train_file=args.data,
        fresh=args.fresh,
        progress=not args.no_progress,
        placement=placement_from_args(args),
    )
    print(result.model)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from interp.viz.report import write_report

    sequences = None
    if args.sequences:
        from interp.worlds.io import read_sequences

        sequences = read_sequences(args.sequences)[: args.n_sequences]
    model = False if args.no_attention else args.model
    placement = placement_from_args(args)  # a bad --device/--dtype fails before anything is written
    path = write_report(
        args.run_dir,
        model=model,
        sequences=sequences,
        max_rows=args.max_rows,
        n_sequences=args.n_sequences,
        max_tokens=args.max_tokens,
        out=args.out,
        placement=placement,
    )
    print(path)
    return 0
