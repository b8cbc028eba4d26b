"""Statistics of before/after tables: t intervals over seeds and the wide summary.

A long table has one row per (model, seed, metric, layer) with ``value``, ``se``, ``ci_low``,
``ci_high`` and ``n`` (what :func:`interp.analysis.evaluation.finetune.evaluate` returns, tagged with the model
and seed); :func:`summarise` turns it into one row per (metric, layer) with, per model, the mean
over seeds and a 95 % interval, and :func:`markdown_table` prints that.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: two-sided 95 % normal quantile (the intervals below; ``scipy`` is not a dependency: Student's t is
#: computed here, :func:`t_quantile`)
Z95 = 1.959963984540054


def proportion_interval(p: float, se: float | None = None, n: int | None = None, z: float = Z95) -> tuple[float, float]:
    """A 95 % interval of a **share** (a value in [0, 1]) that stays inside [0, 1]: the Wilson
    score interval (Wilson 1927) with the *effective* sample size n_eff = p(1 − p)/se² when a
    standard error is given (Korn & Graubard 1998: a clustered or averaged share, e.g. a mean of
    per-state precisions, carries the information of n_eff independent yes/no trials), capped at
    ``n``; with no usable se (none, 0 at p = 0 or 1, or NaN) the plain Wilson interval on ``n``.
    ``p ± 1.96·se`` (what the report printed before: "0.96 [0.905, 1.01]") can leave [0, 1] near
    its ends; Wilson cannot. NaN bounds when neither se nor n says how much data there is.

    Wilson: centre (p + z²/2n)/(1 + z²/n), half-width z·√(p(1 − p)/n + z²/4n²)/(1 + z²/n)."""
    p = float(p)
    if math.isnan(p):
        return math.nan, math.nan
    if not -1e-12 <= p <= 1 + 1e-12:
        raise ValueError(f"a share must lie in [0, 1], got {p}")
    p = min(max(p, 0.0), 1.0)
    n_eff = math.nan
    if se is not None and not math.isnan(float(se)) and float(se) > 0:
        n_eff = p * (1 - p) / float(se) ** 2
        if n is not None and n > 0:
            n_eff = min(n_eff, float(n))
        if n_eff == 0:  # p is 0 or 1 with a positive se (cannot happen for a share of trials): use n
            n_eff = float(n) if n else math.nan
    elif n is not None and n > 0:
        n_eff = float(n)
    if not n_eff > 0:
        return math.nan, math.nan
    z2 = z * z
    centre = (p + z2 / (2 * n_eff)) / (1 + z2 / n_eff)
    half = z * math.sqrt(p * (1 - p) / n_eff + z2 / (4 * n_eff**2)) / (1 + z2 / n_eff)
    return max(0.0, centre - half), min(1.0, centre + half)


#: metrics whose values are shares in [0, 1] (the metric suite, the route metrics and the
#: world-model table's columns): their ±SE intervals are Wilson intervals
#: (:func:`proportion_interval`), which stay inside [0, 1]
SHARES = frozenset(
    {
        "next_token_position",
        "next_token_sequence",
        "mn_compression_precision",
        "mn_distinction_precision",
        "mn_distinction_recall",
        "routes_valid",
        "routes_illegal_turn",
        "next_token",
        "probe",
        "compression_precision",
        "distinction_precision",
        "distinction_recall",
    }
)


def rank_auc(scores: Any, labels: Any) -> float:
    """The area under the ROC curve of ``scores`` for binary ``labels`` (1 = positive): the
    probability that a random positive scores above a random negative, ties counting one half
    (the Mann–Whitney U statistic over n₊·n₋). 0.5 = no signal. NaN when a class is empty."""
    x = np.asarray(scores, dtype=float)
    y = np.asarray(labels).astype(bool)
    if x.shape != y.shape:
        raise ValueError(f"scores {x.shape} and labels {y.shape} differ in shape")
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return math.nan
    ranks = pd.Series(x).rank(method="average").to_numpy()  # ties share their mean rank
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (Lentz's method, as in
    Numerical Recipes §6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float | int) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom (through the incomplete beta)."""
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(n: int, level: float = 0.975) -> float:
    """The ``level`` quantile of Student's t with ``n - 1`` degrees of freedom (default 97.5 %: a 95 %
    two-sided interval of a mean over ``n`` values), by bisection on :func:`t_cdf` (no scipy); nan for
    ``n < 2``. Exact to about 1e-10 (t_{0.975, 1} = 12.7062, t_{0.975, 30} = 2.0423)."""
    if n < 2:
        return math.nan
    if not 0.5 <= level < 1:
        raise ValueError(f"level must be in [0.5, 1), got {level}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, n - 1) < level:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, n - 1) < level else (lo, mid)
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def summarise(table: pd.DataFrame, objectives: list[str]) -> pd.DataFrame:
    """One row per (metric, layer): ``before`` and, per objective, the mean over seeds with a 95 %
    interval (t over seeds when there are several, else the metric's own interval: bootstrap for
    the sweep, ±1.96 SE otherwise) and the change from before; and, per regularised objective run
    beside ``plain``, ``<objective>_vs_plain``: the mean over seeds of (objective − plain) on the
    same seed (same batches), with a t interval over seeds.

    The ``before`` interval is the evaluation's sampling uncertainty (held-out examples); an
    interval over seeds is the fine-tuning's variability on the same held-out examples. They
    answer different questions: compare objectives with each other through ``_vs_plain``."""
    out = []
    keys = table[["metric", "layer"]].drop_duplicates()
    for metric, layer in keys.itertuples(index=False):
        sel = table[(table.metric == metric) & (table.layer.isna() if pd.isna(layer) else table.layer == layer)]
        row: dict[str, Any] = {"metric": metric, "layer": None if pd.isna(layer) else int(layer)}
        b = sel[sel.model == "before"]
        if len(b):
            row["before"], row["before_lo"], row["before_hi"] = interval(b.iloc[0])
        for obj in objectives:
            s = sel[sel.model == obj]
            if not len(s):
                continue
            if len(s) == 1:
                m, lo, hi = interval(s.iloc[0])
            else:
                v = s.value.to_numpy(dtype=float)
                m = float(v.mean())
                h = t_quantile(len(v)) * float(v.std(ddof=1)) / math.sqrt(len(v))
                lo, hi = m - h, m + h
            row[obj], row[f"{obj}_lo"], row[f"{obj}_hi"] = m, lo, hi
            row[f"{obj}_seeds"] = int(len(s))
            if "before" in row:
                row[f"{obj}_change"] = m - row["before"]
        plain = sel[sel.model == "plain"].set_index("seed").value
        for obj in objectives:
            if obj == "plain" or not len(plain):
                continue
            mine = sel[sel.model == obj].set_index("seed").value
            seeds = sorted(set(plain.index) & set(mine.index))
            if not seeds:
                continue
            d = np.array([float(mine[k]) - float(plain[k]) for k in seeds])
            m = float(d.mean())
            h = t_quantile(len(d)) * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.nan
            row[f"{obj}_vs_plain"], row[f"{obj}_vs_plain_lo"], row[f"{obj}_vs_plain_hi"] = m, m - h, m + h
        out.append(row)
    return pd.DataFrame(out)


def interval(r: pd.Series) -> tuple[float, float, float]:
    """``(value, low, high)`` of a long-table row: its own interval (``ci_low``/``ci_high``, e.g. a
    bootstrap) when present, else from its standard error — the Wilson interval for a share
    (a metric in :data:`SHARES`: :func:`proportion_interval`, inside [0, 1]),
    ±1.96 SE otherwise."""
    v = float(r.value)
    if not (pd.isna(r.ci_low) or pd.isna(r.ci_high)):
        return v, float(r.ci_low), float(r.ci_high)
    se = float(r.se) if not pd.isna(r.se) else math.nan
    if str(r.get("metric")) in SHARES and 0 <= v <= 1:
        n = r.get("n")
        return (v, *proportion_interval(v, se, None if n is None or pd.isna(n) else int(n)))
    return v, v - 1.96 * se, v + 1.96 * se


def format_interval(m: float, lo: float, hi: float) -> str:
    """``m [lo, hi]`` to four significant figures; ``m`` alone without an interval, ``–`` for a
    missing value."""
    if pd.isna(m):
        return "–"
    if pd.isna(lo) or pd.isna(hi):
        return f"{m:.4g}"
    return f"{m:.4g} [{lo:.4g}, {hi:.4g}]"


def markdown_table(wide: pd.DataFrame) -> str:
    """The wide table of :func:`summarise` as Markdown: one column per model, ``value [low, high]``
    with the change from before (``Δ``), and the ``− plain`` differences last."""
    cols = [c for c in wide.columns if f"{c}_lo" in wide.columns]
    models = [c for c in cols if not c.endswith("_vs_plain")]
    models = ["before"] + [c for c in models if c != "before"] + [c for c in cols if c.endswith("_vs_plain")]
    names = [c.replace("_vs_plain", " − plain") for c in models]
    head = "| metric | layer | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (2 + len(models))]
    for r in wide.to_dict(orient="records"):
        layer = "" if r.get("layer") is None or pd.isna(r.get("layer")) else str(int(r["layer"]))
        cells = []
        for m in models:
            cell = format_interval(r.get(m, math.nan), r.get(f"{m}_lo", math.nan), r.get(f"{m}_hi", math.nan))
            change = r.get(f"{m}_change")
            if change is not None and not pd.isna(change):
                cell += f" (Δ {change:+.3g})"
            cells.append(cell)
        lines.append(f"| {r['metric']} | {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = [
    "SHARES",
    "Z95",
    "format_interval",
    "interval",
    "markdown_table",
    "proportion_interval",
    "rank_auc",
    "summarise",
    "t_cdf",
    "t_quantile",
]
