"""What replaces a layer's MLP output in a removal sweep: ``zero``, ``mean``, ``resample``, ``scale``.

A layer sweep (:func:`interp.analysis.engines.sweeps.mlp_removal_sweep`) removes one MLP at a time and
measures the change of a metric. *How* it removes it decides what is measured
(``shared/reference/ablations.md``): zeroing feeds the later layers a residual stream they never saw,
so part of its effect is the surprise (Heimersheim & Nanda 2024; Li & Janson 2024 show zero and
mean ablation inflate importance); replacing the output by a typical value keeps the stream on the
model's distribution. Each kind is a replacement ``r(mlp_out)`` of the layer's output at every
non-padding position:

- ``zero`` — ``r = 0``: PragWorld §6.2's MLP zero-out, the default (the paper's).
- ``scale`` — ``r = α · mlp_out`` for each factor α (dose-response: α = 1 is the model, α = 0 is
  zero-out; a layer that truly hurts should help more as α falls, a non-monotone curve points to
  an artefact).
- ``mean`` — ``r`` = the layer's mean output over a **reference set** (the task's own rows; all of
  them unless ``reference`` names a subset, e.g. a discovery half), per **position class**: one mean
  for the first token of a row and one for every later non-padding position. Why two classes and
  not one mean or one per position: the first token carries large, input-independent activations
  (Sun et al. 2024, §3: "massive activations" sit at the starting token; with no BOS, as SmolLM2,
  whatever token comes first), so a single mean over all positions would move the first token far
  off its distribution — the artefact mean ablation is meant to avoid — while a mean per absolute
  position is, for prompts of different lengths, an average of few rows at the late positions (the
  longest row's last positions would be its own value: no removal at all). Two classes need no
  alignment, so rows of any length are handled alike.
- ``resample`` — ``r`` = the layer's output on **another row** (Chan et al. 2022), ``draws`` rows per
  example (seeded; the same draws for every layer, so the layers stay paired), the metric averaged
  over the draws. Positions are aligned **from the first token**: position t of the row takes
  position t of the source, and a source is drawn only among reference rows *at least as long* as
  the row, so every position has one. In a causal model the source's first T outputs are exactly
  those of its T-token prefix, so every replacement is the output of a real input of the task (a
  prefix of another route, the first T tokens of another prompt). Sources come from *other groups*
  when groups are given (an alteration of the same PragWorld conversation would hand back nearly
  the row's own activation). A row with no such source (the longest rows, when no other row is as
  long) is skipped and counted (``meta["skipped"]``).

All kinds need right-padded inputs (every row's real tokens first); the sweeps check it.

One definition: a :class:`Removal` is a view of :class:`interp.hooks.Intervention` at
``mlp_out`` of each swept layer (:meth:`Removal.intervention`), which owns the kinds, their
validation and their serialisation; ``mean``'s two classes are its ``over="first/later"`` pooling
(:mod:`interp.hooks.means`, whose :func:`~interp.hooks.means.class_sums` the sweeps use too).
What a Removal adds is the sweep's *sampling design*, which no single intervention has: ``draws``
(the metric averaged over several resample draws) and the source rule above (reference rows at
least as long as the row, from other groups: :func:`resample_sources`); the sweep runs each draw
as a patch from the drawn rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from jaxtyping import Shaped
from torch import Tensor

from interp.hooks import KINDS, Intervention, Site
from interp.hooks.means import class_sums, mean_replacement

#: the removal kinds of a layer sweep (``interp sweep --ablation``): the intervention kinds that
#: need no source run (``patch`` does)
ABLATIONS = tuple(k for k in KINDS if k != "patch")
#: the source name of ``mean`` / ``resample`` in :meth:`Removal.intervention`: the sweep's reference rows
REFERENCE = "reference"
#: keys of :meth:`Removal.to_dict` (and of a sweep's ``meta["ablation"]``) that describe, not define
_RECORD_KEYS = frozenset(
    {"name", "describe", "alignment", "positions", "over", "reference", "n_reference", "n_first", "n_later", "same_as"}
)
#: the default dose-response factors of ``scale`` (α = 1: the model; α = 0: zero-out)
DEFAULT_SCALES = (1.0, 0.75, 0.5, 0.25, 0.0)
#: default number of resample draws per example
DEFAULT_DRAWS = 3


@dataclass(frozen=True)
class Removal:
    """One way to remove a layer's MLP output (see the module docstring).

    ``kind``: one of :data:`ABLATIONS`; ``factor``: α of ``scale`` (required there, refused
    elsewhere); ``draws`` and ``seed``: the resample draws (other kinds hold the defaults). Kinds, factor and seed are checked by
    the :class:`~interp.hooks.Intervention` it stands for (:meth:`intervention`)."""

    kind: str = "zero"
    factor: float | None = None
    draws: int = DEFAULT_DRAWS
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ABLATIONS:
            why = " (patch needs a source run: use interp.hooks.patch)" if self.kind == "patch" else ""
            raise ValueError(f"unknown ablation {self.kind!r}; expected one of {', '.join(ABLATIONS)}{why}")
        object.__setattr__(self, "factor", self.intervention(0).factor)  # validates, α as a float
        if self.kind == "resample" and int(self.draws) < 1:
            raise ValueError(f"resample needs draws ≥ 1, got {self.draws}")
        if self.kind != "resample":  # draws and seed are resample's: other kinds hold the defaults
            object.__setattr__(self, "draws", DEFAULT_DRAWS)
            object.__setattr__(self, "seed", 0)

    def intervention(self, layer: int) -> Intervention:
        """The :mod:`interp.hooks` intervention this removal applies at ``mlp_out:layer``, at every
        position; ``mean`` / ``resample`` name their source :data:`REFERENCE` (the sweep's
        reference rows; for ``resample`` the sweep draws the rows itself, see the module docstring)."""
        return Intervention(
            Site(int(layer), "mlp_out"),
            self.kind,
            factor=self.factor,
            source=REFERENCE if self.kind in ("mean", "resample") else None,
            seed=int(self.seed) if self.kind == "resample" else 0,
            over="first/later" if self.kind == "mean" else "positions",
        )

    @property
    def name(self) -> str:
        """``zero``, ``mean``, ``resample`` or ``scale0.5`` (file names: ``verdicts_<name>.json``)."""
        return f"scale{self.factor:g}" if self.kind == "scale" else self.kind

    def describe(self) -> str:
        """One line for a report."""
        if self.kind == "scale":
            return f"MLP output scaled by α = {self.factor:g}"
        if self.kind == "resample":
            return f"MLP output replaced by another row's, {self.draws} draws averaged (seed {self.seed})"
        return {
            "zero": "MLP output replaced by 0 (PragWorld §6.2)",
            "mean": "MLP output replaced by its reference mean (first token / later positions)",
        }[self.kind]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the kind, its name, a sentence, and its settings (what ``meta["ablation"]`` holds)."""
        iv = self.intervention(0).to_dict()
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "describe": self.describe()}
        out.update({k: iv[k] for k in ("factor", "over") if k in iv})
        if self.kind == "resample":
            out.update(
                draws=int(self.draws),
                seed=iv["seed"],
                alignment="from the first token; sources at least as long as the row, from other groups",
            )
        if self.kind == "mean":
            out["positions"] = "two classes: the first token, every later non-padding position"
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Removal:
        """The removal of a :meth:`to_dict` (or of a sweep's ``meta["ablation"]``): reads ``kind``,
        ``factor``, ``draws`` and ``seed``; the descriptive keys must agree with them."""
        unknown = set(d) - {"kind", "factor", "draws", "seed"} - _RECORD_KEYS
        if unknown:
            raise ValueError(f"unknown removal keys {sorted(unknown)}; a removal has kind, factor, draws and seed")
        out = cls(
            str(d.get("kind", "zero")), d.get("factor"), int(d.get("draws", DEFAULT_DRAWS)), int(d.get("seed", 0))
        )
        for key in ("name", "over"):
            if key in d and d[key] != out.to_dict().get(key):
                raise ValueError(f"removal {key} {d[key]!r} does not match its kind: {out.to_dict().get(key)!r}")
        return out


