"""How far a half-precision run may drift from float32: the tolerances the precision tests assert.

A GPU user runs bfloat16 by default (``--dtype auto``, :func:`interp.models.device.resolve_dtype`);
every analysis here is checked against float32 on the same rows (``tests/test_precision.py``,
``bench/precision.py``). The tolerance of a logit-scale metric is

    tol = k · u · √(2L) · s

- ``u``: the dtype's unit roundoff, half its machine epsilon (bfloat16 2⁻⁸ ≈ 3.9e-3, float16
  2⁻¹¹ ≈ 4.9e-4): the relative error of one rounding;
- ``√(2L)``: each of the ``L`` blocks writes twice to the residual stream (attention, MLP), each
  write rounded once; independent rounding errors add in quadrature, so the residual's relative
  error grows like the square root of the number of writes (the matrix products accumulate in
  float32 on the CPU and on tensor cores, so their inner sums add no error of that order);
- ``s``: the metric's scale — the standard deviation of the float32 logits over the vocabulary at
  the scored position (a logit *difference* such as the yes/no margin inherits the error of the
  logits it subtracts, at the logits' own scale);
- ``k = 4``: headroom over the mean error (measured on SmolLM2-135M, 30 layers: the largest yes/no
  margin error over the rows was 2.0 × ``u·√(2L)·s`` in bfloat16 and 1.8 × in float16).

A probability through a sigmoid of the margin (P(yes), P(gold)) moves at most a quarter as much
as the margin (the sigmoid's slope is ≤ 1/4): :func:`probability_tolerance`. A verdict is
expected to agree with float32 wherever the float32 margin is larger than the tolerance, and
greedy decoding to give the same tokens until the first step whose float32 top-two logit gap is
smaller than it.
"""

from __future__ import annotations

import math

import torch

#: headroom over the mean rounding drift (see the module docstring)
HEADROOM = 4.0


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon of a floating dtype: bfloat16 2⁻⁸, float16 2⁻¹¹, float32 2⁻²⁴."""
    if not dtype.is_floating_point:
        raise ValueError(f"unit_roundoff needs a floating dtype, got {dtype}")
    return torch.finfo(dtype).eps / 2


def logit_tolerance(dtype: torch.dtype, n_layers: int, logit_scale: float, headroom: float = HEADROOM) -> float:
    """``headroom · u · √(2 n_layers) · logit_scale``: how far a logit difference (a yes/no
    margin, a top-two gap, a logit-difference metric) computed in ``dtype`` may be from its
    float32 value. ``logit_scale``: the float32 logits' standard deviation over the vocabulary."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    if not logit_scale >= 0:
        raise ValueError(f"logit_scale must be >= 0, got {logit_scale}")
    return headroom * unit_roundoff(dtype) * math.sqrt(2 * n_layers) * float(logit_scale)


def probability_tolerance(dtype: torch.dtype, n_layers: int, logit_scale: float, headroom: float = HEADROOM) -> float:
    """The tolerance of a sigmoid of a logit difference (P(yes), P(gold)): a quarter of
    :func:`logit_tolerance`, the sigmoid's largest slope."""
    return logit_tolerance(dtype, n_layers, logit_scale, headroom) / 4


#: metrics read on the logit scale (a difference of logits, a next-token loss); the others
#: (P(gold), P(yes), the probability mass on legal next tokens) are probabilities
LOGIT_METRICS = ("logit-diff", "logit_diff", "token_loss", "continuation_loss")


def effect_tolerance(
    dtype: torch.dtype, n_layers: int, logit_scale: float, metric: str | None, headroom: float = HEADROOM
) -> float:
    """How far a sweep *effect* (ablated − clean, a difference of two metric values) computed in
    ``dtype`` may be from float32's: twice the tolerance of its metric, :func:`logit_tolerance`
    for a logit-scale metric (:data:`LOGIT_METRICS`; a next-token loss moves at most as much as
    the largest logit error), :func:`probability_tolerance` for a probability (P(gold), P(yes),
    legal mass: ``Σ_legal p`` moves by ``m(1 − m)`` times a logit difference, at most a quarter)."""
    if metric is not None and str(metric) in LOGIT_METRICS:
        return 2 * logit_tolerance(dtype, n_layers, logit_scale, headroom)
    if metric is not None and str(metric) == "accuracy":
        raise ValueError("accuracy is a step function of the margin: it has no rounding tolerance; use p-gold")
    return 2 * probability_tolerance(dtype, n_layers, logit_scale, headroom)


__all__ = [
    "HEADROOM",
    "LOGIT_METRICS",
    "effect_tolerance",
    "logit_tolerance",
    "probability_tolerance",
    "unit_roundoff",
]
