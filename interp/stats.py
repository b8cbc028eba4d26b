"""Statistics of before/after tables: t intervals over seeds and the wide summary.

A long table has one row per (model, seed, metric, layer) with ``value``, ``se``, ``ci_low``,
``ci_high`` and ``n`` (what :func:`interp.analysis.suite.evaluate` returns, tagged with the model
and seed); :func:`summarise` turns it into one row per (metric, layer) with, per model, the mean
over seeds and a 95 % interval, and :func:`markdown_table` prints that.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def t_quantile(n: int) -> float:
    """The 97.5 % quantile of Student's t with ``n - 1`` degrees of freedom (a 95 % two-sided
    interval of a mean over ``n`` values); nan for ``n < 2``."""
    if n < 2:
        return math.nan
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, n - 1))
    except ImportError:  # pragma: no cover - scipy is a dependency of our dependencies
        return 1.96


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
    bootstrap) when present, else ±1.96 standard errors."""
    v = float(r.value)
    if not (pd.isna(r.ci_low) or pd.isna(r.ci_high)):
        return v, float(r.ci_low), float(r.ci_high)
    se = float(r.se) if not pd.isna(r.se) else math.nan
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


__all__ = ["format_interval", "interval", "markdown_table", "summarise", "t_quantile"]
