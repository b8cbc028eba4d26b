"""The Table-1 figure: one bar group per metric, one bar per model, with standard errors."""

from __future__ import annotations

from pathlib import Path

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


__all__ = ["draw_table1"]
