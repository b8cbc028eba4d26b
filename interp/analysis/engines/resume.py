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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor, nn

from interp.analysis.engines.scoring import forward
from interp.hooks import module_hooks


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
    with module_hooks([(bridge.blocks[0], lambda m, i, o: seen.append(isinstance(o, tuple)))]):
        forward(bridge, torch.zeros((1, 1), dtype=torch.long))
    return bool(seen and seen[0])


def mlp_removed_residual(
    resid_pre: Float[Tensor, "*batch d_model"],
    attn_out: Float[Tensor, "*batch d_model"],
    mlp_out: Float[Tensor, "*batch d_model"],
    resid_post: Float[Tensor, "*batch d_model"],
) -> Float[Tensor, "*batch d_model"] | None:
    """The residual block ℓ + 1 receives with block ℓ's MLP output removed, ``resid_pre + attn_out``,
    when the block only adds its MLP output (``resid_post = resid_pre + attn_out + mlp_out`` within a
    few roundings of the activations' dtype: sequential GPT-2/Llama blocks, parallel GPT-J/NeoX ones);
    None when it does not (Gemma-2's post-MLP norm, OLMo-2's post-norms): the caller then reruns the
    block with a hook. The sum is exact where ``resid_post − mlp_out`` is not: an MLP that writes a
    large activation leaves ``resid_post`` with too few digits for the rest in half precision
    (bfloat16 SmolLM2: P(gold) 0.049 off the loop). The one place the reuse and prefix sweeps get
    their resume point (``tests/test_precision.py``)."""
    mid = resid_pre + attn_out
    scale = float(resid_post.abs().max()) or 1.0
    rtol = max(1e-4, 4 * torch.finfo(resid_post.dtype).eps)  # a few roundings of the model's dtype
    return mid if torch.allclose(mid + mlp_out, resid_post, rtol=rtol, atol=rtol * 0.1 * scale) else None


@contextmanager
def skipping_blocks(
    bridge: Any, layer: int, residual: Float[Tensor, "batch pos d_model"], as_tuple: bool
) -> Iterator[None]:
    """Inside the block, any forward of ``bridge`` enters block ``layer`` with ``residual`` and runs
    no block before it (the swap :func:`resume_forward` makes, for callers that run their own
    forward: a packed one, :mod:`interp.analysis.engines.prefix`)."""
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
    last: bool = False,
) -> Float[Tensor, "batch kept vocab"]:
    """Logits of a forward that enters block ``layer`` with ``residual`` (the residual stream
    *entering* that block, i.e. ``resid_pre``) instead of computing blocks ``0..layer−1``.

    ``tokens`` / ``attention_mask`` are the run's inputs (their embeddings are computed and
    discarded; they fix the masks and positions). ``layer = n_layers`` runs only the final norm and
    unembedding. ``as_tuple``: see :func:`block_output_is_tuple` (found when None). ``last``: only
    each row's last position (:func:`~interp.analysis.engines.scoring.forward`).
    """
    n = len(bridge.blocks)
    if not 0 <= layer <= n:
        raise ValueError(f"layer must be in 0..{n}, got {layer}")
    if layer == 0:
        return forward(bridge, tokens, attention_mask, last=last)
    if as_tuple is None:
        as_tuple = block_output_is_tuple(bridge)
    with skipping_blocks(bridge, layer, residual, as_tuple):
        return forward(bridge, tokens, attention_mask, last=last)


__all__ = ["block_output_is_tuple", "mlp_removed_residual", "resume_forward", "skipping_blocks"]
