"""PragWorld (AAAI 2026): yes/no questions about conversations under minimal alterations.

- :func:`load_pragworld` — either CSV split → :class:`PragWorldData` (rows with explicit groups,
  normalised categories, flip/invariant, gold, length buckets; ``grouping="clean"|"reference"``);
  :func:`write_pragworld_csv` writes the manual-split layout.
- :func:`parse_yes_no` — the benchmark's answer parser.
- :func:`benchmark_prompt`, :func:`label_prompt` — the evaluation and interpretability prompts.
- :mod:`.evaluate` (needs torch; loaded on first use): :func:`yes_no_margin` /
  :func:`p_yes_from_logits` (pure functions of logits), :func:`score_label_prompts`,
  :func:`generate_responses`, :func:`evaluate_model`.

The accuracies (robust, yes/no, original/altered, flip/invariant, per category and length) are
:func:`interp.metrics.pragworld.score_pragworld`.
"""

from __future__ import annotations

import importlib
from typing import Any

from interp.benchmarks.pragworld.data import (
    CATEGORIES,
    GROUPINGS,
    LENGTH_BUCKETS,
    Dropped,
    PragWorldData,
    PragWorldFormatError,
    count_utterances,
    length_bucket,
    load_pragworld,
    normalise_category,
    write_pragworld_csv,
)
from interp.benchmarks.pragworld.parse import normalise_prediction, parse_yes_no
from interp.benchmarks.pragworld.prompts import PROMPTS, benchmark_prompt, build_prompt, label_prompt

_LAZY = ("yes_no_token_ids", "last_position_logits", "yes_no_margin", "p_yes_from_logits",
         "model_logits", "encode_prompts", "score_label_prompts", "generate_responses", "evaluate_model",
         "read_responses", "EvalRun")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module("interp.benchmarks.pragworld.evaluate"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CATEGORIES", "GROUPINGS", "LENGTH_BUCKETS", "PROMPTS", "Dropped", "PragWorldData",
           "PragWorldFormatError", "benchmark_prompt", "build_prompt", "count_utterances", "label_prompt",
           "length_bucket", "load_pragworld", "normalise_category", "normalise_prediction", "parse_yes_no",
           "write_pragworld_csv", *_LAZY]
