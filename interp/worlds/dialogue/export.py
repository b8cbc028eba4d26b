"""The dialogue world as a PragWorld benchmark file, and benchmark items as token sequences.

:func:`benchmark_rows` draws groups — an original item (a conversation of ``min_utts..max_utts``
utterances and a balanced question) followed by one alteration per category it admits — as rows
in the schema of :func:`interp.datasets.pragworld.load_pragworld` (``context``, ``question``,
``gold``, ``altered``, ``target``, ``category``, ``effect``, plus ``group``). :func:`write_benchmark`
writes them in the manual split's CSV layout through
:func:`~interp.datasets.pragworld.write_pragworld_csv`, so the benchmark's loader, metrics and
sweeps read a synthetic file exactly as they read the published one. Contexts are one utterance per
line (``P1: ann put two sheep in barn``): whitespace-split, a row's text is its tokens again
(:func:`prompt_tokens`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from interp.worlds.dialogue.alterations import CATEGORIES, alter_all
from interp.worlds.dialogue.grammar import ANSWERS, PROBE, Item, Probe, parse
from interp.worlds.dialogue.sampling import sample_item

#: our category names → the loader's category keys
CATEGORY_KEYS = {
    "Negation": "negation",
    "Variable Substitution": "variable_substitution",
    "Quantity Change": "quantity_change",
    "Variable Swap": "variable_swap",
    "Quantifier Change": "quantifier_change",
    "Logical Connective Change": "connective_change",
    "Injecting Inconsistent Data": "inconsistent_data",
}


def _row(
    group: int,
    item: Item,
    gold: bool,
    category: str | None = None,
    target: str | None = None,
    effect: str | None = None,
) -> dict:
    return {
        "group": group,
        "context": item.context_text(),
        "question": item.question.text(),
        "gold": int(gold),
        "altered": category is not None,
        "target": target.lower() if target else "none",
        "category": CATEGORY_KEYS[category] if category else None,
        "effect": effect.lower() if effect else None,
    }


def benchmark_rows(world, n_groups: int, seed: int = 0, categories: tuple[str, ...] = CATEGORIES) -> pd.DataFrame:
    """``n_groups`` groups (original + alterations), seeded; columns as described above."""
    rng = np.random.default_rng(seed)
    rows = []
    for g in range(n_groups):
        item = sample_item(world, rng)
        rows.append(_row(g, item, world.gold(item)))
        for a in alter_all(world, item, rng, categories):
            rows.append(_row(g, a.item, a.gold, a.category, a.target, a.effect))
    return pd.DataFrame(rows)


def write_benchmark(world, path: str | os.PathLike, n_groups: int = 500, seed: int = 0) -> Path:
    """Draw :func:`benchmark_rows` and write them in the manual split's CSV layout."""
    from interp.datasets.pragworld import write_pragworld_csv

    return write_pragworld_csv(benchmark_rows(world, n_groups, seed), path)


def prompt_tokens(context: str, question: str) -> list[str]:
    """What a model reads for a benchmark row: the conversation, ``Q:``, the question."""
    return [*context.split(), PROBE, *question.split()]


def item_from_text(context: str, question: str) -> Item:
    """A row's text back as a structured :class:`Item` (raises ``WorldError`` if it is not ours)."""
    utterances = parse(context.split())
    probe = parse([PROBE, *question.split(), ANSWERS[0]])
    said = [u for u in utterances if not isinstance(u, Probe)]
    if len(said) != len(utterances) or len(probe) != 1 or not isinstance(probe[0], Probe):
        from interp.worlds.base import WorldError

        raise WorldError("dialogue: a benchmark context holds utterances only, the question one question")
    return Item(tuple(said), probe[0].question)


def item_sequences(world, rows: pd.DataFrame) -> list[list[str]]:
    """Each row as a training sequence: its prompt followed by its gold answer (legal in ``world``)."""
    return [
        prompt_tokens(c, q) + [ANSWERS[0] if int(g) == 1 else ANSWERS[1]]
        for c, q, g in zip(rows["context"], rows["question"], rows["gold"])
    ]


def write_item_sequences(world, rows: pd.DataFrame, path: str | os.PathLike) -> Path:
    """:func:`item_sequences` as a sequence file (one per line), e.g. to fine-tune on altered items."""
    from interp.worlds.io import write_sequences

    seqs: Iterable[list[str]] = item_sequences(world, rows)
    return write_sequences(Path(path), seqs)
