"""Fused attention on a TransformerBridge: every hook fires as before, except the pattern's.

TransformerLens's bridge computes attention itself, eagerly, so that ``hook_attn_scores`` (before
the softmax) and ``hook_pattern`` (after it) can fire: a ``[batch, heads, query, key]`` float
tensor is written, scaled, masked, softmaxed and multiplied by the values — five passes over a
tensor quadratic in the length, dense over every pair even where a 4-D mask (a packed trie,
:mod:`interp.models.packing`) keeps a quarter of them. When nothing reads the pattern, one call
to :func:`torch.nn.functional.scaled_dot_product_attention` (SDPA) computes the same output
without materialising it.

:func:`set_attention` switches a loaded bridge's attention modules between the two (``eager`` /
``fused`` / ``auto``); :func:`attention` does it for a ``with`` block and restores the previous
setting on exit, also on error. Fused attention replaces only the scores → softmax → weighted
values core: the projections and their hooks (``hook_q`` / ``hook_k`` / ``hook_v`` through the
q/k/v bridges, ``hook_rot_q`` / ``hook_rot_k``, the position-embedding hooks), the KV cache,
``hook_z`` (the output projection's input), ``hook_result`` under ``use_attn_result`` and
``hook_attn_out`` run the bridge's own code, copied from TransformerLens 4.3 and checked against
it (``tests/test_fused_attention.py``: every hook value within 1e-5 in float32 on the
architecture matrix). The mask means what the eager path makes of it: ``None`` is causal, a 4-D
boolean mask becomes the same additive ``0 / finfo.min`` mask, a 4-D float mask is added as is
(so a fully masked row, a left pad, averages the values exactly as eager does), a lower-rank mask
goes through the bridge's own mask builder. Grouped-query attention uses SDPA's ``enable_gqa``;
the scale is the bridge's (``scaling`` of the module: Gemma-2's ``query_pre_attn_scalar``, GPT-2's
inverse layer index, ``reorder_and_upcast_attn`` in float32).

The modes:

- ``eager``: the bridge as TransformerLens ships it;
- ``fused``: SDPA; a hook on ``hook_attn_scores`` / ``hook_pattern`` (``run_with_cache`` of
  every hook point included) raises :class:`AttentionError` at the forward, naming the hook
  point, as does a setting that needs the eager path (``use_split_qkv_input`` / ``use_attn_in``,
  compatibility mode). In training mode the attention dropout is SDPA's (same rate, other
  random draws than eager's);
- ``auto``: SDPA, but each forward that would be refused (or would draw attention dropout) runs
  the eager path instead — so reading the pattern just works, at eager's cost.

Architectures whose attention the fused core cannot reproduce exactly are refused by name
(``fused``) or left eager (``auto``): attention-logit softcapping (Gemma-2 with
``attn_logit_softcapping``), attention sinks (GPT-OSS), gated queries or a gate projection
(Qwen3.5 / Qwen3-Next, HRM-Text), a key multiplier (Falcon-H1), ``clip_qkv`` (OLMo), Llama-4
query scaling (Ministral-3), any other attention bridge class (ALiBi, T5 relative bias, MLA,
encoders) and modules wrapped by accelerate (a device map). :func:`fused_support` says why.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from functools import cache, lru_cache, partial
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

#: the values of ``--attention`` (and of :attr:`interp.models.device.Placement.attention`)
ATTENTION_MODES = ("auto", "eager", "fused")
#: the hook points fused attention never fires (it computes no scores or pattern)
PATTERN_HOOKS = ("hook_attn_scores", "hook_pattern")
_MODE_ATTR = "_interp_attention"


class AttentionError(ValueError):
    """Fused attention asked for where it cannot run: a pattern hook, an unsupported architecture
    or setting, an unknown mode."""


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`ATTENTION_MODES`, else an :class:`AttentionError`."""
    if mode not in ATTENTION_MODES:
        raise AttentionError(f"--attention must be one of {', '.join(ATTENTION_MODES)}, got {mode!r}")
    return mode


# ---- which modules, and whether they can run fused ------------------------------------------------


@lru_cache(maxsize=1)
def _bases() -> tuple[type, type, type, type]:
    from transformer_lens.model_bridge.generalized_components import (
        AttentionBridge,
        JointQKVAttentionBridge,
        JointQKVPositionEmbeddingsAttentionBridge,
        PositionEmbeddingsAttentionBridge,
    )

    return (
        AttentionBridge,
        PositionEmbeddingsAttentionBridge,
        JointQKVAttentionBridge,
        JointQKVPositionEmbeddingsAttentionBridge,
    )


