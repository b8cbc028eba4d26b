"""Interventions as data: site × kind × positions, compiled into TransformerLens hooks.

An :class:`Intervention` is a small frozen, JSON-serialisable record (pyvene's idea); applying it
is a context manager over a model (``with intervene(bridge, [...]):``), so any metric runs "under"
an intervention and a before/after comparison is two calls of the same metric::

    from interp.hooks import intervene, zero
    before = myhill_nerode(world, BridgeLM(bridge, vocab))
    with intervene(bridge, [zero("mlp_out:3")]):          # every forward inside is ablated
        after = myhill_nerode(world, BridgeLM(bridge, vocab))

Kinds (what replaces the activation at the chosen positions)
- ``zero``: 0. Zeroing one layer's MLP output at every position is PragWorld's *MLP zero-out
  ablation* (§6.2): a layer is useful if accuracy drops without it, harmful if it rises.
- ``scale``: the activation times ``factor`` (``scale(…, 1.0)`` is the identity).
- ``mean``: the mean activation over a reference set (a mean per feature, per head for ``z``),
  pooled as ``over`` says (:mod:`interp.hooks.means`): ``"positions"`` (default), one mean over
  every row and every non-padding position of the reference inputs; ``"first/later"`` (the removal
  sweep's), one mean for the rows' first real tokens and one for every later position, each
  position of the run taking its class's mean (full sequences only, not KV-cached steps). It is
  computed *once*, when the intervention is compiled, by one forward over the reference inputs.
- ``resample``: the activation of *another input*: each row of the run takes a row of a source
  set drawn at random with the intervention's ``seed`` (resampling ablation, Chan et al. 2022).
- ``patch``: the activation of a *source run* (activation patching): row ``i`` of the run takes
  row ``i`` of the source (or its only row, broadcast). A source run on the clean input patched
  into the clean run returns the clean logits.

Positions (which positions of the run change)
- ``"all"``; ``"last"``: the last non-padding position of each row (from ``attention_mask`` when
  given, else the last position; the same rule finds the source's last position);
- a tuple of indices (negative ones count from the end; the source uses the same indices);
- an :class:`Alignment`: (dest position, source position) pairs, for ``resample``/``patch``
  between inputs of different lengths — e.g. PragWorld's direct-effect patching, which aligns an
  original and an altered prompt by the matching blocks of a sequence diff
  (:meth:`Alignment.matching`).
For ``pattern`` sites, positions are query (destination) positions; the source's key length must
equal the run's.

Sources are runtime data, never serialised: an intervention names its source (``source="clean"``)
and :func:`compile_interventions` / :func:`intervene` take ``sources={"clean": ...}``, where a source
is token ids (run once through the bridge, with whatever hooks are already registered), a
mapping hook name → activation (an ``ActivationCache`` works), or a :class:`Source` with an
attention mask. So a serialised ``mean`` intervention stores the *name* of its reference set, and
the mean tensor is recomputed from the reference inputs when compiled.

Forwards under KV caching (``BridgeLM.extend``) see only the new tokens, so only position-free
kinds make sense there: ``zero``, ``scale`` and ``mean`` with ``"all"`` (or ``"last"``) positions.

``resid_mid`` sites compile to two hooks (see :mod:`interp.hooks.sites`): ``resid_pre`` is kept,
and ``attn_out`` becomes ``f(resid_pre + attn_out) − resid_pre``, so the edit reaches both the MLP
input and the residual skip, as in HookedTransformer.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int, Shaped
from torch import Tensor

from interp.hooks.capture import capturing
from interp.hooks.hooked import bridge_of, hooked
from interp.hooks.means import MEAN_OVER, first_real_positions, reference_mean
from interp.hooks.sites import HookNames, Site, SiteError, check_site, parse_site
from interp.models.positions import position_ids

KINDS = ("zero", "mean", "resample", "patch", "scale")
_NEEDS_SOURCE = frozenset({"mean", "resample", "patch"})
HookFn = Callable[..., Any]


class InterventionError(ValueError):
    """An intervention that is malformed, or that does not fit the model or its sources."""


# ---- data -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alignment:
    """(dest position, source position) pairs: the run's position ``d`` takes the source's ``s``."""

    pairs: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        try:
            pairs = tuple((int(d), int(s)) for d, s in self.pairs)
        except (TypeError, ValueError):
            raise InterventionError(
                f"an alignment is a list of (dest, source) integer pairs, got {self.pairs!r}"
            ) from None
        if not pairs:
            raise InterventionError("an alignment needs at least one (dest, source) pair")
        dests = [d for d, _ in pairs]
        if len(set(dests)) != len(dests):
            raise InterventionError(f"an alignment maps each dest position once; repeated in {pairs}")
        object.__setattr__(self, "pairs", pairs)

    @classmethod
    def matching(cls, dest: Sequence[Any], source: Sequence[Any]) -> Alignment:
        """Pair the positions of equal tokens in the matching blocks of a diff of two sequences.

        Like a diff tool, the common prefix and suffix are matched first and ``difflib`` aligns only
        what lies between: a one-token substitution then pairs every other position with itself.
        (``difflib`` alone may pair a repeated token with its shifted copy — ``W W E E`` vs ``W W N
        E`` matched ``E₂`` with ``E₃`` — which is an equally long but position-shifting match.)"""
        a, b = list(dest), list(source)
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
            tail += 1
        pairs = [(i, i) for i in range(head)]
        mid = difflib.SequenceMatcher(a=a[head : len(a) - tail], b=b[head : len(b) - tail], autojunk=False)
        pairs += [(head + m.a + k, head + m.b + k) for m in mid.get_matching_blocks() for k in range(m.size)]
        pairs += [(len(a) - tail + k, len(b) - tail + k) for k in range(tail)]
        return cls(tuple(pairs))


Positions = str | tuple[int, ...] | Alignment


def _positions(value: Any) -> Positions:
    if isinstance(value, Alignment):
        return value
    if isinstance(value, str):
        if value not in ("all", "last"):
            raise InterventionError(
                f"positions must be 'all', 'last', a list of indices or an Alignment, got {value!r}"
            )
        return value
    if isinstance(value, Mapping) and set(value) == {"align"}:
        return Alignment(tuple(tuple(p) for p in value["align"]))
    if isinstance(value, Sequence) and value and all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        if len(set(value)) != len(value):
            raise InterventionError(f"repeated position in {list(value)}")
        return tuple(int(i) for i in value)
    raise InterventionError(
        f"positions must be 'all', 'last', a non-empty list of indices or an Alignment, got {value!r}"
    )


@dataclass(frozen=True)
class Intervention:
    """Replace the activation at ``site`` by ``kind`` at ``positions`` (see the module docstring).

    ``factor``: the multiplier of ``scale``. ``source``: the name of the source of ``mean``
    (reference inputs), ``resample`` (a set of other inputs) and ``patch`` (a source run).
    ``seed``: the draw of ``resample``. ``over``: the pooling of ``mean`` (``"positions"`` or
    ``"first/later"``, :mod:`interp.hooks.means`). Build with :func:`zero`, :func:`scale`, :func:`mean`,
    :func:`resample`, :func:`patch`, or :meth:`from_dict`.
    """

    site: Site
    kind: str = "zero"
    positions: str | Sequence[int] | Alignment = "all"
    factor: float | None = None
    source: str | None = None
    seed: int = 0
    over: str = "positions"

    def __post_init__(self) -> None:
        if not isinstance(self.site, Site):
            raise InterventionError(f"site must be a Site (use parse_site), got {self.site!r}")
        if self.kind not in KINDS:
            raise InterventionError(f"unknown intervention kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        object.__setattr__(self, "positions", _positions(self.positions))
        if self.kind == "scale":
            if self.factor is None or not math.isfinite(float(self.factor)):
                raise InterventionError(f"scale needs a finite factor, got {self.factor!r}")
            object.__setattr__(self, "factor", float(self.factor))
        elif self.factor is not None:
            raise InterventionError(f"factor is only for scale, not {self.kind}")
        if self.kind in _NEEDS_SOURCE:
            if not isinstance(self.source, str) or not self.source:
                raise InterventionError(f"{self.kind} needs the name of its source (source='...')")
        elif self.source is not None:
            raise InterventionError(f"{self.kind} takes no source")
        if self.over not in MEAN_OVER:
            raise InterventionError(f"unknown mean pooling over={self.over!r}; expected one of {', '.join(MEAN_OVER)}")
        if self.over != "positions" and self.kind != "mean":
            raise InterventionError(f"over={self.over!r} is the pooling of mean, not of {self.kind}")
        if isinstance(self.positions, Alignment) and self.kind not in ("resample", "patch"):
            raise InterventionError(
                f"an alignment pairs run and source positions; {self.kind} has no source "
                f"positions (give the positions as a list)"
            )
        if self.kind == "mean" and self.site.component == "pattern":
            raise InterventionError(
                "mean ablation of an attention pattern is not defined here (patterns of "
                "different inputs have different key lengths); use zero, scale, patch or "
                "resample, or mean-ablate z"
            )

    # -- serialisation --
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; :meth:`from_dict` inverts it."""
        pos = self.positions
        out: dict[str, Any] = {
            "site": str(self.site),
            "kind": self.kind,
            "positions": {"align": [list(p) for p in pos.pairs]}
            if isinstance(pos, Alignment)
            else list(pos)
            if isinstance(pos, tuple)
            else pos,
        }
        if self.factor is not None:
            out["factor"] = self.factor
        if self.source is not None:
            out["source"] = self.source
        if self.kind == "resample":
            out["seed"] = self.seed
        if self.over != "positions":
            out["over"] = self.over
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Intervention:
        unknown = set(d) - {"site", "kind", "positions", "factor", "source", "seed", "over"}
        if unknown:
            raise InterventionError(f"unknown intervention keys {sorted(unknown)}")
        if "site" not in d:
            raise InterventionError("an intervention needs a site")
        return cls(
            parse_site(d["site"]),
            d.get("kind", "zero"),
            _positions(d.get("positions", "all")),
            d.get("factor"),
            d.get("source"),
            int(d.get("seed", 0)),
            str(d.get("over", "positions")),
        )

    def describe(self) -> str:
        """One line: ``zero mlp_out:3 at all positions``."""
        what = f"scale×{self.factor:g}" if self.kind == "scale" else self.kind
        what += f" ({self.over})" if self.over != "positions" else ""
        src = f" from {self.source!r}" if self.source else ""
        pos = self.positions
        where = (
            "all positions"
            if pos == "all"
            else "the last position"
            if pos == "last"
            else f"{len(pos.pairs)} aligned positions"
            if isinstance(pos, Alignment)
            else f"positions {list(pos)}"
        )
        return f"{what} {self.site}{src} at {where}"


