"""The MLP layer sweep over rows that share prefixes: each distinct prefix read once per variant.

``mlp_zero_sweep(..., method="prefix")`` runs here. The rows are laid out as token tries
(:mod:`interp.models.packing`: sorted by token ids, each row adding only the tokens after its
longest common prefix with its neighbour, a 4-D ancestor mask and depth position ids), so one
forward of a pack reads every row in it and a prefix shared by a PragWorld group — or by two of
its rows — is computed once. The metric is read at each row's last token only (the logits of no
other position are computed).

It combines with the reuse trick of :mod:`interp.analysis.engines.sweeps`: one clean packed forward caches,
per swept layer ℓ, the residual the next block receives with the MLP removed (``resid_pre +
attn_out + r(mlp_out)``, :func:`~interp.analysis.engines.resume.mlp_removed_residual`: exact in half
precision too) at every packed position, and each variant resumes at block ℓ + 1 from it
(:func:`~interp.analysis.engines.resume.skipping_blocks`), over the packed positions. So a variant reads
``n_layers − 1 − ℓ`` blocks of the *unique* tokens only: against the TransformerLens loop
(``n_layers + 1`` full forwards of every row) that is about 2× from the reuse and ``row tokens /
unique tokens`` from the packing. A layer whose block does not just add its MLP output (checked
on the first batch, as in ``reuse``) resumes at block ℓ with the removal as a hook instead.

**Which removals are prefix-safe** (:func:`prefix_safe`, kinds of
:class:`~interp.analysis.engines.removals.Removal`): those whose replacement at a position depends on
nothing but that position's own output and its position id — ``zero``, ``scale`` by a factor,
``mean`` (the reference's mean for the first token, another for every later position: the
position id tells them apart, and a pack keeps position ids) — since a prefix's activations then
still do not depend on what follows it. A ``resample`` from another row (each row takes a
different source row's output at the same index) and position-specific patches (``"last"``,
position lists, alignments) tie a position's value to its row, which a pack does not keep:
``mlp_removal_sweep(method="prefix")`` runs those through the unshared ``reuse`` path and says so
in ``meta["prefix_fallback"]``.
Metrics must read only each row's last position: :func:`reads_last_position` says which do
(``two_way_prob``, ``logit_diff``); ``token_loss`` reads every position and is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor

from interp.analysis.engines.removals import Removal
from interp.analysis.engines.resume import block_output_is_tuple, mlp_removed_residual, skipping_blocks
from interp.analysis.engines.scoring import Batch, Metric, metric_name
from interp.hooks import InterventionError, Site, hooked
from interp.models.packing import PackedBatch, PackPlan, packed_logits, plan

#: removal kinds that act on every position alike, so a shared prefix stays shared
PREFIX_SAFE = ("zero", "scale", "mean")


def prefix_safe(removal: Removal) -> bool:
    """Whether a removal may run over packed rows: ``zero``, ``scale`` and ``mean`` (its two
    position classes, the first token and every later one, are read from the position ids, which
    a pack keeps); not ``resample``, whose replacement is another row's output at the same index."""
    return removal.kind in PREFIX_SAFE


def replacement(
    removal: Removal,
    mlp_out: Tensor,
    positions: Tensor,
    layer: int,
    means: dict[int, tuple[Tensor, Tensor]] | None = None,
) -> Tensor:
    """``r(mlp_out)`` of a prefix-safe removal at packed positions (``positions``: each packed
    position's position id, ``[packs, width]``): 0, ``α · mlp_out``, or the reference's first-token
    mean at position 0 and its later-position mean elsewhere (:mod:`interp.analysis.engines.removals`)."""
    if removal.kind == "zero":
        return torch.zeros_like(mlp_out)
    if removal.kind == "scale":
        return mlp_out * float(removal.factor or 0.0)  # a scale removal always has its factor
    if removal.kind == "mean":
        if not means or layer not in means:
            raise ValueError(f"mean removal: no reference means for layer {layer}")
        first, later = (m.to(mlp_out) for m in means[layer])
        at_first = (positions.to(mlp_out.device) == 0)[..., None]
        return torch.where(at_first, first.expand_as(mlp_out), later.expand_as(mlp_out))
    raise ValueError(
        f"{removal.kind} is not prefix-safe (a position's replacement depends on its row): run it unshared"
    )


def reads_last_position(metric: Metric) -> bool:
    """Whether ``metric`` declares it reads each row's last position only (``metric.reads ==
    "last"``); such metrics run on logits ``[rows, 1, vocab]`` with a :class:`Batch` of one
    position."""
    return getattr(metric, "reads", None) == "last"


