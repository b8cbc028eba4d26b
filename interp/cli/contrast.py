"""``interp data ioi`` and ``interp eval``: contrast examples generated and a model scored on them."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from interp.cli.common import add_placement, placement_from_args

SWITCH = {"auto": None, "on": True, "off": False}


def cmd_data_ioi(args: argparse.Namespace) -> int:
    from interp.datasets.contrast import write_contrast
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.tasks import own_tokenizer

    templates = None
    if args.templates:
        path = Path(args.templates)
        if not path.is_file():
            raise FileNotFoundError(f"--templates {path} does not exist")
        templates = [t for t in path.read_text(encoding="utf-8").splitlines() if t.strip()]
    tok = own_tokenizer(args.model)
    examples = ioi_examples(tok, args.n, seed=args.seed, templates=templates)
    out = write_contrast(examples, args.out)
    orders = [e.meta["order"] for e in examples]
    n_templates = len(templates or IOI_TEMPLATES)
    print(
        f"wrote {len(examples)} IOI prompts ({orders.count('ABBA')} ABBA, {orders.count('BABA')} BABA; "
        f"{len({e.group for e in examples})} groups over {n_templates} templates; seed {args.seed}) for the "
        f"tokenizer of {args.model} to {out}"
    )
    return 0


def cmd_data_dialogue(args: argparse.Namespace) -> int:
    from interp.datasets.contrast import write_contrast
    from interp.tasks import own_tokenizer
    from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples, pragworld_rows

    if args.csv and args.form != "yesno":
        raise ValueError(f"--csv writes PragWorld's yes/no layout: it needs --form yesno, got --form {args.form}")
    config = DialogueConfig(
        groups=args.n, seed=args.seed, split=args.split, form=args.form, paraphrase=not args.no_paraphrase
    )
    made = dialogue_examples(own_tokenizer(args.model), config)
    examples = made.examples
    out = write_contrast(examples, args.out)
    cats = [e.template for e in examples]
    effects = [e.meta["effect"] for e in examples]
    print(
        f"wrote {len(examples)} {args.form} examples ({args.n} groups, {args.split} split, seed {args.seed}; "
        f"{effects.count('Flip')} flip, {effects.count('Invariant')} invariant) for the tokenizer of "
        f"{args.model} to {out}"
    )
    print("per category: " + ", ".join(f"{c} {cats.count(c)}" for c in dict.fromkeys(cats)))
    skipped = {c: k for c, k in made.missing.items() if k}
    if skipped:
        print(
            "groups without an admissible alteration (left out): " + ", ".join(f"{c} {k}" for c, k in skipped.items())
        )
    if args.csv:
        from interp.datasets.pragworld import write_pragworld_csv

        rows = pragworld_rows(examples)
        print(f"wrote {len(rows)} PragWorld rows (paraphrases left out) to {write_pragworld_csv(rows, args.csv)}")
    if args.baselines:
        from interp.metrics.dialogue_heuristics import heuristic_frame, heuristic_table

        table = heuristic_table(heuristic_frame(examples, seed=args.seed))
        path = Path(args.baselines)
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
        cols = ["subset", "n"] + [c for c in table.columns if c.endswith("_accuracy")]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print(f"wrote the heuristic baselines to {path}")
    return 0


def default_out(model: str, data: str, what: str) -> Path:
    """``runs/<what>/<model>_<data stem>`` with unsafe characters replaced."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{model}_{Path(data).stem}").strip("._")
    return Path("runs") / what / name


def cmd_eval(args: argparse.Namespace) -> int:
    from interp.analysis.evaluation.contrast import evaluate_contrast
    from interp.datasets.contrast import data_file_kind
    from interp.models.checkpoint import load_bridge
    from interp.tasks import ContrastTask, YesNoTask

    kind = data_file_kind(args.data)
    if not Path(args.data).is_file():
        raise FileNotFoundError(f"--data {args.data} does not exist")
    if args.n is not None and args.n < 1:
        raise ValueError(f"--n must be ≥ 1, got {args.n}")
    bos, template = SWITCH[args.prepend_bos], SWITCH[args.chat_template]
    if kind == "contrast":
        task: ContrastTask = ContrastTask.build(
            args.model, args.data, prepend_bos=bos, chat_template=template, n=args.n
        )
    elif kind == "pragworld":
        from interp.datasets.pragworld import load_pragworld

        rows = load_pragworld(args.data, grouping=args.grouping).rows
        task = YesNoTask.pragworld(
            args.model,
            rows if args.n is None else rows.iloc[: args.n],
            prompt="label",
            prepend_bos=bos,
            chat_template=template,
        )
    else:
        raise ValueError(
            f"--data {args.data}: interp eval scores contrast examples (a .jsonl file, see "
            "docs/concepts/contrast-tasks.md) or a PragWorld CSV, not a sequence file"
        )
    placement = placement_from_args(args)
    bridge = load_bridge(args.model, placement=placement)
    task.check_fits(int(bridge.cfg.n_ctx))
    result = evaluate_contrast(
        bridge,
        task,
        batch_size=args.batch_size,
        n_boot=args.n_boot,
        confidence=args.confidence,
        seed=args.seed,
        progress=not args.no_progress,
    )
    result.settings.update(model=str(args.model), data=str(args.data), data_kind=kind)
    out = Path(args.out) if args.out else default_out(args.model, args.data, "eval")
    result.save(out)
    info = sys.stderr if args.json else sys.stdout
    s = result.summary()
    print(
        f"model {args.model} on {args.data} ({s['n']} examples, {s['groups']} groups): right on {s['n_right']}, "
        f"accuracy {100 * s['accuracy']:.1f} %, mean logit difference {s['logit_diff']:+.3f} "
        f"[{s['logit_diff_lo']:+.3f}, {s['logit_diff_hi']:+.3f}]",
        file=info,
    )
    print(result.markdown(), file=info)
    print(f"wrote {out}/contrast_eval.json, contrast_eval.csv, contrast_eval_table.csv", file=info)
    if args.json:
        print(json.dumps({k: v for k, v in s.items() if k != "settings"}))
    return 0


