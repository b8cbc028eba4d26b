"""CircuitsVis views that work offline and several to a page.

CircuitsVis (1.43) renders a React component into a ``<div>`` and returns a ``RenderedHTML`` with
two sources: ``cdn_src`` (what ``str()`` gives) imports the bundle from unpkg.com, so a page saved
that way is blank offline; ``local_src`` inlines the ~1.3 MB bundle. Only ``local_src`` is used
here. It has two defects when pages hold more than one view, both handled by :class:`Component`:

- the container is written ``<div id=… style=…/>``. HTML has no self-closing ``<div>``: the tag
  stays open, the script and everything after it become its children, and React's ``render``
  replaces them — the second view (and whatever follows the first) disappears. We write
  ``<div …></div>``.
- every view carries its own copy of the bundle as a ``type="module"`` script (where ``var
  CircuitsVis`` is module-local). We split ``local_src`` into the bundle and the render call and
  put the bundle once per page as a classic script (``CircuitsVis`` becomes a global), followed
  by one small render call per view.

A third: CircuitsVis writes tokens as HTML, so ``<bos>`` vanishes (an unknown empty element) and
a token holding markup would be markup; :func:`display_token` shows ``<``, ``>``, ``&`` as
look-alikes (``‹bos›``).

Container ids are deterministic (``interp-cv-<slug>``, unique per page) instead of CircuitsVis's
random uuid, so the same run writes the same report.

Views: :func:`attention_views` (``circuitsvis.attention.attention_patterns`` of chosen token
sequences, one per sequence × layer, from ``blocks.{l}.attn.hook_pattern``),
:func:`head_attention_views` (``attention_heads`` of chosen (layer, head) pairs on token ids, for
a real model's tokenizer) and
:func:`patching_view` (``circuitsvis.tokens.colored_tokens_multi`` of a
:class:`~interp.analysis.engines.activation_patching.PatchingMap`'s per-position mean, one button per
layer). :func:`page` writes any of them into a standalone HTML document;
:func:`write_standalone` saves one.

circuitsvis and torch are imported inside the functions.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: how ``local_src`` looks in CircuitsVis 1.43: container, module script = bundle + render call
_LOCAL_SRC = re.compile(
    r'^\s*<div id="(?P<id>[^"]+)"(?P<attrs>[^>]*?)\s*/?>\s*(?:</div>)?\s*'
    r"<script[^>]*>(?P<body>.*)</script>\s*$",
    re.S,
)
_CALL = re.compile(r'CircuitsVis\.render\(\s*"[^"]+",\s*CircuitsVis\.(?P<name>\w+),', re.S)
_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.M)


#: CircuitsVis writes tokens into the page as HTML (``dangerouslySetInnerHTML``): ``<bos>`` would
#: become an empty, invisible element and a token with markup would be markup. Look-alike characters
#: read the same in its HTML and in its text (chart tooltips) contexts.
_TOKEN_SAFE = str.maketrans({"<": "\u2039", ">": "\u203a", "&": "\uff06"})


def display_token(token: str, space: bool = False) -> str:
    """A token as CircuitsVis can show it: ``<bos>`` → ``‹bos›`` (``<``, ``>``, ``&`` replaced).
    ``space``: prefix a space (CircuitsVis sets tokens side by side, as sub-word pieces; whole-word
    tokens such as ``13 3 S E`` would read ``133SE``)."""
    text = str(token).translate(_TOKEN_SAFE)
    return " " + text if space and not text[:1].isspace() else text


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "view"


@dataclass(frozen=True)
class Component:
    """One CircuitsVis view, split out of its ``local_src``.

    ``id``: the container's id; ``name``: the React component (``AttentionPatterns``, …);
    ``call``: the JavaScript that renders it (``CircuitsVis.render("id", CircuitsVis.X, {props})``);
    ``bundle``: the inlined CircuitsVis bundle (identical for all views of one install) — or, if
    ``local_src`` did not have the expected shape (another CircuitsVis version), ``call`` is None
    and ``raw`` is the whole ``local_src`` with its container closed, to be embedded as it is."""

    id: str
    name: str
    title: str
    call: str | None
    bundle: str
    raw: str | None = None
    caption: str = ""

    @classmethod
    def from_rendered(cls, rendered: Any, id: str, title: str = "", caption: str = "") -> "Component":
        """From a CircuitsVis ``RenderedHTML`` (or its ``local_src`` string); ``id`` must be a
        valid HTML id unique on the page (letters, digits, ``-``; starting with a letter)."""
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", id):
            raise ValueError(f"container id {id!r} must start with a letter and hold only letters, digits, - and _")
        src = rendered if isinstance(rendered, str) else rendered.local_src
        m = _LOCAL_SRC.match(src)
        if m is None:
            raise ValueError("not a CircuitsVis local_src (expected a <div id=…> and one <script>)")
        old_id, body = m.group("id"), m.group("body")
        at = body.rfind("CircuitsVis.render(")
        call = _CALL.match(body, at) if at >= 0 else None
        if call is None:  # unknown layout: keep CircuitsVis's own script, close the container
            raw = re.sub(r"^(\s*<div\b[^>]*?)\s*/>", r"\1></div>", src.replace(old_id, id), count=1)
            return cls(id, "unknown", title, None, "", raw, caption)
        props = body[call.end() :].strip()
        if not props.endswith(")"):
            raise ValueError("unexpected CircuitsVis render call: " + body[at : at + 200])
        # props are JSON: '<' can only occur inside strings, where \u003c is the same character
        # and can never close the script (a token "</script>" would otherwise end it)
        props = props[:-1].strip().replace("<", "\\u003c")
        js = f'CircuitsVis.render("{id}", CircuitsVis.{call.group("name")}, {props})'
        bundle = _SOURCE_MAP.sub("", body[:at]).strip()
        return cls(id, call.group("name"), title, js, bundle, None, caption)

    def container(self) -> str:
        """The closed container ``<div>`` and the render call (the bundle must already be loaded)."""
        if self.call is None:
            return str(self.raw)
        return (
            f'<div id="{self.id}" class="circuitsvis" data-component="{html.escape(self.name)}" '
            f'style="margin: 15px 0;"></div>\n<script>{self.call};</script>'
        )


def bundle_script(components: Iterable[Component]) -> str:
    """The bundle as one classic ``<script>`` (defines the global ``CircuitsVis``), or '' when no
    component needs it."""
    bundle = next((c.bundle for c in components if c.call is not None and c.bundle), "")
    # the bundle is an IIFE assigning `var CircuitsVis`; CircuitsVis already strips "</script>"
    return f"<script>\n{bundle}\n</script>" if bundle else ""


def fragment(components: Sequence[Component], heading_level: int = 3) -> str:
    """HTML for several views: each container (with its title and caption) and its render call.
    Put :func:`bundle_script` before it on the page."""
    ids = [c.id for c in components]
    if len(set(ids)) != len(ids):
        raise ValueError(f"container ids must be unique on a page: {ids}")
    parts = []
    for c in components:
        head = f"<h{heading_level}>{html.escape(c.title)}</h{heading_level}>\n" if c.title else ""
        cap = f'<p class="caption">{html.escape(c.caption)}</p>\n' if c.caption else ""
        parts.append(f'<figure class="cv" id="fig-{c.id}">\n{head}{cap}{c.container()}\n</figure>')
    return "\n".join(parts)


def page(components: Sequence[Component], title: str = "CircuitsVis") -> str:
    """A standalone HTML document holding ``components`` (the bundle inlined once): opens from
    disk with no network."""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"{bundle_script(components)}\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
        f"{fragment(components, 2)}\n</body>\n</html>\n"
    )


def write_standalone(component: Component | Sequence[Component], path: str | Path, title: str | None = None) -> Path:
    """Save one view (or a few) as its own HTML file; returns the path."""
    comps = [component] if isinstance(component, Component) else list(component)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(comps, title or (comps[0].title if comps else "CircuitsVis")), encoding="utf-8")
    return path


# ---------------------------------------------------------------- attention patterns


def _bridge_and_vocab(model: Any) -> tuple[Any, Any]:
    """(bridge, vocab) from a checkpoint folder, a :class:`~interp.models.checkpoint.Checkpoint`,
    or a ``(bridge, vocab)`` pair."""
    if isinstance(model, (str, Path)):
        from interp.models.checkpoint import load_checkpoint

        model = load_checkpoint(model)
    if isinstance(model, tuple):
        return model
    return model.bridge, model.vocab


def _tokens(seq: str | Sequence[str]) -> list[str]:
    return seq.split() if isinstance(seq, str) else [str(t) for t in seq]


def attention_views(
    model: Any,
    sequences: Sequence[str | Sequence[str]],
    *,
    layers: Sequence[int] | None = None,
    max_tokens: int = 32,
    id_prefix: str = "attn",
    decimals: int = 3,
) -> list[Component]:
    """Attention patterns of ``sequences`` (token lists, or strings of space-separated tokens;
    ``<bos>`` is prepended) under ``model``: one ``attention_patterns`` view per sequence × layer,
    all heads of the layer ([heads, dest, src]).

    ``model``: a checkpoint folder, a ``Checkpoint``, or ``(bridge, vocab)``. Sequences are cut
    to ``max_tokens`` tokens (and the model's context) to keep the page small; weights are
    rounded to ``decimals``."""
    import numpy as np
    import torch
    from circuitsvis.attention import attention_patterns

    from interp.models.device import model_device

    bridge, vocab = _bridge_and_vocab(model)
    device = model_device(bridge)
    n_layers = int(bridge.cfg.n_layers)
    lays = list(range(n_layers)) if layers is None else [int(x) for x in layers]
    bad = [x for x in lays if not 0 <= x < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range: the model has {n_layers}")
    limit = min(max_tokens, int(bridge.cfg.n_ctx) - 1)
    out: list[Component] = []
    for i, seq in enumerate(sequences):
        toks = _tokens(seq)[:limit]
        ids = torch.tensor([vocab.encode(toks)])
        labels = [display_token(t, space=True) for t in vocab.decode(ids[0].tolist())]
        with torch.no_grad():
            _, cache = bridge.run_with_cache(ids.to(device), names_filter=lambda name: name.endswith("hook_pattern"))
        for layer in lays:
            pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0].float().cpu().numpy()  # [heads, dest, src]
            rendered = attention_patterns(labels, np.round(pattern, decimals))
            out.append(
                Component.from_rendered(
                    rendered,
                    f"interp-cv-{_slug(id_prefix)}-{i}-l{layer}",
                    title=f"sequence {i + 1}, layer {layer}",
                    caption=f"{len(labels)} tokens: {''.join(labels).strip()}",
                )
            )
        del cache
    return out


def head_attention_views(
    bridge: Any,
    ids: Any,
    tokens: Sequence[Sequence[str]],
    heads: Sequence[tuple[int, int]],
    *,
    id_prefix: str = "heads",
    decimals: int = 3,
    captions: Sequence[str] | None = None,
) -> list[Component]:
    """Attention patterns of chosen heads (``(layer, head)`` pairs, e.g. the top cells of a
    layer × head patching map) on each row of ``ids`` (token ids ``[n, pos]``, no padding), as one
    CircuitsVis ``attention_heads`` view per row: the heads side by side, named ``L{layer}H{head}``.

    ``tokens``: each row's token strings (shown via :func:`display_token`), e.g. the tokenizer's
    ``convert_ids_to_tokens`` with the byte-level ``Ġ`` replaced by a space. Patterns are read at
    ``blocks.{layer}.attn.hook_pattern`` ([head, query, key]) in one forward per row."""
    import numpy as np
    import torch
    from circuitsvis.attention import attention_heads

    from interp.hooks import capturing, hooked
    from interp.models.device import model_device

    ids = torch.as_tensor(ids)
    if ids.dim() != 2 or len(tokens) != ids.shape[0]:
        raise ValueError(
            f"ids must be [n, pos] with one token list per row; got {tuple(ids.shape)} and {len(tokens)} token lists"
        )
    n_layers, n_heads = int(bridge.cfg.n_layers), int(bridge.cfg.n_heads)
    heads = [(int(a), int(b)) for a, b in heads]
    bad = [(a, b) for a, b in heads if not (0 <= a < n_layers and 0 <= b < n_heads)]
    if bad or not heads:
        raise ValueError(
            f"heads must be (layer, head) pairs within {n_layers} layers × {n_heads} heads, got {bad or heads}"
        )
    wanted = {f"blocks.{a}.attn.hook_pattern" for a, _ in heads}
    names = [f"L{a}H{b}" for a, b in heads]
    out: list[Component] = []
    for i in range(ids.shape[0]):
        row = ids[i : i + 1]
        labels = [display_token(t) for t in tokens[i]]
        if len(labels) != row.shape[1]:
            raise ValueError(f"row {i}: {len(labels)} token strings for {row.shape[1]} ids")
        got: dict[str, Any] = {}
        with torch.no_grad(), hooked(bridge, capturing(got, sorted(wanted), clone=False)):
            bridge(row.to(model_device(bridge)))
        pattern = np.stack([got[f"blocks.{a}.attn.hook_pattern"][0, b].float().cpu().numpy() for a, b in heads])
        rendered = attention_heads(np.round(pattern, decimals), labels, attention_head_names=names)
        out.append(
            Component.from_rendered(
                rendered,
                f"interp-cv-{_slug(id_prefix)}-{i}",
                title=f"prompt {i + 1}: heads {', '.join(names)}",
                caption=captions[i] if captions else "".join(labels).strip(),
            )
        )
    return out


# ---------------------------------------------------------------- activation patching


def patching_view(
    pmap: Any, column: str = "restored", *, id: str | None = None, title: str | None = None, decimals: int = 3
) -> Component:
    """A :class:`~interp.analysis.engines.activation_patching.PatchingMap` as CircuitsVis
    ``colored_tokens_multi``: the positions (or heads) as tokens, one button per layer colouring
    them by ``column``: ``restored`` (default; :meth:`PatchingMap.restored`, the share of the mean
    clean − corrupted gap one patched activation restores) or the mean of a frame column over
    examples. Cells with no value (clean = corrupted) show as 0."""
    import torch
    from circuitsvis.tokens import colored_tokens_multi

    grid = pmap.restored() if column == "restored" else pmap.mean(column)  # layers × positions|heads
    axis = pmap.axis
    labels = pmap.meta.get("labels")
    if axis == "pos" and labels and len(labels) == grid.shape[1]:
        tokens = [display_token(t, space=True) for t in labels]
    else:
        tokens = [f" {'H' if axis == 'head' else 'p'}{c}" for c in grid.columns]
    values = torch.tensor(grid.fillna(0.0).to_numpy(dtype=float).T.round(decimals), dtype=torch.float32)
    layer_names = [f"layer {layer}" for layer in grid.index]
    rendered = colored_tokens_multi(tokens, values, layer_names)
    comp = pmap.meta.get("component", axis)
    return Component.from_rendered(
        rendered,
        id or f"interp-cv-patching-{_slug(str(comp))}",
        title=title or f"activation patching: {comp}, {column} by layer × {'head' if axis == 'head' else 'position'}",
        caption=(
            f"metric {pmap.meta.get('metric', '?')}: clean {pmap.meta.get('clean_mean', float('nan')):.4g}, "
            f"corrupted {pmap.meta.get('corrupted_mean', float('nan')):.4g}, "
            f"{pmap.meta.get('n_examples', '?')} examples; choose a layer to colour the "
            f"{'heads' if axis == 'head' else 'positions'} by their mean {column}"
        ),
    )


def load_patching_map(folder: str | Path, stem: str) -> Any:
    """A :class:`PatchingMap` from what :meth:`PatchingMap.save` wrote (``<stem>.csv`` and
    ``<stem>.json``)."""
    import pandas as pd

    from interp.analysis.engines.activation_patching import PatchingMap

    folder = Path(folder)
    meta = json.loads((folder / f"{stem}.json").read_text())
    return PatchingMap(pd.read_csv(folder / f"{stem}.csv"), meta)


__all__ = [
    "Component",
    "attention_views",
    "bundle_script",
    "display_token",
    "fragment",
    "head_attention_views",
    "load_patching_map",
    "page",
    "patching_view",
    "write_standalone",
]
