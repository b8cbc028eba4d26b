"""Activation patching clean → corrupted with the variants of a layer stacked into resumed forwards.

The same maps as :func:`~interp.analysis.engines.activation_patching.activation_patching` (which calls
TransformerLens's ``transformer_lens.patching``: one full forward per cell), computed by our own
code so that the two can check each other (``tests/test_stacked_patching.py``: equal within 1e-5
on a tiny random Llama and on SmolLM2-135M):

- ``resid_pre`` (layer × position): the corrupted run with ``blocks.ℓ.hook_resid_pre`` at one
  position replaced by the clean run's — TransformerLens's ``get_act_patch_resid_pre``;
- ``heads`` (layer × head, all positions): the corrupted run with one head's ``attn.hook_z`` (its
  mixed values, the input of the output projection ``W_O`` for that head) replaced by the clean
  run's at every position — ``get_act_patch_attn_head_out_all_pos``.

Two savings, both exact: (1) the blocks before ℓ compute what the corrupted run computed, so every
variant at layer ℓ resumes at block ℓ from the cached corrupted ``resid_pre`` (via
:func:`~interp.analysis.engines.resume.resume_forward`; about half the block evaluations of a full
forward per cell, averaged over layers); (2) the variants of one layer (each position, or each
head) are stacked as rows of one forward whose hook patches each row's own cell, so the Python
overhead per forward is paid once per ``max_rows`` rows instead of once per cell.

**Head outputs on a booted Hugging Face model.** On a ``TransformerBridge`` of a HF Llama (and
GPT-2), ``blocks.ℓ.attn.hook_z`` is an alias of ``blocks.ℓ.attn.o.hook_in`` shown as
``[batch, pos, n_heads, d_head]``: the per-head input of ``o_proj``. Patching a head's slice there
patches that head's output; ``set_use_attn_result`` (which adds ``hook_result``, the per-head
``W_O``-projected outputs) is not needed, and TransformerLens's head patching uses ``hook_z`` too.
With grouped-query attention (SmolLM2: 9 query heads, 3 key-value heads) ``hook_z`` has one slice
per *query* head. A test checks a patched ``hook_z`` slice against a plain PyTorch pre-hook on the
raw HF ``o_proj`` input.

Inputs have equal shapes and no padding (the patching of TransformerLens runs without an attention
mask); group pairs by length before calling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from interp.analysis.engines.activation_patching import COMPONENTS, PatchingMap, check_pair_shapes, patching_map
from interp.analysis.engines.batching import swept_layer_list
from interp.analysis.engines.resume import block_output_is_tuple, resume_forward
from interp.analysis.engines.scoring import Batch, Metric, forward, metric_name, score_metric
from interp.hooks import HookNames, InterventionError, Site, capturing, check_site, hooked

#: components the stacked engine computes (a subset of the TransformerLens wrapper's)
STACKED_COMPONENTS = ("resid_pre", "heads")


def _cache(
    bridge: Any, tokens: Tensor, hooks: Sequence[str], metric: Metric, n: int
) -> tuple[np.ndarray, dict[str, Tensor]]:
    """One forward of ``tokens``: the metric per row and the activations at ``hooks`` (detached)."""
    got: dict[str, Tensor] = {}
    with hooked(bridge, capturing(got, hooks)):
        value = score_metric(metric, forward(bridge, tokens), Batch(tokens, None, torch.arange(n)))
    missing = [h for h in hooks if h not in got]
    if missing:
        raise InterventionError(f"hooks {missing} never fired")
    return value, got


def _check(bridge: Any, clean: Tensor, corrupted: Tensor, component: str) -> None:
    if component not in STACKED_COMPONENTS:
        raise ValueError(f"component must be one of {', '.join(STACKED_COMPONENTS)}, got {component!r}")
    check_pair_shapes(bridge, clean, corrupted)


def stacked_patching(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    component: str = "resid_pre",
    *,
    layers: Sequence[int] | None = None,
    labels: list[str] | None = None,
    max_rows: int = 64,
    progress: bool = False,
) -> PatchingMap:
    """Patch ``component`` from the clean run into the corrupted run at every (layer, position) —
    every (layer, head), all positions, for ``"heads"`` — and score each patched run with
    ``metric(logits, batch) -> Tensor[n]``. Same :class:`PatchingMap` as
    :func:`~interp.analysis.engines.activation_patching.activation_patching` (``value``, ``effect = value −
    corrupted``, ``recovered = effect / (clean − corrupted)``).

    ``layers``: a subset (default all); ``max_rows`` bounds the rows of one stacked forward
    (variants × examples; the logits of a forward are ``rows × pos × vocab`` floats);
    ``progress``: a tqdm bar over layers. No hooks remain afterwards, also on error.
    """
    from tqdm.auto import tqdm

    _check(bridge, clean, corrupted, component)
    n, n_pos = int(clean.shape[0]), int(clean.shape[1])
    lays = swept_layer_list(bridge, layers)
    names = HookNames(bridge)
    site = "z" if component == "heads" else "resid_pre"
    for layer in lays:
        check_site(Site(layer, site), bridge, names)
        check_site(Site(layer, "resid_pre"), bridge, names)
    patched_hooks = {layer: Site(layer, site).hook_name for layer in lays}
    resume_hooks = {layer: Site(layer, "resid_pre").hook_name for layer in lays if layer > 0}
    with torch.no_grad():
        clean_value, clean_acts = _cache(bridge, clean, sorted(set(patched_hooks.values())), metric, n)
        corrupted_value, corrupted_acts = _cache(bridge, corrupted, sorted(set(resume_hooks.values())), metric, n)
    n_variants = int(bridge.cfg.n_heads) if component == "heads" else n_pos
    as_tuple = block_output_is_tuple(bridge)
    values = np.zeros((len(lays), n_variants, n))
    variant_of_row = torch.arange(n_variants).repeat_interleave(n)  # row r: variant r // n, example r % n
    example_of_row = torch.arange(n).repeat(n_variants)
    step = max(1, int(max_rows))
    for j, layer in enumerate(tqdm(lays, disable=not progress, desc=f"{component} patching", unit="layer")):
        source = clean_acts[patched_hooks[layer]]
        for start in range(0, n_variants * n, step):
            vs, es = variant_of_row[start : start + step], example_of_row[start : start + step]
            rows = torch.arange(len(vs))
            fired = [0]

            def patch(
                act: Tensor,
                hook: Any,
                vs: Tensor = vs,
                es: Tensor = es,
                rows: Tensor = rows,
                fired: list[int] = fired,
                source: Tensor = source,
            ) -> Tensor:
                fired[0] += 1
                out = act.clone()
                if component == "heads":  # [rows, pos, head, d_head]: each row its own head, all positions
                    out[rows, :, vs.to(out.device)] = source[es, :, vs].to(out.device, out.dtype)
                else:  # [rows, pos, d_model]: each row its own position
                    out[rows, vs.to(out.device)] = source[es, vs].to(out.device, out.dtype)
                return out

            tokens = corrupted[es]
            with torch.no_grad(), hooked(bridge, [(patched_hooks[layer], patch)]):
                if layer == 0:
                    logits = forward(bridge, tokens)
                else:
                    resid = corrupted_acts[resume_hooks[layer]][es.to(corrupted_acts[resume_hooks[layer]].device)]
                    logits = resume_forward(bridge, layer, resid, tokens, as_tuple=as_tuple)
            if fired[0] != 1:
                raise InterventionError(f"patching {patched_hooks[layer]} fired {fired[0]} times in one forward")
            values[j, vs.numpy(), es.numpy()] = score_metric(metric, logits, Batch(tokens, None, es))
    fn_name = COMPONENTS[component][0]
    meta = {
        "component": component,
        "metric": metric_name(metric),
        "labels": labels,
        "positions": n_pos,
        "layers": lays,
        "engine": "interp.analysis.engines.stacked_patching (resumed, stacked variants; peer: "
        f"transformer_lens.patching.{fn_name})",
    }
    return patching_map(bridge, values, clean_value, corrupted_value, meta, layers=lays)


def transformer_lens_check(
    bridge: Any,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    ours: PatchingMap,
    layers: Sequence[int] | None = None,
) -> dict[str, Any]:
    """The peer oracle: TransformerLens's own patching function for ``ours``'s component
    (``get_act_patch_resid_pre`` / ``get_act_patch_attn_head_out_all_pos``) run on the same
    bridge and inputs over every cell of ``layers`` (default: the map's layers; its ``index_df``
    restricts the cells, each still one full forward), compared with the map's per-example values.

    Returns ``max_abs_diff`` (patched metric), ``max_abs_diff_baseline`` (the corrupted run),
    ``n_cells``, ``layers`` and the ``engine``. The bridge must be in eval mode."""
    import pandas as pd
    import transformer_lens.patching as tl_patching

    from interp.analysis.engines.activation_patching import tl_device
    from interp.analysis.engines.scoring import to_model_device

    component = str(ours.meta["component"])
    _check(bridge, clean, corrupted, component)
    fn_name, axis = COMPONENTS[component]
    lays = (
        [int(x) for x in (ours.meta.get("layers") or sorted(ours.frame["layer"].unique()))]
        if layers is None
        else swept_layer_list(bridge, layers)
    )
    n_second = int(bridge.cfg.n_heads) if component == "heads" else int(clean.shape[1])
    cells = pd.DataFrame([(layer, k) for layer in lays for k in range(n_second)], columns=["layer", axis])
    n = int(clean.shape[0])
    batch = Batch(corrupted, None, torch.arange(n))
    with torch.no_grad(), tl_device(bridge):
        _, cache = bridge.run_with_cache(to_model_device(bridge, clean))
        result = getattr(tl_patching, fn_name)(
            bridge,
            to_model_device(bridge, corrupted),
            cache,
            lambda logits: metric(logits, batch),
            index_axis_names=None,
            index_df=cells,
            reduce="none",
            baseline=True,
        )
    del cache
    peer = result.values.float().cpu().numpy()  # [cell, n]
    mine = ours.frame.set_index(["layer", axis, "example"])["value"]
    got = np.array([[mine.loc[(layer, k, i)] for i in range(n)] for layer, k in cells.itertuples(index=False)])
    base = float(
        np.abs(
            result.baseline.float().cpu().numpy()
            - (
                ours.frame.groupby("example")["value"].first() - ours.frame.groupby("example")["effect"].first()
            ).to_numpy()
        ).max()
    )
    return {
        "max_abs_diff": float(np.abs(got - peer).max()),
        "max_abs_diff_baseline": base,
        "n_cells": len(cells),
        "n_examples": n,
        "layers": lays,
        "engine": f"transformer_lens.patching.{fn_name}",
    }


__all__ = ["STACKED_COMPONENTS", "stacked_patching", "transformer_lens_check"]