def parse_ablations(text: str | Sequence[str] | None) -> list[str]:
    """``"zero,mean"`` (or a list) → ``["zero", "mean"]``; each must be in :data:`ABLATIONS`, none
    repeated; empty or None → ``["zero"]``."""
    if text is None:
        return ["zero"]
    items = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if str(s).strip()]
    if not items:
        return ["zero"]
    bad = [s for s in items if s not in ABLATIONS]
    if bad:
        raise ValueError(
            f"--ablation: unknown kind {bad[0]!r}; expected a comma-separated list of {', '.join(ABLATIONS)}"
        )
    if len(set(items)) != len(items):
        raise ValueError(f"--ablation names a kind twice: {','.join(items)}")
    return items


def parse_scales(text: str | Sequence[float] | None) -> list[float]:
    """``"1,0.75,0.5"`` (or a list) → factors, each finite, none repeated; None → :data:`DEFAULT_SCALES`."""
    if text is None:
        return list(DEFAULT_SCALES)
    raw = text.split(",") if isinstance(text, str) else list(text)
    try:
        out = [float(s) for s in raw if str(s).strip()]
    except ValueError:
        raise ValueError(
            f"--scales: expected comma-separated numbers such as 1,0.75,0.5,0.25,0, got {text!r}"
        ) from None
    if not out or not all(math.isfinite(a) for a in out):
        raise ValueError(f"--scales: give one or more finite factors, got {text!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"--scales repeats a factor: {text!r}")
    return out


def removal_set(
    ablation: str | Sequence[str] | None, scales: str | Sequence[float] | None = None, draws: int = 3, seed: int = 0
) -> list[Removal]:
    """The removals a sweep runs, in the order named: ``scale`` expands to one removal per factor
    other than 1 (the model itself), smallest effect first (α = 0.75, 0.5, …)."""
    out: list[Removal] = []
    for kind in parse_ablations(ablation):
        if kind == "scale":
            factors = sorted((a for a in parse_scales(scales) if a != 1.0), reverse=True)
            if not factors:
                raise ValueError("--scales: give at least one factor other than 1 (α = 1 is the model itself)")
            out += [Removal("scale", factor=a) for a in factors]
        else:
            out.append(Removal(kind, draws=draws, seed=seed))
    return out


def check_removals(
    kind: str,
    method: str,
    ablation: str | Sequence[str] | None,
    scales: str | Sequence[float] | None = None,
    draws: int = 3,
    seed: int = 0,
) -> list[Removal]:
    """:func:`removal_set` for a sweep job, refusing what does not apply: removals other than zero
    outside the MLP sweep (``--kind mlp-zero``), and with ``--method attribution`` (its AtP estimate
    is of zero-out)."""
    removals = removal_set(ablation, scales, draws, seed)
    if [r.name for r in removals] != ["zero"]:
        if kind != "mlp-zero":
            raise ValueError(
                f"--ablation {','.join(parse_ablations(ablation))} applies to the MLP sweep "
                f"(--kind mlp-zero), not --kind {kind}"
            )
        if method == "attribution":
            raise ValueError(
                "--method attribution estimates zero-out only; run --ablation mean/resample/scale "
                "with --method reuse (or loop)"
            )
    return removals


def check_right_padded(mask: Shaped[Tensor, "n pos"] | None, kind: str) -> None:
    """``mean`` and ``resample`` locate each row's first token and align rows from it: the rows
    must be right-padded (real tokens first)."""
    if mask is None:
        return
    m = mask.bool()
    if bool((m[:, 1:] & ~m[:, :-1]).any()) or not bool(m[:, 0].all()):
        raise ValueError(
            f"--ablation {kind} needs right-padded inputs (every row's real tokens first, then "
            "padding); the attention mask has padding before a real token"
        )


@dataclass(frozen=True)
class SweepRows:
    """Which rows of a sweep's ``inputs`` it scores and what it knows of each (each None: the
    default). ``rows``: the rows scored (all; the frame's ``example`` numbers them 0.. in sorted
    order). ``reference``: the rows the ``mean`` is taken over and ``resample`` sources are drawn
    from (all; e.g. the discovery half of a confirmation split). ``categories``: one per row of
    ``inputs``, the frame's ``category`` column. ``groups``: one id per row of ``inputs``, the
    ``group`` column and the rows a resample draw avoids (each row its own)."""

    rows: Sequence[int] | np.ndarray | None = None
    reference: Sequence[int] | np.ndarray | None = None
    categories: Sequence[Any] | None = None
    groups: Sequence[Any] | np.ndarray | None = None


def reference_rows(n: int, reference: Sequence[int] | np.ndarray | None) -> np.ndarray:
    """The reference set's example indices (all ``n`` when None), checked."""
    if reference is None:
        return np.arange(n)
    ref = np.unique(np.asarray(list(reference), dtype=int))
    if len(ref) == 0 or ref.min() < 0 or ref.max() >= n:
        raise ValueError(f"the reference rows must be a non-empty subset of 0..{n - 1}, got {list(reference)[:5]}…")
    return ref


def resample_sources(
    lengths: Sequence[int] | np.ndarray,
    draws: int,
    seed: int,
    reference: Sequence[int] | np.ndarray | None = None,
    groups: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(sources [n, draws], skipped [n] bool)``: for each row, ``draws`` source rows drawn with
    ``seed`` among the reference rows at least as long as it, other than itself and outside its
    group (with replacement only when there are fewer candidates than draws). A row with no
    candidate is ``skipped`` (its sources are itself, an identity replacement that is never scored)."""
    lengths = np.asarray(lengths, dtype=int)
    n = len(lengths)
    ref = reference_rows(n, reference)
    g = np.arange(n) if groups is None else np.asarray(list(groups))
    rng = np.random.default_rng(seed)
    sources = np.repeat(np.arange(n)[:, None], draws, axis=1)
    skipped = np.zeros(n, dtype=bool)
    for i in range(n):
        cand = ref[(lengths[ref] >= lengths[i]) & (g[ref] != g[i]) & (ref != i)]
        if len(cand) == 0:
            skipped[i] = True
            continue
        sources[i] = rng.choice(cand, size=draws, replace=len(cand) < draws)
    return sources, skipped


__all__ = [
    "ABLATIONS",
    "DEFAULT_DRAWS",
    "DEFAULT_SCALES",
    "REFERENCE",
    "Removal",
    "SweepRows",
    "check_removals",
    "check_right_padded",
    "class_sums",
    "mean_replacement",
    "parse_ablations",
    "parse_scales",
    "reference_rows",
    "removal_set",
    "resample_sources",
]
