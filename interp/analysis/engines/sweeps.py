"""Layer sweeps: PragWorld's MLP zero-out ablation (§6.2), one layer at a time.

For each layer ℓ the MLP's output (``blocks.ℓ.hook_mlp_out``) is replaced by 0 at every position,
so the residual stream receives nothing from that MLP; attention and every other MLP stay. The
per-example effect of the layer is ``metric(ablated) − metric(clean)``. PragWorld recomputes
accuracy A_ℓ with layer ℓ ablated and calls the layer *useful* if A_ℓ < A_0 and *harmful* if
A_ℓ > A_0; here the per-example effects are kept, so :mod:`interp.analysis.verdicts.layers` can put a
paired bootstrap interval on them (and still report the raw rule beside it).

Three ways to run the same sweep (``method=``), equal to 1e-5 (tested):
- ``"loop"`` (the reference, how ``transformer_lens.patching`` does it): one
  :func:`~interp.hooks.intervene` forward per layer, ``1 + n_layers`` full forwards per chunk.
- ``"reuse"`` (the default): the blocks before ℓ compute the same as in the clean run, so they are
  not recomputed. One clean forward caches, per swept layer, the residual the next block would
  receive with the MLP zeroed — ``resid_pre + attn_out`` — and each variant resumes at block ℓ+1
  from it (:func:`~interp.analysis.engines.resume.resume_forward`), running ``n_layers − 1 − ℓ`` blocks
  instead of ``n_layers``. That assumes the block adds its MLP output to the residual
  (``resid_post = resid_pre + attn_out + mlp_out``: sequential GPT-2/Llama blocks and parallel
  GPT-J/NeoX blocks alike); the first chunk checks that identity on the clean run (to a tolerance
  of a few roundings of the model's dtype), and a layer where it fails (e.g. a post-MLP norm)
  resumes at block ℓ with the zero hook instead, which is exact for any block.
  ``bench/sweep_reuse.py`` measures it against the loop. The sum is the block's own residual
  before its MLP (bitwise, for a sequential block): ``resid_post − mlp_out`` would equal it in
  float32 but not in bfloat16/float16, where an MLP that writes a large activation leaves
  ``resid_post`` rounded to that activation's precision and the subtraction cancels (measured on
  SmolLM2 in bfloat16: P(gold) off by 0.05 from the loop; ``tests/test_precision.py``).
- ``"batched"``: the ``n_layers`` ablated variants of a chunk stacked into one forward of
  ``n_layers × chunk`` rows, where layer ℓ's hook zeroes only the rows of variant ℓ (fewer Python
  calls, more rows; measured slower than ``reuse`` on a 2-core CPU — see the benchmark).
- ``"prefix"``: ``reuse`` over rows laid out as token tries, so a prefix several rows share (a
  PragWorld group's conversation, a template's opening) is read once per variant and only each
  row's last position is scored (:mod:`interp.analysis.engines.prefix`; the metric must read the last
  position only, e.g. ``two_way_prob`` or ``logit_diff``). For the removals that act on every
  position alike (zero, scale, mean); a ``resample`` sweep runs ``reuse`` instead (``meta``
  says so).

Memory: ``reuse`` keeps one ``[chunk, pos, d_model]`` tensor per swept layer (``resid_pre +
attn_out``) and nothing else; ``batch_size`` bounds the chunk. For a 7B-class model (32 layers,
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

from interp.analysis.engines.batching import check_categories, row_chunks, swept_layer_list, trim_padding
from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.removals import (
    Removal,
    SweepRows,
    check_right_padded,
    class_sums,
    mean_replacement,
    reference_rows,
    resample_sources,
)
from interp.analysis.engines.resume import block_output_is_tuple, mlp_removed_residual, resume_forward
from interp.analysis.engines.scoring import Batch, Metric, forward, metric_name, reads_last, score_metric
from interp.analysis.engines.sweep_options import METHODS
from interp.config import merge_options
from interp.hooks import (
    HookNames,
    Intervention,
    InterventionError,
    Site,
    Source,
    check_site,
    hooked,
    intervene,
    patch,
    scale,
    zero,
)
from interp.results import mean_se, save_result


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
    (:func:`~interp.analysis.engines.fingerprint.model_fingerprint`).
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

    def with_groups(self, groups: Sequence[Any] | np.ndarray, unit: str) -> "SweepResult":
        """The same sweep with ``group = groups[example]`` (one id per example) and
        ``meta["groups"] = unit`` (what a group is, for the verdict file)."""
        n = int(self.frame["example"].max()) + 1 if len(self.frame) else 0
        return SweepResult(attach_groups(self.frame, groups, n), {**self.meta, "groups": unit})

    def effects(self) -> pd.DataFrame:
        """Wide table: one row per example, one column per layer (the effect)."""
        return self.frame.pivot(index="example", columns="layer", values="effect")

    def save(self, folder: str | Path, stem: str = "sweep") -> Path:
        """``<stem>.json`` (meta + summary), ``<stem>.csv`` (per example), ``<stem>swept_layer_list.csv`` (summary)."""
        return save_result(folder, stem, self.summary(), **{"": self.frame, "layers": self.per_layer()})


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

    ``metric(logits, batch) -> Tensor[batch]`` (see :mod:`interp.analysis.engines.scoring`);
    ``attention_mask`` marks padding; ``layers`` defaults to all; ``categories`` (one per example,
    e.g. PragWorld alteration types) becomes a ``category`` column, ``groups`` (one id per
    example, e.g. PragWorld groups; default: each example its own) the ``group`` column; ``batch_size`` bounds the
    examples of one forward (``"batched"`` multiplies it by the number of layers; None: all at
    once); with padding, chunks group examples of similar length and drop trailing all-padding
    columns, so a metric sees ``batch.tokens`` of the chunk's own width (use ``batch.index`` and
    ``batch.attention_mask``, not the full input's width);
    ``higher_is_better`` is recorded for the verdicts (False for a loss). The bridge should be in
    eval mode. Hooks are removed on return and on error. The AtP estimate of this sweep (same
    arguments, same frame) is :func:`interp.analysis.engines.attribution.mlp_zero_attribution`; the other
    removals (mean, resample, scale): :func:`mlp_removal_sweep`, of which this is the zero case.
    """
    if method == "attribution":  # the estimate builds on this module, so it is called, not dispatched to
        raise ValueError(
            "method='attribution': call interp.analysis.engines.attribution.mlp_zero_attribution (same "
            "arguments, same frame) for the estimate of this sweep"
        )
    return mlp_removal_sweep(
        bridge,
        inputs,
        metric,
        attention_mask,
        layers,
        ablation=Removal("zero"),
        categories=categories,
        groups=groups,
        batch_size=batch_size,
        method=method,
        higher_is_better=higher_is_better,
    )


