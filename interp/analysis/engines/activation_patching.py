"""Activation patching sweeps (layer × position, layer × head) on ``transformer_lens.patching``.

Activation patching asks *where* a difference between two inputs lives: run the **corrupted**
input, overwrite one activation with its value from the **clean** input, and see how far the
metric moves back toward the clean run. Sweeping the activation over (layer, position) gives the
familiar heatmap — which positions carry the information at which depth; sweeping attention
heads' outputs over (layer, head) finds the heads that move it.

This wraps TransformerLens's own engine (``get_act_patch_resid_pre`` / ``_attn_out`` /
``_mlp_out`` / ``_attn_head_out_all_pos``, one ``run_with_hooks`` per cell, 4.x's
``reduce="none"`` per-example values and ``baseline=True``) rather than re-implementing it, and
adds what a sweep here needs: our metric signature (``metric(logits, batch)``, one value per
example), the clean run's metric for normalisation, a tidy per-example DataFrame and
:meth:`PatchingMap.save`. The inputs must have equal shapes and no padding (TransformerLens's
patching runs without an attention mask); group pairs by length before calling.

Per cell and example: ``value`` (the patched corrupted run's metric), ``effect = value −
corrupted`` and ``recovered = (value − corrupted) / (clean − corrupted)`` (1 = patching this one
activation restores the clean metric; NaN where clean and corrupted coincide).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.scoring import Batch, Metric, metric_name, to_model_device
from interp.models.device import model_device
from interp.results import save_result

#: what can be patched → (TransformerLens function name, the second axis)
COMPONENTS: dict[str, tuple[str, str]] = {
    "resid_pre": ("get_act_patch_resid_pre", "pos"),
    "attn_out": ("get_act_patch_attn_out", "pos"),
    "mlp_out": ("get_act_patch_mlp_out", "pos"),
    "heads": ("get_act_patch_attn_head_out_all_pos", "head"),
}


@dataclass
class PatchingMap:
    """Per-example activation-patching values over (layer, pos) or (layer, head).

    ``frame``: one row per (layer, ``pos`` or ``head``, example) with ``value``, ``effect`` and
    ``recovered``; ``meta``: component, metric, the clean and corrupted metric means, the model."""

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def axis(self) -> str:
        return str(self.meta["axis"])

    def mean(self, column: str = "effect") -> pd.DataFrame:
        """The heatmap: mean of ``column`` over examples, layers as rows, positions/heads as columns."""
        return self.frame.pivot_table(index="layer", columns=self.axis, values=column, aggfunc="mean")

    def restored(self) -> pd.DataFrame:
        """The heatmap to read first: mean effect / mean (clean − corrupted) gap per cell — the share
        of the average gap one patched activation restores. Steadier than the mean of per-example
        ``recovered`` ratios, which explode on examples whose own gap is tiny."""
        gap = self.meta["clean_mean"] - self.meta["corrupted_mean"]
        mean = self.mean("effect")
        return mean / gap if abs(gap) > 1e-12 else mean * float("nan")

    def stderr(self, column: str = "effect") -> pd.DataFrame:
        g = self.frame.groupby(["layer", self.axis])[column]
        se = g.std(ddof=1) / np.sqrt(g.count())
        return se.unstack(self.axis)

    def summary(self) -> dict[str, Any]:
        """``meta``: component, metric, the clean and corrupted metric means, the model (the
        heatmaps are :meth:`mean` / :meth:`restored`)."""
        return dict(self.meta)

    def save(self, folder: str | Path, stem: str = "patching") -> Path:
        """``<stem>.csv`` (per example), ``<stem>_mean.csv`` (the heatmap), ``<stem>.json`` (meta)."""
        mean = self.mean().reset_index()
        mean.columns = [str(c) for c in mean.columns]
        return save_result(folder, stem, self.summary(), **{"": self.frame, "mean": mean})


@contextmanager
def tl_device(bridge: Any) -> Iterator[None]:
    """While TransformerLens's patching runs, ``bridge.cfg.device`` names the model's device: it
    allocates its result tensor there, and under a device map that offloads the embedding the
    bridge's ``cfg.device`` is ``meta`` (a tensor with no data). Restored on exit."""
    cfg = bridge.cfg
    saved, device = cfg.device, model_device(bridge)
    if saved is None or torch.device(saved).type != "meta":
        yield
        return
    cfg.device = device
    try:
        yield
    finally:
        cfg.device = saved


def check_pair_shapes(bridge: Any, clean: Tensor, corrupted: Tensor) -> None:
    """Raise unless ``clean`` and ``corrupted`` are ``[n, pos]`` token ids of one shape within the
    model's context (patching pairs positions one to one, without padding)."""
    if clean.dim() != 2 or tuple(clean.shape) != tuple(corrupted.shape):
        raise ValueError(
            f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must be [n, pos] "
            "of equal shape (group pairs by length; patching runs without padding)"
        )
    if int(clean.shape[1]) > int(bridge.cfg.n_ctx):
        raise ValueError(f"{clean.shape[1]} positions exceed the model context n_ctx={bridge.cfg.n_ctx}")


