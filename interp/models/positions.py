"""Position ids from an attention mask: the one rule every padded forward uses.

A padded batch must give each real token the position it would have unpadded, or a left-padded
row (and any row under rotary or learned position embeddings) is scored at the wrong positions:
a row's ``k``-th real token gets position ``k − 1``, counted over the mask, whatever padding comes
before it. Padding positions get the position of the last real token before them (0 before the
first); no real token attends to them, so their value never matters.

::

    mask = [[0, 0, 1, 1, 1],      # left-padded   → [[0, 0, 0, 1, 2],
            [1, 1, 1, 0, 0]]      # right-padded  →  [0, 1, 2, 2, 2]]
"""

from __future__ import annotations

from jaxtyping import Int, Shaped
from torch import Tensor


def position_ids(attention_mask: Shaped[Tensor, "batch pos"]) -> Int[Tensor, "batch pos"]:
    """``(cumsum(mask) − 1).clamp(min=0)`` as int64 on the mask's device: each real token's index
    among its row's real tokens (see the module docstring); ``attention_mask`` is 0/1 or bool."""
    if attention_mask.dim() != 2:
        raise ValueError(
            f"position ids need a [batch, pos] attention mask of 0/1, got shape {tuple(attention_mask.shape)}"
        )
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


__all__ = ["position_ids"]
