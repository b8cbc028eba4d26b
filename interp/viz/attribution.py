"""Attribution vs exact: one point per site (layer, layer × position, or layer × head), the AtP
estimate of its mean effect on x and the exactly measured mean effect on y, with the y = x line
(:func:`draw_attribution_scatter`). Points on the line are sites where the first-order estimate is
right; points across the axes changed sign.

Input: an attribution result and the exact one (:class:`~interp.analysis.engines.sweeps.SweepResult` or
:class:`~interp.analysis.engines.activation_patching.PatchingMap`, joined on their shared sites by
:func:`interp.analysis.engines.attribution.site_table`), or a table with ``attribution`` and ``exact``
columns (e.g. ``verify.csv`` from ``interp sweep --method attribution --verify-top K``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.viz.layers import save_png


def _sites(data: Any, exact: Any | None) -> pd.DataFrame:
    from interp.analysis.engines.attribution import site_table

    if isinstance(data, pd.DataFrame):
        frame = data
    elif exact is not None:
        frame = site_table(data, exact)
    else:
        raise TypeError(
            "draw_attribution_scatter needs (attribution result, exact result) or a table with "
            f"attribution and exact columns, got {type(data).__name__} alone"
        )
    missing = [c for c in ("attribution", "exact") if c not in frame.columns]
    if missing:
        raise ValueError(f"the site table has no column(s) {missing}; columns: {list(frame.columns)}")
    if frame.empty:
        raise ValueError("no sites to draw")
    return frame


def _label(row: pd.Series) -> str:
    for axis in ("pos", "head"):
        if axis in row and not pd.isna(row[axis]):
            return f"{int(row['layer'])}.{int(row[axis])}"
    return f"L{int(row['layer'])}"


def draw_attribution_scatter(
    data: Any, path: str | Path | None, exact: Any | None = None, title: str | None = None, ax: Any | None = None
) -> Path | Any:
    """PNG of attribution (x) vs exact (y) mean effect per site, with y = x and the Spearman rank
    correlation; sites are labelled (``L3`` a layer, ``3.5`` layer 3 position/head 5) when there are
    at most 30. With ``ax`` (a matplotlib Axes) it draws there and returns the Axes instead."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from interp.analysis.engines.attribution import spearman

    frame = _sites(data, exact)
    x, y = frame["attribution"].to_numpy(float), frame["exact"].to_numpy(float)
    fig = None
    if ax is None:
        fig = Figure(figsize=(4.6, 4.2), dpi=120)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
    lim = float(np.nanmax(np.abs(np.concatenate([x, y])))) or 1.0
    lim *= 1.1
    ax.plot([-lim, lim], [-lim, lim], color="#999", lw=1, ls="--", label="y = x")
    ax.axhline(0, color="#ccc", lw=0.8)
    ax.axvline(0, color="#ccc", lw=0.8)
    same = np.sign(x) == np.sign(y)
    ax.scatter(x[same], y[same], s=22, color="#1f6fb4", label="same sign")
    if (~same).any():
        ax.scatter(x[~same], y[~same], s=26, color="#d1372b", marker="x", label="sign differs")
    if len(frame) <= 30:
        for (_, row), xi, yi in zip(frame.iterrows(), x, y):
            ax.annotate(_label(row), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel("attribution (AtP estimate of the mean effect)")
    ax.set_ylabel("exact mean effect")
    rho = spearman(x, y)
    ax.set_title(title or "attribution vs exact", fontsize=10)
    ax.text(0.02, 0.98, f"{len(frame)} sites, Spearman {rho:+.2f}", transform=ax.transAxes, va="top", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    if fig is None:
        return ax
    if path is None:
        raise ValueError("draw_attribution_scatter: give a path to write the PNG to, or an ax to draw on")
    return save_png(fig, path)


__all__ = ["draw_attribution_scatter"]
