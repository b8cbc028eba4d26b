"""Per-example scalar metrics for layer sweeps and patching, and the one forward they share.

A *metric* is any callable ``metric(logits, batch) -> Float[Tensor, "batch"]``: one number per
example, **higher = better** for the helpers here except :func:`token_loss` (lower = better; see
:mod:`interp.analysis.verdicts.layers` for how the sign convention is declared). ``batch`` is a
:class:`Batch`: the token ids and attention mask of the forward, plus ``index``, the positions of
its rows in the full input set, so a metric can carry per-example data (a gold answer, a target
token) and look up the rows of the current chunk with ``gold[batch.index]``.

Helpers
- :func:`logit_diff` — ``logit[pos] − logit[neg]`` at the last non-padding position (the ARENA
  / IOI style metric); ids may be one id for all examples or one per example. It is
  :func:`interp.tasks.contrast.logit_diff`, the metric of :meth:`interp.tasks.ContrastTask.logit_diff_metric`.
- :func:`two_way_prob` — PragWorld's interpretability score (§ "Prompting and parsing",
  used by §6.1 and §6.2): the softmax over just the " yes" and " no" logits at the last position,
  and the probability it gives the *gold* answer. ``> 0.5`` means the model answers correctly.
  It is :func:`interp.tasks.yesno.two_way_prob`, the metric of
  :meth:`interp.tasks.YesNoTask.metric` (one implementation).
- :func:`token_loss` — mean next-token cross-entropy per example over its non-padding targets.

Padding: the last position of a row is its last non-padding one (``attention_mask``), so rows may
be left- or right-padded; forwards get ``position_ids`` counted over non-padding tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor

from interp.hooks import last_positions
from interp.models.device import model_device
from interp.models.positions import position_ids
from interp.tasks.contrast import logit_diff  # the one implementation (ContrastTask.logit_diff_metric's)
from interp.tasks.yesno import two_way_prob  # the one implementation (YesNoTask.metric's)

Metric = Callable[..., Tensor]


@dataclass(frozen=True)
class Batch:
    """The rows one forward sees: ``tokens`` [batch, pos], ``attention_mask`` (1 = real token, or
    None for no padding), and ``index`` — each row's example number in the full input set."""

    tokens: Int[Tensor, "batch pos"]
    attention_mask: Shaped[Tensor, "batch pos"] | None
    index: Int[Tensor, " batch"]

    def last(self) -> Int[Tensor, " batch"]:
        """The last non-padding position of every row."""
        if self.attention_mask is None:
            return torch.full((self.tokens.shape[0],), self.tokens.shape[1] - 1, dtype=torch.long)
        return last_positions(self.attention_mask)


@overload
def to_model_device(bridge: Any, tensor: Tensor) -> Tensor: ...
@overload
def to_model_device(bridge: Any, tensor: None) -> None: ...
def to_model_device(bridge: Any, tensor: Tensor | None) -> Tensor | None:
    """``tensor`` moved to where ``bridge`` takes its inputs (None stays None).

    That is :func:`interp.models.device.model_device`: the input embedding's device, or — under a
    device map that offloads the embedding — the first module kept on a device (accelerate moves
    it on from there). Not ``bridge.cfg.device``, which is ``meta`` under such a map. The bridge
    does not move tensor inputs itself, so every analysis forward goes through this."""
    return None if tensor is None else tensor.to(model_device(bridge))


def reads_last(metric: Metric) -> bool:
    """Whether ``metric`` reads only each row's last position (it says so with ``reads = "last"``,
    as :func:`logit_diff` and :func:`two_way_prob` do): its forwards may then compute logits there only."""
    return getattr(metric, "reads", None) == "last"


def forward(
    bridge: Any,
    tokens: Int[Tensor, "batch pos"],
    attention_mask: Shaped[Tensor, "batch pos"] | None = None,
    *,
    last: bool = False,
) -> Float[Tensor, "batch kept vocab"]:
    """Logits of one forward (no grad) at every position, with position ids counted over
    non-padding tokens. Inputs move to the model's device (:func:`to_model_device`).

    ``last``: only each row's last non-padding position, as logits [batch, 1, vocab] (the
    unembedding runs at those positions only, through the Hugging Face forward's ``logits_to_keep``:
    on a large vocabulary most of a forward's time — Gemma 3 270M: 60 %). A metric that
    :func:`reads_last` reads them as it reads full logits (``tasks.contrast``'s last-logits rule)."""
    tokens, attention_mask = to_model_device(bridge, tokens), to_model_device(bridge, attention_mask)
    kwargs: dict[str, Any] = {}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
        kwargs["position_ids"] = position_ids(attention_mask)
    if last:
        at = Batch(tokens, attention_mask, torch.arange(tokens.shape[0])).last().to(tokens.device)
        keep, col = torch.unique(at, sorted=True, return_inverse=True)
        kwargs["logits_to_keep"] = keep
    with torch.no_grad():
        logits = bridge(tokens, **kwargs)
    if not last:
        return logits
    rows = torch.arange(tokens.shape[0], device=logits.device)
    if logits.shape[1] != len(keep):  # a forward that ignores logits_to_keep: every position came back
        return logits[rows, at.to(logits.device)][:, None]
    return logits[rows, col.to(logits.device)][:, None]


def token_loss(logits: Float[Tensor, "batch pos vocab"], batch: Batch) -> Float[Tensor, " batch"]:
    """Metric (lower = better): mean next-token cross-entropy of each row over the targets whose
    own token and whose predicting token are both non-padding."""
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    tgt = batch.tokens[:, 1:].to(lp.device)
    nll = -lp.gather(-1, tgt[..., None])[..., 0]
    if batch.attention_mask is None:
        return nll.mean(dim=1)
    m = batch.attention_mask.to(lp.device).bool()
    keep = (m[:, 1:] & m[:, :-1]).float()
    return (nll * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)


def metric_name(metric: Metric) -> str:
    """A metric's name for tables and ``run.json``: its ``__name__``, else its type's."""
    return getattr(metric, "__name__", type(metric).__name__)


def score_metric(metric: Metric, logits: Tensor, batch: Batch) -> np.ndarray:
    """``metric(logits, batch)`` as a float NumPy array [batch], checked to be one value per row."""
    val = metric(logits, batch)
    if not isinstance(val, Tensor) or tuple(val.shape) != (batch.tokens.shape[0],):
        raise ValueError(
            f"metric {metric_name(metric)} must return a tensor [batch={batch.tokens.shape[0]}], "
            f"got {getattr(val, 'shape', type(val).__name__)}"
        )
    return val.detach().float().cpu().numpy()


__all__ = [
    "Batch",
    "Metric",
    "forward",
    "logit_diff",
    "metric_name",
    "reads_last",
    "to_model_device",
    "token_loss",
    "two_way_prob",
]
