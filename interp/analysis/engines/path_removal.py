"""An MLP's output removed along one path only: into a later MLP, or straight into the logits.

The MLP zero-out sweep (:func:`interp.analysis.engines.sweeps.mlp_zero_sweep`) measures a layer's **total**
effect: zeroing ``mlp_out`` at layer j removes it from the residual stream, so every later
component reads a stream without it. When one later MLP (at layer k) is known to do harm — a
planted one — zeroing an *upstream* layer j also removes part of that MLP's input, and j can look
harmful without doing harm itself. Two path-restricted removals separate the two (Wang et al. 2022,
§3, "path patching"; here with zero ablation, the sweep's removal, instead of a resampled input):

- ``into="mlp:K"`` — j's output is subtracted from the **input of layer K's MLP only** (the input of
  its pre-MLP norm, ``blocks.K.hook_resid_mid``, which on a TransformerBridge feeds the MLP and not
  the residual skip, :mod:`interp.hooks.sites`); every other reader, and the residual stream
  itself, still sees it. The effect is what j does *through* MLP K.
- ``into="logits"`` — j's output is subtracted from the **input of the final norm only**
  (``ln_final.hook_in``): its *direct* effect, the part of the logits it writes without any later
  layer reading it (the norm recomputed, not frozen as in direct logit attribution). For the last
  layer this equals the total effect (nothing reads it in between).

A layer whose total effect is mostly its effect through MLP K, with a small direct effect, looks
harmful because it feeds the planted MLP; a layer with its own harm keeps it along the direct
path. Each removal is one forward with two hooks (one keeps ``blocks.j.hook_mlp_out``, the other
subtracts it at the target), so a set of ``S`` source layers costs ``S`` forwards per chunk. The
result is a :class:`~interp.analysis.engines.sweeps.SweepResult` (``kind = "mlp_path_zero"``, ``meta["into"]``)
with the frame of a sweep, so the verdicts (:func:`interp.analysis.verdicts.layers.layer_verdicts`) read it
as they read a sweep. Hooks are removed on return and on error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int, Shaped
from torch import Tensor

from interp.analysis.engines.batching import row_chunks, trim_padding
from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.scoring import Batch, Metric, forward, metric_name, score_metric
from interp.analysis.engines.sweeps import OWN_GROUP, SweepResult, attach_groups
from interp.hooks import InterventionError, Site, hooked

#: the hook name of the final norm's input (the end of the residual stream, before the unembedding)
FINAL_NORM_INPUT = "ln_final.hook_in"


def path_target(into: str, n_layers: int) -> tuple[int | None, str]:
    """``(K, hook name)`` of a path target: ``"mlp:K"`` → the input of layer K's MLP
    (``blocks.K.hook_resid_mid``); ``"logits"`` → ``(None, "ln_final.hook_in")``."""
    if into == "logits":
        return None, FINAL_NORM_INPUT
    head, _, tail = into.partition(":")
    if head != "mlp" or not tail.strip().lstrip("-").isdigit():
        raise ValueError(f"into must be 'logits' or 'mlp:K' (K a layer, e.g. mlp:12), got {into!r}")
    k = int(tail)
    if not 0 <= k < n_layers:
        raise ValueError(
            f"into={into!r}: layer {k} is out of range; the model has {n_layers} layers (0..{n_layers - 1})"
        )
    return k, Site(k, "resid_mid").hook_name


def mlp_path_removal(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    metric: Metric,
    sources: Sequence[int],
    into: str,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    *,
    groups: Sequence[Any] | np.ndarray | None = None,
    batch_size: int | None = 64,
    higher_is_better: bool = True,
) -> SweepResult:
    """Remove each source layer's MLP output along one path (module docstring) and score every example.

    ``sources``: the layers whose ``mlp_out`` is removed, one forward each; with ``into="mlp:K"``
    each must lie below K (a later layer's output never reaches MLP K). ``metric``, ``attention_mask``,
    ``groups``, ``batch_size`` and ``higher_is_better`` as in :func:`~interp.analysis.engines.sweeps.mlp_zero_sweep`;
    the frame has its columns (``layer`` is the source layer). The bridge should be in eval mode.
    """
    if inputs.dim() != 2:
        raise ValueError(f"inputs must be token ids [n, pos], got shape {tuple(inputs.shape)}")
    n_layers = int(bridge.cfg.n_layers)
    k, target = path_target(into, n_layers)
    srcs = [int(x) for x in sources]
    if not srcs:
        raise ValueError("sources: give at least one layer")
    bad = [j for j in srcs if not 0 <= j < n_layers or (k is not None and j >= k)]
    if bad:
        limit = f"0..{n_layers - 1}" if k is None else f"0..{k - 1} (below the target MLP's layer {k})"
        raise ValueError(f"source layer {bad[0]} is out of range for into={into!r}: sources must be in {limit}")
    n = int(inputs.shape[0])
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(inputs.shape):
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} ≠ inputs {tuple(inputs.shape)}")

    clean = np.zeros(n)
    removed = np.zeros((len(srcs), n))
    for idx in row_chunks(n, batch_size, attention_mask):
        ids, mask = trim_padding(inputs[idx], None if attention_mask is None else attention_mask[idx])
        batch = Batch(ids, mask, torch.as_tensor(idx, dtype=torch.long))
        clean[idx] = score_metric(metric, forward(bridge, ids, mask), batch)
        for s, j in enumerate(srcs):
            removed[s, idx] = score_metric(metric, _removed_forward(bridge, ids, mask, j, target), batch)

    rows = [
        {"example": i, "layer": j, "clean": clean[i], "ablated": removed[s, i], "effect": removed[s, i] - clean[i]}
        for s, j in enumerate(srcs)
        for i in range(n)
    ]
    meta = {
        "kind": "mlp_path_zero",
        "into": into,
        "target_hook": target,
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "n_examples": n,
        "layers": srcs,
        "groups": "given" if groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
    }
    return SweepResult(attach_groups(pd.DataFrame(rows), groups, n), meta)


def _removed_forward(bridge: Any, ids: Tensor, mask: Tensor | None, source: int, target: str) -> Tensor:
    """Logits of one forward in which ``blocks.{source}.hook_mlp_out`` is subtracted at ``target``."""
    kept: dict[str, Tensor] = {}
    fired = {"keep": 0, "subtract": 0}

    def keep(act: Tensor, hook: Any) -> None:
        kept["out"] = act.detach()
        fired["keep"] += 1

    def subtract(act: Tensor, hook: Any) -> Tensor:
        if "out" not in kept:
            raise InterventionError(f"{target} ran before mlp_out:{source}: the source must lie upstream")
        fired["subtract"] += 1
        return act - kept["out"]

    with hooked(bridge, [(Site(source, "mlp_out").hook_name, keep), (target, subtract)]):
        logits = forward(bridge, ids, mask)
    if fired != {"keep": 1, "subtract": 1}:
        raise InterventionError(f"path removal mlp_out:{source} → {target}: hooks fired {fired} (expected once each)")
    return logits


__all__ = ["FINAL_NORM_INPUT", "mlp_path_removal", "path_target"]
