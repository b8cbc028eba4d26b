"""The Myhill–Nerode world-model metrics: sequence compression and sequence distinction.

Vafa et al. (NeurIPS 2024, §2.3–2.4, App. E) evaluate the world model implicit in a generative
model by comparing Myhill–Nerode boundaries (see :mod:`interp.metrics.mn_boundary` for the
definitions and the two estimators):

- **Compression** (Def. 2.6, "sequence compression metric"): a state ``q`` and two *different*
  prefixes reaching it. The true boundary ``MNB^W(q, q)`` is empty, so only precision exists: the
  pair scores 1 iff the model boundary ``MNB^m(s1, s2)`` is empty ("we say a generative model's
  precision is 1 if its boundary is correctly empty"), else ``|MNB^m ∩ ∅| / |MNB^m| = 0``. As in
  the paper, the model boundary is the directed one (accepted after ``s1``, rejected after
  ``s2``); the pair's two prefixes are drawn independently, so the direction is random.

Prefix lengths. When the world draws prefix lengths itself (``world.sample_prefix_length``;
streets), one length is drawn per prefix pair — for the first state — and used for both
prefixes, as the reference code does (``prefix_len`` once per trial); ``prefix_lengths =
"independent"`` draws one per prefix instead (this package's earlier rule). Other worlds draw
each prefix on its own.
- **Distinction**: two different states, one prefix each; boundary precision and boundary recall.
  Recall is undefined (and counted, never scored) for a pair whose true boundary is empty to the
  depth examined; precision is defined for every pair.

Averaging (§3.2): over the prefix pairs of a state (compression) or state pair (distinction),
then over states, with a standard error over states (the independent units).

States: ``pairs=N`` samples N states (N state pairs) with a fixed seed — the world's own
``sample_state`` when it has one (streets: uniform reachable (intersection, destination) pairs
with intersection ≠ destination, as the reference samples them),
else states visited by the world's traversals (:mod:`interp.metrics.states`); ``pairs="all"``
takes every reachable state (every ordered pair of distinct reachable states) of a small world.

Nothing is dropped silently: every prefix pair that could not be scored is a row of the per-pair
table with its reason (prefix sampling failed, identical prefixes, frontier too large, context too
long, …), and the summary counts them by reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.config import merge_options
from interp.metrics.acceptance import AcceptanceRule, Epsilon
from interp.metrics.mn_boundary import BoundaryOptions, EngineStats, PairJob, PairOutcome, evaluate_pairs
from interp.metrics.states import all_ordered_pairs, reachable_states, sample_state, sample_state_pair
from interp.models.lm import LM
from interp.results import Estimate, mean_se, save_result
from interp.worlds.base import IllegalTokenError, State, World, WorldError

METRICS = ("compression", "distinction")

# skip reasons decided before the LM runs (the engine adds "frontier too large", "context too long")
STATE_FAILED = "state sampling failed"
PREFIX_FAILED = "prefix sampling failed"
IDENTICAL = "identical prefixes"
WRONG_STATE = "prefix does not reach the state"


@dataclass
class MyhillNerodeResult:
    """Compression precision, distinction precision and recall, with the per-pair table."""

    compression_precision: Estimate
    distinction_precision: Estimate
    distinction_recall: Estimate
    #: one row per prefix pair (skipped ones included, with ``status`` = the reason)
    per_pair: pd.DataFrame = field(repr=False)
    settings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    def _used(self, metric: str) -> pd.DataFrame:
        df = self.per_pair
        return df[(df.metric == metric) & (df.status == "ok")]

    def skipped(self) -> dict[str, dict[str, int]]:
        """Skipped prefix pairs: metric → reason → count."""
        df = self.per_pair
        bad = df[df.status != "ok"]
        return {
            m: {str(k): int(v) for k, v in bad[bad.metric == m].status.value_counts().items()}
            for m in self.settings.get("metrics", METRICS)
        }

    def summary(self) -> dict[str, Any]:
        skipped = self.skipped()
        comp, dist = self._used("compression"), self._used("distinction")
        out: dict[str, Any] = {
            "compression_precision": self.compression_precision.mean,
            "compression_precision_se": self.compression_precision.se,
            "distinction_precision": self.distinction_precision.mean,
            "distinction_precision_se": self.distinction_precision.se,
            "distinction_recall": self.distinction_recall.mean,
            "distinction_recall_se": self.distinction_recall.se,
            "compression_states": self.compression_precision.n,
            "distinction_state_pairs": self.distinction_precision.n,
            "recall_state_pairs": self.distinction_recall.n,
            "pairs_used": int(len(comp) + len(dist)),
            "compression_pairs_used": int(len(comp)),
            "distinction_pairs_used": int(len(dist)),
            "pairs_skipped_total": int(sum(sum(v.values()) for v in skipped.values())),
            "pairs_skipped": skipped,
            "recall_undefined": int(dist.recall.isna().sum()),
        }
        out.update(self.settings)
        out.update(self.stats)
        return out

    def __str__(self) -> str:
        s = self.settings
        d = s.get("depth")
        lines = [
            f"Myhill–Nerode metrics ({s.get('estimator')} estimator, {s.get('rule')}, depth {d}, seed {s.get('seed')})"
        ]
        if "compression" in s.get("metrics", METRICS):
            lines.append(
                f"  compression precision  {_fmt(self.compression_precision)}  ({self.compression_precision.n} states)"
            )
        if "distinction" in s.get("metrics", METRICS):
            lines.append(
                f"  distinction precision  {_fmt(self.distinction_precision)}  "
                f"({self.distinction_precision.n} state pairs)"
            )
            lines.append(
                f"  distinction recall     {_fmt(self.distinction_recall)}  "
                f"({self.distinction_recall.n} state pairs with a non-empty true boundary)"
            )
        summ = self.summary()
        lines.append(
            f"  prefix pairs used: compression {summ['compression_pairs_used']}, "
            f"distinction {summ['distinction_pairs_used']}"
        )
        for metric, reasons in summ["pairs_skipped"].items():
            if reasons:
                text = ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
                lines.append(f"  skipped ({metric}): {text}")
        if summ["recall_undefined"]:
            lines.append(
                f"  recall undefined (empty true boundary to depth {d}): "
                f"{summ['recall_undefined']} distinction prefix pairs (precision still scored)"
            )
        return "\n".join(lines)

    @property
    def frame(self) -> pd.DataFrame:
        """One row per prefix pair (``per_pair``)."""
        return self.per_pair

    def save(self, folder: str | Path, stem: str = "myhill_nerode") -> Path:
        """Write ``<stem>.csv`` (per prefix pair) and ``<stem>.json`` (summary) into ``folder``."""
        return save_result(folder, stem, self.summary(), **{"": self.per_pair})


def _fmt(e: Estimate) -> str:
    if e.n == 0:
        return "  n/a        "
    se = "  n/a" if math.isnan(e.se) else f"{e.se:.3f}"
    return f"{e.mean:.3f} ± {se}"


# ---- building the prefix pairs --------------------------------------------------------------------


@dataclass
class _Row:
    metric: str
    unit: int
    prefix_pair: int
    state1: Any
    state2: Any
    prefix1: tuple[str, ...] | None = None
    prefix2: tuple[str, ...] | None = None
    status: str = "ok"
    detail: str = ""


def _pair_job(row: _Row) -> PairJob:
    """The engine's job for a row whose prefixes were drawn (status ``ok``)."""
    if row.prefix1 is None or row.prefix2 is None:
        raise ValueError(f"row {row.unit}/{row.prefix_pair} has no prefixes (status {row.status!r})")
    return PairJob(row.prefix1, row.prefix2, row.state1, row.state2, recall=row.metric == "distinction")


