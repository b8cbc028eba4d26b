"""What a ``mean`` intervention puts in: the mean activation of a reference set, pooled one of two ways.

``over`` (a parameter of :func:`interp.hooks.mean` and of :class:`~interp.hooks.Intervention`)
names the pooling, so the two means the project uses are one definition with one switch:

- ``"positions"`` (the default of :func:`~interp.hooks.intervene`): one mean over every
  non-padding position of every reference row.
- ``"first/later"`` (the removal sweep's, :mod:`interp.analysis.engines.removals`): two means, one over the
  rows' first real tokens and one over every later non-padding position; each position of the run
  takes the mean of its class. The first token carries large input-independent activations
  (Sun et al. 2024, "massive activations"), so a single mean would move it far off its
  distribution — the artefact a mean ablation is meant to avoid.

Sums are accumulated in float64 (:func:`class_sums`, chunk by chunk) and divided once.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Shaped
from torch import Tensor

#: the poolings of a ``mean`` intervention (module docstring)
MEAN_OVER = ("positions", "first/later")


def first_real_positions(mask: Shaped[Tensor, "n pos"]) -> Shaped[Tensor, " n"]:
    """Index of each row's first non-padding position (0 for right padding)."""
    return mask.bool().to(torch.int64).argmax(dim=1)


def class_sums(
    outputs: Float[Tensor, "n pos *rest"], mask: Shaped[Tensor, "n pos"] | None
) -> tuple[Float[Tensor, "*rest"], Float[Tensor, "*rest"], int, int]:
    """``(first, later, n_first, n_later)``: the float64 sums of ``outputs`` over the rows' first
    real positions and over every later non-padding position, and how many vectors each holds
    (accumulate over chunks, divide once). ``d`` may be several dimensions (heads × d_head)."""
    x = outputs.detach().double().cpu()
    m = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else mask.bool().cpu()
    first = first_real_positions(m)
    rows = torch.arange(x.shape[0])
    later_mask = m.clone()
    later_mask[rows, first] = False
    shape = (*later_mask.shape, *([1] * (x.dim() - 2)))
    return x[rows, first].sum(0), (x * later_mask.reshape(shape)).sum((0, 1)), int(x.shape[0]), int(later_mask.sum())


def mean_replacement(
    first: Float[Tensor, " d"], later: Float[Tensor, " d"], batch: int, width: int
) -> Float[Tensor, "batch pos d"]:
    """The ``first/later`` mean of right-padded rows: ``first`` at position 0 of every row,
    ``later`` at every other position (padding positions too: they are never read by a real
    position)."""
    out = later.expand(batch, width, later.shape[-1]).clone()
    out[:, 0] = first
    return out


def reference_mean(view: Float[Tensor, "n pos *rest"], mask: Shaped[Tensor, "n pos"] | None, over: str) -> Tensor:
    """The mean of a reference run's activation ``view`` (``[rows, positions, *rest]``): ``[*rest]``
    for ``over="positions"``, ``[2, *rest]`` (first, later) for ``"first/later"``."""
    if over == "first/later":
        m = mask if mask is not None and tuple(mask.shape) == tuple(view.shape[:2]) else None
        first, later, n_first, n_later = class_sums(view, m)
        if n_later == 0:
            raise ValueError("a first/later mean needs a reference position after the first token; none has one")
        return torch.stack([first / n_first, later / n_later]).float()
    if over != "positions":
        raise ValueError(f"unknown mean pooling over={over!r}; expected one of {', '.join(MEAN_OVER)}")
    if mask is None or tuple(mask.shape) != tuple(view.shape[:2]):
        return view.float().mean(dim=(0, 1))
    w = mask.to(torch.float32).reshape(*mask.shape, *([1] * (view.dim() - 2)))
    return (view.float() * w).sum(dim=(0, 1)) / w.sum()


__all__ = ["MEAN_OVER", "class_sums", "first_real_positions", "mean_replacement", "reference_mean"]
