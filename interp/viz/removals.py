"""The dose-response figure of a removal comparison: per layer, the mean effect of scaling its MLP
output by α, from α = 1 (the model: 0) down to α = 0 (zero-out), with the interval each verdict
reads and the margin, points coloured by verdict (:func:`draw_dose_response`).

Input: :class:`~interp.analysis.verdicts.agreement.RemovalComparison` (its ``dose`` table). One small panel
per layer, shared y axis, α decreasing to the right (more of the output removed); the title of a
panel names the curve's shape (``rising`` / ``falling`` / ``flat`` / ``non-monotone``, in the
benefit; :mod:`interp.analysis.verdicts.agreement`). matplotlib on an Agg canvas, no pyplot state.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from interp.viz.layers import VERDICT_COLOURS, save_png


def draw_dose_response(comparison: Any, path: str | Path, title: str | None = None) -> Path:
    """PNG of every layer's dose-response curve (mean effect vs α with its interval)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dose = comparison.dose
    if dose is None or len(dose) == 0:
        raise ValueError("no dose-response rows: run the sweep with --ablation scale")
    layers = sorted(int(x) for x in dose["layer"].unique())
    shapes = dict(zip(comparison.frame["layer"], comparison.frame.get("dose_response", [None] * len(comparison.frame))))
    cols = min(6, len(layers))
    rows = math.ceil(len(layers) / cols)
    fig = Figure(figsize=(2.4 * cols + 0.6, 2.1 * rows + 0.8), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, sharey=True, squeeze=False)
    margin = float(dose["margin"].iloc[0])
    for k, layer in enumerate(layers):
        ax = axes[k // cols][k % cols]
        g = dose[dose["layer"] == layer].sort_values("alpha", ascending=False)
        alpha = np.concatenate([[1.0], g["alpha"].to_numpy(dtype=float)])
        mean = np.concatenate([[0.0], g["mean_effect"].to_numpy(dtype=float)])
        lo = np.concatenate([[0.0], g["ci_low"].to_numpy(dtype=float)])
        hi = np.concatenate([[0.0], g["ci_high"].to_numpy(dtype=float)])
        if margin > 0:
            ax.axhspan(-margin, margin, color="0.9", zorder=0, linewidth=0)
        ax.axhline(0, color="0.6", linewidth=0.6)
        ax.fill_between(
            alpha,
            np.where(np.isfinite(lo), lo, mean),
            np.where(np.isfinite(hi), hi, mean),
            color="0.75",
            alpha=0.5,
            linewidth=0,
            zorder=1,
        )
        ax.plot(alpha, mean, color="0.25", linewidth=1.0, zorder=2)
        colours = ["#9a9a9a"] + [VERDICT_COLOURS.get(str(v), "#9a9a9a") for v in g["verdict"]]
        ax.scatter(alpha, mean, c=colours, edgecolors="0.2", linewidths=0.5, s=22, zorder=3)
        ax.set_xlim(1.05, min(alpha) - 0.05)
        ax.set_title(f"layer {layer}" + (f": {shapes.get(layer)}" if shapes.get(layer) else ""), fontsize=8)
        ax.tick_params(labelsize=7)
        if k % cols == 0:
            ax.set_ylabel("mean effect", fontsize=8)
        if k // cols == rows - 1:
            ax.set_xlabel("α (output × α)", fontsize=8)
    for k in range(len(layers), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.suptitle(title or "dose-response: MLP output scaled by α (1 = the model, 0 = zero-out)", fontsize=9)
    fig.tight_layout()
    return save_png(fig, path)


def write_removals(comparison: Any, folder: str | Path, title: str | None = None) -> list[Path]:
    """What a sweep of several removals adds to its folder: the comparison's files
    (:meth:`~interp.analysis.verdicts.agreement.RemovalComparison.save`: ``verdicts_<removal>.json``,
    ``agreement.csv`` / ``.json`` / ``.md``, ``dose_response.csv``) and, with ``scale``,
    ``dose_response.png``; returns the figures drawn."""
    comparison.save(folder)
    if len(comparison.dose) == 0:
        return []
    return [draw_dose_response(comparison, Path(folder) / "dose_response.png", title=title)]


__all__ = ["draw_dose_response", "write_removals"]