def _site(site: Site | str) -> Site:
    return site if isinstance(site, Site) else parse_site(site)


def zero(site: Site | str, positions: Any = "all") -> Intervention:
    """Zero ablation (PragWorld §6.2's MLP zero-out when the site is ``mlp_out:L``)."""
    return Intervention(_site(site), "zero", positions)


def scale(site: Site | str, factor: float, positions: Any = "all") -> Intervention:
    """Multiply the activation by ``factor``."""
    return Intervention(_site(site), "scale", positions, factor=factor)


def mean(site: Site | str, source: str, positions: Any = "all", over: str = "positions") -> Intervention:
    """Mean ablation over the reference inputs named ``source``, pooled ``over`` ``"positions"``
    (one mean) or ``"first/later"`` (first token / later positions; :mod:`interp.hooks.means`)."""
    return Intervention(_site(site), "mean", positions, source=source, over=over)


def resample(site: Site | str, source: str, positions: Any = "all", seed: int = 0) -> Intervention:
    """Resampling ablation: each row takes a random row (drawn with ``seed``) of the source set."""
    return Intervention(_site(site), "resample", positions, source=source, seed=seed)


def patch(site: Site | str, source: str, positions: Any = "all") -> Intervention:
    """Activation patching from the source run named ``source`` (row i ← source row i)."""
    return Intervention(_site(site), "patch", positions, source=source)


