"""Attribution patching (AtP): every site's patching effect from one gradient, not one forward per site.

An exact sweep measures an edit ``a → a'`` of one activation by rerunning the model with it. AtP
(Nanda 2023; Kramár et al. 2024, "AtP*", §2) replaces the rerun by the first-order Taylor term
around the run being edited::

    metric(a') − metric(a)  ≈  (a' − a) · ∂metric/∂a        (summed over the edited positions)

One forward with gradients at every hooked site and one backward give the term for every site
at once, so a layer × position or layer × head map costs 2 forwards + 1 backward per batch
instead of one forward per cell. Here, in the result shapes of the exact sweeps:

- **MLP zero-out** (:func:`mlp_zero_attribution`, PragWorld §6.2; exact:
  :func:`~interp.analysis.engines.sweeps.mlp_zero_sweep`): ``a' = 0`` at every position, gradient on the
  clean run: ``effect_ℓ ≈ −Σ_pos mlp_out_ℓ · ∇_{mlp_out_ℓ} metric`` — 1 forward + 1 backward.
- **direct-effect patching** (:func:`direct_effect_attribution`, §6.1; exact:
  :func:`~interp.analysis.engines.direct_patching.direct_effect_patching`): the altered run's ``resid_pre_ℓ``
  at the aligned positions, gradient on the original run:
  ``effect_ℓ ≈ Σ_(d,s) (alt_ℓ[s] − orig_ℓ[d]) · ∇_{resid_pre_ℓ[d]} metric``.
- **activation patching** clean → corrupted (:func:`activation_attribution`; exact:
  :func:`~interp.analysis.engines.activation_patching.activation_patching`): ``resid_pre`` /
  ``attn_out`` / ``mlp_out`` per layer × position and ``heads`` (``attn.hook_z``, all positions)
  per layer × head, gradient on the corrupted run (TransformerLens's "denoising" convention):
  ``effect ≈ (a_clean − a_corrupted) · ∇_a metric(corrupted)``.

Gradients come through the bridge's own hooks: each hooked activation ``a`` is returned as
``a + δ`` with ``δ = 0`` a leaf that requires grad, and ``torch.autograd.grad(Σ metric, δ)`` gives
``∂metric/∂a`` per example (rows of a batch do not interact, so the sum's gradient is each row's
own). No parameter ``.grad`` is touched; hooks are removed on return and on error.

The estimate is exact when the metric is linear in the site (e.g. a logit of the unembedded final
residual with no norm after the site — tested), and good when the edit is small relative to the
curvature met downstream. It degrades where an edit is large: the residual stream (a patch there
replaces everything the layers before wrote, and its effect passes through every later norm,
softmax and MLP) and layers with large activations (zeroing an MLP whose output dominates the
residual norm). README ("Attribution patching") has the measured agreement.

**AtP\\* corrections (Kramár et al. 2024, §3.1).** *QK fix* (§3.1.1) recomputes the attention
softmax exactly for edits of *query and key* nodes, whose first consumer is the saturating softmax.
None of the sites here is a query or key: ``z`` / ``attn_out`` / ``mlp_out`` are read linearly
(by W_O or the residual sum), and a ``resid_pre`` edit reaches the softmax only through a
LayerNorm and the query/key projections, which the fix does not cover either. So the fix is not
applied, and the residual-stream maps are where this module's estimates are least trustworthy
(measured; use ``verify_top``). *GradDrop* (§3.1.2) ranks nodes by ``Σ_ℓ |AtP with the gradient
dropped at layer ℓ|``, an unsigned score for catching cancellation false negatives at the cost of
L extra backward passes; a layer verdict needs the signed effect, and L backwards would erase the
gain on a layer sweep, so it is not implemented. What this module offers instead is
:func:`~interp.analysis.verdicts.verify_attribution.verify_layers` /
:func:`~interp.analysis.verdicts.verify_attribution.verify_cells`
(``--verify-top``): rank by |attribution|, measure the top K exactly.

Public code note: TransformerLens 4.3's ``transformer_lens.tools.analysis.attribution_patch``
computes the same node term (``attn_head_out`` on ``hook_z``, ``mlp_out``) one example at a time
with backward hooks and averages over the batch; here rows are batched and per-example values
kept, as layer verdicts need them (a test compares the two on one pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor

from interp.analysis.engines.activation_patching import COMPONENTS, PatchingMap
from interp.analysis.engines.batching import check_categories, row_chunks, swept_layer_list, trim_padding
from interp.analysis.engines.direct_patching import PatchPair, resid_cache, token_ids_1d
from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.scoring import Batch, Metric, forward, metric_name, score_metric, to_model_device
from interp.analysis.engines.sweeps import OWN_GROUP, SweepResult, attach_groups
from interp.hooks import Alignment, HookNames, InterventionError, Site, capturing, check_site, hooked, intervene, patch
from interp.models.positions import position_ids

#: activation-patching components this module estimates (those of the exact sweep)
ATTRIBUTION_COMPONENTS = tuple(COMPONENTS)


def _model_inputs(bridge: Any, tokens: Tensor, mask: Tensor | None) -> tuple[Tensor, dict[str, Any]]:
    """Tokens on the model's device and the forward's kwargs, as :func:`~interp.analysis.engines.scoring.forward`
    builds them (position ids counted over non-padding tokens) — but for a forward with gradients."""
    tokens, mask = to_model_device(bridge, tokens), to_model_device(bridge, mask)
    kwargs: dict[str, Any] = {}
    if mask is not None:
        kwargs["attention_mask"] = mask
        kwargs["position_ids"] = position_ids(mask)
    return tokens, kwargs


def gradient_run(
    bridge: Any,
    tokens: Int[Tensor, "batch pos"],
    metric: Metric,
    hook_names: Sequence[str],
    attention_mask: Shaped[Tensor, "batch pos"] | None = None,
    index: Int[Tensor, " batch"] | None = None,
) -> tuple[np.ndarray, dict[str, Tensor], dict[str, Tensor]]:
    """One forward with gradients and one backward: ``(metric per row, activations, gradients)``.

    ``activations[name]`` is the (detached) activation at each hook alias in ``hook_names`` and
    ``gradients[name]`` is ``∂metric_row/∂activation`` for every row at once (same shape). A site the
    metric does not depend on gets a zero gradient. Raises :class:`InterventionError` if a hook
    does not fire exactly once. No hook remains afterwards, also on error.
    """
    b = int(tokens.shape[0])
    batch = Batch(tokens, attention_mask, torch.arange(b) if index is None else index)
    acts: dict[str, Tensor] = {}
    deltas: dict[str, Tensor] = {}
    fired = {name: 0 for name in hook_names}

    def perturb(name: str):
        def hook(act: Tensor, hook: Any) -> Tensor:
            fired[name] += 1
            delta = torch.zeros_like(act, requires_grad=True)
            acts[name], deltas[name] = act.detach().clone(), delta
            return act + delta

        return hook

    ids, kwargs = _model_inputs(bridge, tokens, attention_mask)
    with torch.enable_grad(), hooked(bridge, [(name, perturb(name)) for name in hook_names]):
        logits = bridge(ids, **kwargs)
        bad = {k: v for k, v in fired.items() if v != 1}
        if bad:
            raise InterventionError(f"gradient hooks fired {bad} times in one forward (expected once each)")
        values = metric(logits, batch)
        if not isinstance(values, Tensor) or tuple(values.shape) != (b,):
            raise ValueError(
                f"metric {metric_name(metric)} must return a tensor [batch={b}], "
                f"got {getattr(values, 'shape', type(values).__name__)}"
            )
        if not values.requires_grad:
            raise ValueError(
                f"metric {metric_name(metric)} is not differentiable in the logits "
                "(attribution patching needs its gradient)"
            )
        grads = torch.autograd.grad(values.float().sum(), [deltas[n] for n in hook_names], allow_unused=True)
    out = {n: (torch.zeros_like(acts[n]) if g is None else g.detach()) for n, g in zip(hook_names, grads)}
    return values.detach().float().cpu().numpy(), acts, out


# ---- MLP zero-out ----------------------------------------------------------------------------------


def mlp_zero_attribution(
    bridge: Any,
    inputs: Int[Tensor, "n pos"],
    metric: Metric,
    attention_mask: Shaped[Tensor, "n pos"] | None = None,
    layers: Sequence[int] | None = None,
    *,
    categories: Sequence[Any] | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
    batch_size: int | None = 64,
    higher_is_better: bool = True,
) -> SweepResult:
    """AtP estimate of :func:`~interp.analysis.engines.sweeps.mlp_zero_sweep`: per example and layer,
    ``effect ≈ −Σ_pos mlp_out · ∇_{mlp_out} metric`` on the clean run (1 forward + 1 backward per
    chunk, all layers at once). Same arguments and frame as the exact sweep; ``ablated`` is
    ``clean + effect`` (an estimate, not a measured run) and ``meta["method"] = "attribution"``.
    """
    if inputs.dim() != 2:
        raise ValueError(f"inputs must be token ids [n, pos], got shape {tuple(inputs.shape)}")
    n = int(inputs.shape[0])
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(inputs.shape):
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} ≠ inputs {tuple(inputs.shape)}")
    lays = swept_layer_list(bridge, layers)
    cats = check_categories(categories, n)
    names = HookNames(bridge)
    sites = [Site(layer, "mlp_out") for layer in lays]
    for site in sites:
        check_site(site, bridge, names)
    hooks = [s.hook_name for s in sites]
    clean = np.zeros(n)
    effect = np.zeros((len(lays), n))
    for idx in row_chunks(n, batch_size, attention_mask):
        ids, mask = trim_padding(inputs[idx], None if attention_mask is None else attention_mask[idx])
        clean[idx], acts, grads = gradient_run(bridge, ids, metric, hooks, mask, torch.as_tensor(idx))
        for j, h in enumerate(hooks):
            effect[j, idx] = -(acts[h].float() * grads[h].float()).sum(dim=(1, 2)).cpu().numpy()
    rows = []
    for j, layer in enumerate(lays):
        for i in range(n):
            row = {
                "example": i,
                "layer": layer,
                "clean": clean[i],
                "ablated": clean[i] + effect[j, i],
                "effect": effect[j, i],
            }
            if cats is not None:
                row["category"] = cats[i]
            rows.append(row)
    meta = {
        "kind": "mlp_zero",
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "method": "attribution",
        "estimate": "AtP: -sum_pos mlp_out . grad(metric) on the clean run",
        "n_examples": n,
        "layers": lays,
        "groups": "given" if groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
    }
    return SweepResult(attach_groups(pd.DataFrame(rows), groups, n), meta)


# ---- direct-effect patching ------------------------------------------------------------------------


def _by_length(lengths: Sequence[int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, k in enumerate(lengths):
        groups.setdefault(int(k), []).append(i)
    return groups


def direct_effect_attribution(
    bridge: Any,
    pairs: Sequence[PatchPair | tuple[Any, Any]],
    metric: Metric,
    layers: Sequence[int] | None = None,
    *,
    categories: Sequence[Any] | None = None,
    groups: Sequence[Any] | np.ndarray | None = None,
    higher_is_better: bool = True,
) -> SweepResult:
    """AtP estimate of :func:`~interp.analysis.engines.direct_patching.direct_effect_patching`: per pair and layer,
    ``effect ≈ Σ_(d,s) (alt[s] − orig[d]) · ∇_{resid_pre[d]} metric(original)`` over the aligned
    positions. Pairs of equal lengths share a forward (originals with gradients, altered runs for
    the cache): 2 forwards + 1 backward per length group, for every layer. Same frame as the exact
    function (``ablated = clean + effect``, an estimate).
    """
    pair_list = [p if isinstance(p, PatchPair) else PatchPair(*p) for p in pairs]
    if not pairs:
        raise ValueError("direct_effect_attribution needs at least one pair")
    lays = swept_layer_list(bridge, layers)
    cats = check_categories(categories, len(pair_list))
    names = HookNames(bridge)
    for layer in lays:
        check_site(Site(layer, "resid_pre"), bridge, names)
    hooks = [Site(layer, "resid_pre").hook_name for layer in lays]
    origs = [token_ids_1d(p.original, f"pair {i}: original") for i, p in enumerate(pair_list)]
    alts = [token_ids_1d(p.altered, f"pair {i}: altered") for i, p in enumerate(pair_list)]
    aligns = []
    for i, (o, a) in enumerate(zip(origs, alts)):
        try:
            aligns.append(Alignment.matching(o.tolist(), a.tolist()))
        except InterventionError as e:
            raise ValueError(f"pair {i}: the original and altered prompts share no token to align ({e})") from e

    alt_acts: dict[int, dict[str, Tensor]] = {}  # pair → hook → [pos, d_model]
    for _, idx in _by_length([len(a) for a in alts]).items():
        cache = resid_cache(bridge, torch.stack([alts[i] for i in idx]), lays)
        for row, i in enumerate(idx):
            alt_acts[i] = {h: cache[h][row] for h in hooks}
    clean = np.zeros(len(pair_list))
    effect = np.zeros((len(lays), len(pair_list)))
    for _, idx in _by_length([len(o) for o in origs]).items():
        ids = torch.stack([origs[i] for i in idx])
        clean[idx], acts, grads = gradient_run(bridge, ids, metric, hooks, None, torch.as_tensor(idx))
        for row, i in enumerate(idx):
            d = torch.tensor([p[0] for p in aligns[i].pairs])
            s = torch.tensor([p[1] for p in aligns[i].pairs])
            for j, h in enumerate(hooks):
                delta = alt_acts[i][h][s.to(alt_acts[i][h].device)] - acts[h][row, d.to(acts[h].device)]
                effect[j, i] = float((delta.float() * grads[h][row, d.to(grads[h].device)].float()).sum())
    rows = []
    for i in range(len(pair_list)):
        for j, layer in enumerate(lays):
            record = {
                "example": i,
                "layer": layer,
                "clean": clean[i],
                "ablated": clean[i] + effect[j, i],
                "effect": effect[j, i],
                "n_aligned": len(aligns[i].pairs),
                "len_original": len(origs[i]),
                "len_altered": len(alts[i]),
            }
            if cats is not None:
                record["category"] = cats[i]
            rows.append(record)
    meta = {
        "kind": "direct_effect_patching",
        "site": "resid_pre",
        "metric": metric_name(metric),
        "higher_is_better": bool(higher_is_better),
        "method": "attribution",
        "estimate": "AtP: sum over aligned (d,s) of (alt[s] - orig[d]) . grad(metric) at resid_pre[d]",
        "n_examples": len(pair_list),
        "layers": lays,
        "groups": "given" if groups is not None else OWN_GROUP,
        "model": model_fingerprint(bridge),
    }
    return SweepResult(attach_groups(pd.DataFrame(rows), groups, len(pair_list)), meta)


# ---- activation patching (clean → corrupted) -------------------------------------------------------


def _component_hooks(component: str, layers: Sequence[int]) -> list[str]:
    comp = "z" if component == "heads" else component
    return [Site(layer, comp).hook_name for layer in layers]


@overload
def activation_attribution(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    components: str = ...,
    *,
    labels: list[str] | None = None,
    batch_size: int | None = None,
) -> PatchingMap: ...
@overload
def activation_attribution(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    components: tuple[str, ...] | list[str],
    *,
    labels: list[str] | None = None,
    batch_size: int | None = None,
) -> dict[str, PatchingMap]: ...
def activation_attribution(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    components: str | Sequence[str] = "resid_pre",
    *,
    labels: list[str] | None = None,
    batch_size: int | None = None,
) -> PatchingMap | dict[str, PatchingMap]:
    """AtP estimate of :func:`~interp.analysis.engines.activation_patching.activation_patching` for one
    component (returns a :class:`PatchingMap`) or several (a dict of them, all from the *same*
    clean forward, corrupted forward and backward).

    Per example: ``effect[layer, pos] ≈ (a_clean − a_corr)[pos] · ∇_a metric(corrupted)`` for
    ``resid_pre`` / ``attn_out`` / ``mlp_out``; for ``heads`` the head's slice of ``attn.hook_z``,
    summed over positions (all positions patched, as the exact ``heads`` map). ``value`` is
    ``corrupted + effect`` and ``recovered = effect / (clean − corrupted)``, as in the exact map.
    ``batch_size`` bounds the rows of one forward (None: all).
    """
    single = isinstance(components, str)
    comps: list[str] = [components] if isinstance(components, str) else list(components)
    bad = [c for c in comps if c not in ATTRIBUTION_COMPONENTS]
    if bad or not comps:
        raise ValueError(f"components must be among {', '.join(ATTRIBUTION_COMPONENTS)}, got {components!r}")
    if clean.dim() != 2 or tuple(clean.shape) != tuple(corrupted.shape):
        raise ValueError(
            f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} must be [n, pos] "
            "of equal shape (group pairs by length; patching runs without padding)"
        )
    if int(clean.shape[1]) > int(bridge.cfg.n_ctx):
        raise ValueError(f"{clean.shape[1]} positions exceed the model context n_ctx={bridge.cfg.n_ctx}")
    n, n_pos = int(clean.shape[0]), int(clean.shape[1])
    n_layers, n_heads = int(bridge.cfg.n_layers), int(bridge.cfg.n_heads)
    layers = list(range(n_layers))
    names = HookNames(bridge)
    for c in comps:
        for layer in layers:
            check_site(Site(layer, "z" if c == "heads" else c), bridge, names)
    hooks = sorted({h for c in comps for h in _component_hooks(c, layers)})
    size = n if not batch_size else int(batch_size)
    clean_val, corr_val = np.zeros(n), np.zeros(n)
    est = {c: np.zeros((n_layers, n_heads if c == "heads" else n_pos, n)) for c in comps}

    for start in range(0, n, size):
        sl = slice(start, min(n, start + size))
        idx = torch.arange(sl.start, sl.stop)
        got: dict[str, Tensor] = {}
        with hooked(bridge, capturing(got, hooks)):
            clean_val[sl] = score_metric(metric, forward(bridge, clean[sl]), Batch(clean[sl], None, idx))
        corr_val[sl], acts, grads = gradient_run(bridge, corrupted[sl], metric, hooks, None, idx)
        for c in comps:
            for layer, h in zip(layers, _component_hooks(c, layers)):
                term = (got[h].float() - acts[h].float()) * grads[h].float()
                # [b, pos, d] → [pos, b];  z [b, pos, head, d_head] → [head, b]
                cell = term.sum(dim=(1, 3)) if c == "heads" else term.sum(dim=2)
                est[c][layer, :, sl] = cell.T.cpu().numpy()
    gap = clean_val - corr_val
    maps = {}
    for c in comps:
        axis = COMPONENTS[c][1]
        effect = est[c]
        value = corr_val[None, None, :] + effect
        with np.errstate(divide="ignore", invalid="ignore"):
            recovered = np.where(np.abs(gap) > 1e-12, effect / gap, np.nan)
        L, S, _ = effect.shape
        layer_at, second_at, example_at = np.meshgrid(np.arange(L), np.arange(S), np.arange(n), indexing="ij")
        frame = pd.DataFrame(
            {
                "layer": layer_at.ravel(),
                axis: second_at.ravel(),
                "example": example_at.ravel(),
                "value": value.ravel(),
                "effect": effect.ravel(),
                "recovered": recovered.ravel(),
            }
        )
        meta = {
            "kind": "activation_patching",
            "component": c,
            "axis": axis,
            "metric": metric_name(metric),
            "n_examples": n,
            "positions": n_pos,
            "clean_mean": float(clean_val.mean()),
            "corrupted_mean": float(corr_val.mean()),
            "labels": labels,
            "method": "attribution",
            "engine": "interp.analysis.engines.attribution (AtP: (a_clean - a_corr) . grad on the corrupted run)",
            "model": model_fingerprint(bridge),
        }
        maps[c] = PatchingMap(frame, meta)
    return maps[comps[0]] if single else maps


# ---- checking the top sites exactly -----------------------------------------------------------------


def rank_sites(result: SweepResult | PatchingMap, k: int | None = None) -> pd.DataFrame:
    """Sites ordered by |mean attribution| (largest first), the top ``k`` (None: all): columns
    ``layer`` (and ``pos`` / ``head`` for a map), ``attribution`` (the mean estimated effect) and
    ``rank`` (1 = largest)."""
    if isinstance(result, PatchingMap):
        keys = ["layer", result.axis]
    else:
        keys = ["layer"]
    mean = result.frame.groupby(keys, sort=True)["effect"].mean().rename("attribution").reset_index()
    order = mean.reindex(mean["attribution"].abs().sort_values(ascending=False, kind="stable").index)
    order = order.reset_index(drop=True)
    order["rank"] = np.arange(1, len(order) + 1)
    return order if k is None else order.head(int(k))


def exact_cells(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    component: str,
    cells: Sequence[tuple[int, int]],
) -> Float[Tensor, "cells n"]:
    """The exact activation-patching effect (patched − corrupted metric) of each ``(layer, pos)``
    cell — ``(layer, head)`` for ``heads`` — one forward per cell over all examples, via
    :func:`~interp.hooks.intervene` with the clean run's cached activations."""
    if component not in ATTRIBUTION_COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(ATTRIBUTION_COMPONENTS)}, got {component!r}")
    n = int(clean.shape[0])
    batch = Batch(corrupted, None, torch.arange(n))
    hooks = sorted({_component_hooks(component, [layer])[0] for layer, _ in cells})
    got: dict[str, Tensor] = {}
    with hooked(bridge, capturing(got, hooks)):
        forward(bridge, clean)
    base = torch.as_tensor(score_metric(metric, forward(bridge, corrupted), batch))
    out = []
    for layer, second in cells:
        if component == "heads":
            iv = patch(Site(int(layer), "z", int(second)), "clean")
        else:
            iv = patch(Site(int(layer), component), "clean", (int(second),))
        with intervene(bridge, [iv], sources={"clean": got}) as active:
            logits = forward(bridge, corrupted)
        if active.calls != [1]:
            raise InterventionError(f"patching {iv.describe()} fired {active.calls} times in one forward")
        out.append(torch.as_tensor(score_metric(metric, logits, batch)) - base)
    return torch.stack(out) if out else torch.zeros((0, n))


