"""How often the shortcuts answer the natural dialogue items: the heuristic columns of
:mod:`interp.metrics.dialogue_heuristics` (most recent place, first place, initial place, a random
place among those said) on generated items, per split — the numbers quoted in
docs/concepts/dialogue-cloze.md.

    python bench/dialogue_shortcuts.py [--groups 200] [--seed 0] [--model smollm2-135m-instruct]

``--model``: whose tokenizer decides the single-token places (a pinned name or a folder).
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=200, help="original conversations per split (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0)")
    ap.add_argument("--model", default="smollm2-135m-instruct", help="tokenizer: a pinned name or a folder")
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from interp.metrics.dialogue_heuristics import heuristic_frame, heuristic_table
    from interp.models.registry import PINNED, get_model
    from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples

    folder = get_model(args.model) if args.model in PINNED else args.model
    tok = AutoTokenizer.from_pretrained(folder)
    cols = ["subset", "n", "recent_accuracy", "first_accuracy", "initial_accuracy", "random_accuracy"]
    for split in ("train", "heldout"):
        examples = list(
            dialogue_examples(tok, DialogueConfig(groups=args.groups, seed=args.seed, split=split)).examples
        )
        table = heuristic_table(heuristic_frame(examples))
        print(f"{split}: {len(examples)} items from {args.groups} groups (seed {args.seed})")
        print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"), flush=True)


if __name__ == "__main__":
    main()