def to_json(interventions: Sequence[Intervention]) -> str:
    """A JSON list of :meth:`Intervention.to_dict` records."""
    return json.dumps([iv.to_dict() for iv in interventions])


def from_json(text: str) -> list[Intervention]:
    """Inverse of :func:`to_json`."""
    data = json.loads(text)
    if not isinstance(data, list):
        raise InterventionError("expected a JSON list of interventions")
    return [Intervention.from_dict(d) for d in data]


# ---- sources --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """What ``mean``/``resample``/``patch`` draw from (runtime data, never serialised).

    Either ``tokens`` (run once through the bridge when compiled) or ``activations`` (hook name,
    alias or canonical → tensor, e.g. an ``ActivationCache``); ``attention_mask`` marks padding
    (excluded from means; used to find each row's last position).
    """

    tokens: Int[Tensor, "batch pos"] | None = None
    activations: Any = None
    attention_mask: Shaped[Tensor, "batch pos"] | None = None

    def __post_init__(self) -> None:
        if (self.tokens is None) == (self.activations is None):
            raise InterventionError("a Source needs exactly one of tokens or activations")


def _as_source(name: str, value: Any) -> Source:
    if isinstance(value, Source):
        return value
    if isinstance(value, Tensor):
        if value.is_floating_point() or value.dim() != 2:
            raise InterventionError(
                f"source {name!r}: a tensor source is token ids [batch, pos], got {value.dtype} {tuple(value.shape)}"
            )
        return Source(tokens=value)
    if hasattr(value, "__getitem__") and hasattr(value, "keys"):
        return Source(activations=value)
    raise InterventionError(
        f"source {name!r}: expected token ids, a mapping of activations or a Source, got {type(value).__name__}"
    )


def last_positions(attention_mask: Shaped[Tensor, "batch pos"]) -> Int[Tensor, " batch"]:
    """Index of each row's last non-padding position (left or right padding alike)."""
    mask = attention_mask.to(torch.bool)
    if not bool(mask.any(dim=1).all()):
        raise InterventionError("a row of the attention mask has no tokens")
    return mask.shape[1] - 1 - mask.flip(1).to(torch.int64).argmax(dim=1)


def _record(bridge: Any, src: Source, hook_names: Sequence[str]) -> dict[str, Tensor]:
    """Activations of a source at ``hook_names`` (detached)."""
    if src.activations is not None:
        names, out = HookNames(bridge), {}
        for n in hook_names:
            for key in (n, names.canonical(n)):
                try:
                    out[n] = src.activations[key].detach()
                    break
                except KeyError:
                    continue
            else:
                raise InterventionError(f"the source activations have no {n!r} (nor {names.canonical(n)!r})")
        return out
    got: dict[str, Tensor] = {}

    kwargs: dict[str, Any] = {}
    if src.attention_mask is not None:
        kwargs["attention_mask"] = src.attention_mask
        kwargs["position_ids"] = position_ids(src.attention_mask)
    with torch.no_grad(), hooked(bridge, capturing(got, hook_names, clone=False)):
        bridge(src.tokens, **kwargs)
    missing = [n for n in hook_names if n not in got]
    if missing:
        raise InterventionError(f"hooks {missing} never fired in the source forward")
    return got


# ---- compiling ------------------------------------------------------------------------------------


def _view(act: Tensor, site: Site) -> Tensor:
    """[batch, pos, *rest] with heads (if any) at dim 2."""
    return act.movedim(site.pos_dim, 1)


def _unview(view: Tensor, site: Site) -> Tensor:
    return view.movedim(1, site.pos_dim)


def _index(i: int, n: int, what: str, where: str) -> int:
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        raise InterventionError(f"{what} position {i} is out of range for {n} positions at {where}")
    return j


@dataclass
class _Ctx:
    """Everything a hook needs besides the activation: resolved once at compile time."""

    iv: Intervention
    where: str
    mask: Tensor | None
    source: Tensor | None = None  # source activation in view layout [batch, pos, *rest]
    source_mask: Tensor | None = None
    mean: Tensor | None = None  # [*rest]
    calls: list[int] = field(default_factory=lambda: [0])

    def pairs(self, batch: int, n_pos: int) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        """(rows, dest positions, source rows, source positions) of every edited slot."""
        iv, pos = self.iv, self.iv.positions
        s_rows = s_pos = None
        if self.source is not None:
            s_batch, s_n = self.source.shape[0], self.source.shape[1]
            if iv.kind == "patch":
                if s_batch not in (1, batch):
                    raise InterventionError(
                        f"{iv.describe()}: the source run has {s_batch} rows, the run has "
                        f"{batch} (patching maps row i to row i, or broadcasts one row)"
                    )
                by_row = torch.arange(batch) if s_batch == batch else torch.zeros(batch, dtype=torch.long)
            else:
                gen = torch.Generator().manual_seed(iv.seed)
                by_row = torch.randint(s_batch, (batch,), generator=gen)
        if pos == "all":
            if self.source is not None and s_n != n_pos:
                raise InterventionError(
                    f"{iv.describe()}: the source has {s_n} positions, the run {n_pos}; give positions or an Alignment"
                )
            rows = torch.arange(batch).repeat_interleave(n_pos)
            dest = torch.arange(n_pos).repeat(batch)
            src = dest if self.source is not None else None
        elif pos == "last":
            if self.mask is not None:
                if tuple(self.mask.shape) != (batch, n_pos):
                    raise InterventionError(
                        f"{iv.describe()}: the attention mask is {tuple(self.mask.shape)} but {self.where} saw "
                        f"batch {batch} × {n_pos} positions (a KV-cached step? 'last' needs no mask there)"
                    )
                dest = last_positions(self.mask)
            else:
                dest = torch.full((batch,), n_pos - 1)
            rows = torch.arange(batch)
            src = None
            if self.source is not None:
                src_last = (
                    last_positions(self.source_mask)
                    if self.source_mask is not None
                    else torch.full((self.source.shape[0],), s_n - 1)
                )
                src = src_last[by_row]
        else:
            # any other string was refused when the Intervention was built
            pairs = pos.pairs if isinstance(pos, Alignment) else tuple((int(i), int(i)) for i in pos)
            d = [_index(a, n_pos, "run", self.where) for a, _ in pairs]
            rows = torch.arange(batch).repeat_interleave(len(d))
            dest = torch.tensor(d).repeat(batch)
            src = None
            if self.source is not None:
                src = torch.tensor([_index(b, s_n, "source", self.where) for _, b in pairs]).repeat(batch)
        if self.source is not None:
            s_rows = by_row[rows]
            s_pos = src
        return rows, dest, s_rows, s_pos

    def new_values(self, view: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(rows, positions, replacement values [n, *rest]) for an activation in view layout."""
        rows, dest, s_rows, s_pos = self.pairs(view.shape[0], view.shape[1])
        rows, dest = rows.to(view.device), dest.to(view.device)
        kind = self.iv.kind
        if kind == "zero":
            vals = torch.zeros_like(view[rows, dest])
        elif kind == "scale":
            if self.iv.factor is None:
                raise InterventionError(f"{self.iv.describe()}: scale needs a factor")
            vals = view[rows, dest] * self.iv.factor
        elif kind == "mean":
            if self.mean is None:
                raise InterventionError(f"{self.iv.describe()}: no mean was recorded for {self.where}")
            split = self.iv.over == "first/later"  # mean is [2, *rest]: (first token, later positions)
            if self.mean.shape[int(split) :] != view.shape[2:]:
                raise InterventionError(
                    f"{self.iv.describe()}: mean has shape {tuple(self.mean.shape)}, "
                    f"{self.where} has {tuple(view.shape[2:])} per position"
                )
            if split:
                mask = self.mask if self.mask is not None and self.mask.shape == view.shape[:2] else None
                first = first_real_positions(mask) if mask is not None else torch.zeros(view.shape[0], dtype=torch.long)
                is_first = (dest.cpu() == first[rows.cpu()]).to(view.device)
                m = self.mean.to(view)
                vals = torch.where(is_first.reshape(-1, *([1] * (view.dim() - 2))), m[0], m[1])
            else:
                vals = self.mean.to(view).expand(len(rows), *view.shape[2:])
        else:
            if self.source is None or s_rows is None or s_pos is None:
                raise InterventionError(f"{self.iv.describe()}: no source activation was recorded for {self.where}")
            if self.source.shape[2:] != view.shape[2:]:
                raise InterventionError(
                    f"{self.iv.describe()}: source activation is {tuple(self.source.shape)}"
                    f", {self.where} is {tuple(view.shape)} (pattern key lengths differ?)"
                )
            vals = self.source.to(view)[s_rows.to(view.device), s_pos.to(view.device)]
        return rows, dest, vals


def _edit(view: Tensor, rows: Tensor, dest: Tensor, vals: Tensor, head: int | None) -> Tensor:
    """A copy of ``view`` with ``vals`` written at (rows, dest[, head]); differentiable."""
    out = view.clone()
    if head is None:
        out[rows, dest] = vals.to(out.dtype)
    else:
        if view.dim() < 3 or head >= view.shape[2]:
            raise InterventionError(f"head {head} is out of range for an activation of shape {tuple(view.shape)}")
        out[rows, dest, head] = vals[:, head].to(out.dtype)
    return out


def _hooks_for(ctx: _Ctx) -> list[tuple[str, HookFn]]:
    site = ctx.iv.site
    head = site.head
    if site.component != "resid_mid":

        def hook_fn(act: Float[Tensor, "..."], hook: Any) -> Float[Tensor, "..."]:
            view = _view(act, site)
            if head is not None and (view.dim() < 4 or head >= view.shape[2]):
                raise InterventionError(
                    f"{ctx.where}: expected one slice per head at dim {site.head_dim}, got "
                    f"an activation of shape {tuple(act.shape)}"
                )
            rows, dest, vals = ctx.new_values(view)
            ctx.calls[0] += 1
            return _unview(_edit(view, rows, dest, vals, head), site)

        return [(site.hook_name, hook_fn)]

    # resid_mid = resid_pre + attn_out: keep resid_pre, rewrite attn_out so the sum is the edit
    kept: dict[str, Tensor] = {}
    pre_name = Site(site.layer, "resid_pre").hook_name
    attn_name = Site(site.layer, "attn_out").hook_name

    def keep_pre(act: Float[Tensor, "batch pos d_model"], hook: Any) -> None:
        kept["pre"] = act

    def edit_attn(act: Float[Tensor, "batch pos d_model"], hook: Any) -> Float[Tensor, "batch pos d_model"]:
        pre = kept.pop("pre", None)
        if pre is None or pre.shape != act.shape:
            raise InterventionError(f"{ctx.where}: {pre_name} did not fire before {attn_name} in this forward")
        rows, dest, vals = ctx.new_values(pre + act)
        ctx.calls[0] += 1
        return _edit(act, rows, dest, vals - pre[rows, dest], None)

    return [(pre_name, keep_pre), (attn_name, edit_attn)]


@dataclass
class ActiveInterventions:
    """What :func:`intervene` yields: the interventions, their hooks, and how often each edited."""

    interventions: tuple[Intervention, ...]
    hooks: list[tuple[str, HookFn]]
    _ctxs: list[_Ctx] = field(repr=False)

    @property
    def calls(self) -> list[int]:
        """Times each intervention edited an activation (one per forward it was active in)."""
        return [c.calls[0] for c in self._ctxs]

    def describe(self) -> list[str]:
        return [
            f"{iv.describe()} (applied in {n} forward{'s' if n != 1 else ''})"
            for iv, n in zip(self.interventions, self.calls)
        ]

    def summary(self) -> list[dict[str, Any]]:
        """JSON-ready: each intervention's dict with its ``calls``."""
        return [{**iv.to_dict(), "calls": n} for iv, n in zip(self.interventions, self.calls)]


def _bridge_of(model: Any) -> Any:
    try:
        return bridge_of(model)
    except TypeError:
        raise InterventionError(
            f"interventions need a TransformerBridge (or a BridgeLM), got {type(model).__name__}"
        ) from None


def _prepare(
    model: Any,
    interventions: Intervention | Sequence[Intervention],
    sources: Mapping[str, Any] | None,
    attention_mask: Tensor | None,
) -> ActiveInterventions:
    bridge = _bridge_of(model)
    ivs = (interventions,) if isinstance(interventions, Intervention) else tuple(interventions)
    for iv in ivs:
        if not isinstance(iv, Intervention):
            raise InterventionError(f"expected Intervention objects, got {type(iv).__name__}")
    names = HookNames(bridge)
    for site in dict.fromkeys(iv.site for iv in ivs):
        check_site(site, bridge, names)
    sources = dict(sources or {})
    wanted: dict[str, list[str]] = {}
    for iv in ivs:
        if iv.source is not None:
            if iv.source not in sources:
                raise InterventionError(
                    f"{iv.describe()}: no source named {iv.source!r} was given (sources: {sorted(sources) or 'none'})"
                )
            wanted.setdefault(iv.source, []).append(iv.site.hook_name)
    recorded = {}
    for name, hook_names in wanted.items():
        src = _as_source(name, sources[name])
        recorded[name] = (src, _record(bridge, src, list(dict.fromkeys(hook_names))))
    ctxs: list[_Ctx] = []
    first: list[tuple[str, HookFn]] = []
    last: list[tuple[str, HookFn]] = []
    for iv in ivs:
        ctx = _Ctx(iv, f"{iv.site.hook_name} ({iv.describe()})", attention_mask)
        if iv.source is not None:
            src, acts = recorded[iv.source]
            view = _view(acts[iv.site.hook_name], iv.site)
            if iv.kind == "mean":
                try:
                    ctx.mean = reference_mean(view, src.attention_mask, iv.over)
                except ValueError as e:
                    raise InterventionError(f"{iv.describe()}: {e}") from None
            else:
                ctx.source, ctx.source_mask = view, src.attention_mask
        ctxs.append(ctx)
        # resid_mid's pair of hooks goes last: it must see resid_pre and attn_out after other edits
        (last if iv.site.component == "resid_mid" else first).extend(_hooks_for(ctx))
    return ActiveInterventions(ivs, first + last, ctxs)


def compile_interventions(
    interventions: Intervention | Sequence[Intervention],
    bridge: Any,
    sources: Mapping[str, Any] | None = None,
    attention_mask: Shaped[Tensor, "batch pos"] | None = None,
) -> list[tuple[str, HookFn]]:
    """``(hook alias, hook function)`` pairs for :func:`~interp.hooks.hooked.hooked`.

    Checks every site against the bridge (:func:`~interp.hooks.sites.check_site`), runs each named
    source once, and computes means. ``attention_mask`` (of the runs to come) locates ``"last"``.
    Prefer :func:`intervene`, which also removes the hooks.
    """
    return _prepare(bridge, interventions, sources, attention_mask).hooks


compile = compile_interventions  # the name the design uses; shadows the builtin only if imported


@contextlib.contextmanager
def intervene(
    model: Any,
    interventions: Intervention | Sequence[Intervention],
    sources: Mapping[str, Any] | None = None,
    attention_mask: Shaped[Tensor, "batch pos"] | None = None,
) -> Iterator[ActiveInterventions]:
    """Every forward of ``model`` (a TransformerBridge or a BridgeLM) inside the block runs under
    ``interventions``; the hooks are removed on exit, also when the block raises.

    Yields an :class:`ActiveInterventions` whose ``calls`` count the forwards each intervention
    edited — zero after a forward means the hook never fired, which should never pass silently.
    """
    active = _prepare(model, interventions, sources, attention_mask)
    with hooked(_bridge_of(model), active.hooks):
        yield active


__all__ = [
    "KINDS",
    "ActiveInterventions",
    "Alignment",
    "Intervention",
    "InterventionError",
    "Source",
    "SiteError",
    "compile",
    "compile_interventions",
    "from_json",
    "intervene",
    "last_positions",
    "mean",
    "patch",
    "resample",
    "scale",
    "to_json",
    "zero",
]