def mlp_removal_sweep(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    metric: Metric,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    layers: Sequence[int] | None = None,
    *,
    ablation: Removal | str = "zero",
    batch_size: int | None = 64,
    method: str = "reuse",
    higher_is_better: bool = True,
    examples: SweepRows | None = None,
    **row_settings: Any,
) -> SweepResult:
    """Remove ``mlp_out`` of each layer in the way ``ablation`` says (a :class:`Removal` or the name
    of a kind without parameters: ``zero``, ``mean``, ``resample``; see
    :mod:`interp.analysis.engines.removals`) and score every example; the arguments and the frame are
    :func:`mlp_zero_sweep`'s.

    ``examples``: a :class:`SweepRows` — the rows scored, the reference rows, categories and
    groups — whose fields may also be given as keywords (``rows=``, ``reference=``, ``groups=``).
    The scored rows' ``categories`` / ``groups`` and the metric's ``batch.index`` are rows of
    ``inputs`` (the resample draws read every row's group) — so a process of a sharded run scores its share against the whole reference.
    The three methods are equal to 1e-5 for every kind (tested): ``loop`` applies the
    :mod:`interp.hooks` intervention (``zero``, ``scale``; ``mean`` and ``resample`` as a ``patch``
    from the replacement, the resample source run by the intervention itself), ``reuse`` resumes
    each variant after block ℓ from ``resid_pre + attn_out + r(mlp_out)``, ``batched`` writes
    ``r`` into the stacked rows of its variant. ``meta["ablation"]`` records the removal and its
    settings; rows a resample found no source for are left out and counted in ``meta["skipped"]``.
    """
    ex = merge_options(SweepRows, examples, row_settings, "mlp_removal_sweep")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    removal = ablation if isinstance(ablation, Removal) else Removal(str(ablation))
    if inputs.dim() != 2:
        raise ValueError(f"inputs must be token ids [n, pos], got shape {tuple(inputs.shape)}")
    n_all = int(inputs.shape[0])
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(inputs.shape):
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} ≠ inputs {tuple(inputs.shape)}")
    scored = np.arange(n_all) if ex.rows is None else reference_rows(n_all, ex.rows)
    if ex.rows is not None and len(scored) != len(list(ex.rows)):
        raise ValueError("rows: each row once, please (sorted order is used)")
    lays = swept_layer_list(bridge, layers)
    cats = check_categories(ex.categories, n_all)
    if ex.groups is not None and len(ex.groups) != n_all:
        raise ValueError(f"{len(ex.groups)} group ids for {n_all} examples")
    names = HookNames(bridge)
    for layer in lays:
        check_site(Site(layer, "mlp_out"), bridge, names)
    replace = _Replacements(bridge, inputs, attention_mask, lays, removal, ex.reference, ex.groups, batch_size)
    run = _SweepRun(replace, metric, scored, batch_size)
    if method == "prefix":
        run.by_prefix()
    if method != "prefix" or run.fallback:
        run.by_chunks(method)
    frame = _effects_frame(lays, scored, run.clean, run.ablated, replace.skipped, cats)
    meta = {
        "kind": "mlp_zero" if removal.kind == "zero" else f"mlp_{removal.kind}",
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "method": method,
        "n_examples": len(scored),
        "layers": lays,
        "groups": "given" if ex.groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
        "ablation": {**removal.to_dict(), **replace.settings()},
        **run.meta(),
    }
    g_local = None if ex.groups is None else np.asarray(list(ex.groups))[scored]
    return SweepResult(attach_groups(frame, g_local, len(scored)), meta)


