"""Greedy decoding of token ids, with a KV cache, and with every hook applied to every new token.

:func:`greedy_generate` continues a right-padded batch of prompts of unequal length:

- ``use_cache=True`` (default for a TransformerBridge): one forward reads the prompts, then each
  step reads only the new token of every row, over the cached keys/values of everything before
  it. It reuses the project's one KV-cache path (:mod:`interp.models.lm`: the bridge-attention
  shim ``kv_cache_shim`` and the preallocated ``PackedCache``): a row's prompt stays where right
  padding put it, columns ``[0, L_i)``; the token generated at step ``t`` is written at column
  ``W + t`` (``W`` the widest prompt) with position id ``L_i + t``, and a 4-D mask lets it attend
  to its own prompt and its own earlier tokens only. Physical columns do not matter to attention
  once the mask and the position ids are right, so no re-layout (left padding) is needed.
- ``use_cache=False``: the reference loop — every step re-runs each active row's whole sequence
  (right padding, 2-D attention mask) and reads the logits at its last real token.

**Hooks.** Every forward of both paths runs through the bridge, so whatever is registered on it
(``with intervene(bridge, [...])``, ``bridge.hooks(...)``, ``add_hook``) runs on every generated
token. In the cached path a step's activations cover the new token only (``[batch, 1, ...]``;
attention patterns ``[batch, heads, 1, keys]``): a hook that acts on each position by itself —
``zero`` / ``scale`` / ``mean`` interventions at ``"all"`` positions, or any hook that treats
positions alike — gives exactly the full loop's tokens (tested with and without
``blocks.1.hook_mlp_out`` zeroed on GPT-2, Llama, Qwen2, GPT-NeoX, Phi-3, Mistral, OLMo-2 and
Gemma-2). A hook tied to absolute positions or to the sequence length — a tuple
of position indices, ``"last"`` resolved from a fixed attention mask, ``patch``/``resample`` from a
source run of a fixed length — sees a different tensor in a cached step (the new token only), so
it is not the same intervention there: use ``use_cache=False`` for those.

**Sliding-window attention** (Gemma-2's alternate layers, Mistral with ``sliding_window`` set):
the cached path passes one explicit mask, which cannot carry a per-layer window, so it is exact
only while prompt + new tokens fit in the window (Gemma-2 and Mistral: 4,096). Beyond that,
``use_cache=None`` runs the full loop (and says so in a warning) and ``use_cache=True`` is an
error; measured on tiny models with a 4-token window, the cached tokens would differ.

**Stopping.** A row stops at an EOS id (not kept), when ``stop(new_ids)`` says so (e.g. its first
line is complete), or after ``max_new_tokens``. A stopped row is still carried through the
cached forwards (its outputs ignored) rather than copied out of the cache.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch
from torch import Tensor

from interp.models.device import model_device
from interp.worlds.encoding import pad_right


def _is_bridge(model: Any) -> bool:
    return hasattr(model, "hook_dict") and hasattr(model, "cfg")


def _logits(model: Any, ids: Tensor, mask: Tensor, **kw: Any) -> Tensor:
    if _is_bridge(model):
        return model(ids, return_type="logits", attention_mask=mask, **kw)
    return model(input_ids=ids, attention_mask=mask, **kw).logits


def _kv_layout(model: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head size) of a bridge's attention."""
    cfg = model.cfg
    heads = int(cfg.n_heads)
    kv = int(getattr(cfg, "n_key_value_heads", None) or heads)
    d_head = int(getattr(cfg, "d_head", 0) or int(cfg.d_model) // heads)
    return int(cfg.n_layers), kv, d_head


def sliding_window(model: Any) -> int | None:
    """The smallest attention window of a model's layers, or None when every layer attends to the
    whole sequence (read from the Hugging Face config: ``layer_types``, ``use_sliding_window``,
    ``sliding_window``)."""
    hf = getattr(model, "original_model", model)
    cfg = getattr(hf, "config", None)
    if cfg is None:
        return None
    types = getattr(cfg, "layer_types", None)
    if types is not None and "sliding_attention" not in types:
        return None
    if getattr(cfg, "use_sliding_window", True) is False:
        return None
    window = getattr(cfg, "sliding_window", None)
    return int(window) if window else None


def _layer_devices(model: Any, n_layers: int, default: torch.device) -> list[torch.device]:
    """The device each block's attention runs on (several under a device map)."""
    out = []
    for blk in list(model.blocks)[:n_layers]:
        dev = default
        for p in blk.attn.parameters():
            if p.device.type != "meta":
                dev = p.device
                break
        out.append(dev)
    return out


@torch.no_grad()
def greedy_generate(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    pad_id: int,
    max_new_tokens: int,
    eos_ids: Collection[int] = (),
    stop: Callable[[list[int]], bool] | None = None,
    use_cache: bool | None = None,
) -> list[list[int]]:
    """The greedy new token ids of each prompt (one batch; see the module docstring).

    ``model``: a TransformerBridge (hooks registered on it apply) or, with ``use_cache=False``, a
    Hugging Face causal LM. ``use_cache=None`` means True for a bridge, False otherwise; the
    cached path needs a bridge (it rides on the bridge attention's KV-cache shim).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    explicit = use_cache is not None
    if use_cache is None:
        use_cache = _is_bridge(model)
    if use_cache and not _is_bridge(model):
        raise ValueError(
            "use_cache=True needs a TransformerBridge (the KV cache rides on its attention shim); "
            "pass use_cache=False for a plain Hugging Face model"
        )
    window, longest = sliding_window(model), max(map(len, prompts)) + max_new_tokens
    if use_cache and window is not None and longest > window:
        msg = (
            f"this model attends through a sliding window of {window} tokens, shorter than prompt + new "
            f"tokens ({longest}); the KV-cached path cannot apply the window"
        )
        if explicit:
            raise ValueError(msg + ": pass use_cache=False")
        warnings.warn(msg + "; generating without the cache (exact, slower)", stacklevel=2)
        use_cache = False
    run = _cached if use_cache else _full
    return run(model, [list(p) for p in prompts], pad_id, max_new_tokens, set(eos_ids), stop)


def _accept(i: int, t: int, new: list[list[int]], eos: set[int], stop) -> bool:
    """Record token ``t`` for row ``i``; whether the row goes on."""
    if t in eos:
        return False
    new[i].append(t)
    return not (stop is not None and stop(new[i]))


def _full(model, rows, pad_id, max_new_tokens, eos, stop) -> list[list[int]]:
    """The reference: re-run each active row in full every step."""
    device = model_device(model)
    new: list[list[int]] = [[] for _ in rows]
    active = list(range(len(rows)))
    for _ in range(max_new_tokens):
        ids, mask, lengths = pad_right([rows[i] + new[i] for i in active], pad_id)
        logits = _logits(model, ids.to(device), mask.to(device))
        last = logits[torch.arange(len(active), device=logits.device), (lengths - 1).to(logits.device)]
        active = [i for i, t in zip(active, last.argmax(dim=-1).tolist()) if _accept(i, t, new, eos, stop)]
        if not active:
            break
    return new


def _cached(model, rows, pad_id, max_new_tokens, eos, stop) -> list[list[int]]:
    """Prefill the right-padded prompts once, then one new token per row per step."""
    from interp.models.lm import PackedCache, kv_cache_shim

    device = model_device(model)
    n_layers, kv_heads, d_head = _kv_layout(model)
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    ids, valid, lengths = pad_right(rows, pad_id)
    b, width = ids.shape
    cap = width + max_new_tokens
    devs = _layer_devices(model, n_layers, device)
    keys = [torch.zeros((b, kv_heads, cap, d_head), dtype=dtype, device=d) for d in devs]
    values = [torch.zeros((b, kv_heads, cap, d_head), dtype=dtype, device=d) for d in devs]
    # attend[i, j]: may a query of row i read column j (its prompt, then its generated tokens)
    attend = torch.zeros((b, cap), dtype=torch.bool)
    attend[:, :width] = valid.bool()
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    # a padding query reads itself only (finite values no real row ever reads)
    mask = (causal & attend[:, None, :width]) | torch.eye(width, dtype=torch.bool)
    positions = torch.arange(width).expand(b, width)
    new: list[list[int]] = [[] for _ in rows]
    active = torch.ones(b, dtype=torch.bool)
    rows_idx = torch.arange(b)
    with kv_cache_shim(model):
        logits = _logits(
            model,
            ids.to(device),
            mask[:, None].to(device),
            position_ids=positions.to(device),
            past_key_values=PackedCache(keys, values, 0, width),
            use_cache=True,
        )
        nxt = logits[rows_idx.to(logits.device), (lengths - 1).to(logits.device)].argmax(dim=-1).cpu()
        for step in range(max_new_tokens):
            for i in active.nonzero().squeeze(1).tolist():
                active[i] = _accept(i, int(nxt[i]), new, eos, stop)
            if not bool(active.any()) or step == max_new_tokens - 1:
                break
            col = width + step
            attend[:, col] = True
            tok = torch.where(active, nxt, torch.full_like(nxt, pad_id))
            logits = _logits(
                model,
                tok[:, None].to(device),
                attend[:, None, None, : col + 1].to(device),
                position_ids=(lengths + step)[:, None].to(device),
                past_key_values=PackedCache(keys, values, col, 1),
                use_cache=True,
            )
            nxt = logits[:, -1].argmax(dim=-1).cpu()
    return new


__all__ = ["greedy_generate"]