def add_data_ioi(data_sub) -> None:
    """``interp data ioi`` under the ``interp data`` parser's sub-commands."""
    s = data_sub.add_parser(
        "ioi",
        help="indirect-object identification prompts (Wang et al. 2022) for a model's "
        "tokenizer, as a contrast JSONL file (docs/concepts/contrast-tasks.md)",
    )
    s.add_argument(
        "--model",
        required=True,
        help="the model whose tokenizer the names, places and objects must be "
        "single tokens of: a folder, a .gguf file or a hub name",
    )
    s.add_argument("--n", type=int, default=240, help="prompts (default 240; groups of two: ABBA then BABA)")
    s.add_argument("--seed", type=int, default=0, help="seed of the names, places and objects (default 0)")
    s.add_argument(
        "--templates",
        help="a text file of templates, one a line, with {A} {B} (the two names in "
        "order), {S} (the repeated subject), optional {PLACE} {OBJECT} "
        "(default: the eight built-in ones)",
    )
    s.add_argument("--out", required=True, help="the JSONL file to write")
    s.set_defaults(fn=cmd_data_ioi)


def add_data_dialogue(data_sub) -> None:
    """``interp data dialogue`` under the ``interp data`` parser's sub-commands."""
    s = data_sub.add_parser(
        "dialogue",
        help="natural-English location-tracking conversations with exact gold, each original followed "
        "by PragWorld's seven alterations and a paraphrase, as a contrast JSONL file "
        "(docs/concepts/dialogue-cloze.md)",
    )
    s.add_argument(
        "--model",
        required=True,
        help="the model whose tokenizer the answer places (and yes / no) must be single tokens of: "
        "a folder, a .gguf file or a hub name",
    )
    s.add_argument(
        "--n", type=int, default=100, help="groups: originals, each followed by its alterations (default 100)"
    )
    s.add_argument("--seed", type=int, default=0, help="seed of the conversations and alterations (default 0)")
    s.add_argument(
        "--split",
        choices=("train", "heldout"),
        default="train",
        help="template families and word lists: train (chat, story) or heldout (transcript, diary; "
        "other names, objects, places) (default train)",
    )
    s.add_argument(
        "--form",
        choices=("cloze", "yesno"),
        default="cloze",
        help="cloze: 'So right now the key is in the' → ' drawer' against a foil place (default); yesno: "
        "PragWorld's label prompt 'Is the key in the drawer?' → ' yes' / ' no'",
    )
    s.add_argument("--no-paraphrase", action="store_true", help="leave out each group's paraphrase row")
    s.add_argument("--csv", help="also write the yes/no items as a PragWorld CSV (needs --form yesno)")
    s.add_argument(
        "--baselines",
        help="also write the heuristic baselines' table (recent, first, initial, random place) to this CSV",
    )
    s.add_argument("--out", required=True, help="the JSONL file to write")
    s.set_defaults(fn=cmd_data_dialogue)


def add_eval(sub) -> None:
    """``interp eval``."""
    s = sub.add_parser(
        "eval",
        help="accuracy and mean logit difference correct − foil of a model on contrast "
        "examples (JSONL, e.g. from interp data ioi) or PragWorld label prompts (CSV), "
        "with intervals, per template",
    )
    s.add_argument("--model", required=True, help="checkpoint folder, a .gguf file or a Hugging Face hub name")
    s.add_argument(
        "--data",
        required=True,
        help="contrast examples (.jsonl) or a PragWorld CSV (the label prompt: "
        "correct / foil = the gold / other answer)",
    )
    s.add_argument("--n", "--limit", dest="n", type=int, metavar="N", help="only the first N examples")
    s.add_argument("--out", help="output folder (default runs/eval/<model>_<data stem>)")
    s.add_argument("--batch-size", type=int, default=32, help="prompts per forward (default 32)")
    s.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples of groups (default 2000)")
    s.add_argument("--confidence", type=float, default=0.95, help="confidence of each interval (default 0.95)")
    s.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    s.add_argument(
        "--grouping",
        choices=("clean", "reference"),
        default="clean",
        help="PragWorld CSV: how rows form groups (see interp pragworld score)",
    )
    s.add_argument(
        "--prepend-bos",
        choices=("auto", "on", "off"),
        default="auto",
        help="a BOS first as the model's own tokenizer adds it (auto, default), always (on) or never (off)",
    )
    s.add_argument(
        "--chat-template",
        choices=("auto", "on", "off"),
        default="off",
        help="wrap each prompt as a user message of the tokenizer's chat template: off (default: the "
        "bare prompt, as IOI and the reference layer analyses score it), auto, on",
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true", help="print the summary as one JSON line last")
    add_placement(s, device_map=True)
    s.set_defaults(fn=cmd_eval)


__all__ = [
    "add_data_dialogue",
    "add_data_ioi",
    "add_eval",
    "cmd_data_dialogue",
    "cmd_data_ioi",
    "cmd_eval",
    "default_out",
]
