"""The ``interp`` command. Heavy imports (torch, transformer_lens) happen inside the subcommands,
so ``interp --help`` answers at once."""

from __future__ import annotations

import argparse
import json
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
    return _cmd_train(args)


def _cmd_next_token(args: argparse.Namespace) -> int:
    import numpy as np

    from interp.metrics.next_token import next_token_test
    from interp.models.checkpoint import load_checkpoint
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences

    world = parse_world(args.world) if args.world else None
    ckpt = load_checkpoint(args.model, world=world)
    world = ckpt.world
    data = Path(args.data) if args.data else Path(args.model).resolve().parent / "data" / "test.txt"
    if data.exists():
        sequences = read_sequences(data, world)
        source = str(data)
    else:
        sequences = world.generate(args.n, np.random.default_rng(args.seed))
        source = f"{args.n} fresh sequences (seed {args.seed}; may overlap the training data)"
        print(f"note: no held-out file at {data}; scoring {source}", file=sys.stderr)
    if args.n and len(sequences) > args.n:
        sequences = sequences[: args.n]
    result = next_token_test(ckpt.bridge, world, sequences, progress=not args.json)
    print(f"model {args.model} on {source}")
    print(result)
    if args.json:
        print(json.dumps(result.summary()))
    return 0


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
                       ("run", "the main job on a config (default: the embedded demo config)")):
        s = sub.add_parser(name, help=text)
        if name == "train":
            s.add_argument("--config", required=True, help="TOML file (see experiments/configs/)")
        else:
            s.add_argument("config", nargs="?", default=None, help="TOML file (default: embedded demo)")
        s.add_argument("--fresh", action="store_true", help="delete the run folder first instead of resuming")
        s.add_argument("--no-progress", action="store_true", help="no progress bars")
        s.set_defaults(fn=_cmd_train if name == "train" else _cmd_run)

    s = sub.add_parser("next-token", help="the next-token test of a checkpoint")
    s.add_argument("--model", required=True, help="checkpoint folder (e.g. runs/demo/best)")
    s.add_argument("--world", help="override the checkpoint's world (vocabularies must match)")
    s.add_argument("--data", help="sequence file (default: the run's data/test.txt)")
    s.add_argument("--n", type=int, default=1000, help="at most this many sequences (default 1000)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    s.set_defaults(fn=_cmd_next_token)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