def spearman(x: Any, y: Any) -> float:
    """Spearman rank correlation (average ranks for ties); NaN with fewer than 2 points or no spread."""
    a, b = pd.Series(np.asarray(x, dtype=float)), pd.Series(np.asarray(y, dtype=float))
    if len(a) < 2:
        return float("nan")
    ra, rb = a.rank().to_numpy(), b.rank().to_numpy()
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def agreement(attribution: SweepResult | PatchingMap, exact: SweepResult | PatchingMap) -> dict[str, float]:
    """How an attribution result matches the exact one over their shared sites: ``spearman`` of the
    mean effects, ``pearson``, ``sign_agreement`` (share of sites with the same sign of mean effect),
    ``max_abs_error`` of the mean effects and ``n_sites``."""
    keys = ["layer", attribution.axis] if isinstance(attribution, PatchingMap) else ["layer"]
    a = attribution.frame.groupby(keys)["effect"].mean()
    e = exact.frame.groupby(keys)["effect"].mean()
    joined = pd.concat([a.rename("a"), e.rename("e")], axis=1, join="inner")
    x, y = joined["a"].to_numpy(), joined["e"].to_numpy()
    pearson = float(np.corrcoef(x, y)[0, 1]) if len(x) > 1 and x.std() > 0 and y.std() > 0 else float("nan")
    return {
        "spearman": spearman(x, y),
        "pearson": pearson,
        "sign_agreement": float(np.mean(np.sign(x) == np.sign(y))) if len(x) else float("nan"),
        "max_abs_error": float(np.abs(x - y).max()) if len(x) else float("nan"),
        "n_sites": int(len(x)),
    }