def attention_modules(bridge: Any) -> list[Any]:
    """The attention bridge components of ``bridge`` (one per block for a decoder)."""
    base = _bases()[0]
    return [m for m in bridge.modules() if isinstance(m, base)]


def _eager_class(module: Any) -> Any:
    """The class TransformerLens gave ``module`` (under a fused swap: the class it replaced)."""
    return getattr(type(module), "_interp_eager_class", type(module))


def _module_reason(module: Any) -> str | None:
    """Why ``module`` cannot run fused, or None."""
    _, pos_emb, joint, joint_pos = _bases()
    cls = _eager_class(module)
    if cls not in (pos_emb, joint, joint_pos):
        return (
            f"its attention is {cls.__name__}, which the fused path does not reproduce (it covers "
            f"{pos_emb.__name__}, {joint.__name__} and {joint_pos.__name__})"
        )
    if "forward" in vars(module):
        return "its attention modules are wrapped by accelerate (a device map)"
    hf = module.original_component
    cfg = module.config
    if cls is pos_emb:
        checks = (
            (getattr(hf, "attn_logit_softcapping", None) is not None, "attention-logit softcapping (Gemma-2)"),
            (getattr(hf, "sinks", None) is not None, "attention sinks (GPT-OSS)"),
            (getattr(cfg, "gated_q_proj", False) or "gate" in module.submodules, "gated attention"),
            (getattr(hf, "key_multiplier", None) is not None, "a key multiplier (Falcon-H1)"),
            (getattr(getattr(hf, "config", None), "clip_qkv", None) is not None, "clip_qkv (OLMo)"),
            (
                isinstance(getattr(getattr(hf, "config", None), "rope_parameters", None), dict)
                and hf.config.rope_parameters.get("llama_4_scaling_beta") is not None,
                "Llama-4 query scaling (Ministral-3)",
            ),
        )
        for bad, what in checks:
            if bad:
                return f"its attention uses {what}, which the fused kernel does not compute"
    return None


def fused_support(bridge: Any) -> str | None:
    """None when every attention module of ``bridge`` can run fused, else the reason (one sentence
    naming the architecture and what it needs)."""
    modules = attention_modules(bridge)
    if not modules:
        return f"{_arch(bridge)} has no attention modules"
    for m in modules:
        why = _module_reason(m)
        if why is not None:
            return f"{_arch(bridge)} cannot run fused attention: {why}"
    return None


def _arch(bridge: Any) -> str:
    cfg = getattr(bridge, "cfg", None)
    return str(getattr(cfg, "architecture", None) or getattr(cfg, "model_name", None) or type(bridge).__name__)


def attention_mode(bridge: Any) -> str:
    """The attention mode a bridge runs: ``eager``, ``fused`` or ``auto`` (the mode of its first
    attention module; :func:`set_attention` sets them all alike)."""
    modules = attention_modules(bridge)
    return getattr(modules[0], _MODE_ATTR, "eager") if modules else "eager"


def _install(module: Any, mode: str) -> None:
    cls = _eager_class(module)
    if mode == "eager":
        object.__setattr__(module, "__class__", cls)
        module.__dict__.pop(_MODE_ATTR, None)
        return
    object.__setattr__(module, "__class__", _fused_class(cls))
    module.__dict__[_MODE_ATTR] = mode


def set_attention(bridge: Any, mode: str = "auto") -> str:
    """Switch every attention module of ``bridge`` to ``mode`` (module docstring) and return what it
    runs: ``eager`` or the fused ``mode``. ``fused`` on an architecture :func:`fused_support` refuses
    raises :class:`AttentionError`; ``auto`` leaves it eager. The bridge is wholly fused or wholly
    eager; no hook is added."""
    check_mode(mode)
    modules = attention_modules(bridge)
    if mode != "eager":
        why = fused_support(bridge)
        if why is not None:
            if mode == "fused":
                raise AttentionError(f"--attention fused: {why}; use --attention eager (or auto)")
            mode = "eager"
    for m in modules:
        _install(m, mode)
    return mode


@contextlib.contextmanager
def attention(bridge: Any, mode: str = "fused") -> Iterator[str]:
    """``with attention(bridge, "fused") as got:`` runs the block with :func:`set_attention`'s
    ``mode`` (``got`` is what it resolved to) and restores each module's previous mode on exit, also
    on error."""
    before = [(m, getattr(m, _MODE_ATTR, "eager")) for m in attention_modules(bridge)]
    try:
        yield set_attention(bridge, mode)
    finally:
        for m, was in before:
            _install(m, was)