class _SweepRun:
    """The clean and removed scores of one :func:`mlp_removal_sweep` (rows of ``inputs``), by the
    prefix engine (:meth:`by_prefix`) or chunk by chunk (:meth:`by_chunks`: reuse, loop, batched)."""

    def __init__(self, replace: _Replacements, metric: Metric, scored: np.ndarray, batch_size: int | None) -> None:
        self.bridge, self.inputs, self.mask, self.lays = replace.bridge, replace.inputs, replace.mask, replace.layers
        self.replace, self.metric, self.scored, self.batch_size = replace, metric, scored, batch_size
        n_all = int(self.inputs.shape[0])
        self.clean, self.ablated = np.zeros(n_all), np.zeros((len(self.lays), n_all))
        self.prefix: Any = None
        self.packing: Any = None
        self.fallback: str | None = None
        self.additive: dict[int, bool] | None = None

    def by_prefix(self) -> None:
        """The prefix engine (:mod:`interp.analysis.engines.prefix`), or a fallback to ``reuse`` (said)."""
        from interp.analysis.engines.prefix import PrefixSweep, prefix_safe, rows_of

        removal, idx, mask = self.replace.removal, self.scored, self.mask
        if not prefix_safe(removal):
            self.fallback = f"{removal.kind} ties a position's replacement to its row: run by reuse, unshared"
            return
        self.prefix = PrefixSweep(self.bridge, self.lays, removal, self.replace.means)
        width, n = int(self.inputs.shape[1]), len(idx)
        self.clean[idx], self.ablated[:, idx], self.packing = self.prefix.run(
            rows_of(self.inputs[idx], None if mask is None else mask[idx]),
            self.metric,
            batch_tokens=max(width, (self.batch_size or n) * width),
            pack_tokens=min(2048, max(width, (self.batch_size or n) * width)),  # packs cut to the batch
            index=idx,  # the metric's per-row data (gold, contrast tokens) is indexed by the rows of inputs
        )
        self.additive = self.prefix.additive

    def by_chunks(self, method: str) -> None:
        """Chunks of rows of similar length: ``reuse`` (also the prefix fallback), ``loop``, ``batched``."""
        bridge, metric, lays, replace, scored = self.bridge, self.metric, self.lays, self.replace, self.scored
        reuse = _Reuse(bridge, lays, replace) if method in ("reuse", "prefix") else None
        sub_mask = None if self.mask is None else self.mask[scored]
        for local in row_chunks(len(scored), self.batch_size, sub_mask):
            idx = scored[local]
            ids, mask = trim_padding(self.inputs[idx], None if self.mask is None else self.mask[idx])
            batch = Batch(ids, mask, torch.as_tensor(idx, dtype=torch.long))  # rows of inputs: per-row metric data
            if reuse is not None:
                self.clean[idx], self.ablated[:, idx] = reuse(metric, batch, idx)
                continue
            self.clean[idx] = score_metric(metric, forward(bridge, ids, mask, last=reads_last(metric)), batch)
            for d in range(replace.n_draws):
                if method == "loop":
                    for j, layer in enumerate(lays):
                        iv, sources = replace.intervention(layer, idx, ids.shape[1], d)
                        with intervene(bridge, [iv], sources=sources, attention_mask=mask) as active:
                            logits = forward(bridge, ids, mask, last=reads_last(metric))
                        if active.calls != [1]:
                            raise InterventionError(f"{iv.describe()} fired {active.calls} times in one forward")
                        self.ablated[j, idx] += score_metric(metric, logits, batch) / replace.n_draws
                else:
                    self.ablated[:, idx] += _batched(bridge, metric, batch, lays, replace, idx, d) / replace.n_draws
        if reuse is not None:
            self.additive = reuse.additive

    def meta(self) -> dict[str, Any]:
        """What the run adds to the sweep's ``meta``: skipped rows, resumed layers, packing, fallback."""
        out: dict[str, Any] = {}
        skipped = self.replace.skipped[self.scored]
        if skipped.any():
            out["skipped"] = {"no resample source at least as long, outside the row's group": int(skipped.sum())}
        if self.additive is not None:
            out["resumed_after_block"] = [layer for layer in self.lays if self.additive.get(layer, True)]
        if self.prefix is not None:
            out["packing"] = self.packing.stats()
        if self.fallback:
            out["prefix_fallback"] = self.fallback
        return out