def rows_of(inputs: Int[Tensor, "n pos"], attention_mask: Shaped[Tensor, "n pos"] | None) -> list[list[int]]:
    """Each row's real tokens (left or right padding dropped); a mask with a gap inside a row is an
    error."""
    if attention_mask is None:
        return [r.tolist() for r in inputs]
    out = []
    for i, (r, m) in enumerate(zip(inputs, attention_mask.bool())):
        idx = m.nonzero().flatten()
        if len(idx) == 0:
            raise ValueError(f"row {i} has no real (non-padding) token")
        if int(idx[-1] - idx[0]) + 1 != len(idx):
            raise ValueError(f"row {i}'s attention mask has a gap; prefix sharing needs contiguous real tokens")
        out.append(r[idx].tolist())
    return out


def _score(
    metric: Metric, last_logits: Tensor, pb: PackedBatch, tokens: Tensor, index: Tensor | None = None
) -> np.ndarray:
    """``metric`` of the batch's rows; the :class:`Batch` it sees indexes each row as ``index[row]``
    (the caller's row ids, where the metric's per-row data lives), or as the row itself."""
    batch = Batch(tokens[:, None], None, pb.rows if index is None else index[pb.rows])
    val = metric(last_logits[:, None], batch)
    if not isinstance(val, Tensor) or tuple(val.shape) != (len(pb.rows),):
        raise ValueError(
            f"metric {metric_name(metric)} must return a tensor [batch={len(pb.rows)}], got "
            f"{getattr(val, 'shape', type(val).__name__)}"
        )
    return val.detach().float().cpu().numpy()


def _last_tokens(pb: PackedBatch) -> Tensor:
    return torch.stack([pb.tokens[p, pb.keep[c]] for p, c in zip(pb.pack.tolist(), pb.col.tolist())])