# ---- the fused forward ----------------------------------------------------------------------------


def pattern_hooks(module: Any) -> list[str]:
    """The names of ``module``'s :data:`PATTERN_HOOKS` that have a hook registered."""
    out = []
    for attr in PATTERN_HOOKS:
        hp = getattr(module, attr, None)
        if hp is not None and (hp._forward_hooks or hp._forward_pre_hooks):
            out.append(str(getattr(hp, "name", None) or attr))
    return out


def _dropout_p(module: Any) -> float:
    """The attention dropout rate the eager path would apply now (0 in eval mode)."""
    if not module.training:
        return 0.0
    hf = module.original_component
    rate = getattr(hf, "attention_dropout", None)
    drop = getattr(hf, "attn_dropout", None)
    if isinstance(drop, torch.nn.Dropout):
        return float(drop.p)
    return float(rate) if isinstance(rate, (int, float)) else 0.0


def _eager_needed(module: Any) -> str | None:
    """Why this forward needs the eager path (in ``fused`` mode: why it is refused), or None."""
    hooked = pattern_hooks(module)
    if hooked:
        return (
            f"a hook is registered on {', '.join(hooked)}, which fused attention never computes: "
            f"use --attention eager or auto to read the attention scores or pattern"
        )
    cfg = module.config
    if getattr(cfg, "use_split_qkv_input", False) or getattr(cfg, "use_attn_in", False):
        return "use_split_qkv_input / use_attn_in are set; their per-head inputs run eager only"
    if module.compatibility_mode:
        return "the bridge is in compatibility mode (its -inf masks and NaN scrubs run eager only)"
    if getattr(module, _MODE_ATTR, "fused") == "auto" and _dropout_p(module) > 0:
        return "attention dropout is on (training): auto keeps eager's random draws"
    return None


def _use_eager(module: Any) -> bool:
    """Whether this forward runs the eager path: ``auto`` falls back, ``fused`` raises."""
    why = _eager_needed(module)
    if why is None:
        return False
    if getattr(module, _MODE_ATTR, "fused") == "auto":
        return True
    raise AttentionError(f"--attention fused: {why}")


#: the last boolean mask made additive (the same mask object reaches every layer of a forward)
_MASK_CACHE: dict[str, Any] = {}


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A boolean mask (True = attend) as the eager path adds it: 0 where kept, ``finfo.min``
    elsewhere, so a fully masked row averages the values as eager does (SDPA would give zeros)."""
    key = (mask, mask._version, dtype, mask.device)
    hit = _MASK_CACHE.get("key")
    if hit is not None and hit[0] is mask and hit[1:] == key[1:]:
        return _MASK_CACHE["value"]
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    out = torch.where(mask, zero, torch.full((), torch.finfo(dtype).min, dtype=dtype, device=mask.device))
    _MASK_CACHE.update(key=key, value=out)
    return out


def clear_mask_cache() -> None:
    """Drop the cached additive mask (it holds one mask tensor between forwards)."""
    _MASK_CACHE.clear()


def fused_core(
    module: Any,
    q: Float[Tensor, "batch head q d"],
    k: Float[Tensor, "batch kv_head k d"],
    v: Float[Tensor, "batch kv_head k d"],
    mask: Tensor | None,
    scale: float,
) -> Float[Tensor, "batch head q d"]:
    """softmax(q kᵀ · scale + mask) v in one SDPA call, with the eager path's mask semantics
    (module docstring) and grouped-query heads (``k`` / ``v`` with fewer heads than ``q``)."""
    q_len, kv_len = q.shape[-2], k.shape[-2]
    causal = False
    if mask is None:
        if module.is_causal and not module.is_cross_attention:
            if q_len == kv_len:
                causal = True
            else:  # decode steps over a cache: query i sees keys up to kv_len − q_len + i
                keep = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril(kv_len - q_len)
                mask = _additive(keep, q.dtype)
    elif mask.ndim >= 4:
        if mask.shape[-1] != kv_len:
            mask = mask[..., :kv_len]
        if mask.shape[-2] != q_len:
            mask = mask[..., -q_len:, :]
        mask = _additive(mask, q.dtype) if mask.dtype == torch.bool else mask.to(q.dtype)
    else:  # a lower-rank mask: the bridge's own builder, on zero scores
        zeros = torch.zeros((q.shape[0], 1, q_len, kv_len), dtype=q.dtype, device=q.device)
        mask = module._apply_reconstruct_attention_mask(zeros, mask, kv_len, q_len)
    gqa = {"enable_gqa": True} if k.shape[-3] != q.shape[-3] else {}
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=_dropout_p(module), is_causal=causal, scale=scale, **gqa
    )


def _project_out(module: Any, out: Tensor, input_shape: tuple[int, ...], n_heads: int, head_dim: int) -> Tensor:
    """The eager path's tail: ``hook_z`` (``o.hook_in``), the output projection (per head under
    ``use_attn_result``, firing ``hook_result``); ``hook_out`` is the caller's."""
    if bool(getattr(module.config, "use_attn_result", False)) and module.o.original_component is not None:
        out = module.o.hook_in(out)
        return module._compute_per_head_result(out.view(*input_shape, n_heads, head_dim), n_heads, head_dim)
    return module._apply_output_projection(out)


