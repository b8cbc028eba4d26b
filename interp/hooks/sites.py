"""Sites: *where* in a transformer an intervention acts (layer × component [× head]).

A :class:`Site` names one activation by TransformerLens's classic hook names, the public contract
of every analysis here::

    component   hook alias (layer 3)          shape seen by a hook          written ``…``
    resid_pre   blocks.3.hook_resid_pre       [batch, pos, d_model]         resid_pre:3
    resid_mid   blocks.3.hook_resid_mid       [batch, pos, d_model]         resid_mid:3
    resid_post  blocks.3.hook_resid_post      [batch, pos, d_model]         resid_post:3
    attn_out    blocks.3.hook_attn_out        [batch, pos, d_model]         attn_out:3
    mlp_out     blocks.3.hook_mlp_out         [batch, pos, d_model]         mlp_out:3
    z           blocks.3.attn.hook_z          [batch, pos, head, d_head]    z:3   (all heads), z:3.1
    pattern     blocks.3.attn.hook_pattern    [batch, head, query, key]     pattern:3, pattern:3.1

``z`` is each head's output before the output projection (the mixed values); ``pattern`` is the
softmaxed attention, and its *positions* are the query (destination) positions.

**Aliases vs canonical names (TransformerLens 4.x).** A TransformerBridge wraps a Hugging Face
module; its hook points have *canonical* names that follow the module tree
(``blocks.3.mlp.hook_out``, ``blocks.3.attn.o.hook_in``, ``blocks.3.hook_in``), and the classic names
above are *aliases* of them. You may register a hook under either name, but inside the hook
``hook.name`` is the canonical one. :class:`HookNames` maps both ways, so results keyed by hook
name can always use the alias.

**resid_mid is special on the bridge.** ``blocks.L.hook_resid_mid`` is an alias of
``blocks.L.ln2.hook_in``, the *input of the second LayerNorm*: a hook there changes what the MLP
reads but not the residual skip, so the block still outputs ``clean resid_mid + mlp_out`` (checked
on GPT-2 and Llama bridges, TL 4.3). In HookedTransformer, editing resid_mid edited the residual
stream itself. :mod:`interp.hooks.interventions` restores that meaning: an intervention on
``resid_mid`` is compiled into an edit of ``attn_out`` (``attn_out' = f(resid_pre + attn_out) −
resid_pre``), which changes the MLP input and the skip alike.

**The module behind a site.** Code that trains the model itself (HLS / ULA in
:mod:`interp.train.regularisers`, planting) hooks the Hugging Face *module* whose output is the
site, with plain PyTorch forward hooks, on a raw HF model or a bridge alike:
:meth:`Site.module` / :meth:`Site.module_path`. Only ``mlp_out`` is one module's output: the last
module of the MLP branch before the residual add, as TransformerLens's alias says::

    architecture              module of mlp_out:3 (raw HF model)            computes
    GPT-2                     transformer.h.3.mlp                            dropout(c_proj(act(c_fc(x))))
    Llama, Qwen2, Mistral,    model.layers.3.mlp                             down_proj(act(gate_proj(x)) * up_proj(x))
      Phi-3
    GPT-NeoX / Pythia         gpt_neox.layers.3.mlp                          dense_4h_to_h(act(dense_h_to_4h(x)))
    Gemma-2, OLMo-2           model.layers.3.post_feedforward_layernorm      RMSNorm(mlp(x)): the MLP's output
                                                                             normed before the residual add

(on Gemma-2 / OLMo-2 ``blocks.3.hook_mlp_out`` is an alias of ``blocks.3.ln2_post.hook_out``, TL
4.3). On a bridge TransformerLens has put its own wrapper at that path (``blocks.3.mlp`` or
``blocks.3.ln2_post``), and that wrapper is the module returned: some wrappers never call the HF
module they hold (Phi-3's MLP splits its fused ``gate_up_proj``), so only the wrapper's output is
the hook's on every architecture. Either way the module's output *is* ``blocks.3.hook_mlp_out`` (a
test checks it on eight architectures). ``peft`` (LoRA) and ``DistributedDataParallel`` wrappers
are looked through (LoRA adapters live inside the module).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from interp.hooks.hooked import hooked

#: component → hook alias template (TransformerLens's ``get_act_name`` names)
COMPONENTS: dict[str, str] = {
    "resid_pre": "blocks.{layer}.hook_resid_pre",
    "resid_mid": "blocks.{layer}.hook_resid_mid",
    "resid_post": "blocks.{layer}.hook_resid_post",
    "attn_out": "blocks.{layer}.hook_attn_out",
    "mlp_out": "blocks.{layer}.hook_mlp_out",
    "z": "blocks.{layer}.attn.hook_z",
    "pattern": "blocks.{layer}.attn.hook_pattern",
}
#: components that have one slice per attention head (``head`` may be given)
HEAD_COMPONENTS = frozenset({"z", "pattern"})
#: where positions and heads live in each component's activation: (pos dim, head dim or None)
LAYOUT: dict[str, tuple[int, int | None]] = {
    **{c: (1, None) for c in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")},
    "z": (1, 2),
    "pattern": (2, 1),
}

_SITE_RE = re.compile(r"^\s*([a-z_]+)\s*:\s*(\d+)(?:\s*\.\s*(\d+))?\s*$")


class SiteError(ValueError):
    """A site that cannot be parsed, or that the model at hand does not have."""


@dataclass(frozen=True)
class Site:
    """One activation of a transformer: ``layer`` × ``component`` (× ``head`` for z / pattern).

    ``head=None`` on a head component means all heads at once. ``str(site)`` is the short form
    :func:`parse_site` reads (``mlp_out:3``, ``z:2.1``).
    """

    layer: int
    component: str
    head: int | None = None

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise SiteError(f"unknown component {self.component!r}; expected one of {', '.join(COMPONENTS)}")
        if isinstance(self.layer, bool) or not isinstance(self.layer, int) or self.layer < 0:
            raise SiteError(f"layer must be an integer ≥ 0, got {self.layer!r}")
        if self.head is not None:
            if self.component not in HEAD_COMPONENTS:
                raise SiteError(f"component {self.component!r} has no heads; only {sorted(HEAD_COMPONENTS)} do")
            if isinstance(self.head, bool) or not isinstance(self.head, int) or self.head < 0:
                raise SiteError(f"head must be an integer ≥ 0, got {self.head!r}")

    @property
    def hook_name(self) -> str:
        """The TransformerLens hook alias of this site, e.g. ``blocks.3.hook_mlp_out``."""
        return COMPONENTS[self.component].format(layer=self.layer)

    @property
    def pos_dim(self) -> int:
        """The dimension of the activation that indexes (query) positions."""
        return LAYOUT[self.component][0]

    @property
    def head_dim(self) -> int | None:
        """The dimension that indexes heads (None for residual-width components)."""
        return LAYOUT[self.component][1]

    def __str__(self) -> str:
        return f"{self.component}:{self.layer}" + ("" if self.head is None else f".{self.head}")

    def module_path(self, model: Any) -> str:
        """Attribute path of the HF module whose output is this site, e.g. ``transformer.h.3.mlp``."""
        blocks, path = _hf_blocks(self, model)
        return f"{path}.{self.layer}.{_mlp_out_attr(blocks[self.layer])}"

    def module(self, model: Any) -> Any:
        """The HF module whose output is this site (``mlp_out`` only), in a raw HF model, a bridge,
        or a peft / DDP wrapper of either; hook it with ``register_forward_hook`` (its output is
        this site's activation: the first element where the module returns a tuple)."""
        blocks, _ = _hf_blocks(self, model)
        block = blocks[self.layer]
        return getattr(block, _mlp_out_attr(block))


def parse_site(text: str) -> Site:
    """``"mlp_out:3"`` → ``Site(3, "mlp_out")``; ``"z:2.1"`` → layer 2, head 1."""
    if isinstance(text, Site):
        return text
    m = _SITE_RE.match(str(text))
    if not m:
        raise SiteError(
            f"cannot parse site {text!r}: expected COMPONENT:LAYER or COMPONENT:LAYER.HEAD "
            f"(e.g. mlp_out:3, z:2.1) with COMPONENT one of {', '.join(COMPONENTS)}"
        )
    component, layer, head = m.group(1), int(m.group(2)), m.group(3)
    return Site(layer, component, None if head is None else int(head))


# ---- modules of a Hugging Face model --------------------------------------------------------------

#: attribute paths to the list of decoder blocks of an HF causal LM, in the order tried
HF_BLOCK_PATHS = ("transformer.h", "model.layers", "gpt_neox.layers", "model.decoder.layers")
#: attributes of a decoder block whose output is ``mlp_out``, the first present wins: the norm some
#: architectures apply to the MLP's output before the residual add (Gemma-2, OLMo-2), else the MLP
MLP_OUT_ATTRS = ("post_feedforward_layernorm", "mlp")


def hf_model(model: Any) -> Any:
    """The HF model in a bridge (``original_model``), a DDP (``.module``) or peft
    (``get_base_model()``) wrapper, or the model itself."""
    for _ in range(8):
        if hasattr(model, "original_model") and hasattr(model, "hook_dict"):  # a TransformerBridge
            model = model.original_model
        elif type(model).__name__ == "DistributedDataParallel" and hasattr(model, "module"):
            model = model.module
        elif callable(getattr(model, "get_base_model", None)):
            model = model.get_base_model()
        else:
            break
    return model


def hf_blocks(model: Any) -> tuple[Any, str]:
    """The decoder blocks of an HF model (or bridge, or wrapper) and their attribute path."""
    base = hf_model(model)
    for path in HF_BLOCK_PATHS:
        blocks: Any = base
        for part in path.split("."):
            blocks = getattr(blocks, part, None)
        if blocks is not None and hasattr(blocks, "__len__") and len(blocks) and all(hasattr(b, "mlp") for b in blocks):
            return blocks, path
    raise SiteError(
        f"cannot find the decoder blocks of a {type(base).__name__}: tried "
        f"{', '.join(p + '.<layer>.mlp' for p in HF_BLOCK_PATHS)} (GPT-2, Llama-style, "
        "GPT-NeoX and OPT layouts)"
    )


def _mlp_out_attr(block: Any) -> str:
    return next(a for a in MLP_OUT_ATTRS if getattr(block, a, None) is not None)


def _hf_blocks(site: Site, model: Any) -> tuple[Any, str]:
    if site.component != "mlp_out":
        raise SiteError(
            f"site {site}: only mlp_out is the output of one HF module; {site.component} "
            "is reached through its TransformerLens hook (site.hook_name)"
        )
    blocks, path = hf_blocks(model)
    if site.layer >= len(blocks):
        raise SiteError(
            f"site {site}: layer {site.layer} is out of range; this model has {len(blocks)} "
            f"layers (0..{len(blocks) - 1})"
        )
    return blocks, path


# ---- names on a bridge ---------------------------------------------------------------------------


class HookNames:
    """Alias ↔ canonical hook names of one bridge (build once, use in loops and hooks).

    ``canonical("blocks.1.hook_mlp_out") == "blocks.1.mlp.hook_out"`` and back with :meth:`alias`.
    A name that is not an alias is its own canonical name; a canonical name with no classic alias
    is its own alias.
    """

    def __init__(self, bridge: Any):
        hook_dict = bridge.hook_dict
        self.names = frozenset(hook_dict)
        self._to_canonical = {k: (hp.name or k) for k, hp in hook_dict.items()}
        by_canonical: dict[str, list[str]] = {}
        for k, c in self._to_canonical.items():
            if k != c:
                by_canonical.setdefault(c, []).append(k)
        # prefer a classic name (never hook_in / hook_out), then the shortest
        self._to_alias = {
            c: min(aliases, key=lambda a: (a.rsplit(".", 1)[-1] in ("hook_in", "hook_out"), len(a), a))
            for c, aliases in by_canonical.items()
        }

    def canonical(self, name: str) -> str:
        """The name ``hook.name`` reports inside a hook registered under ``name``."""
        return self._to_canonical.get(name, name)

    def alias(self, name: str) -> str:
        """The classic (TransformerLens 2.x style) name of a hook, given its alias or canonical name."""
        c = self.canonical(name)
        return self._to_alias.get(c, c)

    def __contains__(self, name: str) -> bool:
        return name in self.names


def canonical_name(bridge: Any, name: str) -> str:
    """Canonical hook name (what ``hook.name`` reports) of an alias such as ``blocks.1.hook_mlp_out``.

    Builds the name maps on each call; in a loop build one :class:`HookNames` instead.
    """
    return HookNames(bridge).canonical(name)


def hook_alias(bridge: Any, name: str) -> str:
    """The classic alias of a hook name (e.g. ``blocks.1.mlp.hook_out`` → ``blocks.1.hook_mlp_out``)."""
    return HookNames(bridge).alias(name)


def _noop(tensor: Any, hook: Any) -> None:
    return None


def _try_register(bridge: Any, name: str) -> str | None:
    """None if TransformerLens accepts a hook on ``name``, else its reason (no forward is run)."""
    try:
        with hooked(bridge, [(name, _noop)]):
            pass
    except (KeyError, AttributeError) as e:
        return f"it has no hook point {name!r} ({e})"
    except (NotImplementedError, ValueError) as e:  # driver cannot fire it / gated off by a setter
        return f"TransformerLens refuses a hook on {name!r}: {e}"
    return None


def check_site(site: Site, bridge: Any, names: HookNames | None = None) -> None:
    """Raise :class:`SiteError` unless ``bridge`` has ``site`` and accepts a hook there.

    Checks the layer (and head) range against the config, that the alias exists on this bridge,
    and that TransformerLens lets a hook be registered there (some drivers cannot fire some hooks;
    some hooks are gated behind ``set_use_*`` setters). ``resid_mid`` also needs ``resid_pre`` and
    ``attn_out`` (see the module docstring) and a sequential block (not parallel attention + MLP).
    """
    cfg = bridge.cfg
    n_layers = int(cfg.n_layers)
    if site.layer >= n_layers:
        raise SiteError(
            f"site {site}: layer {site.layer} is out of range; this model has {n_layers} layers (0..{n_layers - 1})"
        )
    if site.head is not None:
        n_heads = int(cfg.n_heads)
        if site.head >= n_heads:
            raise SiteError(
                f"site {site}: head {site.head} is out of range; this model has {n_heads} "
                f"heads per layer (0..{n_heads - 1})"
            )
    names = names or HookNames(bridge)
    arch = getattr(cfg, "architecture", None) or type(bridge).__name__
    needed = [site.hook_name]
    if site.component == "resid_mid":
        if getattr(cfg, "parallel_attn_mlp", False):
            raise SiteError(
                f"site {site}: {arch} runs attention and MLP in parallel, so there is no resid_mid between them"
            )
        needed = [Site(site.layer, "resid_pre").hook_name, Site(site.layer, "attn_out").hook_name, site.hook_name]
    for name in needed:
        if name not in names:
            raise SiteError(
                f"site {site}: this bridge ({arch}) exposes no hook {name!r}; sites it has at "
                f"layer {site.layer}: {', '.join(available_components(bridge, names)) or 'none'}"
            )
        reason = _try_register(bridge, name)
        if reason is not None:
            raise SiteError(f"site {site} is unavailable on this bridge ({arch}): {reason}")


def available_components(bridge: Any, names: HookNames | None = None) -> list[str]:
    """The components of :data:`COMPONENTS` whose hook alias this bridge exposes (checked at layer 0)."""
    names = names or HookNames(bridge)
    return [c for c, tpl in COMPONENTS.items() if tpl.format(layer=0) in names]