def _effects_frame(
    lays: list[int], scored: np.ndarray, clean: np.ndarray, ablated: np.ndarray, skipped: np.ndarray, cats: Any
) -> pd.DataFrame:
    """One row per (scored example, layer): clean, ablated, effect (and category); rows a resample
    found no source for are left out."""
    out = []
    for j, layer in enumerate(lays):
        for k, i in enumerate(scored):
            if skipped[i]:
                continue
            row = {"example": k, "layer": layer, "clean": clean[i], "ablated": ablated[j, i]}
            row["effect"] = ablated[j, i] - clean[i]
            if cats is not None:
                row["category"] = cats[i]
            out.append(row)
    columns = ["example", "layer", "clean", "ablated", "effect"] + (["category"] if cats is not None else [])
    return pd.DataFrame(out, columns=columns)


#: the reference means of the last mean sweep: a sweep run unit by unit (interp.analysis.engines.unitstore)
#: calls the engine once per chunk of rows with the same reference; its means are computed once
_MEANS_MEMO: dict[str, Any] = {}


class _Replacements:
    """``r(mlp_out)`` of a removal for a chunk and a layer (:mod:`interp.analysis.engines.removals`): the
    tensor the reuse engine adds to ``resid_pre + attn_out``, and the equivalent intervention of
    the loop. ``mean``: the reference's first-token and later-position means of every swept layer,
    computed once by forwards over the reference rows; ``resample``: the draws (the same for every
    layer), each source chunk run once per draw."""

    def __init__(
        self,
        bridge: Any,
        inputs: Tensor,
        mask: Tensor | None,
        layers: list[int],
        removal: Removal,
        reference: Any,
        groups: Any,
        batch_size: int | None,
    ):
        self.bridge, self.inputs, self.mask, self.layers, self.removal = bridge, inputs, mask, layers, removal
        n = int(inputs.shape[0])
        self.kind = removal.kind
        self.ref = reference_rows(n, reference)
        self.n_draws = int(removal.draws) if self.kind == "resample" else 1
        self.skipped = np.zeros(n, dtype=bool)
        self.means: dict[int, tuple[Tensor, Tensor]] = {}
        self._counts: tuple[int, int] = (0, 0)
        self._source_cache: dict[tuple[int, ...], dict[int, Tensor]] = {}
        if self.kind in ("mean", "resample"):
            check_right_padded(mask, self.kind)
        lengths = (np.full(n, inputs.shape[1]) if mask is None else mask.sum(1).cpu().numpy()).astype(int)
        if self.kind == "resample":
            self.sources, self.skipped = resample_sources(lengths, self.n_draws, removal.seed, self.ref, groups)
        if self.kind == "mean":
            self._reference_means(batch_size)

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.kind in ("mean", "resample"):
            out["reference"] = (
                "all rows"
                if len(self.ref) == len(self.skipped)
                else f"{len(self.ref)} of {len(self.skipped)} rows (given)"
            )
            out["n_reference"] = int(len(self.ref))
        if self.kind == "mean":
            out["n_first"], out["n_later"] = self._counts
        return out

    def _capture(self, ids: Tensor, mask: Tensor | None) -> dict[int, Tensor]:
        got: dict[int, Tensor] = {}

        def keep(layer: int):
            def hook(act: Tensor, hook: Any) -> None:
                got[layer] = act.detach()

            return hook

        with hooked(self.bridge, [(Site(layer, "mlp_out").hook_name, keep(layer)) for layer in self.layers]):
            forward(self.bridge, ids, mask, last=True)  # only the activations are read: the fewest logits
        return got

    def _reference_means(self, batch_size: int | None) -> None:
        import weakref

        objects = (self.bridge, self.inputs, self.mask)
        key = (tuple(self.layers), self.ref.tobytes())
        last = _MEANS_MEMO.get("last")
        if last is not None and last[1] == key and all(r() is o for r, o in zip(last[0], objects)):
            self._counts, self.means = last[2], dict(last[3])  # the same reference as the previous sweep
            return
        self._compute_means(batch_size)
        refs = tuple((lambda: None) if o is None else weakref.ref(o) for o in objects)
        _MEANS_MEMO["last"] = (refs, key, self._counts, dict(self.means))

    def _compute_means(self, batch_size: int | None) -> None:
        sums: dict[int, list[Any]] = {layer: [0.0, 0.0] for layer in self.layers}
        n_first = n_later = 0
        sub = None if self.mask is None else self.mask[self.ref]
        for local in row_chunks(len(self.ref), batch_size, sub):
            idx = self.ref[local]
            ids, mask = trim_padding(self.inputs[idx], None if self.mask is None else self.mask[idx])
            outs = self._capture(ids, mask)
            for layer in self.layers:
                f, later, nf, nl = class_sums(outs[layer], mask)
                sums[layer][0] = sums[layer][0] + f
                sums[layer][1] = sums[layer][1] + later
            n_first, n_later = n_first + nf, n_later + nl
        if n_later == 0:
            raise ValueError("mean ablation: the reference rows have no position after the first token")
        self._counts = (n_first, n_later)
        for layer in self.layers:
            self.means[layer] = (sums[layer][0] / n_first, sums[layer][1] / n_later)

    def source_ids(self, idx: np.ndarray, width: int, d: int) -> tuple[Tensor, Tensor | None]:
        """The resample sources of the chunk's rows (draw ``d``), cut to the chunk's width: a source
        is at least as long as its row, and the cut keeps exactly the outputs of its first tokens."""
        src = self.sources[idx, d]
        ids = self.inputs[src][:, :width]
        mask = None if self.mask is None else self.mask[src][:, :width]
        return ids, mask

    def tensor(self, layer: int, idx: np.ndarray, clean_mlp: Tensor | None, width: int, d: int) -> Tensor | None:
        """``r`` for the chunk's rows at ``layer`` (draw ``d``); None for zero."""
        if self.kind == "zero":
            return None
        if self.kind == "scale":
            if clean_mlp is None or self.removal.factor is None:
                raise ValueError("scale needs the clean MLP output and a factor")
            return clean_mlp * self.removal.factor
        if self.kind == "mean":
            first, later = self.means[layer]
            like = next(self.bridge.parameters())
            return mean_replacement(first, later, len(idx), width).to(device=like.device, dtype=like.dtype)
        key = (d, width, *map(int, idx))
        if key not in self._source_cache:  # one source forward per (chunk, draw), every layer at once
            self._source_cache = {key: self._capture(*self.source_ids(idx, width, d))}
        return self._source_cache[key][layer]

    def intervention(self, layer: int, idx: np.ndarray, width: int, d: int) -> tuple[Intervention, dict[str, Any]]:
        """The :mod:`interp.hooks` intervention of the loop method and its sources."""
        site = Site(layer, "mlp_out")
        if self.kind == "zero":
            return zero(site), {}
        if self.kind == "scale":
            return scale(site, float(self.removal.factor or 0.0)), {}
        if self.kind == "mean":
            return patch(site, source="mean"), {"mean": {site.hook_name: self.tensor(layer, idx, None, width, d)}}
        ids, mask = self.source_ids(idx, width, d)  # the intervention runs the source rows itself
        return patch(site, source="draw"), {"draw": Source(tokens=ids, attention_mask=mask)}


