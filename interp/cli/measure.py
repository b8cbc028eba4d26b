"""``interp next-token``, ``probe``, ``navigate``, ``metrics``: world-model metrics of a checkpoint."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from interp.cli.common import ablations_from_args, intervened, placement_from_args


def cmd_next_token(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.named_metrics import NEXT_TOKEN, world_model_metrics
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences

    ablations = ablations_from_args(args)
    world = parse_world(args.world) if args.world else None
    ckpt = load_checkpoint(args.model, world=world, placement=placement_from_args(args))
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
    with intervened(ckpt.bridge, ablations, args.model) as active:
        _, found = world_model_metrics(ckpt.bridge, world, sequences, NEXT_TOKEN, progress=not args.json)
    result = found["next_token"]
    print(f"model {args.model} on {source}")
    print(result)
    for line in active.describe() if active else []:
        print(f"  under {line}")
    if args.json:
        print(json.dumps({**result.summary(), "interventions": active.summary() if active else []}))
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.probes import probe_layers
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences
    from interp.worlds.split import split_sequences

    if args.train_sequences < 1 or args.test_sequences < 1:
        raise ValueError("--train-sequences and --test-sequences must be ≥ 1")
    ckpt = load_checkpoint(
        args.model, world=parse_world(args.world) if args.world else None, placement=placement_from_args(args)
    )
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
    result = probe_layers(
        ckpt.bridge, world, train, test, layers=args.layers, l2=args.l2, max_iter=args.max_iter, progress=not args.json
    )
    print(f"model {args.model}: current-state probes on {source}")
    print(result)
    if args.out:
        result.save(args.out)
    if args.json:
        print(json.dumps(result.summary()))
    return 0


def cmd_navigate(args: argparse.Namespace) -> int:
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
    from interp.models.lm import LM, lm_from_arg
    from interp.results import write_json
    from interp.worlds import parse_world
    from interp.worlds.base import WorldError
    from interp.worlds.io import read_sequences
    from interp.worlds.streets.world import StreetsWorld

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
        lm: LM = ShortestPathLM(world)
    else:
        lm, world = lm_from_arg(args.model, parse_world(args.world) if args.world else None, placement_from_args(args))
    if not isinstance(world, StreetsWorld):
        raise WorldError(f"interp navigate needs a streets world, got {world.describe()}")
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

        routes = greedy if args.map_from == "greedy" else decode_routes(lm, world, pairs, sample=True, seed=args.seed)
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


def cmd_metrics(args: argparse.Namespace) -> int:
    from interp.metrics.acceptance import rule_from_args
    from interp.metrics.named_metrics import MYHILL_NERODE, world_model_metrics
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
    ablations = ablations_from_args(args)
    lm, world = lm_from_arg(args.model, parse_world(args.world) if args.world else None, placement_from_args(args))
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    info = sys.stderr if args.json else sys.stdout
    print(f"model {args.model} ({lm.describe()}) on {world.describe()}", file=info)
    with intervened(getattr(lm, "bridge", None), ablations, args.model, out=info) as active:
        names = [n for n in MYHILL_NERODE if any(n.startswith(f"mn_{m}_") for m in metrics)]
        _, found = world_model_metrics(
            lm,
            world,
            [],
            names,
            mn_pairs=pairs,
            mn_depth=args.depth,
            seed=args.seed,
            estimator=args.estimator,
            max_nodes=args.max_nodes,
            progress=not args.no_progress,
            myhill_nerode_options={
                "rule": rule,
                "samples": args.samples,
                "prefix_pairs": args.prefix_pairs,
                "max_states": args.max_states,
                "metrics": metrics,
            },
        )
    result = found["myhill_nerode"]
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