def activation_patching(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    component: str = "resid_pre",
    *,
    labels: list[str] | None = None,
) -> PatchingMap:
    """Patch ``component`` from the clean run into the corrupted run at every (layer, position)
    — or every (layer, head) for ``"heads"`` — and score each patched run with ``metric``.

    ``metric(logits, batch) -> Tensor[n]`` as in :mod:`interp.analysis.engines.scoring` (higher or lower
    = better as you define it; the effect is signed). ``labels``: optional names of the positions
    (e.g. the clean tokens) stored in the meta for figures. The bridge must be in eval mode
    (TransformerLens refuses otherwise). No hooks remain afterwards.
    """
    import transformer_lens.patching as tl_patching

    if component not in COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(COMPONENTS)}, got {component!r}")
    check_pair_shapes(bridge, clean, corrupted)
    n = int(clean.shape[0])
    batch = Batch(corrupted, None, torch.arange(n))

    def tl_metric(logits: Tensor) -> Tensor:
        val = metric(logits, batch)
        if not isinstance(val, Tensor) or tuple(val.shape) != (n,):
            raise ValueError(
                f"metric {metric_name(metric)} must return a tensor [n={n}], "
                f"got {getattr(val, 'shape', type(val).__name__)}"
            )
        return val

    fn_name = COMPONENTS[component][0]
    with torch.no_grad(), tl_device(bridge):
        clean_logits, cache = bridge.run_with_cache(to_model_device(bridge, clean))
        clean_value = metric(clean_logits, Batch(clean, None, torch.arange(n))).float().cpu()
        result = getattr(tl_patching, fn_name)(
            bridge, to_model_device(bridge, corrupted), cache, tl_metric, reduce="none", baseline=True
        )
    del cache
    meta = {
        "component": component,
        "metric": metric_name(metric),
        "labels": labels,
        "positions": int(clean.shape[1]),
        "engine": f"transformer_lens.patching.{fn_name}",
    }
    return patching_map(
        bridge, result.values.float().cpu().numpy(), clean_value.numpy(), result.baseline.float().cpu().numpy(), meta
    )


def patching_map(
    bridge: Any,
    values: np.ndarray,
    clean_value: np.ndarray,
    corrupted_value: np.ndarray,
    meta: dict[str, Any],
    *,
    layers: list[int] | None = None,
) -> PatchingMap:
    """A :class:`PatchingMap` from the patched metric ``values`` ``[layer, pos|head, n]`` and the
    clean / corrupted metric per example ``[n]``: ``effect = value − corrupted``, ``recovered =
    effect / (clean − corrupted)`` (NaN where the gap is 0). ``meta`` needs ``component`` (and
    gives ``positions``, the input length, and what else the caller records); the
    axis, counts, means and the model's fingerprint are added. ``layers``: the layer of each row of
    ``values`` (default 0, 1, …)."""
    values = np.asarray(values, dtype=np.float64)
    clean_value = np.asarray(clean_value, dtype=np.float64)
    corrupted_value = np.asarray(corrupted_value, dtype=np.float64)
    n_layers, n_second, n = values.shape
    axis = COMPONENTS[meta["component"]][1]
    effect = values - corrupted_value
    gap = clean_value - corrupted_value
    with np.errstate(divide="ignore", invalid="ignore"):
        recovered = np.where(np.abs(gap) > 1e-12, effect / gap, np.nan)
    lays = np.arange(n_layers) if layers is None else np.asarray(layers)
    layer, second, example = np.meshgrid(lays, np.arange(n_second), np.arange(n), indexing="ij")
    frame = pd.DataFrame(
        {
            "layer": layer.ravel(),
            axis: second.ravel(),
            "example": example.ravel(),
            "value": values.ravel(),
            "effect": effect.ravel(),
            "recovered": recovered.ravel(),
        }
    )
    meta = {
        "kind": "activation_patching",
        "axis": axis,
        "n_examples": n,
        "clean_mean": float(clean_value.mean()),
        "corrupted_mean": float(corrupted_value.mean()),
        **meta,
        "model": model_fingerprint(bridge),
    }
    return PatchingMap(frame, meta)


def legal_mass(legal: Tensor) -> Metric:
    """Metric (higher = better): the probability the model puts, at the last position, on the
    tokens in ``legal[example]`` (a bool ``[n, vocab]`` mask, e.g. the tokens legal in the clean
    input's state). Patching clean activations into a corrupted run raises it where the patched
    activation carries the clean state."""
    legal = legal.bool()

    def metric(logits: Tensor, batch: Batch) -> Tensor:
        probs = torch.softmax(logits[torch.arange(logits.shape[0]), batch.last()].float(), dim=-1)
        return (probs * legal[batch.index].to(probs.device).float()).sum(-1)

    metric.__name__ = "legal_mass"
    return metric


__all__ = ["COMPONENTS", "PatchingMap", "activation_patching", "check_pair_shapes", "legal_mass", "patching_map"]
