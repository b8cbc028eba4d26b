"""Layer sweeps: PragWorld's MLP zero-out ablation (§6.2), one layer at a time.

For each layer ℓ the MLP's output (``blocks.ℓ.hook_mlp_out``) is replaced by 0 at every position,
so the residual stream receives nothing from that MLP; attention and every other MLP stay. The
per-example effect of the layer is ``metric(ablated) − metric(clean)``. PragWorld recomputes
accuracy A_ℓ with layer ℓ ablated and calls the layer *useful* if A_ℓ < A_0 and *harmful* if
A_ℓ > A_0; here the per-example effects are kept, so :mod:`interp.analysis.verdicts` can put a
paired bootstrap interval on them (and still report the raw rule beside it).

Two ways to run the same sweep (``method=``):
- ``"loop"`` (the reference): one :func:`~interp.hooks.intervene` forward per layer — easy to read,
  ``1 + n_layers`` forwards per chunk of inputs.
- ``"batched"``: the ``n_layers`` ablated variants of a chunk stacked into one forward of
  ``n_layers × chunk`` rows, where layer ℓ's hook zeroes only the rows of variant ℓ. On a bridge
  the per-forward Python overhead dominates small models (``docs: ecosystem.md``), so this is the
  fast path; a test checks it equals the loop to 1e-5. Memory grows with ``n_layers × batch_size``.
Reusing the clean run for the layers before ℓ (start a forward at block ℓ from the cached
residual) is *not* done: TransformerLens's ``start_at_layer`` still runs blocks 0..ℓ−1 on the
bridge, and calling the wrapped HF blocks directly would bypass the bridge's masks and rotary
embeddings for some architectures; it is left until it can be verified per architecture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int, Shaped
from torch import Tensor

from interp.analysis.fingerprint import model_fingerprint
from interp.analysis.scoring import Batch, Metric, forward, metric_name
from interp.hooks import HookNames, InterventionError, Site, check_site, intervene, zero
from interp.results import mean_se, save_result


@dataclass
class SweepResult:
    """Per-example effects of one intervention per layer, and their per-layer summary.

    ``frame``: one row per (example, layer) with ``clean`` (metric unedited), ``ablated`` (metric
    under the layer's intervention; for patching, the patched run), ``effect = ablated − clean``
    and ``category`` when categories were given. ``summary``: per layer, the mean effect, its
    standard error and n, and the mean clean / ablated metric. ``meta``: the kind of sweep, the
    metric's name, whether higher is better, and the model fingerprint
    (:func:`~interp.analysis.fingerprint.model_fingerprint`).
    """

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> pd.DataFrame:
        rows = []
        for layer, g in self.frame.groupby("layer", sort=True):
            est = mean_se(g["effect"].to_numpy())
            rows.append({"layer": int(layer), "mean_effect": est.mean, "se": est.se, "n": est.n,
                         "clean": float(g["clean"].mean()), "ablated": float(g["ablated"].mean())})
        return pd.DataFrame(rows, columns=["layer", "mean_effect", "se", "n", "clean", "ablated"])

    @property
    def layers(self) -> list[int]:
        return sorted(int(x) for x in self.frame["layer"].unique())

    def effects(self) -> pd.DataFrame:
        """Wide table: one row per example, one column per layer (the effect)."""
        return self.frame.pivot(index="example", columns="layer", values="effect")

    def save(self, folder: str | Path, stem: str = "sweep") -> Path:
        """``<stem>.json`` (meta + summary), ``<stem>.csv`` (per example), ``<stem>_layers.csv`` (summary)."""
        summary = self.summary
        return save_result(folder, stem, {**self.meta, "summary": summary.to_dict(orient="records")},
                           **{"": self.frame, "layers": summary})


def _chunks(n: int, size: int | None) -> list[np.ndarray]:
    size = n if not size else max(1, int(size))
    return [np.arange(i, min(i + size, n)) for i in range(0, n, size)]


def _layers(bridge: Any, layers: Sequence[int] | None) -> list[int]:
    n = int(bridge.cfg.n_layers)
    out = list(range(n)) if layers is None else [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n]
    if bad or not out:
        raise ValueError(f"layers must be a non-empty subset of 0..{n - 1}, got {layers!r}")
    return out


def _categories(categories: Sequence[Any] | None, n: int) -> list[Any] | None:
    if categories is None:
        return None
    cats = list(categories)
    if len(cats) != n:
        raise ValueError(f"{len(cats)} categories for {n} examples")
    return cats


def _score(metric: Metric, logits: Tensor, batch: Batch) -> np.ndarray:
    val = metric(logits, batch)
    if not isinstance(val, Tensor) or tuple(val.shape) != (batch.tokens.shape[0],):
        raise ValueError(f"metric {metric_name(metric)} must return a tensor [batch={batch.tokens.shape[0]}], "
                         f"got {getattr(val, 'shape', type(val).__name__)}")
    return val.detach().float().cpu().numpy()


def mlp_zero_sweep(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    metric: Metric,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    layers: Sequence[int] | None = None,
    *,
    categories: Sequence[Any] | None = None,
    batch_size: int | None = None,
    method: str = "loop",
    higher_is_better: bool = True,
) -> SweepResult:
    """Zero ``mlp_out`` of each layer at every position (PragWorld §6.2) and score every example.

    ``metric(logits, batch) -> Tensor[batch]`` (see :mod:`interp.analysis.scoring`);
    ``attention_mask`` marks padding; ``layers`` defaults to all; ``categories`` (one per example,
    e.g. PragWorld alteration types) becomes a ``category`` column; ``batch_size`` bounds the
    examples of one forward (``"batched"`` multiplies it by the number of layers);
    ``higher_is_better`` is recorded for the verdicts (False for a loss). The bridge should be in
    eval mode. Hooks are removed on return and on error.
    """
    if method not in ("loop", "batched"):
        raise ValueError(f"method must be 'loop' or 'batched', got {method!r}")
    if inputs.dim() != 2:
        raise ValueError(f"inputs must be token ids [n, pos], got shape {tuple(inputs.shape)}")
    n = int(inputs.shape[0])
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(inputs.shape):
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} ≠ inputs {tuple(inputs.shape)}")
    lays = _layers(bridge, layers)
    cats = _categories(categories, n)
    names = HookNames(bridge)
    for layer in lays:
        check_site(Site(layer, "mlp_out"), bridge, names)

    clean = np.zeros(n)
    ablated = np.zeros((len(lays), n))
    for idx in _chunks(n, batch_size):
        ids = inputs[idx]
        mask = None if attention_mask is None else attention_mask[idx]
        batch = Batch(ids, mask, torch.as_tensor(idx, dtype=torch.long))
        clean[idx] = _score(metric, forward(bridge, ids, mask), batch)
        if method == "loop":
            for j, layer in enumerate(lays):
                with intervene(bridge, [zero(Site(layer, "mlp_out"))], attention_mask=mask) as active:
                    logits = forward(bridge, ids, mask)
                if active.calls != [1]:
                    raise InterventionError(f"zeroing mlp_out:{layer} fired {active.calls} times in one forward")
                ablated[j, idx] = _score(metric, logits, batch)
        else:
            ablated[:, idx] = _batched(bridge, metric, batch, lays)

    rows = []
    for j, layer in enumerate(lays):
        for i in range(n):
            row = {"example": i, "layer": layer, "clean": clean[i], "ablated": ablated[j, i],
                   "effect": ablated[j, i] - clean[i]}
            if cats is not None:
                row["category"] = cats[i]
            rows.append(row)
    meta = {"kind": "mlp_zero", "metric": metric_name(metric), "higher_is_better": bool(higher_is_better),
            "method": method, "n_examples": n, "layers": lays, "model": model_fingerprint(bridge)}
    return SweepResult(pd.DataFrame(rows), meta)


def _batched(bridge: Any, metric: Metric, batch: Batch, layers: list[int]) -> np.ndarray:
    """Scores [len(layers), batch] from one forward of the stacked variants."""
    b = batch.tokens.shape[0]
    k = len(layers)
    fired = [0] * k

    def zero_rows(j: int):
        def hook(act: Tensor, hook: Any) -> Tensor:
            if act.shape[0] != k * b:
                raise InterventionError(f"expected {k * b} stacked rows at mlp_out:{layers[j]}, got {act.shape[0]}")
            out = act.clone()
            out[j * b:(j + 1) * b] = 0
            fired[j] += 1
            return out
        return hook

    ids = batch.tokens.repeat(k, 1)
    mask = None if batch.attention_mask is None else batch.attention_mask.repeat(k, 1)
    with bridge.hooks(fwd_hooks=[(Site(layer, "mlp_out").hook_name, zero_rows(j)) for j, layer in enumerate(layers)]):
        logits = forward(bridge, ids, mask)
    if fired != [1] * k:
        raise InterventionError(f"stacked zero-ablation hooks fired {fired} times (expected once each)")
    out = np.zeros((k, b))
    for j in range(k):
        sl = slice(j * b, (j + 1) * b)
        out[j] = _score(metric, logits[sl], batch)
    return out


__all__ = ["SweepResult", "mlp_zero_sweep"]
