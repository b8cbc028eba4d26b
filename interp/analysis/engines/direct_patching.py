"""Direct-effect patching (PragWorld §6.1), for any pair of inputs and any per-example metric.

PragWorld asks, layer by layer, how much of the change between an original prompt and its minimal
alteration is *carried in the residual stream entering that layer*. For a pair (original, altered):

1. run the altered prompt once and cache the residual stream entering every block
   (``blocks.ℓ.hook_resid_pre``);
2. align the two token sequences: positions of equal tokens in the matching blocks of a sequence
   diff (:meth:`interp.hooks.Alignment.matching`) — the edited words have no partner and keep the
   original's activations;
3. for each layer ℓ, rerun the *original* prompt with its aligned positions at ``resid_pre:ℓ``
   overwritten by the altered run's activations (a ``patch`` intervention with the alignment), and
   score it; effect = metric(patched) − metric(original, unpatched).

In the paper the metric is P(gold of the altered prompt) in the two-way yes/no softmax
(:func:`interp.analysis.engines.scoring.two_way_prob` with the altered gold), and the analysis runs only
on pairs where the model answers the alteration correctly and changes its answer — choosing the
pairs is the caller's job. Patching a pair of identical prompts (or a run with its own
activations) changes nothing, so every effect is exactly 0; the tests hold the code to that.

Each pair runs alone (its own alignment and lengths): ``2 + n_layers`` forwards per pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from interp.analysis.engines.batching import check_categories, swept_layer_list
from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.scoring import Batch, Metric, forward, metric_name, score_metric, to_model_device
from interp.analysis.engines.sweeps import OWN_GROUP, SweepResult, attach_groups
from interp.hooks import Alignment, HookNames, InterventionError, Site, capturing, check_site, hooked, intervene, patch


@dataclass(frozen=True)
class PatchPair:
    """An original prompt and its altered version, as 1-D token ids (lengths may differ)."""

    original: Sequence[int] | Tensor
    altered: Sequence[int] | Tensor


def token_ids_1d(x: Sequence[int] | Tensor, what: str) -> Tensor:
    t = torch.as_tensor(x, dtype=torch.long)
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of token ids, got shape {tuple(t.shape)}")
    return t


def resid_cache(bridge: Any, tokens: Tensor, layers: Sequence[int]) -> dict[str, Tensor]:
    """``{blocks.ℓ.hook_resid_pre: activation}`` of one forward (detached, no grad; ``tokens`` move
    to the model's device, each activation stays on its layer's device)."""
    got: dict[str, Tensor] = {}
    names = [Site(layer, "resid_pre").hook_name for layer in layers]
    with torch.no_grad(), hooked(bridge, capturing(got, names)):
        bridge(to_model_device(bridge, tokens))
    missing = [n for n in names if n not in got]
    if missing:
        raise InterventionError(f"hooks {missing} never fired while caching the altered run")
    return got


def direct_effect_patching(
    bridge: Any,
    pairs: Sequence[PatchPair | tuple[Any, Any]],
    metric: Metric,
    layers: Sequence[int] | None = None,
    *,
    categories: Sequence[Any] | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
    higher_is_better: bool = True,
    method: str = "exact",
) -> SweepResult:
    """Patch the altered run's ``resid_pre:ℓ`` into the original run at aligned positions, per layer.

    ``metric(logits, batch)`` scores the original prompt's run; ``batch.index`` is the pair's index,
    so per-example data (e.g. the altered gold) is looked up by pair. Returns a
    :class:`~interp.analysis.engines.sweeps.SweepResult` whose ``clean`` is the unpatched original score,
    ``ablated`` the patched one and ``effect`` their difference (one row per pair × layer);
    ``groups``: one id per pair (e.g. the PragWorld group of its original; default: each pair its
    own), the ``group`` column the verdicts resample.
    The AtP estimate (same arguments, same frame) is
    :func:`interp.analysis.engines.attribution.direct_effect_attribution`.
    """
    if method == "attribution":  # the estimate builds on this module, so it is called, not dispatched to
        raise ValueError(
            "method='attribution': call interp.analysis.engines.attribution.direct_effect_attribution "
            "(same arguments, same frame) for the estimate of this patching"
        )
    if method != "exact":
        raise ValueError(f"method must be 'exact' or 'attribution', got {method!r}")
    pair_list = [p if isinstance(p, PatchPair) else PatchPair(*p) for p in pairs]
    if not pairs:
        raise ValueError("direct_effect_patching needs at least one pair")
    lays = swept_layer_list(bridge, layers)
    cats = check_categories(categories, len(pair_list))
    names = HookNames(bridge)
    for layer in lays:
        check_site(Site(layer, "resid_pre"), bridge, names)

    rows = []
    for i, pair in enumerate(pair_list):
        orig = token_ids_1d(pair.original, f"pair {i}: original")[None]
        alt = token_ids_1d(pair.altered, f"pair {i}: altered")[None]
        try:
            alignment = Alignment.matching(orig[0].tolist(), alt[0].tolist())
        except InterventionError as e:
            raise ValueError(f"pair {i}: the original and altered prompts share no token to align ({e})") from e
        batch = Batch(orig, None, torch.tensor([i]))
        clean = float(score_metric(metric, forward(bridge, orig), batch)[0])
        cache = resid_cache(bridge, alt, lays)
        for layer in lays:
            iv = patch(Site(layer, "resid_pre"), "altered", alignment)
            with intervene(bridge, [iv], sources={"altered": cache}) as active:
                logits = forward(bridge, orig)
            if active.calls != [1]:
                raise InterventionError(f"patching resid_pre:{layer} fired {active.calls} times in one forward")
            patched = float(score_metric(metric, logits, batch)[0])
            row = {
                "example": i,
                "layer": layer,
                "clean": clean,
                "ablated": patched,
                "effect": patched - clean,
                "n_aligned": len(alignment.pairs),
                "len_original": int(orig.shape[1]),
                "len_altered": int(alt.shape[1]),
            }
            if cats is not None:
                row["category"] = cats[i]
            rows.append(row)
    meta = {
        "kind": "direct_effect_patching",
        "site": "resid_pre",
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "n_examples": len(pair_list),
        "layers": lays,
        "groups": "given" if groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
    }
    frame = attach_groups(pd.DataFrame(rows), groups, len(pair_list))
    frame["clean"] = frame["clean"].astype(np.float64)
    return SweepResult(frame, meta)


__all__ = ["PatchPair", "direct_effect_patching", "resid_cache"]
