"""PragWorld (AAAI 2026): yes/no questions about conversations under minimal alterations.

- :func:`load_pragworld` — either CSV split → :class:`PragWorldData` (rows with explicit groups,
  normalised categories, flip/invariant, gold, length buckets; ``grouping="clean"|"reference"``);
  :func:`write_pragworld_csv` writes the manual-split layout.
- :func:`parse_yes_no` — the benchmark's answer parser.
- :func:`benchmark_prompt`, :func:`label_prompt` — the evaluation and interpretability prompts.

Asking a model (:func:`~interp.metrics.pragworld_eval.evaluate_model`, the pure scoring functions of
logits) is :mod:`interp.metrics.pragworld_eval`; the accuracies (robust, yes/no, original/altered,
flip/invariant, per category and length) are :func:`interp.metrics.pragworld.score_pragworld`.
This package reads and writes files only: it imports nothing else of interp.
"""

from __future__ import annotations

from interp.datasets.pragworld.data import (
    CATEGORIES,
    GROUPINGS,
    LENGTH_BUCKETS,
    Dropped,
    PragWorldData,
    PragWorldFormatError,
    count_utterances,
    first_groups,
    length_bucket,
    load_pragworld,
    normalise_category,
    write_pragworld_csv,
)
from interp.datasets.pragworld.parse import normalise_prediction, parse_yes_no
from interp.datasets.pragworld.prompts import PROMPTS, benchmark_prompt, build_prompt, label_prompt

__all__ = [
    "CATEGORIES",
    "GROUPINGS",
    "LENGTH_BUCKETS",
    "PROMPTS",
    "Dropped",
    "PragWorldData",
    "PragWorldFormatError",
    "benchmark_prompt",
    "build_prompt",
    "count_utterances",
    "first_groups",
    "label_prompt",
    "length_bucket",
    "load_pragworld",
    "normalise_category",
    "normalise_prediction",
    "parse_yes_no",
    "write_pragworld_csv",
]
