"""``interp pragworld score`` / ``eval``: PragWorld accuracies of published responses or of a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from interp.cli.common import add_placement, placement_from_args


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


def cmd_pragworld_score(args: argparse.Namespace) -> int:
    from interp.datasets.pragworld import load_pragworld, parse_yes_no
    from interp.datasets.pragworld.parse import read_predictions, read_responses
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
        print(
            f"wrote {Path(args.out) / 'pragworld.json'}, pragworld.csv, pragworld_groups.csv, "
            f"pragworld_categories.csv, pragworld_lengths.csv"
        )
    if args.json:
        print(json.dumps(score.summary()))
    return 0


def cmd_pragworld_eval(args: argparse.Namespace) -> int:
    import re

    from interp.datasets.contrast import data_file_kind
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.pragworld import score_pragworld
    from interp.metrics.pragworld_eval import evaluate_model
    from interp.models.checkpoint import load_bridge

    if data_file_kind(args.data) == "contrast":  # contrast examples: scored by their logits, as interp eval does
        from interp.cli.contrast import cmd_eval

        args.n, args.confidence = args.limit, 0.95
        return cmd_eval(args)
    data = load_pragworld(args.data, grouping=args.grouping)  # a bad file fails before the model loads
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit must be >= 1")
    out = (
        Path(args.out)
        if args.out
        else (
            Path("runs")
            / "pragworld"
            / (re.sub(r"[^A-Za-z0-9._-]+", "_", str(args.model)).strip("._") + f"_{args.prompt}")
        )
    )
    placement = placement_from_args(args)  # a bad --device/--dtype/--device-map fails before the model loads
    bridge = load_bridge(args.model, placement=placement)
    template = {"auto": None, "on": True, "off": False}[args.chat_template]
    info = sys.stderr if args.json else sys.stdout
    run = evaluate_model(
        bridge,
        data,
        out / "responses.jsonl",
        prompt=args.prompt,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        chat_template=template,
        limit=args.limit,
        prepend_bos={"auto": None, "on": True, "off": False}[args.prepend_bos],
        fresh=args.fresh,
        progress=not args.no_progress,
        model_name=str(args.model),
    )
    print(
        f"model {args.model}: {args.prompt} prompt"
        f"{' (chat template)' if run.meta['chat_template'] else ''}; {run.reused} rows reused from "
        f"{run.path}, {run.computed} computed"
        f"{' (a partial last line was discarded)' if run.discarded_partial_line else ''}",
        file=info,
    )
    if run.meta.get("yes_id") is not None:
        print(
            f"yes/no tokens: {run.meta['yes_token']!r} (id {run.meta['yes_id']}), "
            f"{run.meta['no_token']!r} (id {run.meta['no_id']})",
            file=info,
        )
    rows = data if args.limit is None else data.rows.iloc[: args.limit]
    score = score_pragworld(rows, run.predictions, n_boot=args.n_boot, seed=args.seed)
    score.settings.update(
        model=str(args.model), prompt=args.prompt, grouping=args.grouping, limit=args.limit, responses=str(run.path)
    )
    _print_pragworld(data, score, f"{run.path} ({len(run.records)} rows)", out=info)
    score.save(out)
    print(f"wrote {out}/responses.jsonl, pragworld.json and the per-row/category/length CSVs", file=info)
    if args.json:
        print(json.dumps(score.summary()))
    return 0


def add_pragworld(sub) -> None:
    s = sub.add_parser("pragworld", help="PragWorld (AAAI 2026): score published responses or evaluate a model")
    pw = s.add_subparsers(dest="pragworld_command", metavar="{score,eval}", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--grouping",
            choices=("clean", "reference"),
            default="clean",
            help="clean (default): Perturbation? flags read whitespace-insensitively (manual split: "
            "88 groups, 412 alterations); reference: as the published evaluation, which reads ten "
            "'TRUE ' cells as unaltered rows (98 groups; reproduces the paper's Table 1)",
        )
        p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples of groups (default 2000)")
        p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
        p.add_argument(
            "--json",
            action="store_true",
            help="print the summary as one JSON line last (robust, yes, no, original, altered, flip, "
            "invariant, total in %%; groups, rows; unparseable in %%; robust_ci_low/high, ...)",
        )

    s = pw.add_parser("score", help="accuracies of responses (published outputs format) or predictions")
    s.add_argument("data", help="PragWorld CSV (manual or synthetic split)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--responses",
        help="JSONL, one record per data row with a 'response' field (the released "
        "outputs format), read by the benchmark's yes/no parser",
    )
    src.add_argument("--predictions", help="CSV with a 'prediction' column (yes / no / other), in data-row order")
    s.add_argument("--out", help="also write pragworld.json and the per-row/group/category/length CSVs here")
    common(s)
    s.set_defaults(fn=cmd_pragworld_score)

    s = pw.add_parser("eval", help="ask a model every row (resumable) and score it")
    s.add_argument(
        "--model",
        required=True,
        help="checkpoint folder, a .gguf file (converted once into the cache, "
        "see interp models) or a Hugging Face hub name",
    )
    s.add_argument(
        "--data",
        required=True,
        help="PragWorld CSV (manual or synthetic split), or contrast examples "
        "(.jsonl): then scored as interp eval scores them (accuracy and "
        "logit difference correct − foil; the chat template as "
        "--chat-template says)",
    )
    s.add_argument(
        "--prompt",
        choices=("benchmark", "label"),
        default="benchmark",
        help="benchmark (default): greedy generation read by the yes/no parser; label: P(yes) from "
        "the two-way softmax over the ' yes'/' no' logits at the last position",
    )
    s.add_argument(
        "--out",
        help="output folder (default runs/pragworld/<model>_<prompt>); responses.jsonl there "
        "is appended row by row, so a rerun resumes",
    )
    s.add_argument("--batch-size", type=int, default=8, help="prompts per forward (default 8)")
    s.add_argument(
        "--max-new-tokens",
        type=int,
        default=16,
        help="benchmark prompt: generation stops at the end of the first line or after this many tokens (default 16)",
    )
    s.add_argument(
        "--prepend-bos",
        choices=("auto", "on", "off"),
        default="auto",
        help="both prompts: a BOS first as the model's own tokenizer adds it (auto, default), always "
        "(on) or never (off); see README 'Tokenizer settings'",
    )
    s.add_argument(
        "--chat-template",
        choices=("auto", "on", "off"),
        default="auto",
        help="wrap the prompt as a user message of the tokenizer's chat template: auto (default: "
        "when it has one), on, off",
    )
    s.add_argument(
        "--limit",
        "--n",
        dest="limit",
        type=int,
        metavar="N",
        help="only the first N data rows (--n: the same, the name interp sweep uses)",
    )
    add_placement(s, device_map=True)
    s.add_argument("--fresh", action="store_true", help="discard earlier responses in --out instead of resuming")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    common(s)
    s.set_defaults(fn=cmd_pragworld_eval)