class _Reuse:
    """The ``"reuse"`` method: one clean forward that caches ``resid_pre + attn_out`` per layer (and
    ``mlp_out`` for ``scale``), then one resumed forward per layer (and draw) from
    ``resid_pre + attn_out + r(mlp_out)`` (:func:`~interp.analysis.engines.resume.mlp_removed_residual`;
    see the module docstring)."""

    def __init__(self, bridge: Any, layers: list[int], replace: _Replacements):
        self.bridge, self.layers, self.replace = bridge, layers, replace
        self.as_tuple = block_output_is_tuple(bridge)
        self.additive: dict[int, bool] = {}  # per layer, checked on the first chunk
        self.keep_mlp = replace.kind == "scale"

    def _components(self, layer: int) -> tuple[str, ...]:
        if not self.additive:  # first chunk: everything the additivity check needs
            return ("resid_pre", "attn_out", "mlp_out", "resid_post")
        if not self.additive[layer]:
            return ("resid_pre",)
        return ("resid_pre", "attn_out", "mlp_out") if self.keep_mlp else ("resid_pre", "attn_out")

    def _clean_run(self, metric: Metric, batch: Batch) -> tuple[np.ndarray, dict[tuple[int, str], Tensor]]:
        cache: dict[tuple[int, str], Tensor] = {}

        def keep(layer: int, comp: str):
            def hook(act: Tensor, hook: Any) -> None:
                if comp == "attn_out" and self.additive:  # later chunks keep only the sum
                    cache[(layer, "resumed")] = cache.pop((layer, "resid_pre")) + act.detach()
                else:
                    cache[(layer, comp)] = act.detach()

            return hook

        hooks = [(Site(layer, c).hook_name, keep(layer, c)) for layer in self.layers for c in self._components(layer)]
        with hooked(self.bridge, hooks):
            logits = forward(self.bridge, batch.tokens, batch.attention_mask, last=reads_last(metric))
            clean = score_metric(metric, logits, batch)
        if not self.additive:
            for layer in self.layers:
                post, mlp = cache.pop((layer, "resid_post")), cache[(layer, "mlp_out")]
                if not self.keep_mlp:
                    cache.pop((layer, "mlp_out"))
                mid = mlp_removed_residual(cache[(layer, "resid_pre")], cache.pop((layer, "attn_out")), mlp, post)
                self.additive[layer] = mid is not None
                if mid is not None:
                    cache[(layer, "resumed")] = mid
                    del cache[(layer, "resid_pre")]
        return clean, cache

    def __call__(self, metric: Metric, batch: Batch, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        clean, cache = self._clean_run(metric, batch)
        ids, mask = batch.tokens, batch.attention_mask
        rep, last_only = self.replace, reads_last(metric)
        out = np.zeros((len(self.layers), ids.shape[0]))
        for d in range(rep.n_draws):  # draws outside: one draw's source outputs held at a time
            last = d == rep.n_draws - 1
            for j, layer in enumerate(self.layers):
                resumed = (cache.pop if last else cache.get)((layer, "resumed"), None)
                clean_mlp = cache.pop((layer, "mlp_out"), None) if last else cache.get((layer, "mlp_out"))
                if self.additive[layer]:
                    if resumed is None:
                        raise RuntimeError(f"no cached residual for layer {layer}")
                    r = rep.tensor(layer, idx, clean_mlp, ids.shape[1], d)
                    resid = resumed if r is None else resumed + r
                    logits = resume_forward(
                        self.bridge, layer + 1, resid, ids, mask, as_tuple=self.as_tuple, last=last_only
                    )
                else:  # the block does not just add its MLP output: rerun it with the loop's intervention
                    iv, sources = rep.intervention(layer, idx, ids.shape[1], d)
                    with intervene(self.bridge, [iv], sources=sources, attention_mask=mask):
                        resid = cache[(layer, "resid_pre")]
                        logits = resume_forward(
                            self.bridge, layer, resid, ids, mask, as_tuple=self.as_tuple, last=last_only
                        )
                out[j] += score_metric(metric, logits, batch) / rep.n_draws
        return clean, out


def _batched(
    bridge: Any, metric: Metric, batch: Batch, layers: list[int], replace: _Replacements, idx: np.ndarray, d: int
) -> np.ndarray:
    """Scores [len(layers), batch] from one forward of the stacked variants (draw ``d``)."""
    b = batch.tokens.shape[0]
    k = len(layers)
    fired = [0] * k
    width = batch.tokens.shape[1]

    def replace_rows(j: int):
        def hook(act: Tensor, hook: Any) -> Tensor:
            if act.shape[0] != k * b:
                raise InterventionError(f"expected {k * b} stacked rows at mlp_out:{layers[j]}, got {act.shape[0]}")
            out = act.clone()
            rows = slice(j * b, (j + 1) * b)
            r = replace.tensor(layers[j], idx, act[rows], width, d)
            out[rows] = 0 if r is None else r.to(out.dtype)
            fired[j] += 1
            return out

        return hook

    ids = batch.tokens.repeat(k, 1)
    mask = None if batch.attention_mask is None else batch.attention_mask.repeat(k, 1)
    hooks = [(Site(layer, "mlp_out").hook_name, replace_rows(j)) for j, layer in enumerate(layers)]
    if replace.kind == "resample":  # run the sources before the stacked forward's hooks are registered
        replace.tensor(layers[0], idx, None, width, d)
    with hooked(bridge, hooks):
        logits = forward(bridge, ids, mask, last=reads_last(metric))
    if fired != [1] * k:
        raise InterventionError(f"stacked removal hooks fired {fired} times (expected once each)")
    out = np.zeros((k, b))
    for j in range(k):
        sl = slice(j * b, (j + 1) * b)
        out[j] = score_metric(metric, logits[sl], batch)
    return out


__all__ = [
    "METHODS",
    "OWN_GROUP",
    "SweepResult",
    "attach_groups",
    "group_mean_se",
    "mlp_removal_sweep",
    "mlp_zero_sweep",
]
