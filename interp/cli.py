"""The ``interp`` command. Heavy imports (torch, transformer_lens) happen inside the subcommands,
so ``interp --help`` answers at once."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _cmd_worlds(args: argparse.Namespace) -> int:
    from interp.worlds import WORLD_KINDS

    width = max(map(len, WORLD_KINDS))
    for kind, (_, _, text) in WORLD_KINDS.items():
        print(f"{kind:<{width}}  {text}")
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.results import write_json
    from interp.worlds import parse_world
    from interp.worlds.io import write_sequences
    from interp.worlds.split import split_sequences

    world = parse_world(args.world)
    sequences = world.generate(args.n, np.random.default_rng(args.seed))
    train, test = split_sequences(world, sequences, args.test_fraction, args.seed)
    out = Path(args.out)
    write_sequences(out / "train.txt", train)
    write_sequences(out / "test.txt", test)
    write_json(out / "world.json", world.spec())
    write_json(out / "data.json", {"world": world.describe(), "seed": args.seed, "drawn": len(sequences),
                                   "train": len(train), "test": len(test), "test_fraction": args.test_fraction})
    print(f"{world.describe()}\nwrote {len(train)} train and {len(test)} test sequences to {out}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from interp.experiment import load_experiment, run_experiment

    cfg, base = load_experiment(args.config)
    results = run_experiment(cfg, base, fresh=args.fresh, progress=not args.no_progress)
    print(results["run_dir"])
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from interp.experiment import load_experiment
    from interp.pipeline import run_main_job

    cfg, base = load_experiment(args.config)
    results = run_main_job(cfg, base, fresh=args.fresh, progress=not args.no_progress)
    print(results["run_dir"])
    return 0


def _ablations(args: argparse.Namespace) -> list:
    """``--ablate SITE`` (repeatable) → zero-ablation interventions; parsed before any model loads."""
    if not getattr(args, "ablate", None):
        return []
    from interp.hooks import zero

    return [zero(site) for site in args.ablate]


def _intervened(model, interventions: list, name: str, out=None):
    """A ``with`` block running ``model`` (a bridge or BridgeLM) under ``interventions``; says which."""
    import contextlib

    if not interventions:
        return contextlib.nullcontext(None)
    if not hasattr(getattr(model, "bridge", model), "hook_dict"):
        raise ValueError(f"--ablate needs a checkpoint model; {name!r} has no layers to ablate")
    from interp.hooks import intervene

    for iv in interventions:
        print(f"intervention active: {iv.describe()}", file=out or sys.stdout)
    return intervene(model, interventions)


def _cmd_next_token(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.next_token import next_token_test
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences

    ablations = _ablations(args)
    world = parse_world(args.world) if args.world else None
    ckpt = load_checkpoint(args.model, world=world, placement=_placement(args))
    world = ckpt.world
    data = Path(args.data) if args.data else run_data_dir(args.model) / "test.txt"
    if data.exists():
        sequences = read_sequences(data, world)
        source = str(data)
    else:
        sequences = world.generate(args.n, np.random.default_rng(args.seed))
        source = f"{args.n} fresh sequences (seed {args.seed}; may overlap the training data)"
        print(f"note: no held-out file at {data}; scoring {source}", file=sys.stderr)
    if args.n and len(sequences) > args.n:
        sequences = sequences[: args.n]
    with _intervened(ckpt.bridge, ablations, args.model) as active:
        result = next_token_test(ckpt.bridge, world, sequences, progress=not args.json)
    print(f"model {args.model} on {source}")
    print(result)
    for line in active.describe() if active else []:
        print(f"  under {line}")
    if args.json:
        print(json.dumps({**result.summary(), "interventions": active.summary() if active else []}))
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.probes import probe_layers
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences
    from interp.worlds.split import split_sequences

    if args.train_sequences < 1 or args.test_sequences < 1:
        raise ValueError("--train-sequences and --test-sequences must be ≥ 1")
    ckpt = load_checkpoint(args.model, world=parse_world(args.world) if args.world else None,
                           placement=_placement(args))
    world = ckpt.world
    data = Path(args.data) if args.data else run_data_dir(args.model)
    if (data / "train.txt").exists() and (data / "test.txt").exists():
        train = read_sequences(data / "train.txt", world)[: args.train_sequences]
        test = read_sequences(data / "test.txt", world)[: args.test_sequences]
        source = f"{data}/train.txt and test.txt"
    else:
        n = args.train_sequences + args.test_sequences
        drawn = world.generate(n, np.random.default_rng(args.seed))
        train, test = split_sequences(world, drawn, args.test_sequences / n, args.seed)
        source = f"{n} fresh sequences (seed {args.seed}), split by {world.kind} split key"
        print(f"note: no train.txt/test.txt in {data}; probing on {source}", file=sys.stderr)
    result = probe_layers(ckpt.bridge, world, train, test, layers=args.layers, l2=args.l2,
                          max_iter=args.max_iter, progress=not args.json)
    print(f"model {args.model}: current-state probes on {source}")
    print(result)
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary()))
    return 0


def _cmd_navigate(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.navigation import (
        ShortestPathLM,
        decode_routes,
        detour_test,
        pairs_from_sequences,
        reconstruct_map,
        sample_pairs,
    )
    from interp.models.checkpoint import run_data_dir
    from interp.models.lm import lm_from_arg
    from interp.results import write_json
    from interp.worlds import parse_world
    from interp.worlds.base import WorldError
    from interp.worlds.io import read_sequences

    if args.pairs < 1:
        raise ValueError("--pairs must be >= 1")
    kinds = [k.strip() for k in args.detours.split(",") if k.strip()] if args.detours else []
    try:
        probs = [float(x) for x in args.p.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--p must be comma-separated probabilities, got {args.p!r}") from None
    if args.model == "route-oracle":  # the navigation reference: shortest routes, `end` on arrival
        if not args.world:
            raise WorldError("model 'route-oracle' needs --world (it carries no world of its own)")
        world = parse_world(args.world)
        lm = ShortestPathLM(world)
    else:
        lm, world = lm_from_arg(args.model, parse_world(args.world) if args.world else None, _placement(args))
    data = run_data_dir(args.model) / "test.txt"
    if Path(args.model).is_dir() and data.exists():
        pairs = pairs_from_sequences(read_sequences(data, world))[: args.pairs]
        source = f"{len(pairs)} held-out (origin, destination) pairs from {data}"
    else:
        pairs = sample_pairs(world, args.pairs, np.random.default_rng(args.seed))
        source = f"{len(pairs)} random (origin, destination) pairs (seed {args.seed})"
    out = Path(args.out) if args.out else None
    print(f"model {args.model} ({lm.describe()}) on {world.describe()}; {source}")
    greedy = decode_routes(lm, world, pairs, seed=args.seed)
    print(greedy)
    summary: dict = {"model": args.model, "pairs": source, "routes": greedy.summary()}
    if out:
        greedy.save(out, "routes")
    if kinds:
        det = detour_test(lm, world, pairs, kinds, probs, seed=args.seed, progress=not args.json)
        print(det)
        summary["detours"] = det.summary()["detours"]
        if out:
            det.save(out, "detours")
    if args.reconstruct:
        from interp.viz.maps import draw_reconstruction

        routes = greedy if args.map_from == "greedy" else decode_routes(
            lm, world, pairs, sample=True, seed=args.seed)
        rec = reconstruct_map(world.graph, routes.routes)
        print(f"from {args.map_from} routes: {rec}")
        summary["map"] = {"from": args.map_from, **rec.summary()}
        if out:
            rec.save(out, "map")
            print(f"wrote {draw_reconstruction(rec, out / 'map.png')}")
    if out:
        write_json(out / "navigate.json", summary)
    if args.json:
        print(json.dumps(summary, default=str))
    return 0


def _cmd_metrics(args: argparse.Namespace) -> int:
    from interp.metrics.acceptance import rule_from_args
    from interp.metrics.myhill_nerode import myhill_nerode
    from interp.models.lm import lm_from_arg
    from interp.worlds import parse_world

    if args.pairs == "all":
        pairs: int | str = "all"
    else:
        try:
            pairs = int(args.pairs)
        except ValueError:
            raise ValueError(f"--pairs must be a positive integer or 'all', got {args.pairs!r}") from None
    rule = rule_from_args(args.epsilon, args.top_k, args.top_p)
    ablations = _ablations(args)
    lm, world = lm_from_arg(args.model, parse_world(args.world) if args.world else None, _placement(args))
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    info = sys.stderr if args.json else sys.stdout
    print(f"model {args.model} ({lm.describe()}) on {world.describe()}", file=info)
    with _intervened(getattr(lm, "bridge", None), ablations, args.model, out=info) as active:
        result = myhill_nerode(world, lm, rule=rule, depth=args.depth, pairs=pairs, estimator=args.estimator,
                               samples=args.samples, prefix_pairs=args.prefix_pairs, seed=args.seed,
                               max_nodes=args.max_nodes, max_states=args.max_states, metrics=metrics,
                               progress=not args.no_progress)
    result.settings["interventions"] = active.summary() if active else []
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary(), default=str))
    else:
        print(result)
        for line in active.describe() if active else []:
            print(f"  under {line}")
        if args.out:
            print(f"wrote {Path(args.out) / 'myhill_nerode.csv'} and myhill_nerode.json")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from interp.analysis.runner import parse_layers, run_sweep
    from interp.worlds import parse_world

    layers = parse_layers(args.layers)
    info = sys.stderr if args.json else sys.stdout
    pragworld = bool(args.data) and Path(args.data).suffix.lower() == ".csv"
    n = args.n if args.n is not None else (None if pragworld else 200)
    run = run_sweep(args.model, kind=args.kind, world=parse_world(args.world) if args.world else None,
                    data=args.data, n=n, method=args.method, layers=layers, out=args.out, seed=args.seed,
                    batch_size=args.batch_size, length=args.length, edit_at=args.edit_at, grouping=args.grouping,
                    placement=_placement(args),
                    verify_top=args.verify_top, log=sys.stderr,
                    prepend_bos={"auto": None, "on": True, "off": False}[args.prepend_bos],
                    chat_template={"auto": None, "on": True, "off": False}[args.chat_template])
    if int(os.environ.get("RANK", "0")) != 0:  # under accelerate launch / torchrun the first process reports
        return 0
    s = run.summary()
    extra = f"; {s['n_pairs']} pairs, {s['n_failed']} sequences without one" if "n_pairs" in s else ""
    if "skipped" in s:  # PragWorld pairs: the reasons
        extra = f"; {s['n_pairs']} pairs patched, {s['n_failed']} skipped {s['skipped']}"
    print(f"model {args.model}: {args.kind} sweep on {s['data']}{extra}", file=info)
    print(run.table(), file=info)
    if args.kind == "activation-patching":
        print(f"wrote {run.out}/patching_resid_pre.csv, patching_heads.csv (+ _mean.csv, .json), "
              f"{', '.join(f.name for f in run.figures)}", file=info)
    else:
        print(f"wrote {run.out}/sweep.csv, sweep_layers.csv, sweep.json, verdicts.json, {run.figure.name}", file=info)
    if args.json:
        print(json.dumps(s, default=str))
    return 0


def _print_pragworld(data, score, source: str, out=None) -> None:
    """The text report of a PragWorld score: data, source, headline numbers, the two tables."""
    out = out or sys.stdout
    print(data.describe(), file=out)
    print(f"predictions: {source}", file=out)
    print(score, file=out)
    print("\nper category (%):", file=out)
    print(score.per_category.drop(columns=["name"]).round(2).to_string(index=False), file=out)
    print("\nper length bucket (short < 11 utterances, medium 11-15, long > 15) (%):", file=out)
    print(score.per_length.round(2).to_string(index=False), file=out)


def _cmd_pragworld_score(args: argparse.Namespace) -> int:
    from interp.benchmarks.pragworld import load_pragworld, parse_yes_no
    from interp.benchmarks.pragworld.parse import read_predictions, read_responses
    from interp.metrics.pragworld import score_pragworld

    data = load_pragworld(args.data, grouping=args.grouping)
    if args.responses:
        responses = read_responses(args.responses, len(data), gold=data.rows["gold"].to_numpy())
        preds = [parse_yes_no(r) for r in responses]
        source = f"{args.responses} ({len(responses)} responses, read by the benchmark's yes/no parser)"
    else:
        preds = read_predictions(args.predictions, len(data))
        source = f"{args.predictions} ({len(preds)} predictions)"
    score = score_pragworld(data, preds, n_boot=args.n_boot, seed=args.seed)
    score.settings["predictions"] = str(args.responses or args.predictions)
    _print_pragworld(data, score, source)
    if args.out:
        score.save(args.out)
        print(f"wrote {Path(args.out) / 'pragworld.json'}, pragworld.csv, pragworld_groups.csv, "
              f"pragworld_categories.csv, pragworld_lengths.csv")
    if args.json:
        print(json.dumps(score.summary()))
    return 0


def _cmd_pragworld_eval(args: argparse.Namespace) -> int:
    import re

    from interp.benchmarks.pragworld import load_pragworld
    from interp.metrics.pragworld_eval import evaluate_model
    from interp.metrics.pragworld import score_pragworld
    from interp.models.checkpoint import load_bridge

    data = load_pragworld(args.data, grouping=args.grouping)  # a bad file fails before the model loads
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    out = Path(args.out) if args.out else (
        Path("runs") / "pragworld" / (re.sub(r"[^A-Za-z0-9._-]+", "_", str(args.model)).strip("._") + f"_{args.prompt}"))
    placement = _placement(args)  # a bad --device/--dtype/--device-map fails before the model loads
    bridge = load_bridge(args.model, placement=placement)
    template = {"auto": None, "on": True, "off": False}[args.chat_template]
    info = sys.stderr if args.json else sys.stdout
    run = evaluate_model(bridge, data, out / "responses.jsonl", prompt=args.prompt, batch_size=args.batch_size,
                         max_new_tokens=args.max_new_tokens, chat_template=template, limit=args.limit,
                         prepend_bos={"auto": None, "on": True, "off": False}[args.prepend_bos],
                         fresh=args.fresh, progress=not args.no_progress, model_name=str(args.model))
    print(f"model {args.model}: {args.prompt} prompt"
          f"{' (chat template)' if run.meta['chat_template'] else ''}; {run.reused} rows reused from "
          f"{run.path}, {run.computed} computed"
          f"{' (a partial last line was discarded)' if run.discarded_partial_line else ''}", file=info)
    if run.meta.get("yes_id") is not None:
        print(f"yes/no tokens: {run.meta['yes_token']!r} (id {run.meta['yes_id']}), "
              f"{run.meta['no_token']!r} (id {run.meta['no_id']})", file=info)
    rows = data if args.limit is None else data.rows.iloc[: args.limit]
    score = score_pragworld(rows, run.predictions, n_boot=args.n_boot, seed=args.seed)
    score.settings.update(model=str(args.model), prompt=args.prompt, grouping=args.grouping,
                          limit=args.limit, responses=str(run.path))
    _print_pragworld(data, score, f"{run.path} ({len(run.records)} rows)", out=info)
    score.save(out)
    print(f"wrote {out}/responses.jsonl, pragworld.json and the per-row/category/length CSVs", file=info)
    if args.json:
        print(json.dumps(score.summary()))
    return 0


def _add_pragworld(sub) -> None:
    s = sub.add_parser("pragworld", help="PragWorld (AAAI 2026): score published responses or evaluate a model")
    pw = s.add_subparsers(dest="pragworld_command", metavar="{score,eval}", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--grouping", choices=("clean", "reference"), default="clean",
                       help="clean (default): Perturbation? flags read whitespace-insensitively (manual split: "
                            "88 groups, 412 alterations); reference: as the published evaluation, which reads ten "
                            "'TRUE ' cells as unaltered rows (98 groups; reproduces the paper's Table 1)")
        p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples of groups (default 2000)")
        p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
        p.add_argument("--json", action="store_true",
                       help="print the summary as one JSON line last (robust, yes, no, original, altered, flip, "
                            "invariant, total in %%; groups, rows; unparseable in %%; robust_ci_low/high, ...)")

    s = pw.add_parser("score", help="accuracies of responses (published outputs format) or predictions")
    s.add_argument("data", help="PragWorld CSV (manual or synthetic split)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--responses", help="JSONL, one record per data row with a 'response' field (the released "
                                         "outputs format), read by the benchmark's yes/no parser")
    src.add_argument("--predictions", help="CSV with a 'prediction' column (yes / no / other), in data-row order")
    s.add_argument("--out", help="also write pragworld.json and the per-row/group/category/length CSVs here")
    common(s)
    s.set_defaults(fn=_cmd_pragworld_score)

    s = pw.add_parser("eval", help="ask a model every row (resumable) and score it")
    s.add_argument("--model", required=True, help="checkpoint folder or a Hugging Face model name in the local "
                                                  "cache (never downloaded)")
    s.add_argument("--data", required=True, help="PragWorld CSV (manual or synthetic split)")
    s.add_argument("--prompt", choices=("benchmark", "label"), default="benchmark",
                   help="benchmark (default): greedy generation read by the yes/no parser; label: P(yes) from "
                        "the two-way softmax over the ' yes'/' no' logits at the last position")
    s.add_argument("--out", help="output folder (default runs/pragworld/<model>_<prompt>); responses.jsonl there "
                                 "is appended row by row, so a rerun resumes")
    s.add_argument("--batch-size", type=int, default=8, help="prompts per forward (default 8)")
    s.add_argument("--max-new-tokens", type=int, default=16,
                   help="benchmark prompt: generation stops at the end of the first line or after this many "
                        "tokens (default 16)")
    s.add_argument("--prepend-bos", choices=("auto", "on", "off"), default="auto",
                   help="both prompts: a BOS first as the model's own tokenizer adds it (auto, default), always "
                        "(on) or never (off); see README 'Tokenizer settings'")
    s.add_argument("--chat-template", choices=("auto", "on", "off"), default="auto",
                   help="wrap the prompt as a user message of the tokenizer's chat template: auto (default: "
                        "when it has one), on, off")
    s.add_argument("--limit", type=int, help="only the first N data rows")
    _add_placement(s, device_map=True)
    s.add_argument("--fresh", action="store_true", help="discard earlier responses in --out instead of resuming")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    common(s)
    s.set_defaults(fn=_cmd_pragworld_eval)


def _cmd_finetune(args: argparse.Namespace) -> int:
    from interp.config import load_finetune_config
    from interp.train.finetune import _worker, run_finetune

    cfg = load_finetune_config(args.config)  # errors in the config surface before any process starts
    given = {k: v for k, v in (("device", args.device), ("dtype", args.dtype), ("device_map", args.device_map),
                               ("n_devices", args.n_devices)) if v is not None}
    if given and args.processes > 1:
        raise ValueError(f"--processes {args.processes} reads the settings from the config file: set "
                         f"{', '.join(given)} there instead of on the command line")
    if given:
        from dataclasses import replace

        from interp.models.device import resolve_device_map

        if "device_map" in given:
            resolve_device_map(given["device_map"])  # a bad map fails here, before any model loads
        cfg = replace(cfg, **given)
    if args.processes < 1:
        raise ValueError(f"--processes must be ≥ 1, got {args.processes}")
    if args.processes > 1:
        from interp.models.parallel import launch_local

        launch_local(_worker, args.processes, str(args.config), args.fresh, not args.no_progress)
        print((cfg.out_dir / "finetune_table.md").read_text(), end="")
        print(cfg.out_dir)
        return 0
    report = run_finetune(cfg, fresh=args.fresh, progress=not args.no_progress)
    if report is not None:  # under `accelerate launch` / `torchrun` only the main process reports
        print(report.markdown())
        print(f"wrote {report.out}/finetune_table.csv, finetune_table.md, {report.figure.name}, results.json",
              file=sys.stderr)
        print(report.out)
    return 0


def _cmd_plant(args: argparse.Namespace) -> int:
    from interp.analysis.runner import parse_layers
    from interp.train.plant import PlantSpec, plant_harm

    layers = parse_layers(args.layers)
    if not layers:
        raise ValueError("--layers: give the layers whose MLPs learn the corruption, e.g. 3")
    spec = PlantSpec(layers=tuple(layers), corruption=args.corruption, share=args.share, word=args.word,
                     category=args.category, seed=args.seed, steps=args.steps, batch_size=args.batch_size,
                     lr=args.lr)
    result = plant_harm(args.model, args.out, spec, train_file=args.data, fresh=args.fresh,
                        progress=not args.no_progress, placement=_placement(args))
    print(result.model)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from interp.viz.report import write_report

    sequences = None
    if args.sequences:
        from interp.worlds.io import read_sequences

        sequences = read_sequences(args.sequences)[: args.n_sequences]
    model = False if args.no_attention else args.model
    placement = _placement(args)  # a bad --device/--dtype fails before anything is written
    path = write_report(args.run_dir, model=model, sequences=sequences, max_rows=args.max_rows,
                        n_sequences=args.n_sequences, max_tokens=args.max_tokens, out=args.out, placement=placement)
    print(path)
    return 0


def _add_placement(parser: argparse.ArgumentParser, device_map: bool = False, device: str | None = "auto") -> None:
    """``--device`` / ``--dtype`` (and ``--device-map`` / ``--n-devices``): where and in what
    precision the model runs; resolved by :meth:`interp.models.device.Placement.resolve`.
    ``device=None``: no defaults (a config file's settings apply unless given)."""
    default = f"default {device}" if device else "default: the config's"
    parser.add_argument("--device", default=device,
                        help=f"auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps ({default})")
    parser.add_argument("--dtype", default="float32" if device else None,
                        help=f"float32, bfloat16, float16, or auto (float32 on CPU; bfloat16 on a CUDA device that "
                             f"supports it, else float16) ({'default float32' if device else default})")
    if device_map and device is None:  # fine-tuning: the config's settings unless given
        parser.add_argument("--device-map", metavar="MAP",
                            help="split the model over several devices (Hugging Face / accelerate placement, one "
                                 "process): auto, balanced, sequential, or a JSON object {module name: device} "
                                 "(default: the config's)")
        parser.add_argument("--n-devices", type=int, metavar="N",
                            help="split the model evenly over this many CUDA GPUs, one process (default: the "
                                 "config's)")
    elif device_map:
        parser.add_argument("--device-map", metavar="MAP",
                            help="split a model larger than one GPU over several devices (Hugging Face / accelerate "
                                 "placement, instead of --device): auto, balanced, sequential, or a JSON object or "
                                 "file {module name: device}")
        parser.add_argument("--n-devices", type=int, metavar="N",
                            help="split the model evenly over this many CUDA GPUs (instead of --device)")


def _placement(args: argparse.Namespace):
    """The :class:`~interp.models.device.Placement` of a command's ``--device/--dtype/--device-map``."""
    from interp.models.device import Placement

    return Placement.resolve(args.device, args.dtype, getattr(args, "device_map", None),
                             getattr(args, "n_devices", None))


def _add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """``--model CHECKPOINT`` and ``--world`` (override the world the checkpoint carries)."""
    parser.add_argument("--model", required=True, help="checkpoint folder (e.g. runs/demo/best)")
    parser.add_argument("--world", help="override the checkpoint's world (vocabularies must match)")


def _add_ablate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ablate", action="append", metavar="SITE",
                        help="zero-ablate SITE while the metric runs (repeatable), e.g. mlp_out:3, attn_out:0, "
                             "resid_post:1, z:2.1 (layer 2 head 1); compare with a run without it")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="interp",
        description="World models in sequence models: train on a world (a DFA), test the model's "
                    "implicit world model, find the layers that help or hurt it.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("worlds", help="list the worlds (DFAs) interp knows")
    s.set_defaults(fn=_cmd_worlds)

    s = sub.add_parser("data", help="generate a world's sequences into train.txt / test.txt")
    s.add_argument("--world", required=True, help="e.g. streets, streets:edges.csv, connect4, othello, dfa:x.json")
    s.add_argument("--n", type=int, default=10000, help="sequences to draw before the split (default 10000)")
    s.add_argument("--test-fraction", type=float, default=0.1)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", required=True, help="output folder")
    s.set_defaults(fn=_cmd_data)

    for name, text in (("train", "train a GPT-2 on a world from a TOML config and run the next-token test"),
                       ("run", "the main job: train, world-model metrics, layer sweeps, HLS fine-tuning, "
                               "report (default: the embedded demo config)")):
        s = sub.add_parser(name, help=text)
        if name == "train":
            s.add_argument("--config", required=True, help="TOML file (see experiments/configs/)")
        else:
            s.add_argument("config", nargs="?", default=None, help="TOML file (default: embedded demo)")
        s.add_argument("--fresh", action="store_true", help="delete the run folder first instead of resuming")
        s.add_argument("--no-progress", action="store_true", help="no progress bars")
        s.set_defaults(fn=_cmd_train if name == "train" else _cmd_run)

    s = sub.add_parser("next-token", help="the next-token test of a checkpoint")
    _add_checkpoint(s)
    s.add_argument("--data", help="sequence file (default: the run's data/test.txt)")
    s.add_argument("--n", type=int, default=1000, help="at most this many sequences (default 1000)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    _add_ablate(s)
    _add_placement(s)
    s.set_defaults(fn=_cmd_next_token)

    s = sub.add_parser("probe", help="current-state linear probes at every layer of a checkpoint")
    _add_checkpoint(s)
    s.add_argument("--data", help="folder with train.txt/test.txt (default: the run's data/; "
                                   "else fresh sequences)")
    s.add_argument("--train-sequences", type=int, default=1000, help="at most this many to fit on (default 1000)")
    s.add_argument("--test-sequences", type=int, default=500, help="at most this many to score on (default 500)")
    s.add_argument("--layers", type=int, nargs="+", help="layer indices to probe: -1 (embeddings) … n_layers-1 "
                                                         "(default: all)")
    s.add_argument("--l2", type=float, default=1e-4, help="L2 weight on the probe weights (default 1e-4)")
    s.add_argument("--max-iter", type=int, default=500, help="L-BFGS iteration cap per layer (default 500)")
    s.add_argument("--seed", type=int, default=0, help="seed of fresh sequences (default 0)")
    s.add_argument("--out", help="also write probe_layers.csv, probe_components.csv, probe.json here")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    _add_placement(s)
    s.set_defaults(fn=_cmd_probe)

    s = sub.add_parser("navigate", help="streets: greedy routes, detours (Table 2), map reconstruction (App. B)")
    s.add_argument("--model", required=True,
                   help="checkpoint folder, or route-oracle | ideal | oracle | uniform (with --world). route-oracle "
                        "(shortest routes, `end` on arrival) is the navigation reference; ideal is the exact "
                        "predictor of the world's training data; oracle (uniform over legal tokens) never says "
                        "`end` under greedy decoding, so its routes fail")
    s.add_argument("--world", help="the streets world (default: the checkpoint's)")
    s.add_argument("--pairs", type=int, default=200, help="(origin, destination) pairs: the run's held-out "
                                                          "pairs if any, else random (default 200)")
    s.add_argument("--detours", help="comma-separated detour kinds: random,adversarial,second (default: none)")
    s.add_argument("--p", default="0,0.01,0.1,0.5,0.75", help="detour probabilities (default 0,0.01,0.1,0.5,0.75)")
    s.add_argument("--reconstruct", action="store_true", help="reconstruct the map the model's routes imply")
    s.add_argument("--map-from", choices=("sample", "greedy"), default="sample",
                   help="routes to reconstruct from: sampled at temperature 1 as in App. B (default), or greedy")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", help="write routes.csv, detours.csv, map_*.csv, map.png, navigate.json here")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    _add_placement(s)
    s.set_defaults(fn=_cmd_navigate)

    s = sub.add_parser("metrics", help="Myhill–Nerode compression and distinction metrics (Vafa et al. 2024)")
    s.add_argument("--model", required=True, help="checkpoint folder, oracle, ideal, uniform, or dfa:PATH (with --world)")
    s.add_argument("--world", help="dfa:PATH, connect4, streets[:PATH], othello (default: the checkpoint's)")
    rule = s.add_mutually_exclusive_group()
    rule.add_argument("--epsilon", type=float, help="accept tokens with p > EPSILON (default 0.01)")
    rule.add_argument("--top-k", type=int, help="accept the K most likely tokens (ties included)")
    rule.add_argument("--top-p", type=float, help="accept the nucleus of mass P")
    s.add_argument("--depth", type=int, default=5, help="boundary suffix length k (default 5)")
    s.add_argument("--pairs", default="1000", help="states / state pairs to sample, or 'all' (default 1000)")
    s.add_argument("--estimator", choices=("exact", "sampled"), default="exact",
                   help="enumerate the boundaries (default) or sample continuations as the paper does")
    s.add_argument("--samples", type=int, default=30, help="sampled continuations per pair (default 30)")
    s.add_argument("--prefix-pairs", type=int, default=1, help="prefix pairs per state (pair) (default 1)")
    s.add_argument("--metrics", default="compression,distinction", help="which metrics (default both)")
    s.add_argument("--max-nodes", type=int, default=4096,
                   help="skip a pair whose tree exceeds this many nodes at one depth (default 4096)")
    s.add_argument("--max-states", type=int, default=1000, help="state cap for --pairs all (default 1000)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", help="write myhill_nerode.csv (per pair) and myhill_nerode.json here")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    _add_ablate(s)
    _add_placement(s)
    s.set_defaults(fn=_cmd_metrics)

    s = sub.add_parser("sweep", help="layer sweep: MLP zero-out or direct-effect patching, with layer verdicts")
    _add_checkpoint(s)
    s.add_argument("--data", help="sequence file (default: the run's data/test.txt; else fresh sequences), or a "
                                  "PragWorld CSV: the sweep then scores its yes/no questions (label prompt)")
    s.add_argument("--grouping", choices=("clean", "reference"), default="clean",
                   help="PragWorld CSV: how rows form groups (see interp pragworld score)")
    s.add_argument("--n", type=int, default=None,
                   help="at most this many sequences (default 200) or PragWorld rows (default all)")
    s.add_argument("--kind", choices=("mlp-zero", "direct-effect", "activation-patching"), default="mlp-zero",
                   help="mlp-zero: zero each layer's MLP output, per-example next-token loss (default); "
                        "direct-effect: patch resid_pre from a one-token state-changing edit into the "
                        "original, loss on the original's tokens after the edit; activation-patching: "
                        "layer × position and layer × head heatmaps (transformer_lens.patching) of how much "
                        "of the clean state's legal-token mass one patched activation restores. On a PragWorld "
                        "CSV all three score P(gold) of the label prompt; direct-effect and activation-patching "
                        "patch the altered prompt into its original (activation-patching: pairs of equal token "
                        "length, positions counted from the last token)")
    s.add_argument("--prepend-bos", choices=("auto", "on", "off"), default="auto",
                   help="PragWorld CSV: a BOS first as the model's own tokenizer adds it (auto, default), always "
                        "(on) or never (off); see README 'Tokenizer settings'")
    s.add_argument("--chat-template", choices=("auto", "on", "off"), default="off",
                   help="PragWorld CSV: wrap the label prompt as a user message of the tokenizer's chat template: "
                        "off (default: the reference layer analyses scored the bare prompt), auto (when it has "
                        "one), on")
    s.add_argument("--length", type=int, default=12,
                   help="activation-patching: prefix length in tokens (default 12)")
    s.add_argument("--edit-at", type=int, default=4,
                   help="activation-patching: the edited token's index in the prefix (default 4)")
    s.add_argument("--method", choices=("reuse", "loop", "batched", "attribution"), default="reuse",
                   help="mlp-zero: reuse the clean run's early layers (reuse, default), one full forward "
                        "per layer (loop), or all layers stacked in one forward (batched); equal to 1e-5. "
                        "attribution (every kind): first-order estimates of every site from one forward "
                        "and backward (AtP), same outputs and verdicts")
    s.add_argument("--verify-top", type=int, metavar="K",
                   help="with --method attribution: also measure exactly the K sites of largest |attribution| "
                        "(verify.csv; activation-patching: verify_<map>.csv)")
    s.add_argument("--layers", help="comma-separated layers, e.g. 0,1,3 (default: all)")
    s.add_argument("--batch-size", type=int, help="examples per forward (default: all at once)")
    s.add_argument("--out", help="output folder (default: <checkpoint>/../sweep_<kind>/)")
    s.add_argument("--seed", type=int, default=0, help="edit positions, fresh sequences, bootstrap (default 0)")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    _add_placement(s, device_map=True)
    s.set_defaults(fn=_cmd_sweep)

    s = sub.add_parser("plant", help="plant harm: fine-tune only chosen layers' MLPs on corrupted data "
                                     "(ground truth for the layer verdicts)")
    s.add_argument("--model", required=True, help="interp checkpoint to plant into (e.g. runs/demo/best)")
    s.add_argument("--out", required=True, help="output folder (the planted checkpoint is OUT/model)")
    s.add_argument("--layers", required=True, help="comma-separated layers whose MLPs are trained, e.g. 3")
    s.add_argument("--corruption", choices=("random_turns", "mirror", "shortcut", "clean", "flip_category"),
                   default="random_turns",
                   help="random_turns: a share of the turns replaced by other directions (streets, default); "
                        "mirror: turns from the westmost share of the intersections mirrored east-west "
                        "(streets); shortcut: a probe answered yes whenever --word is in its question (dialogue); "
                        "clean: nothing changed (the control); flip_category: PragWorld rows (--data CSV) "
                        "with one alteration --category's gold flipped, for an HF model with its own tokenizer")
    s.add_argument("--share", type=float, default=0.3, help="share of turns (random_turns) or of the "
                                                            "intersections (mirror) corrupted (default 0.3)")
    s.add_argument("--word", help="shortcut: the surface word that triggers 'yes'")
    s.add_argument("--category", help="flip_category: the alteration category, e.g. connective_change")
    s.add_argument("--data", help="training data (default: the run's data/train.txt; flip_category: a PragWorld CSV)")
    s.add_argument("--seed", type=int, default=0, help="corruption draws and training batches (default 0)")
    s.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    s.add_argument("--batch-size", type=int, default=32, help="rows per step (default 32)")
    s.add_argument("--lr", type=float, default=3e-3, help="AdamW peak learning rate (default 3e-3)")
    s.add_argument("--fresh", action="store_true", help="plant again even if OUT holds this planting")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_placement(s)
    s.set_defaults(fn=_cmd_plant)

    s = sub.add_parser("finetune", help="fine-tune a checkpoint (plain, HLS or ULA) and evaluate before/after")
    s.add_argument("--config", required=True, help="TOML file (see experiments/configs/finetune_*.toml)")
    s.add_argument("--processes", type=int, default=1,
                   help="data-parallel local processes (gloo on CPU); or keep 1 and run under "
                        "`accelerate launch` / `torchrun`")
    s.add_argument("--fresh", action="store_true", help="retrain and re-evaluate finished runs")
    s.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_placement(s, device_map=True, device=None)
    s.set_defaults(fn=_cmd_finetune)

    s = sub.add_parser("report", help="write RUN_DIR/report.html: tables, figures, CircuitsVis views; opens offline")
    s.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (e.g. runs/demo)")
    s.add_argument("--model", help="checkpoint for the attention patterns (default: RUN_DIR/best, else last)")
    s.add_argument("--no-attention", action="store_true", help="no attention patterns (no model is loaded)")
    s.add_argument("--sequences", help="sequence file whose first lines to show (default: RUN_DIR/data/test.txt)")
    s.add_argument("--n-sequences", type=int, default=2, help="how many sequences (default 2)")
    s.add_argument("--max-tokens", type=int, default=24, help="cut each sequence to this many tokens (default 24)")
    s.add_argument("--max-rows", type=int, default=20, help="rows shown of each CSV (default 20)")
    s.add_argument("--out", help="output file (default: RUN_DIR/report.html)")
    _add_placement(s)
    s.set_defaults(fn=_cmd_report)

    _add_pragworld(sub)
    return p


def _quiet_hf() -> None:
    """No per-file progress bars, no advisory warnings (users may override). Hub access is left to
    the user's own settings: a hub name downloads when online, else comes from the cache
    (``HF_HUB_OFFLINE=1`` forbids downloads; see :func:`interp.models.checkpoint.resolve_model`)."""
    import os

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_hf()
    from interp.config import ConfigError
    from interp.worlds.base import WorldError

    try:
        return args.fn(args)
    except (ConfigError, WorldError, FileNotFoundError) as e:
        print(f"interp {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # CheckpointError and config validation are ValueErrors
        print(f"interp {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
