"""Layer sweeps: PragWorld's MLP zero-out ablation (§6.2), one layer at a time.

For each layer ℓ the MLP's output (``blocks.ℓ.hook_mlp_out``) is replaced by 0 at every position,
so the residual stream receives nothing from that MLP; attention and every other MLP stay. The
per-example effect of the layer is ``metric(ablated) − metric(clean)``. PragWorld recomputes
accuracy A_ℓ with layer ℓ ablated and calls the layer *useful* if A_ℓ < A_0 and *harmful* if
A_ℓ > A_0; here the per-example effects are kept, so :mod:`interp.analysis.verdicts` can put a
paired bootstrap interval on them (and still report the raw rule beside it).

Three ways to run the same sweep (``method=``), equal to 1e-5 (tested):
- ``"loop"`` (the reference, how ``transformer_lens.patching`` does it): one
  :func:`~interp.hooks.intervene` forward per layer, ``1 + n_layers`` full forwards per chunk.
- ``"reuse"`` (the default): the blocks before ℓ compute the same as in the clean run, so they are
  not recomputed. One clean forward caches, per swept layer, the residual the next block would
  receive with the MLP zeroed — ``resid_post − mlp_out`` — and each variant resumes at block ℓ+1
  from it (:func:`~interp.analysis.resume.resume_forward`), running ``n_layers − 1 − ℓ`` blocks
  instead of ``n_layers``. That subtraction assumes the block adds its MLP output to the residual
  (``resid_post = resid_pre + attn_out + mlp_out``: sequential GPT-2/Llama blocks and parallel
  GPT-J/NeoX blocks alike); the first chunk checks that identity on the clean run, and a layer
  where it fails (e.g. a post-MLP norm) resumes at block ℓ with the zero hook instead, which is
  exact for any block. ``bench/sweep_reuse.py`` measures it against the loop.
- ``"batched"``: the ``n_layers`` ablated variants of a chunk stacked into one forward of
  ``n_layers × chunk`` rows, where layer ℓ's hook zeroes only the rows of variant ℓ (fewer Python
  calls, more rows; measured slower than ``reuse`` on a 2-core CPU — see the benchmark).

Memory: ``reuse`` keeps one ``[chunk, pos, d_model]`` tensor per swept layer (``resid_post −
mlp_out``) and nothing else; ``batch_size`` bounds the chunk. For a 7B-class model (32 layers,
d_model 4096, bf16) a chunk of 8 × 512 tokens caches 32 × 8 × 512 × 4096 × 2 B ≈ 1.1 GB; halve the
chunk or sweep a subset of layers (``layers=``) to halve it. Nothing else is cached: no attention
patterns, no MLP hidden activations.
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
from interp.analysis.resume import block_output_is_tuple, resume_forward
from interp.analysis.scoring import Batch, Metric, forward, metric_name
from interp.hooks import HookNames, InterventionError, Site, check_site, intervene, zero
from interp.results import mean_se, save_result

METHODS = ("reuse", "loop", "batched")


@dataclass
class SweepResult:
    """Per-example effects of one intervention per layer, and their per-layer summary.

    ``frame``: one row per (example, layer) with ``clean`` (metric unedited), ``ablated`` (metric
    under the layer's intervention; for patching, the patched run), ``effect = ablated − clean``,
    ``group`` (the resampling unit of the verdicts: examples that share a source share a group;
    by default each example is its own) and ``category`` when categories were given.
    :meth:`per_layer`: per layer, the mean effect, its standard error (cluster-robust over the
    groups) and n, and the mean clean / ablated metric; :meth:`summary` is ``meta`` with those
    rows. ``meta``: the kind of sweep, the metric's name, whether higher is better, what a group
    is (``groups``), and the model fingerprint
    (:func:`~interp.analysis.fingerprint.model_fingerprint`).
    """

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """``meta`` and, under ``"summary"``, the :meth:`per_layer` rows (what ``<stem>.json`` holds)."""
        return {**self.meta, "summary": self.per_layer().to_dict(orient="records")}

    def per_layer(self) -> pd.DataFrame:
        """One row per layer: ``layer``, ``mean_effect``, ``se``, ``n``, ``clean``, ``ablated``."""
        rows = []
        for layer, g in self.frame.groupby("layer", sort=True):
            est = mean_se(g["effect"].to_numpy()) if "group" not in g else group_mean_se(g["effect"], g["group"])
            rows.append(
                {
                    "layer": int(layer),
                    "mean_effect": est.mean,
                    "se": est.se,
                    "n": est.n,
                    "clean": float(g["clean"].mean()),
                    "ablated": float(g["ablated"].mean()),
                }
            )
        return pd.DataFrame(rows, columns=["layer", "mean_effect", "se", "n", "clean", "ablated"])

    @property
    def layers(self) -> list[int]:
        return sorted(int(x) for x in self.frame["layer"].unique())

    def with_groups(self, groups: Sequence[Any], unit: str) -> "SweepResult":
        """The same sweep with ``group = groups[example]`` (one id per example) and
        ``meta["groups"] = unit`` (what a group is, for the verdict file)."""
        n = int(self.frame["example"].max()) + 1 if len(self.frame) else 0
        return SweepResult(attach_groups(self.frame, groups, n), {**self.meta, "groups": unit})

    def effects(self) -> pd.DataFrame:
        """Wide table: one row per example, one column per layer (the effect)."""
        return self.frame.pivot(index="example", columns="layer", values="effect")

    def save(self, folder: str | Path, stem: str = "sweep") -> Path:
        """``<stem>.json`` (meta + summary), ``<stem>.csv`` (per example), ``<stem>_layers.csv`` (summary)."""
        return save_result(folder, stem, self.summary(), **{"": self.frame, "layers": self.per_layer()})


def _chunks(n: int, size: int | None, mask: Tensor | None = None) -> list[np.ndarray]:
    """Example indices of each forward: ``size`` at a time (all when None), grouped by length when
    there is padding (rows sorted by their number of real tokens), so each chunk can drop the
    padding columns it does not need (:func:`_trim`)."""
    size = n if not size else max(1, int(size))
    order = np.arange(n) if mask is None else np.argsort(mask.sum(1).numpy(), kind="stable")
    return [np.sort(order[i : i + size]) for i in range(0, n, size)]


def _trim(ids: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Drop the trailing columns that are padding in every row of a chunk. Leading columns stay, so
    a metric's column indices keep their meaning for right-padded rows; left-padded rows are kept
    whole."""
    if mask is None:
        return ids, None
    real = mask.bool().any(0).nonzero().flatten()
    if len(real) == 0:
        raise ValueError("a chunk of examples has no real (non-padding) token")
    end = int(real[-1]) + 1
    return ids[:, :end], mask[:, :end]


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


#: ``meta["groups"]`` when every example is its own group
OWN_GROUP = "each example its own group"


def attach_groups(frame: pd.DataFrame, groups: Sequence[Any] | np.ndarray | None, n: int) -> pd.DataFrame:
    """``frame`` with a ``group`` column: ``groups[example]`` (one id per example, ``n`` of them),
    or the example number itself when ``groups`` is None."""
    frame = frame.copy()
    if groups is None:
        frame["group"] = frame["example"].to_numpy()
        return frame
    g = np.asarray(list(groups))
    if g.shape != (n,):
        raise ValueError(f"{len(g)} group ids for {n} examples")
    frame["group"] = g[frame["example"].to_numpy(dtype=int)] if len(frame) else []
    return frame


def group_mean_se(values: Any, groups: Any) -> Any:
    """The mean of ``values`` with its cluster-robust (CR1) standard error over ``groups``
    (:func:`interp.results.ratio_se` on the groups' sums and sizes); ``n`` counts the rows."""
    from interp.results import Estimate, ratio_se

    v = pd.Series(np.asarray(values, dtype=float))
    keep = v.notna().to_numpy()
    by = v[keep].groupby(np.asarray(groups)[keep])
    est = ratio_se(by.sum().to_numpy(), by.count().to_numpy())
    return Estimate(est.mean, est.se, int(keep.sum()))


def _score(metric: Metric, logits: Tensor, batch: Batch) -> np.ndarray:
    val = metric(logits, batch)
    if not isinstance(val, Tensor) or tuple(val.shape) != (batch.tokens.shape[0],):
        raise ValueError(
            f"metric {metric_name(metric)} must return a tensor [batch={batch.tokens.shape[0]}], "
            f"got {getattr(val, 'shape', type(val).__name__)}"
        )
    return val.detach().float().cpu().numpy()


def mlp_zero_sweep(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    metric: Metric,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    layers: Sequence[int] | None = None,
    *,
    categories: Sequence[Any] | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
    batch_size: int | None = 64,
    method: str = "reuse",
    higher_is_better: bool = True,
) -> SweepResult:
    """Zero ``mlp_out`` of each layer at every position (PragWorld §6.2) and score every example.

    ``metric(logits, batch) -> Tensor[batch]`` (see :mod:`interp.analysis.scoring`);
    ``attention_mask`` marks padding; ``layers`` defaults to all; ``categories`` (one per example,
    e.g. PragWorld alteration types) becomes a ``category`` column, ``groups`` (one id per
    example, e.g. PragWorld groups; default: each example its own) the ``group`` column; ``batch_size`` bounds the
    examples of one forward (``"batched"`` multiplies it by the number of layers; None: all at
    once); with padding, chunks group examples of similar length and drop trailing all-padding
    columns, so a metric sees ``batch.tokens`` of the chunk's own width (use ``batch.index`` and
    ``batch.attention_mask``, not the full input's width);
    ``higher_is_better`` is recorded for the verdicts (False for a loss). The bridge should be in
    eval mode. Hooks are removed on return and on error. The AtP estimate of this sweep (same
    arguments, same frame) is :func:`interp.analysis.attribution.mlp_zero_attribution`.
    """
    if method == "attribution":  # the estimate builds on this module, so it is called, not dispatched to
        raise ValueError(
            "method='attribution': call interp.analysis.attribution.mlp_zero_attribution (same "
            "arguments, same frame) for the estimate of this sweep"
        )
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
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
    reuse = _Reuse(bridge, lays) if method == "reuse" else None
    for idx in _chunks(n, batch_size, attention_mask):
        ids, mask = _trim(inputs[idx], None if attention_mask is None else attention_mask[idx])
        batch = Batch(ids, mask, torch.as_tensor(idx, dtype=torch.long))
        if reuse is not None:
            clean[idx], ablated[:, idx] = reuse(metric, batch)
            continue
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
            row = {
                "example": i,
                "layer": layer,
                "clean": clean[i],
                "ablated": ablated[j, i],
                "effect": ablated[j, i] - clean[i],
            }
            if cats is not None:
                row["category"] = cats[i]
            rows.append(row)
    meta = {
        "kind": "mlp_zero",
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "method": method,
        "n_examples": n,
        "layers": lays,
        "groups": "given" if groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
    }
    if reuse is not None:
        meta["resumed_after_block"] = [layer for layer in lays if reuse.additive.get(layer, True)]
    return SweepResult(attach_groups(pd.DataFrame(rows), groups, n), meta)


class _Reuse:
    """The ``"reuse"`` method: one clean forward that caches ``resid_post − mlp_out`` per layer,
    then one resumed forward per layer (see the module docstring)."""

    def __init__(self, bridge: Any, layers: list[int]):
        self.bridge, self.layers = bridge, layers
        self.as_tuple = block_output_is_tuple(bridge)
        self.additive: dict[int, bool] = {}  # per layer, checked on the first chunk

    def _components(self, layer: int) -> tuple[str, ...]:
        if not self.additive:  # first chunk: everything the additivity check needs
            return ("resid_pre", "attn_out", "mlp_out", "resid_post")
        return ("mlp_out", "resid_post") if self.additive[layer] else ("resid_pre",)

    def _clean_run(self, metric: Metric, batch: Batch) -> tuple[np.ndarray, dict[tuple[int, str], Tensor]]:
        cache: dict[tuple[int, str], Tensor] = {}

        def keep(layer: int, comp: str):
            def hook(act: Tensor, hook: Any) -> None:
                if comp == "resid_post" and self.additive:  # later chunks keep only the difference
                    cache[(layer, "resumed")] = act.detach() - cache.pop((layer, "mlp_out"))
                else:
                    cache[(layer, comp)] = act.detach()

            return hook

        hooks = [(Site(layer, c).hook_name, keep(layer, c)) for layer in self.layers for c in self._components(layer)]
        with self.bridge.hooks(fwd_hooks=hooks):
            clean = _score(metric, forward(self.bridge, batch.tokens, batch.attention_mask), batch)
        if not self.additive:
            for layer in self.layers:
                post, mlp = cache.pop((layer, "resid_post")), cache.pop((layer, "mlp_out"))
                rebuilt = cache[(layer, "resid_pre")] + cache.pop((layer, "attn_out")) + mlp
                scale = float(post.abs().max()) or 1.0
                self.additive[layer] = bool(torch.allclose(rebuilt, post, rtol=1e-4, atol=1e-5 * scale))
                cache[(layer, "resumed")] = post - mlp
        return clean, cache

    def __call__(self, metric: Metric, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        clean, cache = self._clean_run(metric, batch)
        ids, mask = batch.tokens, batch.attention_mask
        out = np.zeros((len(self.layers), ids.shape[0]))
        for j, layer in enumerate(self.layers):
            if self.additive[layer]:
                logits = resume_forward(
                    self.bridge, layer + 1, cache.pop((layer, "resumed")), ids, mask, as_tuple=self.as_tuple
                )
            else:  # the block does not just add its MLP output: rerun it with the zero hook
                with intervene(self.bridge, [zero(Site(layer, "mlp_out"))], attention_mask=mask):
                    logits = resume_forward(
                        self.bridge, layer, cache.pop((layer, "resid_pre")), ids, mask, as_tuple=self.as_tuple
                    )
            out[j] = _score(metric, logits, batch)
        return clean, out


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
            out[j * b : (j + 1) * b] = 0
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


__all__ = ["METHODS", "OWN_GROUP", "SweepResult", "attach_groups", "group_mean_se", "mlp_zero_sweep"]
