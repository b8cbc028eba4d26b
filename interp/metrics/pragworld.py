"""PragWorld accuracies (paper §4 "Evaluation metrics", Table 1; reference facts: ``pragworld.md``).

With gold ``t`` (1 = yes) and prediction ``p`` per data row, a row is correct when ``p = t``; an
unparseable prediction (None) is wrong, and its rate is reported separately. All in percent:

- ``total``: accuracy over all rows; ``yes`` / ``no``: over rows whose gold is yes / no;
- ``original`` / ``altered``: over unaltered / altered rows (under the data's grouping);
- ``flip`` / ``invariant``: over alterations labelled flip (gold changes) / invariant;
- ``robust``: the share of groups (an original and all its alterations) answered entirely
  correctly — the paper's headline number — with a seeded percentile bootstrap interval over
  groups (groups are the independent units) and the group-level standard error;
- every other accuracy gets a *cluster* bootstrap interval from the same group draws
  (``<key>_ci_low`` / ``<key>_ci_high``): rows of one group share most of their text, so
  resampling rows independently would give intervals too narrow.

Per category (the seven alterations) and per length bucket (short < 11 utterances, medium 11–15,
long > 15) the same accuracies are tabulated, with a robust accuracy restricted to the category
(a group counts if its unaltered rows and its alterations of that category are all correct) or to
groups whose original falls in the bucket. This mirrors the published ``src/metrics.py``:
robust groups are split at each unaltered row, and flip/invariant follow the effect label
whatever the ``Perturbation?`` flag says.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.results import Estimate, mean_se, save_result

SUMMARY_KEYS = (
    "robust",
    "yes",
    "no",
    "original",
    "altered",
    "flip",
    "invariant",
    "total",
    "groups",
    "rows",
    "unparseable",
)
_NEEDED = ("group", "gold", "altered", "effect", "category", "length_bucket")


def _pct(correct: np.ndarray, mask: np.ndarray) -> float:
    n = int(mask.sum())
    return float(100.0 * correct[mask].mean()) if n else math.nan


def _clean(value: Any) -> Any:
    """JSON-safe: NaN → None, numpy scalars → Python."""
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(float(value)) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


@dataclass
class PragWorldScore:
    """PragWorld accuracies of one set of predictions.

    ``values`` (returned by :meth:`summary`): the percentages (:data:`SUMMARY_KEYS`), counts, and
    the bootstrap interval on robust accuracy (``robust_ci_low``/``robust_ci_high`` at
    ``ci_level``, ``robust_se``); ``per_example`` (also :attr:`frame`): one row per data row with
    ``prediction`` and ``correct``; ``per_group``: one
    row per group with ``robust``; ``per_category`` / ``per_length``: the tables of the module
    docstring; ``robust_estimate``: the robust share (0–1) with its group-level SE.
    """

    values: dict[str, Any]
    per_example: pd.DataFrame
    per_group: pd.DataFrame
    per_category: pd.DataFrame
    per_length: pd.DataFrame
    robust_estimate: Estimate
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def frame(self) -> pd.DataFrame:
        """One row per data row (``per_example``)."""
        return self.per_example

    def summary(self) -> dict[str, Any]:
        """The accuracies, counts and robust interval (a copy of ``values``)."""
        return dict(self.values)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def table1_row(self) -> dict[str, float | None]:
        """robust / yes / no / original / altered / flip / invariant, rounded to 2 decimals (Table 1)."""
        return {
            k: round(self.values[k], 2) if self.values[k] is not None else None
            for k in ("robust", "yes", "no", "original", "altered", "flip", "invariant")
        }

    def __str__(self) -> str:
        s = self.values

        def f(k: str) -> str:
            return "  n/a" if s[k] is None else f"{s[k]:6.2f}"

        lines = [
            f"robust {f('robust')} [{s['robust_ci_low']:.2f}, {s['robust_ci_high']:.2f}] "
            f"({s['robust_groups']}/{s['groups']} groups; {int(100 * s['ci_level'])}% bootstrap interval)",
            "  ".join(f"{k} {f(k)}" for k in ("yes", "no", "original", "altered", "flip", "invariant", "total")),
            f"rows {s['rows']}, unparseable {s['n_unparseable']} ({s['unparseable']:.2f}%)",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return self.summary()

    def save(self, folder: str | os.PathLike, stem: str = "pragworld") -> Path:
        """Write ``<stem>.json`` (summary + settings), ``<stem>.csv`` (per example),
        ``<stem>_groups.csv``, ``<stem>_categories.csv`` and ``<stem>_lengths.csv``."""
        return save_result(
            Path(folder),
            stem,
            {**self.values, "settings": self.settings},
            **{
                "": self.per_example,
                "groups": self.per_group,
                "categories": self.per_category,
                "lengths": self.per_length,
            },
        )


def _rows_of(data: Any) -> tuple[pd.DataFrame, dict[str, Any]]:
    rows = getattr(data, "rows", data)
    info = {}
    if hasattr(data, "grouping"):
        info = {"grouping": data.grouping, "data": str(data.path) if getattr(data, "path", None) else None}
    if not isinstance(rows, pd.DataFrame):
        raise TypeError(f"score_pragworld needs a DataFrame of rows (or PragWorldData), got {type(rows).__name__}")
    missing = [c for c in _NEEDED if c not in rows.columns]
    if missing:
        raise ValueError(f"score_pragworld: rows lack column(s) {missing}")
    return rows.reset_index(drop=True), info


def _normalise(predictions: Any, n_rows: int) -> list[str | None]:
    from interp.datasets.pragworld.parse import normalise_prediction

    preds = list(predictions)
    if len(preds) != n_rows:
        raise ValueError(
            f"{len(preds)} predictions for {n_rows} data rows: predictions must be aligned "
            f"with the data rows, one per row in file order"
        )
    return [normalise_prediction(p) for p in preds]


def score_pragworld(
    rows: Any, predictions: Any, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> PragWorldScore:
    """Score ``predictions`` ('yes' | 'no' | None, one per data row in order; 1 / 0 integers or
    booleans are read as yes / no) on PragWorld ``rows`` (the ``rows`` DataFrame of
    :func:`~interp.datasets.pragworld.load_pragworld`, or the
    :class:`~interp.datasets.pragworld.PragWorldData` itself). Anything else is unparseable
    and wrong. ``n_boot`` group resamples (seeded by ``seed``) give the
    ``level`` percentile interval on robust accuracy.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rows, info = _rows_of(rows)
    preds = _normalise(predictions, len(rows))
    gold = rows["gold"].astype(int).to_numpy()
    pred01 = np.array([1 if p == "yes" else 0 if p == "no" else -1 for p in preds])
    correct = pred01 == gold
    altered = rows["altered"].astype(bool).to_numpy()
    effect = rows["effect"].to_numpy(dtype=object)
    is_flip, is_inv = effect == "flip", effect == "invariant"
    unparseable = pred01 == -1

    per_example = rows.drop(columns=[c for c in ("context", "question") if c in rows.columns]).copy()
    per_example["prediction"] = preds
    per_example["correct"] = correct
    group = rows["group"].astype(int).to_numpy()
    per_group = (
        pd.DataFrame(
            {"group": group, "correct": correct, "altered": altered, "length_bucket": rows["length_bucket"].to_numpy()}
        )
        .groupby("group", sort=True)
        .agg(
            rows=("correct", "size"),
            correct=("correct", "sum"),
            robust=("correct", "all"),
            alterations=("altered", "sum"),
            length_bucket=("length_bucket", "first"),
        )
        .reset_index()
    )
    ok = per_group["robust"].to_numpy(dtype=float)
    est = mean_se(ok)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(ok), size=(n_boot, len(ok)))
    boots = ok[draws].mean(axis=1) if len(ok) else np.array([math.nan])
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2]) * 100
    masks = {
        "yes": gold == 1,
        "no": gold == 0,
        "original": ~altered,
        "altered": altered,
        "flip": is_flip,
        "invariant": is_inv,
        "total": np.ones_like(correct),
    }
    row_ci = _cluster_intervals(correct, group, per_group["group"].to_numpy(), draws, masks, level) if len(ok) else {}

    summary: dict[str, Any] = {
        "robust": 100.0 * est.mean,
        "yes": _pct(correct, gold == 1),
        "no": _pct(correct, gold == 0),
        "original": _pct(correct, ~altered),
        "altered": _pct(correct, altered),
        "flip": _pct(correct, is_flip),
        "invariant": _pct(correct, is_inv),
        "total": _pct(correct, np.ones_like(correct)),
        "groups": len(per_group),
        "rows": len(rows),
        "unparseable": float(100.0 * unparseable.mean()) if len(rows) else math.nan,
        "robust_ci_low": float(lo),
        "robust_ci_high": float(hi),
        "robust_se": 100.0 * est.se,
        **{f"{k}_ci_{end}": v for k, (a, b) in row_ci.items() for end, v in (("low", a), ("high", b))},
        "ci_level": level,
        "n_boot": n_boot,
        "seed": seed,
        "robust_groups": int(ok.sum()),
        "n_unparseable": int(unparseable.sum()),
        "n_yes": int((gold == 1).sum()),
        "n_no": int((gold == 0).sum()),
        "n_original": int((~altered).sum()),
        "n_altered": int(altered.sum()),
        "n_flip": int(is_flip.sum()),
        "n_invariant": int(is_inv.sum()),
        **info,
    }
    return PragWorldScore(
        _clean(summary),
        per_example,
        per_group,
        _per_category(rows, correct),
        _per_length(rows, correct, per_group),
        est,
        {"n_boot": n_boot, "seed": seed, "level": level, **info},
    )


