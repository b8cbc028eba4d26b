"""Token sequences → ``<bos>``-prefixed, right-padded id tensors (the vocabulary's own encoding),
and :func:`pad_right` for rows of ids already tokenized (prompts, generated tokens).

Every room that turns world sequences into model inputs (metrics, analyses, training) encodes them
here, so a sequence is read the same way everywhere. Kept out of :mod:`interp.worlds.base` so
that importing a world does not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from interp.worlds.base import Vocab


def encode_sequences(
    sequences: Sequence[Sequence[str]], vocab: Vocab, n_ctx: int | None = None
) -> Int[Tensor, "n pos"]:
    """``<bos>``-prefixed, right-padded token ids, one row per sequence.

    Raises ``ValueError`` naming the sequence when one does not fit the context ``n_ctx``.
    """
    if not sequences:
        raise ValueError("no sequences to encode")
    rows = [vocab.encode(s) for s in sequences]
    width = max(len(r) for r in rows)
    if n_ctx is not None and width > n_ctx:
        i = max(range(len(rows)), key=lambda j: len(rows[j]))
        raise ValueError(
            f"sequence {i} has {len(rows[i])} tokens with <bos>, more than the model context "
            f"n_ctx={n_ctx}; raise model.n_ctx or lower the world's maximum length"
        )
    out = torch.full((len(rows), width), vocab.pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def pad_right(
    seqs: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[Int[Tensor, "n pos"], Int[Tensor, "n pos"], Int[Tensor, " n"]]:
    """``(ids, attention_mask, lengths)``: real tokens first, then ``pad_id``."""
    if not seqs:
        raise ValueError("no sequences to pad")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    lengths = mask.sum(dim=1)
    return ids.to(device), mask.to(device), lengths.to(device)


__all__ = ["encode_sequences", "pad_right"]
