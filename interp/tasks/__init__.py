"""Tasks: the one place a dataset meets a model's tokenizer.

- :mod:`.tokens` — the model's own tokenizer settings (:func:`own_tokenizer`, the BOS and
  chat-template rules of :class:`Tokenization`, :func:`yes_no_token_ids`, right padding);
- :mod:`.contrast` — :class:`ContrastTask`: contrast examples (a prompt, a correct and a foil next
  token, a corrupted prompt, a group; IOI) as ids, masks, the logit-difference and two-way
  probability metrics, training rows toward the correct token or the foil;
- :mod:`.yesno` — :class:`YesNoTask` (a ContrastTask with correct / foil = gold / other answer):
  PragWorld rows and dialogue-world probes as prompts, ids,
  masks, the scored position, the two-way P(gold) metric, fine-tuning rows, categories and pairs.

Imports run down: tasks use worlds, the PragWorld loader and prompts; analysis, metrics, train,
the evaluation and the CLI use tasks.
"""

from interp.tasks.contrast import ContrastTask
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
    "ContrastTask",
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