def _pos_emb_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    """``PositionEmbeddingsAttentionBridge.forward`` (TransformerLens 4.3; Llama, Qwen2, Mistral,
    Gemma, OLMo-2, …) with the attention core fused; the branches :func:`_module_reason` refuses are
    left out."""
    if _use_eager(self):
        return _eager_class(self).forward(self, *args, **kwargs)
    hf_attn: Any = self.original_component
    if "hidden_states" in kwargs:
        hidden_states = kwargs.pop("hidden_states")
    elif args and isinstance(args[0], torch.Tensor):
        hidden_states, args = args[0], args[1:]
    else:
        raise ValueError("Could not find hidden_states in args or kwargs")
    position_embeddings = kwargs.pop("position_embeddings", None)
    attention_mask = kwargs.pop("attention_mask", None)
    hidden_states = self.hook_in(hidden_states)
    input_shape = hidden_states.shape[:-1]
    head_dim = hf_attn.head_dim
    hidden_shape = (*input_shape, -1, head_dim)
    query_states = self.q(hidden_states)
    key_states = self.k(hidden_states)
    value_states = self.v(hidden_states)
    has_q_norm = "q_norm" in self.submodules
    has_k_norm = "k_norm" in self.submodules
    if has_q_norm and self._qk_norm_phase == "pre_reshape":
        query_states = self._apply_pre_reshape_qk_norm(query_states, self.q_norm, self.hook_q_normed, head_dim)
        if has_k_norm:
            key_states = self._apply_pre_reshape_qk_norm(key_states, self.k_norm, self.hook_k_normed, head_dim)
    query_states = query_states.view(hidden_shape).transpose(1, 2)
    key_states = key_states.view(hidden_shape).transpose(1, 2)
    value_states = value_states.view(hidden_shape).transpose(1, 2)
    after_rope = bool(getattr(self.config, "qk_norm_after_rope", False))
    if has_q_norm and self._qk_norm_phase == "post_reshape" and not after_rope:
        if self._qk_norm_per_head:
            query_states = self.hook_q_normed(self.q_norm(query_states.transpose(1, 2)).transpose(1, 2))
            if has_k_norm:
                key_states = self.hook_k_normed(self.k_norm(key_states.transpose(1, 2)).transpose(1, 2))
        else:
            query_states = self.hook_q_normed(self.q_norm(query_states))
            if has_k_norm:
                key_states = self.hook_k_normed(self.k_norm(key_states))
    if position_embeddings is None and not self.rope_optional:
        if getattr(self.config, "positional_embedding_type", None) == "rotary":  # as eager: warn, no RoPE
            warnings.warn(
                f"{type(self).__name__}({self.name}) reconstructed attention without position_embeddings "
                "on a rotary architecture — RoPE was NOT applied.",
                RuntimeWarning,
                stacklevel=2,
            )
    if position_embeddings is not None:
        query_states, key_states = _rotate(self, query_states, key_states, position_embeddings, head_dim)
    if hasattr(self, "hook_rot_q"):
        query_states = self.hook_rot_q(query_states)
    if hasattr(self, "hook_rot_k"):
        key_states = self.hook_rot_k(key_states)
    if has_q_norm and self._qk_norm_phase == "post_reshape" and after_rope:
        query_states = self.hook_q_normed(self.q_norm(query_states))
        if has_k_norm:
            key_states = self.hook_k_normed(self.k_norm(key_states))
    key_states, value_states = self._update_kv_cache(key_states, value_states, **kwargs)
    scaling = getattr(hf_attn, "scaling", head_dim**-0.5)
    out = fused_core(self, query_states, key_states, value_states, attention_mask, scaling)
    out = out.transpose(1, 2).contiguous().reshape(*input_shape, -1)
    o_weight = getattr(getattr(self.o, "original_component", None), "weight", None)
    if isinstance(o_weight, torch.Tensor) and o_weight.dtype.is_floating_point and out.dtype != o_weight.dtype:
        out = out.to(dtype=o_weight.dtype)  # fp32 cos/sin (FlexOlmo) promote q/k: match the projection
    out = _project_out(self, out, tuple(input_shape), int(self.config.n_heads), head_dim)
    return self.hook_out(out), None


