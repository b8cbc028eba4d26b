"""Tasks: the one place a dataset meets a model's tokenizer.

- :mod:`.tokens` — the model's own tokenizer settings (:func:`own_tokenizer`, the BOS and
  chat-template rules of :class:`Tokenization`, :func:`yes_no_token_ids`, right padding);
- :mod:`.yesno` — :class:`YesNoTask`: PragWorld rows and dialogue-world probes as prompts, ids,
  masks, the scored position, the two-way P(gold) metric, fine-tuning rows, categories and pairs.

Imports run down: tasks use worlds, the PragWorld loader and prompts; analysis, metrics, train,
the evaluation and the CLI use tasks.
"""

from interp.tasks.tokens import (
    Tokenization,
    TokenizationError,
    adds_bos,
    encode_prompts,
    own_tokenizer,
    pad_right,
    yes_no_token_ids,
)
from interp.tasks.yesno import PROMPT_KINDS, YesNoTask, dialogue_prompt

__all__ = [
    "PROMPT_KINDS",
    "Tokenization",
    "TokenizationError",
    "YesNoTask",
    "adds_bos",
    "dialogue_prompt",
    "encode_prompts",
    "own_tokenizer",
    "pad_right",
    "yes_no_token_ids",
]