class PrefixSweep:
    """Clean and removed scores of every row for each swept layer (module docstring). Build once
    per sweep; :meth:`run` takes the rows."""

    def __init__(
        self,
        bridge: Any,
        layers: Sequence[int],
        removal: Removal | None = None,
        means: dict[int, tuple[Tensor, Tensor]] | None = None,
    ):
        self.bridge, self.layers = bridge, list(layers)
        self.removal = removal or Removal("zero")
        if not prefix_safe(self.removal):
            raise ValueError(
                f"a prefix-shared sweep takes the removals {', '.join(PREFIX_SAFE)}; "
                f"{self.removal.kind} ties a position's replacement to its row: run it unshared"
            )
        self.means = means
        self.as_tuple = block_output_is_tuple(bridge)
        self.additive: dict[int, bool] = {}
        self._index: Tensor | None = None  # the metric's row ids of the rows of a run (run's index)

    def _r(self, mlp_out: Tensor, layer: int, pb: PackedBatch) -> Tensor:
        return replacement(self.removal, mlp_out, pb.positions, layer, self.means)

    def _clean(self, metric: Metric, pb: PackedBatch) -> tuple[np.ndarray, dict[tuple[int, str], Tensor]]:
        cache: dict[tuple[int, str], Tensor] = {}
        first = not self.additive
        keep_mlp = self.removal.kind != "zero"

        def keep(layer: int, comp: str):
            def hook(act: Tensor, hook: Any) -> None:
                cache[(layer, comp)] = act.detach()

            return hook

        comps = ("resid_pre", "attn_out", "mlp_out", "resid_post")
        later = ("resid_pre", "attn_out", "mlp_out") if keep_mlp else ("resid_pre", "attn_out")
        hooks = []
        for layer in self.layers:
            use = comps if first else later if self.additive[layer] else ("resid_pre",)
            hooks += [(Site(layer, c).hook_name, keep(layer, c)) for c in use]
        with hooked(self.bridge, hooks):
            logits = packed_logits(self.bridge, pb)
        clean = _score(self._metric, logits, pb, self._tokens, self._index)
        for layer in self.layers:
            mid: Tensor | None = None
            if first:
                post = cache.pop((layer, "resid_post"))
                mid = mlp_removed_residual(
                    cache[(layer, "resid_pre")], cache[(layer, "attn_out")], cache[(layer, "mlp_out")], post
                )
                self.additive[layer] = mid is not None
            if self.additive[layer]:
                if mid is None:  # later batches: the sum, exact (no check needed again)
                    mid = cache[(layer, "resid_pre")] + cache[(layer, "attn_out")]
                cache[(layer, "resumed")] = mid + self._r(cache[(layer, "mlp_out")], layer, pb) if keep_mlp else mid
            for comp in ("attn_out", "mlp_out") if not self.additive[layer] else ("resid_pre", "attn_out", "mlp_out"):
                cache.pop((layer, comp), None)  # a layer that is not additive keeps resid_pre: it reruns block ℓ
        return clean, cache

    def _variant(self, layer: int, pb: PackedBatch, cache: dict[tuple[int, str], Tensor]) -> Tensor:
        if self.additive[layer]:
            with skipping_blocks(self.bridge, layer + 1, cache.pop((layer, "resumed")), self.as_tuple):
                return packed_logits(self.bridge, pb)
        fired = [0]

        def remove(act: Tensor, hook: Any) -> Tensor:
            fired[0] += 1
            return self._r(act, layer, pb)

        with (
            hooked(self.bridge, [(Site(layer, "mlp_out").hook_name, remove)]),
            skipping_blocks(self.bridge, layer, cache.pop((layer, "resid_pre")), self.as_tuple),
        ):
            logits = packed_logits(self.bridge, pb)
        if fired != [1]:
            raise InterventionError(f"the {self.removal.kind} hook on mlp_out:{layer} fired {fired[0]} times")
        return logits

    def run(
        self,
        seqs: Sequence[Sequence[int]],
        metric: Metric,
        *,
        batch_tokens: int = 4096,
        pack_tokens: int = 2048,
        pad_id: int = 0,
        progress: bool = False,
        index: Sequence[int] | np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, PackPlan]:
        """``(clean [n], removed [layers, n], plan)`` for the rows ``seqs`` (token ids), in input
        order. ``batch_tokens`` bounds the padded positions of one forward (and so the cached
        residuals: ``layers × batch_tokens × d_model`` floats), ``pack_tokens`` one pack.
        ``index``: each row's id as the metric knows it (``batch.index``: where a per-row metric —
        a gold answer, a contrast's tokens — reads its data), when ``seqs`` are a subset of the
        metric's rows; default ``0 … n − 1``."""
        if index is not None and len(index) != len(seqs):
            raise ValueError(f"index has {len(index)} ids for {len(seqs)} rows")
        self._index = None if index is None else torch.as_tensor(np.asarray(index), dtype=torch.long)
        if not reads_last_position(metric):
            raise ValueError(
                f"metric {metric_name(metric)} does not declare that it reads only each row's last "
                "position (metric.reads = 'last'); a prefix-shared sweep computes no other logits"
            )
        from tqdm.auto import tqdm

        n = len(seqs)
        pp = plan(seqs, self.bridge, batch_tokens=batch_tokens, pack_tokens=pack_tokens, pad_id=pad_id)
        clean = np.zeros(n)
        removed = np.zeros((len(self.layers), n))
        self._metric = metric
        for pb in tqdm(pp.batches, disable=not progress, desc="prefix sweep", unit="batch"):
            self._tokens = _last_tokens(pb)
            rows = pb.rows.numpy()
            clean[rows], cache = self._clean(metric, pb)
            for j, layer in enumerate(self.layers):
                removed[j, rows] = _score(metric, self._variant(layer, pb, cache), pb, self._tokens, self._index)
        return clean, removed, pp


def score_rows(
    model: Any,
    seqs: Sequence[Sequence[int]],
    metrics: Metric | Sequence[Metric],
    *,
    batch_tokens: int = 4096,
    pack_tokens: int = 2048,
    pad_id: int = 0,
) -> tuple[Float[np.ndarray, "k n"], PackPlan]:
    """Each metric (reading the last position; e.g. a contrast task's ``logit_diff_metric()`` and
    ``prob_metric()``) of every row, ``[len(metrics), n]`` in input order, from one packed forward
    per batch of ``model`` (the hooks registered on it run on the packed positions: position-free
    ones only); with the :class:`~interp.models.packing.PackPlan` (its token and padding counts).
    A single metric gives ``[1, n]``."""
    ms = [metrics] if callable(metrics) else list(metrics)
    bad = [metric_name(m) for m in ms if not reads_last_position(m)]
    if bad:
        raise ValueError(
            f"metrics {bad} do not declare metric.reads = 'last' (a packed forward computes no other logits)"
        )
    pp = plan(seqs, model, batch_tokens=batch_tokens, pack_tokens=pack_tokens, pad_id=pad_id)
    out = np.zeros((len(ms), len(seqs)))
    for pb in pp.batches:
        logits, tokens = packed_logits(model, pb), _last_tokens(pb)
        for k, m in enumerate(ms):
            out[k, pb.rows.numpy()] = _score(m, logits, pb, tokens)
    return out, pp


__all__ = ["PREFIX_SAFE", "PrefixSweep", "prefix_safe", "reads_last_position", "replacement", "rows_of", "score_rows"]