def _rotate(self: Any, q: Tensor, k: Tensor, position_embeddings: Any, head_dim: int) -> tuple[Tensor, Tensor]:
    """RoPE exactly as ``PositionEmbeddingsAttentionBridge.forward`` applies it (the position
    embedding hooks fire first)."""
    from transformer_lens.model_bridge.generalized_components.position_embeddings_attention import (
        _apply_rotary_pos_emb_adjacent_pairs,
    )
    from transformer_lens.utilities.hf_utils import get_rotary_pct_from_config
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rope

    cos, sin = self._apply_position_embedding_hooks(position_embeddings)
    rope: Any = llama_rope
    if getattr(self.config, "rotary_interleaved_cos_sin", False):
        rope = partial(_apply_rotary_pos_emb_adjacent_pairs, relayout_cos_sin=False)
    elif getattr(self.config, "rotary_adjacent_pairs", False):
        rope = _apply_rotary_pos_emb_adjacent_pairs
    rotary_dim = cos.shape[-1]
    if rotary_dim * 2 == head_dim and get_rotary_pct_from_config(self.config) == 1.0:
        return rope(q, k, torch.cat([cos, cos], dim=-1), torch.cat([sin, sin], dim=-1))
    if rotary_dim < head_dim:
        q_rot, k_rot = rope(q[..., :rotary_dim], k[..., :rotary_dim], cos, sin)
        return torch.cat([q_rot, q[..., rotary_dim:]], dim=-1), torch.cat([k_rot, k[..., rotary_dim:]], dim=-1)
    return rope(q, k, cos, sin)


def _joint_reconstruct(self: Any, q: Tensor, k: Tensor, v: Tensor, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """``JointQKVAttentionBridge._reconstruct_attention`` (GPT-2) and its rotary subclass's
    (GPT-NeoX / Pythia, Phi-3), TransformerLens 4.3, with the attention core fused."""
    _, _, joint, joint_pos = _bases()
    if _use_eager(self):
        return _eager_class(self)._reconstruct_attention(self, q, k, v, **kwargs)
    num_heads = self.config.n_heads
    num_kv_heads = getattr(self.config, "n_key_value_heads", None) or num_heads
    q, k, v, batch_size, seq_len, head_dim = self._reshape_qkv_to_heads(q, k, v, num_heads, num_kv_heads)
    rotary = _eager_class(self) is joint_pos
    if rotary:
        position_embeddings = kwargs.get("position_embeddings", None)
        if position_embeddings is not None and isinstance(position_embeddings, tuple):
            cos, sin = self._apply_position_embedding_hooks(position_embeddings)
            q, k = self._apply_rotary_pos_emb(q, k, cos, sin)
    k, v = self._update_kv_cache(k, v, **kwargs)
    scale = head_dim ** (-0.5)
    v_dtype = v.dtype
    if not rotary:
        if getattr(self.config, "scale_attn_by_inverse_layer_idx", False) and self._layer_idx is not None:
            scale /= float(self._layer_idx + 1)
        if getattr(self, "_reorder_and_upcast_attn", False):  # HF computes these scores in float32
            q, k, v = q.float(), k.float(), v.float()
    out = fused_core(self, q, k, v, kwargs.get("attention_mask", None), scale).to(v_dtype)
    out = self._reshape_attn_output(out, batch_size, seq_len, num_heads, head_dim)
    return _project_out(self, out, (batch_size, seq_len), num_heads, head_dim), None


@cache
def _fused_class(cls: type) -> type:
    """The subclass of an attention bridge class whose forward runs fused (swapped in as the
    instance's class, so ``isinstance`` and every other method stay TransformerLens's)."""
    _, pos_emb, _, _ = _bases()
    body: dict[str, Any] = {"_interp_eager_class": cls, "__module__": __name__}
    if cls is pos_emb:
        body["forward"] = _pos_emb_forward
    else:
        body["_reconstruct_attention"] = _joint_reconstruct
    return type(f"Fused{cls.__name__}", (cls,), body)


__all__ = [
    "ATTENTION_MODES",
    "PATTERN_HOOKS",
    "AttentionError",
    "attention",
    "attention_mode",
    "attention_modules",
    "check_mode",
    "clear_mask_cache",
    "fused_core",
    "fused_support",
    "pattern_hooks",
    "set_attention",
]
