"""The Table-1 figure (one bar group per metric, one bar per model, with standard errors) and the
Table-2 detour table in Markdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def draw_table1(
    table: pd.DataFrame, path: str | Path, title: str = "World-model metrics (cf. Vafa et al. 2024, Table 1)"
) -> Path:
    """PNG of a :func:`~interp.metrics.table.results_table` frame; missing cells draw as empty."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from interp.metrics.table import COLUMNS, HEADERS

    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    n = len(table)
    width = 0.8 / max(n, 1)
    for i, (_, r) in enumerate(table.iterrows()):
        xs = np.arange(len(COLUMNS)) + (i - (n - 1) / 2) * width
        means = [r[c] for c in COLUMNS]
        ses = [0 if np.isnan(r[f"{c}_se"]) else r[f"{c}_se"] for c in COLUMNS]
        ax.bar(xs, np.nan_to_num(means), width, yerr=ses, label=r["model"], capsize=2)
    ax.set_xticks(np.arange(len(COLUMNS)), [HEADERS[c] for c in COLUMNS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (± s.e.)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=max(1, min(n, 4)), loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def detour_markdown(detours: dict[str, Any]) -> str:
    """Table 2 in Markdown: one row per model and detour kind, one column per detour probability p (the
    first model's), the valid-route rate to 2 decimals; ``detours``: model name →
    :class:`~interp.metrics.navigation.DetourResult`."""
    probs = sorted(next(iter(detours.values())).table["p"].unique())
    lines = ["| model | detour | " + " | ".join(f"p={p:g}" for p in probs) + " |", "|---|---|" + "---|" * len(probs)]
    for model, d in detours.items():
        for kind in dict.fromkeys(d.table["kind"]):
            t = d.table[d.table["kind"] == kind].set_index("p")
            lines.append(f"| {model} | {kind} | " + " | ".join(f"{t.loc[p, 'valid']:.2f}" for p in probs) + " |")
    return "\n".join(lines) + "\n"


__all__ = ["detour_markdown", "draw_table1"]
