"""Resume a forward at block ℓ from a given residual stream, skipping blocks 0..ℓ−1.

A layer sweep edits one block at a time, so for the edit at layer ℓ the blocks before it compute
exactly what the clean run computed. TransformerLens's ``start_at_layer`` does not save that work
on a bridge (it still runs blocks 0..ℓ−1; ``shared/reference/ecosystem.md``), and calling the
wrapped HF blocks one by one would bypass the attention masks and rotary embeddings the HF forward
builds for them. :func:`resume_forward` keeps the model's own forward and swaps the blocks before ℓ
in its ``ModuleList`` (which *is* ``bridge.blocks``) for pass-through modules: block ℓ−1 hands
over the given residual, earlier ones return their input untouched. Masks, position ids, rotary
embeddings, the final norm, the unembedding and every hook on blocks ≥ ℓ run as usual; the
original blocks are put back on exit, also when the forward raises.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor, nn

from interp.analysis.scoring import forward


class _PassThrough(nn.Module):
    """Stands in for a skipped block: returns its hidden-state input, or ``replacement`` when set.

    ``as_tuple`` mimics blocks that return ``(hidden, ...)`` instead of a tensor."""

    def __init__(self, replacement: Tensor | None, as_tuple: bool):
        super().__init__()
        self.replacement, self.as_tuple = replacement, as_tuple

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs["hidden_states"]
        out = hidden if self.replacement is None else self.replacement
        if self.replacement is not None and tuple(out.shape) != tuple(hidden.shape):
            raise ValueError(f"resume residual has shape {tuple(out.shape)}, the forward's is {tuple(hidden.shape)}")
        return (out,) if self.as_tuple else out


def block_output_is_tuple(bridge: Any) -> bool:
    """Whether the model's blocks return a tuple (older HF layers) rather than a tensor; found by
    running block 0 once on a one-token input."""
    seen: list[bool] = []
    handle = bridge.blocks[0].register_forward_hook(lambda m, i, o: seen.append(isinstance(o, tuple)))
    try:
        forward(bridge, torch.zeros((1, 1), dtype=torch.long))
    finally:
        handle.remove()
    return bool(seen and seen[0])


@contextmanager
def _skipping(bridge: Any, layer: int, residual: Tensor, as_tuple: bool) -> Iterator[None]:
    blocks = bridge.blocks
    originals = [blocks[i] for i in range(layer)]
    try:
        for i in range(layer):
            blocks[i] = _PassThrough(residual if i == layer - 1 else None, as_tuple)
        yield
    finally:
        for i, block in enumerate(originals):
            blocks[i] = block


def resume_forward(
    bridge: Any,
    layer: int,
    residual: Float[Tensor, "batch pos d_model"],
    tokens: Int[Tensor, "batch pos"],
    attention_mask: Shaped[Tensor, "batch pos"] | None = None,
    *,
    as_tuple: bool | None = None,
) -> Float[Tensor, "batch pos vocab"]:
    """Logits of a forward that enters block ``layer`` with ``residual`` (the residual stream
    *entering* that block, i.e. ``resid_pre``) instead of computing blocks ``0..layer−1``.

    ``tokens`` / ``attention_mask`` are the run's inputs (their embeddings are computed and
    discarded; they fix the masks and positions). ``layer = n_layers`` runs only the final norm and
    unembedding. ``as_tuple``: see :func:`block_output_is_tuple` (found when None).
    """
    n = len(bridge.blocks)
    if not 0 <= layer <= n:
        raise ValueError(f"layer must be in 0..{n}, got {layer}")
    if layer == 0:
        return forward(bridge, tokens, attention_mask)
    if as_tuple is None:
        as_tuple = block_output_is_tuple(bridge)
    with _skipping(bridge, layer, residual, as_tuple):
        return forward(bridge, tokens, attention_mask)


__all__ = ["block_output_is_tuple", "resume_forward"]