def _prefix(world: World, q: State, rng: np.random.Generator, length: int | None = None) -> tuple[str, ...]:
    """``world.sample_prefix`` checked to reach ``q`` (a world bug is a skip reason, not a crash)."""
    # a world that draws prefix lengths (sample_prefix_length) also takes length= here
    s = tuple(world.sample_prefix(q, rng, **({} if length is None else {"length": length})))
    try:
        reached = world.run(s)
    except IllegalTokenError as e:
        raise _Skip(WRONG_STATE, f"sampled prefix is illegal: {e}") from None
    if reached != q:
        raise _Skip(WRONG_STATE, f"sampled prefix reaches {reached!r}, not {q!r}")
    return s


class _Skip(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _lengths(world: World, q: State, shared: bool, rng: np.random.Generator) -> int | None:
    """The prefix length both prefixes of a pair use (None: each prefix draws its own)."""
    draw = getattr(world, "sample_prefix_length", None) if shared else None
    return None if draw is None else int(draw(q, rng))


def _compression_rows(
    world: World, states: Sequence[Any], prefix_pairs: int, tries: int, rng: np.random.Generator, shared: bool
) -> list[_Row]:
    rows = []
    for u, q in enumerate(states):
        for p in range(prefix_pairs):
            row = _Row("compression", u, p, q, q)
            rows.append(row)
            if isinstance(q, _Skip):
                row.state1 = row.state2 = None
                row.status, row.detail = q.reason, q.detail
                continue
            try:
                k = _lengths(world, q, shared, rng)
                s1 = _prefix(world, q, rng, k)
                s2 = s1
                for _ in range(tries):
                    s2 = _prefix(world, q, rng, k)
                    if s2 != s1:
                        break
            except _Skip as e:
                row.status, row.detail = e.reason, e.detail
                continue
            except WorldError as e:
                row.status, row.detail = PREFIX_FAILED, str(e)
                continue
            row.prefix1, row.prefix2 = s1, s2
            if s1 == s2:
                row.status = IDENTICAL
                row.detail = f"{tries + 1} sampled prefixes of this state were all {' '.join(s1) or '(empty)'}"
    return rows


def _distinction_rows(
    world: World, pairs: Sequence[Any], prefix_pairs: int, rng: np.random.Generator, shared: bool
) -> list[_Row]:
    rows = []
    for u, qq in enumerate(pairs):
        for p in range(prefix_pairs):
            if isinstance(qq, _Skip):
                rows.append(_Row("distinction", u, p, None, None, status=qq.reason, detail=qq.detail))
                continue
            q1, q2 = qq
            row = _Row("distinction", u, p, q1, q2)
            rows.append(row)
            try:
                k = _lengths(world, q1, shared, rng)
                row.prefix1, row.prefix2 = _prefix(world, q1, rng, k), _prefix(world, q2, rng, k)
            except _Skip as e:
                row.status, row.detail = e.reason, e.detail
            except WorldError as e:
                row.status, row.detail = PREFIX_FAILED, str(e)
    return rows


def _draw(fn, *args) -> Any:
    try:
        return fn(*args)
    except WorldError as e:
        return _Skip(STATE_FAILED, str(e))


# ---- the metric -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MyhillNerodeOptions(BoundaryOptions):
    """The settings of :func:`myhill_nerode`: how pairs are drawn, and how their boundaries are
    estimated (the fields of :class:`~interp.metrics.mn_boundary.BoundaryOptions`: ``depth``,
    ``estimator``, ``samples``, ``max_nodes``, ``seed``, ``continuations``, ``max_length``).

    ``rule``: acceptance rule (None: ``Epsilon(0.01)``, the paper's). ``pairs``: states / state
    pairs sampled (paper: 1000), or ``"all"`` (every reachable state and every ordered pair of
    distinct reachable states; at most ``max_states`` states). ``prefix_pairs``: prefix pairs per
    state (state pair), averaged before averaging over states. ``seed`` fixes the states, the
    prefixes and (unless ``sample_seed`` is given) the sampled continuations; ``sample_seed``
    redraws only the continuations (same pairs). ``metrics``: which of :data:`METRICS` to compute.
    ``prefix_tries``: redraws of the second prefix of a compression pair until it differs from the
    first. ``prefix_lengths``: ``"shared"`` (one drawn length for both prefixes of a pair, the
    reference's) or ``"independent"``; only worlds with ``sample_prefix_length`` draw lengths."""

    rule: AcceptanceRule | None = None
    pairs: int | str = 1000
    prefix_pairs: int = 1
    max_states: int = 1000
    metrics: Sequence[str] = METRICS
    prefix_tries: int = 10
    sample_seed: int | None = None
    prefix_lengths: str = "shared"

    def __post_init__(self) -> None:
        super().__post_init__()
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown or not self.metrics:
            raise ValueError(f"metrics must be among {METRICS}, got {list(self.metrics)}")
        if self.prefix_pairs < 1:
            raise ValueError(f"prefix_pairs must be >= 1, got {self.prefix_pairs}")
        if self.prefix_lengths not in ("shared", "independent"):
            raise ValueError(f"prefix_lengths must be 'shared' or 'independent', got {self.prefix_lengths!r}")
        pairs = self.pairs
        if pairs != "all" and (isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1):
            raise ValueError(f"pairs must be a positive integer or 'all', got {pairs!r}")

    @property
    def acceptance(self) -> AcceptanceRule:
        """``rule``, or the paper's ``Epsilon(0.01)`` when none is given."""
        return self.rule or Epsilon()

    @property
    def boundary(self) -> BoundaryOptions:
        """The engine's options: these, with ``sample_seed`` (when given) as the seed."""
        names = [f.name for f in fields(BoundaryOptions)]
        kw = {n: getattr(self, n) for n in names}
        if self.sample_seed is not None:
            kw["seed"] = self.sample_seed
        return BoundaryOptions(**kw)

    def settings(self) -> dict[str, Any]:
        """What a result records of these settings (the sampled estimator's only when it ran)."""
        out: dict[str, Any] = {
            "estimator": self.estimator,
            "rule": self.acceptance.name,
            "depth": self.depth,
            "pairs": self.pairs,
            "prefix_pairs": self.prefix_pairs,
            "prefix_lengths": self.prefix_lengths,
            "seed": self.seed,
            "metrics": list(self.metrics),
        }
        if self.estimator == "sampled":
            out.update(
                samples=self.samples,
                sample_seed=self.boundary.seed,
                continuations=self.continuations,
                max_length=self.max_length,
            )
        return out


def myhill_nerode(
    world: World,
    lm: LM,
    options: MyhillNerodeOptions | None = None,
    *,
    progress: bool = False,
    **settings: Any,
) -> MyhillNerodeResult:
    """Compression precision and distinction precision/recall of ``lm`` judged against ``world``.

    ``options``: a :class:`MyhillNerodeOptions` (which documents every setting); its fields may
    also be given as keywords (``myhill_nerode(world, lm, pairs=100, depth=3)``), which override
    the options object's. ``progress``: a bar over the prefix pairs.
    """
    opts = merge_options(MyhillNerodeOptions, options, settings, "myhill_nerode")
    t0 = time.perf_counter()
    rows = _draw_rows(world, opts)
    ready = [r for r in rows if r.status == "ok"]
    stats = EngineStats()
    tokens_before = int(getattr(lm, "forward_tokens", 0))
    calls_before = int(getattr(lm, "forward_calls", 0))
    from tqdm.auto import tqdm

    with tqdm(total=len(ready), disable=not progress, desc="myhill-nerode pairs", unit="pair") as bar:
        outcomes = evaluate_pairs(
            world,
            lm,
            [_pair_job(r) for r in ready],
            opts.acceptance,
            opts.boundary,
            on_progress=bar.update,
            stats=stats,
        )
    by_row = {id(r): o for r, o in zip(ready, outcomes)}
    for r, o in zip(ready, outcomes):
        if o.skipped:
            r.status, r.detail = o.skipped, o.detail
    df = _table(rows, by_row, opts.estimator, opts.acceptance.name, opts.depth)
    return MyhillNerodeResult(
        compression_precision=_average(df, "compression", "precision"),
        distinction_precision=_average(df, "distinction", "precision"),
        distinction_recall=_average(df, "distinction", "recall"),
        per_pair=df,
        settings=opts.settings(),
        stats={
            "forward_tokens": int(getattr(lm, "forward_tokens", 0)) - tokens_before,
            "forwards": int(getattr(lm, "forward_calls", 0)) - calls_before,
            "lm_calls": stats.forwards,
            "lm_rows": stats.rows,
            "seconds": round(time.perf_counter() - t0, 3),
        },
    )


def _draw_rows(world: World, opts: MyhillNerodeOptions) -> list[_Row]:
    """The prefix pairs of both metrics (states, then prefixes; failures are rows with a reason)."""
    pairs, shared = opts.pairs, opts.prefix_lengths == "shared"
    rng_c, rng_d = (np.random.default_rng(s) for s in np.random.SeedSequence(opts.seed).spawn(2))
    rows: list[_Row] = []
    states: list[State] = reachable_states(world, opts.max_states) if pairs == "all" else []
    units: list[Any]
    if "compression" in opts.metrics:
        units = states if isinstance(pairs, str) else [_draw(sample_state, world, rng_c) for _ in range(pairs)]
        rows += _compression_rows(world, units, opts.prefix_pairs, opts.prefix_tries, rng_c, shared)
    if "distinction" in opts.metrics:
        units = (
            list(all_ordered_pairs(states))
            if isinstance(pairs, str)
            else [_draw(sample_state_pair, world, rng_d) for _ in range(pairs)]
        )
        rows += _distinction_rows(world, units, opts.prefix_pairs, rng_d, shared)
    return rows


def _table(rows: list[_Row], by_row: dict[int, PairOutcome], estimator: str, rule: str, depth: int) -> pd.DataFrame:
    records = []
    for r in rows:
        o = by_row.get(id(r)) if r.status == "ok" else None
        rec = {
            "metric": r.metric,
            "unit": r.unit,
            "prefix_pair": r.prefix_pair,
            "state1": None if r.state1 is None else repr(r.state1),
            "state2": None if r.state2 is None else repr(r.state2),
            "prefix1": None if r.prefix1 is None else " ".join(r.prefix1),
            "prefix2": None if r.prefix2 is None else " ".join(r.prefix2),
            "status": r.status,
            "detail": r.detail,
            "model_boundary": o.model_boundary if o else np.nan,
            "model_boundary_true": o.model_boundary_true if o else np.nan,
            "true_boundary": (o.true_boundary if o.true_boundary is not None else 0) if o else np.nan,
            "true_boundary_recalled": (o.true_boundary_recalled if o.true_boundary is not None else 0) if o else np.nan,
            "precision": o.precision if o else np.nan,
            "recall": o.recall if o and r.metric == "distinction" else np.nan,
            "nodes": o.nodes if o else np.nan,
            "continuations": o.continuations if o else np.nan,
            "cutoffs": o.cutoffs if o else np.nan,
            "stalled": o.stalled if o else np.nan,
            "ended": o.ended if o else np.nan,
            "capped": o.capped if o else np.nan,
            "complete": o.complete if o else np.nan,
            "estimator": estimator,
            "rule": rule,
            "depth": depth,
        }
        records.append(rec)
    cols = [
        "metric",
        "unit",
        "prefix_pair",
        "state1",
        "state2",
        "prefix1",
        "prefix2",
        "status",
        "detail",
        "model_boundary",
        "model_boundary_true",
        "true_boundary",
        "true_boundary_recalled",
        "precision",
        "recall",
        "nodes",
        "continuations",
        "cutoffs",
        "stalled",
        "ended",
        "capped",
        "complete",
        "estimator",
        "rule",
        "depth",
    ]
    return pd.DataFrame.from_records(records, columns=cols)


def _average(df: pd.DataFrame, metric: str, column: str) -> Estimate:
    """Mean over prefix pairs within each unit (state / state pair), then over units, SE over units."""
    sub = df[(df.metric == metric) & (df.status == "ok")][["unit", column]].dropna()
    if sub.empty:
        return mean_se([])
    return mean_se(sub.groupby("unit")[column].mean().to_numpy())


def pair_boundaries(
    world: World,
    lm: LM,
    prefix1: Sequence[str],
    prefix2: Sequence[str],
    options: BoundaryOptions | None = None,
    *,
    rule: AcceptanceRule | None = None,
    **settings: Any,
) -> PairOutcome:
    """Both boundaries of one prefix pair, kept as sets (``model_set``, ``true_set``) for inspection.

    ``options`` / keywords: the :class:`~interp.metrics.mn_boundary.BoundaryOptions` (``depth``,
    ``estimator``, …); ``rule``: the acceptance rule (None: ``Epsilon(0.01)``).
    ``model_set`` maps each model-boundary suffix to whether it lies in ``L^W(q1) \\ L^W(q2)``;
    ``true_set`` maps each true-boundary suffix to whether the model recalls it.
    """
    opts = merge_options(BoundaryOptions, options, settings, "pair_boundaries")
    q1, q2 = world.run(prefix1), world.run(prefix2)
    job = PairJob(tuple(prefix1), tuple(prefix2), q1, q2, recall=True)
    return evaluate_pairs(world, lm, [job], rule or Epsilon(), opts, keep_boundaries=True)[0]