def site_table(attribution: SweepResult | PatchingMap, exact: SweepResult | PatchingMap) -> pd.DataFrame:
    """Per site: mean ``attribution`` and mean ``exact`` effect (inner join) — the scatter's data."""
    keys = ["layer", attribution.axis] if isinstance(attribution, PatchingMap) else ["layer"]
    a = attribution.frame.groupby(keys)["effect"].mean().rename("attribution")
    e = exact.frame.groupby(keys)["effect"].mean().rename("exact")
    return pd.concat([a, e], axis=1, join="inner").reset_index()


def top_patching_sites(pmap: PatchingMap, k: int) -> pd.DataFrame:
    """The ``k`` sites of a patching map with the largest |mean effect| (:func:`rank_sites`): ``layer``,
    the map's axis (``pos`` / ``head``), ``mean_effect``, ``rank`` and ``restored`` — the effect's share
    of the gap between the clean and the corrupted metric (``meta["clean_mean"] − meta["corrupted_mean"]``)."""
    gap = pmap.meta["clean_mean"] - pmap.meta["corrupted_mean"]
    top = rank_sites(pmap, k).rename(columns={"attribution": "mean_effect"})
    top["restored"] = top["mean_effect"] / gap
    return top


def top_agreement(attribution: SweepResult | PatchingMap, exact: SweepResult | PatchingMap, k: int) -> float:
    """Spearman of the attribution against the exact mean effects over the ``k`` sites of largest
    |exact mean effect| (the sites that matter; :func:`agreement`'s Spearman is over all)."""
    table = site_table(attribution, exact)
    top = table.reindex(table["exact"].abs().sort_values(ascending=False).index).head(k)
    return spearman(top["attribution"], top["exact"])


__all__ = [
    "ATTRIBUTION_COMPONENTS",
    "activation_attribution",
    "agreement",
    "direct_effect_attribution",
    "exact_cells",
    "gradient_run",
    "mlp_zero_attribution",
    "rank_sites",
    "site_table",
    "spearman",
    "top_agreement",
    "top_patching_sites",
]