def _cluster_intervals(
    correct: np.ndarray,
    group: np.ndarray,
    groups: np.ndarray,
    draws: np.ndarray,
    masks: dict[str, np.ndarray],
    level: float,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals (%) of each row-level accuracy under the *cluster* bootstrap: every
    resample draws whole groups (the rows of ``draws``, indices into the sorted ``groups``), so an
    original and its alterations, which share most of their text, move together. The robust
    interval uses the same draws."""
    pos = np.searchsorted(groups, group)  # each row's group number
    counts = np.zeros((draws.shape[0], len(groups)))
    for b in range(draws.shape[0]):
        counts[b] = np.bincount(draws[b], minlength=len(groups))
    w = counts[:, pos]  # [n_boot, rows]: how often each row is drawn
    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    out = {}
    for key, m in masks.items():
        den = (w * m).sum(axis=1)
        if not m.any():
            out[key] = (math.nan, math.nan)
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            acc = (w * (m & correct)).sum(axis=1) / den
        lo, hi = np.nanquantile(acc, q) * 100
        out[key] = (float(lo), float(hi))
    return out


def _accuracies(correct: np.ndarray, gold: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
    return {
        "rows": int(mask.sum()),
        "total": _pct(correct, mask),
        "yes": _pct(correct, mask & (gold == 1)),
        "no": _pct(correct, mask & (gold == 0)),
    }


def _per_category(rows: pd.DataFrame, correct: np.ndarray) -> pd.DataFrame:
    from interp.datasets.pragworld.data import CATEGORIES

    gold = rows["gold"].astype(int).to_numpy()
    cat = rows["category"].to_numpy(dtype=object)
    effect = rows["effect"].to_numpy(dtype=object)
    group = rows["group"].astype(int).to_numpy()
    unaltered = ~rows["altered"].astype(bool).to_numpy()
    out = []
    for key, name in CATEGORIES.items():
        m = cat == key
        if not m.any():
            continue
        groups = np.unique(group[m])
        keep = np.isin(group, groups) & (m | unaltered)
        robust = pd.Series(correct[keep]).groupby(group[keep]).all()
        out.append(
            {
                "category": key,
                "name": name,
                **_accuracies(correct, gold, m),
                "flip_rows": int((m & (effect == "flip")).sum()),
                "flip": _pct(correct, m & (effect == "flip")),
                "invariant_rows": int((m & (effect == "invariant")).sum()),
                "invariant": _pct(correct, m & (effect == "invariant")),
                "groups": len(groups),
                "robust": float(100.0 * robust.mean()),
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            "category",
            "name",
            "rows",
            "total",
            "yes",
            "no",
            "flip_rows",
            "flip",
            "invariant_rows",
            "invariant",
            "groups",
            "robust",
        ],
    )


def _per_length(rows: pd.DataFrame, correct: np.ndarray, per_group: pd.DataFrame) -> pd.DataFrame:
    from interp.datasets.pragworld.data import LENGTH_BUCKETS

    gold = rows["gold"].astype(int).to_numpy()
    bucket = rows["length_bucket"].to_numpy(dtype=object)
    altered = rows["altered"].astype(bool).to_numpy()
    out = []
    for b in LENGTH_BUCKETS:
        m = bucket == b
        g = per_group[per_group["length_bucket"] == b]
        out.append(
            {
                "length_bucket": b,
                **_accuracies(correct, gold, m),
                "original": _pct(correct, m & ~altered),
                "altered": _pct(correct, m & altered),
                "groups": len(g),
                "robust": float(100.0 * g["robust"].mean()) if len(g) else math.nan,
            }
        )
    return pd.DataFrame(out)
