"""One metric suite: the world-model metrics by name, computed one way everywhere.

The world-model table (:func:`interp.metrics.table.evaluate_lm`), the before/after evaluation of a
fine-tune (:func:`interp.analysis.evaluation.finetune.evaluate`, the pipeline's fix stage and ``interp
finetune``) and the repair metrics of a planted model (:func:`interp.train.plant.repair_metrics`)
all get these numbers from :func:`world_model_metrics`, so a name means the same computation,
settings aside, in every table, results file and report::

    name                        metric                                            source
    next_token_position         share of scored positions whose top-1 token is    next_token_test
                                legal (cluster SE over sequences)
    next_token_sequence         share of sequences legal at every position         next_token_test
    mn_compression_precision    Myhill–Nerode compression precision                myhill_nerode
    mn_distinction_precision    Myhill–Nerode distinction precision                myhill_nerode
    mn_distinction_recall       Myhill–Nerode distinction recall                   myhill_nerode

(Vafa et al. 2024, §2–3; :mod:`interp.metrics.next_token`, :mod:`interp.metrics.myhill_nerode`.)
Every estimate's ``n`` is the number of independent units: sequences for the next-token test,
states or state pairs for Myhill–Nerode. The long row of a metric is
``{metric, layer, value, se, ci_low, ci_high, n}`` (:func:`metric_row`), the shape of every
before/after table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from interp.results import Estimate

if TYPE_CHECKING:
    from interp.metrics.myhill_nerode import MyhillNerodeOptions


@dataclass(frozen=True)
class Metric:
    """One metric of the suite: its name, a short header for tables, and which way is better."""

    name: str
    header: str
    source: str
    higher_is_better: bool = True


#: the suite, name → metric (see the module docstring)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("next_token_position", "next-token (position)", "next_token"),
        Metric("next_token_sequence", "next-token (sequence)", "next_token"),
        Metric("mn_compression_precision", "compression prec.", "myhill_nerode"),
        Metric("mn_distinction_precision", "distinction prec.", "myhill_nerode"),
        Metric("mn_distinction_recall", "distinction rec.", "myhill_nerode"),
    )
}
NEXT_TOKEN = tuple(n for n, m in METRICS.items() if m.source == "next_token")
MYHILL_NERODE = tuple(n for n, m in METRICS.items() if m.source == "myhill_nerode")


def metric_row(
    name: str, est: Estimate, layer: int | None = None, ci_low: float = math.nan, ci_high: float = math.nan
) -> dict[str, Any]:
    """The long row ``{metric, layer, value, se, ci_low, ci_high, n}`` of one estimate."""
    return {
        "metric": name,
        "layer": layer,
        "value": float(est.mean),
        "se": float(est.se),
        "ci_low": ci_low,
        "ci_high": ci_high,
        "n": int(est.n),
    }


#: the suite's Myhill–Nerode states / state pairs when none are given (``mn_pairs``)
SUITE_PAIRS = 300
#: the suite's names of Myhill–Nerode settings → :class:`~interp.metrics.myhill_nerode.MyhillNerodeOptions` fields
SUITE_NAMES = {"mn_pairs": "pairs", "mn_depth": "depth"}


def suite_mn_options(given: Any = None, **settings: Any) -> MyhillNerodeOptions:
    """The :class:`~interp.metrics.myhill_nerode.MyhillNerodeOptions` the suite runs: ``given``
    (an options object; a mapping of its fields; None: the defaults with ``pairs`` =
    :data:`SUITE_PAIRS`), then ``settings`` by name — a field (``estimator=``, ``seed=``) or a
    suite name (``mn_pairs`` → ``pairs``, ``mn_depth`` → ``depth``)."""
    from interp.config import merge_options
    from interp.metrics.myhill_nerode import MyhillNerodeOptions

    base = given if isinstance(given, MyhillNerodeOptions) else MyhillNerodeOptions(pairs=SUITE_PAIRS)
    keywords = {**(dict(given) if isinstance(given, Mapping) else {}), **settings}
    keywords = {SUITE_NAMES.get(k, k): v for k, v in keywords.items()}
    return merge_options(MyhillNerodeOptions, base, keywords, "world_model_metrics")


def world_model_metrics(
    model: Any,
    world: Any,
    sequences: Sequence[Sequence[str]],
    names: Sequence[str] = tuple(METRICS),
    *,
    myhill_nerode_options: Any = None,
    next_token_options: dict[str, Any] | None = None,
    progress: bool = False,
    **mn_settings: Any,
) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """The suite's ``names`` for ``model`` (an HF model, a bridge, or any
    :class:`~interp.models.lm.LM`) on ``world``: ``({name: Estimate}, {"next_token": NextTokenResult,
    "myhill_nerode": MyhillNerodeResult})`` — the results hold every number behind the estimates.

    The next-token test runs on ``sequences`` (``next_token_options``: further settings of
    :func:`~interp.metrics.next_token.next_token_test`, e.g. the positions rule). Myhill–Nerode
    runs with :func:`suite_mn_options` of ``myhill_nerode_options`` (a
    :class:`~interp.metrics.myhill_nerode.MyhillNerodeOptions` or a mapping of its fields) and the
    keywords ``mn_pairs`` (default :data:`SUITE_PAIRS` states / state pairs), ``mn_depth``,
    ``estimator``, ``seed``, ``max_nodes`` or any other of its fields — how ``interp next-token``
    and ``interp metrics`` expose every option while reporting the suite's names. A bridge is
    wrapped in :class:`~interp.models.lm.BridgeLM` for Myhill–Nerode, so any active intervention
    acts on every forward it runs.
    """
    mn_options = suite_mn_options(myhill_nerode_options, **mn_settings)
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; the suite has {', '.join(METRICS)}")
    out: dict[str, Estimate] = {}
    results: dict[str, Any] = {}
    if any(n in NEXT_TOKEN for n in names):
        from interp.metrics.next_token import next_token_test

        nt = next_token_test(model, world, sequences, progress=progress, **(next_token_options or {}))
        results["next_token"] = nt
        n_seq = nt.sequence_share.n
        found = {
            "next_token_position": Estimate(nt.position_share.mean, nt.position_share.se, n_seq),
            "next_token_sequence": nt.sequence_share,
        }
        out.update({n: found[n] for n in names if n in found})
    if any(n in MYHILL_NERODE for n in names):
        from interp.metrics.myhill_nerode import myhill_nerode

        mn = myhill_nerode(world, _as_lm(model, world), mn_options, progress=progress)
        results["myhill_nerode"] = mn
        found = {
            "mn_compression_precision": mn.compression_precision,
            "mn_distinction_precision": mn.distinction_precision,
            "mn_distinction_recall": mn.distinction_recall,
        }
        out.update({n: found[n] for n in names if n in found})
    return {n: out[n] for n in names}, results


def _as_lm(model: Any, world: Any) -> Any:
    if hasattr(model, "start") and hasattr(model, "extend"):  # already an LM
        return model
    from interp.models.lm import BridgeLM

    return BridgeLM(model, world.vocab)


__all__ = [
    "METRICS",
    "MYHILL_NERODE",
    "NEXT_TOKEN",
    "SUITE_NAMES",
    "SUITE_PAIRS",
    "Metric",
    "metric_row",
    "suite_mn_options",
    "world_model_metrics",
]
