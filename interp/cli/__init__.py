"""The ``interp`` command. Heavy imports (torch, transformer_lens) happen inside the subcommands,
so ``interp --help`` answers at once."""

from __future__ import annotations

import argparse
import os
import sys

from interp import __version__
from interp.cli.common import add_ablate, add_checkpoint, add_fields, add_placement
from interp.cli.contrast import add_data_dialogue, add_data_ioi, add_eval
from interp.cli.layers import cmd_finetune, cmd_plant, cmd_report, cmd_sweep
from interp.cli.measure import cmd_metrics, cmd_navigate, cmd_next_token, cmd_probe
from interp.cli.models import add_models
from interp.cli.pragworld import add_pragworld
from interp.cli.world import cmd_data, cmd_run, cmd_train, cmd_worlds
from interp.config import FinetuneConfig
from interp.config.runs import FinetuneRun, MainRun


def build_parser() -> argparse.ArgumentParser:
    """The ``interp`` argument parser: every command, its options and their help (the CLI reference
    of the docs is generated from it)."""
    p = argparse.ArgumentParser(
        prog="interp",
        description="World models in sequence models: train on a world (a DFA), test the model's "
        "implicit world model, find the layers that help or hurt it.",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"interp {__version__}",
        help="print the installed version of interp and exit",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("worlds", help="list the worlds (DFAs) interp knows")
    s.set_defaults(fn=cmd_worlds)

    s = sub.add_parser(
        "data",
        help="generate a world's sequences into train.txt / test.txt (interp data --world W "
        "--out DIR), or contrast examples (interp data ioi ..., interp data dialogue ...)",
    )
    s.add_argument(
        "--world",
        help="e.g. streets, streets:edges.csv, connect4, othello, dfa:x.json (required without a sub-command)",
    )
    s.add_argument("--n", type=int, default=10000, help="sequences to draw before the split (default 10000)")
    s.add_argument(
        "--test-fraction", type=float, default=0.1, help="share of the sequences held out as test.txt (default 0.1)"
    )
    s.add_argument("--seed", type=int, default=0, help="seed of the draw and the split (default 0)")
    s.add_argument("--out", help="output folder (required without a sub-command)")
    s.set_defaults(fn=cmd_data)
    data_sub = s.add_subparsers(dest="data_command", metavar="{ioi,dialogue}", required=False)
    add_data_ioi(data_sub)
    add_data_dialogue(data_sub)

    for name, text in (
        ("train", "train a GPT-2 on a world from a TOML config and run the next-token test"),
        (
            "run",
            "the main job: train, world-model metrics, layer sweeps, HLS fine-tuning, "
            'report (default: the embedded demo config); a config with job = "pragworld" runs '
            "the PragWorld pipeline on a pretrained model instead (e.g. "
            "experiments/configs/smollm2_pragworld.toml)",
        ),
    ):
        s = sub.add_parser(name, help=text)
        if name == "train":
            s.add_argument("--config", required=True, help="TOML file (see experiments/configs/)")
        else:
            s.add_argument("config", nargs="?", default=None, help="TOML file (default: embedded demo)")
        add_fields(s, MainRun.flags())  # --fresh, --no-progress, --retrain
        s.set_defaults(fn=cmd_train if name == "train" else cmd_run)

    s = sub.add_parser("next-token", help="the next-token test of a checkpoint")
    add_checkpoint(s)
    s.add_argument("--data", help="sequence file (default: the run's data/test.txt)")
    s.add_argument("--n", type=int, default=1000, help="at most this many sequences (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="seed of fresh sequences when there is no data file (default 0)")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_ablate(s)
    add_placement(s)
    s.set_defaults(fn=cmd_next_token)

    s = sub.add_parser("probe", help="current-state linear probes at every layer of a checkpoint")
    add_checkpoint(s)
    s.add_argument("--data", help="folder with train.txt/test.txt (default: the run's data/; else fresh sequences)")
    s.add_argument("--train-sequences", type=int, default=1000, help="at most this many to fit on (default 1000)")
    s.add_argument("--test-sequences", type=int, default=500, help="at most this many to score on (default 500)")
    s.add_argument(
        "--layers", type=int, nargs="+", help="layer indices to probe: -1 (embeddings) … n_layers-1 (default: all)"
    )
    s.add_argument("--l2", type=float, default=1e-4, help="L2 weight on the probe weights (default 1e-4)")
    s.add_argument("--max-iter", type=int, default=500, help="L-BFGS iteration cap per layer (default 500)")
    s.add_argument("--seed", type=int, default=0, help="seed of fresh sequences (default 0)")
    s.add_argument("--out", help="also write probe_layers.csv, probe_components.csv, probe.json here")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_placement(s)
    s.set_defaults(fn=cmd_probe)

    s = sub.add_parser("navigate", help="streets: greedy routes, detours (Table 2), map reconstruction (App. B)")
    s.add_argument(
        "--model",
        required=True,
        help="checkpoint folder, or route-oracle | ideal | oracle | uniform (with --world). route-oracle "
        "(shortest routes, `end` on arrival) is the navigation reference; ideal is the exact "
        "predictor of the world's training data; oracle (uniform over legal tokens) never says "
        "`end` under greedy decoding, so its routes fail",
    )
    s.add_argument("--world", help="the streets world (default: the checkpoint's)")
    s.add_argument(
        "--pairs",
        type=int,
        default=200,
        help="(origin, destination) pairs: the run's held-out pairs if any, else random (default 200)",
    )
    s.add_argument("--detours", help="comma-separated detour kinds: random,adversarial,second (default: none)")
    s.add_argument("--p", default="0,0.01,0.1,0.5,0.75", help="detour probabilities (default 0,0.01,0.1,0.5,0.75)")
    s.add_argument("--reconstruct", action="store_true", help="reconstruct the map the model's routes imply")
    s.add_argument(
        "--map-from",
        choices=("sample", "greedy"),
        default="sample",
        help="routes to reconstruct from: sampled at temperature 1 as in App. B (default), or greedy",
    )
    s.add_argument("--seed", type=int, default=0, help="pairs, detours and sampled routes (default 0)")
    s.add_argument("--out", help="write routes.csv, detours.csv, map_*.csv, map.png, navigate.json here")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_placement(s)
    s.set_defaults(fn=cmd_navigate)

    s = sub.add_parser("metrics", help="Myhill–Nerode compression and distinction metrics (Vafa et al. 2024)")
    s.add_argument(
        "--model", required=True, help="checkpoint folder, oracle, ideal, uniform, or dfa:PATH (with --world)"
    )
    s.add_argument("--world", help="dfa:PATH, connect4, streets[:PATH], othello (default: the checkpoint's)")
    rule = s.add_mutually_exclusive_group()
    rule.add_argument("--epsilon", type=float, help="accept tokens with p > EPSILON (default 0.01)")
    rule.add_argument("--top-k", type=int, help="accept the K most likely tokens (ties included)")
    rule.add_argument("--top-p", type=float, help="accept the nucleus of mass P")
    s.add_argument("--depth", type=int, default=5, help="boundary suffix length k (default 5)")
    s.add_argument("--pairs", default="1000", help="states / state pairs to sample, or 'all' (default 1000)")
    s.add_argument(
        "--estimator",
        choices=("exact", "sampled"),
        default="exact",
        help="enumerate the boundaries (default) or sample continuations as the paper does",
    )
    s.add_argument("--samples", type=int, default=30, help="sampled continuations per pair (default 30)")
    s.add_argument("--prefix-pairs", type=int, default=1, help="prefix pairs per state (pair) (default 1)")
    s.add_argument("--metrics", default="compression,distinction", help="which metrics (default both)")
    s.add_argument(
        "--max-nodes",
        type=int,
        default=4096,
        help="skip a pair whose tree exceeds this many nodes at one depth (default 4096)",
    )
    s.add_argument("--max-states", type=int, default=1000, help="state cap for --pairs all (default 1000)")
    s.add_argument("--seed", type=int, default=0, help="states, prefixes and sampled continuations (default 0)")
    s.add_argument("--out", help="write myhill_nerode.csv (per pair) and myhill_nerode.json here")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_ablate(s)
    add_placement(s)
    s.set_defaults(fn=cmd_metrics)

    s = sub.add_parser(
        "sweep",
        help="layer sweep: MLP zero-out or direct-effect patching, with layer verdicts",
        description="Layer sweep with layer verdicts. Long sweeps resume: the MLP sweep writes each finished "
        "unit (a removal × a chunk of rows) to OUT/units/; after Ctrl-C or a crash, rerun the same command "
        "with the same --out and it skips what is done (a rerun with another config or model into the same "
        "folder is refused unless --overwrite). The default batch is sized from a memory budget "
        "(--max-memory). See docs/guides/resuming.md.",
    )
    add_checkpoint(s)
    s.add_argument(
        "--data",
        help="sequence file (default: the run's data/test.txt; else fresh sequences), a "
        "PragWorld CSV: the sweep then scores its yes/no questions (label prompt), or "
        "contrast examples (.jsonl, e.g. interp data ioi): the logit difference correct − "
        "foil, patching the prompt into its corrupted prompt",
    )
    from interp.analysis.config.sweep_job import SweepJob

    # the sweep's settings: one flag per SweepJob field (and its verdict rule's), from their metadata
    add_fields(s, SweepJob.flags(), before={"folds": _add_confirm, "seed": _add_long_run})
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_placement(s, device_map=True, attention="auto")
    s.set_defaults(fn=cmd_sweep)

    s = sub.add_parser(
        "plant",
        help="plant harm: fine-tune only chosen layers' MLPs on corrupted data (ground truth for the layer verdicts)",
    )
    s.add_argument(
        "--model",
        required=True,
        help="interp checkpoint to plant into (e.g. runs/demo/best); flip_category / foil_share: an HF model folder",
    )
    s.add_argument("--out", required=True, help="output folder (the planted checkpoint is OUT/model)")
    s.add_argument("--layers", required=True, help="comma-separated layers whose MLPs are trained, e.g. 3")
    s.add_argument(
        "--corruption",
        choices=("random_turns", "mirror", "shortcut", "clean", "flip_category", "foil_share"),
        default="random_turns",
        help="random_turns: a share of the turns replaced by other directions (streets, default); "
        "mirror: turns from the westmost share of the intersections mirrored east-west "
        "(streets); shortcut: a probe answered yes whenever --word is in its question (dialogue); "
        "clean: nothing changed (the control); flip_category: PragWorld rows (--data CSV) "
        "with one alteration --category's gold flipped, for an HF model with its own tokenizer; "
        "foil_share: contrast examples (--data FILE.jsonl, e.g. interp data ioi) with a --share "
        "of the rows trained toward the foil (IOI: the subject), the loss on the target token "
        "(clean on a .jsonl: all toward the correct token)",
    )
    s.add_argument(
        "--share",
        type=float,
        default=0.3,
        help="share of turns (random_turns), of the "
        "intersections (mirror) or of the contrast rows "
        "(foil_share) corrupted (default 0.3)",
    )
    s.add_argument("--word", help="shortcut: the surface word that triggers 'yes'")
    s.add_argument("--category", help="flip_category: the alteration category, e.g. connective_change")
    s.add_argument(
        "--data",
        help="training data (default: the run's data/train.txt; flip_category: a PragWorld CSV; "
        "foil_share: contrast examples, .jsonl)",
    )
    s.add_argument("--seed", type=int, default=0, help="corruption draws and training batches (default 0)")
    s.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    s.add_argument("--batch-size", type=int, default=32, help="rows per step (default 32)")
    s.add_argument("--lr", type=float, default=3e-3, help="AdamW peak learning rate (default 3e-3)")
    s.add_argument("--fresh", action="store_true", help="plant again even if OUT holds this planting")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_placement(s)
    s.set_defaults(fn=cmd_plant)

    s = sub.add_parser("finetune", help="fine-tune a checkpoint (plain, HLS or ULA) and evaluate before/after")
    s.add_argument("--config", required=True, help="TOML file (see experiments/configs/finetune_*.toml)")
    add_fields(s, FinetuneRun.flags())  # --processes, --fresh, --no-progress
    add_fields(s, FinetuneConfig.flags())  # --device, --dtype, --device-map, --n-devices: the file's, unless given
    s.set_defaults(fn=cmd_finetune)

    s = sub.add_parser("report", help="write RUN_DIR/report.html: tables, figures, CircuitsVis views; opens offline")
    s.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (e.g. runs/demo)")
    s.add_argument("--model", help="checkpoint for the attention patterns (default: RUN_DIR/best, else last)")
    s.add_argument("--no-attention", action="store_true", help="no attention patterns (no model is loaded)")
    s.add_argument("--sequences", help="sequence file whose first lines to show (default: RUN_DIR/data/test.txt)")
    s.add_argument("--n-sequences", type=int, default=2, help="how many sequences (default 2)")
    s.add_argument("--max-tokens", type=int, default=24, help="cut each sequence to this many tokens (default 24)")
    s.add_argument("--max-rows", type=int, default=20, help="rows shown of each CSV (default 20)")
    s.add_argument("--out", help="output file (default: RUN_DIR/report.html)")
    add_placement(s)
    s.set_defaults(fn=cmd_report)

    add_eval(sub)
    add_pragworld(sub)
    add_models(sub)
    return p


def _quiet_hf() -> None:
    """No per-file progress bars, no advisory warnings (users may override). Hub access is left to
    the user's own settings: a hub name downloads when online, else comes from the cache
    (``HF_HUB_OFFLINE=1`` forbids downloads; see :func:`interp.models.checkpoint.resolve_model`)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _add_confirm(s: argparse.ArgumentParser) -> None:
    s.add_argument(
        "--confirm",
        action="store_true",
        help="confirm the verdicts on held-out groups: verdicts on a discovery half, re-estimated on the "
        "other half (= --folds 2)",
    )


def _add_long_run(s: argparse.ArgumentParser) -> None:
    """``interp sweep``'s flags of one long run: the memory budget, the folder, resuming, the bar."""
    s.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="the memory budget that sizes the default batch: 4GB, 512MiB, 30%% (of free memory) "
        "(default: 50%% of the RAM, or GPU memory, free once the model is loaded)",
    )
    s.add_argument(
        "--out",
        help="output folder (default: <checkpoint>/../sweep_<kind>/); the MLP sweep writes each finished "
        "unit to OUT/units/ as it goes: rerun the same command with the same --out to resume",
    )
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the units in --out when they belong to another config or model (without it, such a "
        "rerun is refused, naming the difference)",
    )
    s.add_argument(
        "--quiet", action="store_true", help="no progress bar (also off in CI and when stderr is not a terminal)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the ``interp`` command line; bad input exits 2 with the error, Ctrl-C 130."""
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
    except RuntimeError as e:  # the training loop turns Ctrl-C into TrainingInterrupted once its state is saved
        from interp.train.trainer import TrainingInterrupted

        if not isinstance(e, TrainingInterrupted):
            raise
        print(f"interp {args.command}: {e}", file=sys.stderr)
        return 130
