"""Layer-sweep figures: each layer's mean effect with the interval its verdict reads, coloured by
verdict (:func:`draw_layer_effects`), and the layer × position (or head) activation-patching
heatmap with the cells whose simultaneous interval clears the margin marked
(:func:`draw_patching_heatmap`).

Input: :class:`~interp.analysis.verdicts.layers.LayerVerdicts` (or a
:class:`~interp.analysis.engines.sweeps.SweepResult`, whose verdicts are then computed with the defaults).
The bar is the mean *effect* (metric with the intervention − metric clean, in the metric's own
units); the thick error bar is the interval the verdict reads (simultaneous over the layers unless
the verdicts are per layer), the thin one inside it each layer's own (marginal) interval (for a
lower-is-better metric the verdicts hold the intervals of the oriented benefit, flipped back
here); the grey band is ±``min_effect``, the margin. Colours: useful green, harmful red,
negligible light grey, inconclusive amber.

matplotlib is imported inside the function and drawn on an Agg canvas (no GUI, no pyplot state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def save_png(fig: Any, path: str | Path) -> Path:
    """Write a matplotlib figure as a tight PNG, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


VERDICT_COLOURS = {"useful": "#2a9d3f", "harmful": "#d1372b", "negligible": "#c8c8c8", "inconclusive": "#e0a030"}


def draw_layer_effects(verdicts_or_sweep: Any, path: str | Path, title: str | None = None) -> Path:
    """PNG of per-layer mean effects with their intervals and the margin, bars coloured by verdict."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    from interp.analysis.engines.sweeps import SweepResult
    from interp.analysis.verdicts.layers import LayerVerdicts, layer_verdicts

    if isinstance(verdicts_or_sweep, SweepResult):
        verdicts = layer_verdicts(verdicts_or_sweep)
    elif isinstance(verdicts_or_sweep, LayerVerdicts):
        verdicts = verdicts_or_sweep
    else:
        raise TypeError(
            f"draw_layer_effects needs LayerVerdicts or a SweepResult, got {type(verdicts_or_sweep).__name__}"
        )
    f = verdicts.frame
    if f.empty:
        raise ValueError("no layers to draw")
    layers = f["layer"].to_numpy(dtype=int)
    mean = f["mean_effect"].to_numpy(dtype=float)
    lo, hi = verdicts.effect_interval()
    mlo, mhi = verdicts.effect_interval(marginal=True)

    def err(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # an infinite or missing interval: no bar (marked ∞)
        e = np.vstack([np.clip(mean - a, 0, None), np.clip(b - mean, 0, None)])
        return np.where(np.isfinite(e), e, 0.0)

    colours = [VERDICT_COLOURS.get(str(v), "#9a9a9a") for v in f["verdict"]]

    fig = Figure(figsize=(max(4.0, 0.6 * len(layers) + 2.0), 3.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(layers))
    delta = verdicts.min_effect
    if delta > 0:
        ax.axhspan(-delta, delta, color="0.88", zorder=0, linewidth=0)
    ax.bar(x, mean, color=colours, edgecolor="0.3", linewidth=0.5, zorder=2)
    ax.errorbar(x, mean, yerr=err(lo, hi), fmt="none", ecolor="0.15", elinewidth=1.4, capsize=4, zorder=3)
    if not verdicts.meta.get("per_layer", True) and "marginal_low" in f:
        ax.errorbar(x, mean, yerr=err(mlo, mhi), fmt="none", ecolor="0.55", elinewidth=0.8, capsize=2, zorder=4)
    for j in np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi))):
        ax.annotate(
            "∞" if np.isinf(lo[j]) or np.isinf(hi[j]) else "no CI",
            (x[j], mean[j]),
            fontsize=8,
            ha="center",
            va="bottom",
            xytext=(0, 3),
            textcoords="offset points",
        )
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([str(v) for v in layers])
    ax.set_xlabel("layer")
    metric = verdicts.meta.get("metric") or "metric"
    better = "higher" if verdicts.meta.get("higher_is_better", True) else "lower"
    ax.set_ylabel(f"mean effect on {metric}\n(intervened − clean; {better} is better)")
    conf = verdicts.meta.get("confidence")
    handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items()]
    if delta > 0:
        handles.append(Patch(color="0.88", label=f"±{delta:g} margin"))
    family = "per layer" if verdicts.meta.get("per_layer", True) else "simultaneous\n(thin: per layer)"
    ax.legend(
        handles=handles,
        fontsize=8,
        frameon=False,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title=f"{int(round(conf * 100))}% CI, {family}" if conf else None,
        title_fontsize=8,
    )
    if title:
        ax.set_title(title, fontsize=10)
    return save_png(fig, path)


def draw_patching_heatmap(
    patching: Any, path: str | Path, column: str = "restored", title: str | None = None, cells: Any = None
) -> Path:
    """PNG heatmap of a :class:`~interp.analysis.engines.activation_patching.PatchingMap`: layers as rows,
    positions (or heads) as columns; ``restored`` (default): mean effect / mean clean − corrupted
    gap, the share of the gap one patched activation restores; else the mean of a frame column
    over examples (``effect``: the raw change; ``recovered``: per-example ratios).
    Diverging colours centred on 0; position labels from ``meta["labels"]`` when present.
    ``cells`` (:class:`~interp.analysis.verdicts.layers.MapVerdicts`): a dot on every cell whose
    simultaneous interval lies beyond the margin (``above`` or ``below``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure

    grid = patching.restored() if column == "restored" else patching.mean(column)
    if grid.empty:
        raise ValueError("no patching cells to draw")
    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    span = float(np.abs(finite).max()) if finite.size else 1.0
    span = span or 1.0
    fig = Figure(figsize=(max(4.0, 0.45 * values.shape[1] + 2.5), max(2.6, 0.45 * values.shape[0] + 1.6)), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(values, cmap="RdBu", norm=TwoSlopeNorm(0.0, -span, span), aspect="auto")
    axis = patching.axis
    labels = patching.meta.get("labels") if axis == "pos" else None
    ax.set_xticks(np.arange(values.shape[1]))
    ax.set_xticklabels(
        labels if labels and len(labels) == values.shape[1] else [str(c) for c in grid.columns],
        rotation=90 if labels else 0,
        fontsize=7,
    )
    ax.set_yticks(np.arange(values.shape[0]))
    ax.set_yticklabels([str(r) for r in grid.index])
    marks = ""
    if cells is not None:
        rows, cols = {v: i for i, v in enumerate(grid.index)}, {v: j for j, v in enumerate(grid.columns)}
        marked = [
            (rows[a], cols[b]) for which in ("above", "below") for a, b in cells.cells(which) if a in rows and b in cols
        ]
        ax.scatter([c for _, c in marked], [r for r, _ in marked], s=8, c="k", marker="o")
        marks = (
            f"; •: effect beyond ±{cells.meta['min_effect']:g} "
            f"({int(round(100 * cells.meta['confidence']))}% {cells.meta['family'].split(' (')[0]})"
        )
    ax.set_xlabel(("position" if axis == "pos" else "head") + marks, fontsize=8 if marks else None)
    ax.set_ylabel(f"layer ({patching.meta.get('component', '')})")
    n = patching.meta.get("n_examples")
    cbar = fig.colorbar(im, ax=ax)
    what = "share of the mean gap restored" if column == "restored" else f"mean {column}"
    cbar.set_label(f"{what} ({patching.meta.get('metric', 'metric')}, n={n})", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return save_png(fig, path)


def draw_probe_layers(probes: dict[str, dict[str, Any]], path: str | Path, title: str | None = None) -> Path:
    """PNG of current-state probe accuracy by layer (embeddings = −1), one line per model, with
    standard errors and each model's majority-class baseline dashed. ``probes``: model name →
    :meth:`~interp.metrics.probes.ProbeResult.summary`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not probes:
        raise ValueError("no probe results to draw")
    fig = Figure(figsize=(6.0, 3.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for name, summary in probes.items():
        rows = summary["per_layer"]
        x = np.array([r["index"] for r in rows], dtype=float)
        acc = np.array([r["accuracy"] for r in rows], dtype=float)
        se = np.array([r["se"] if r["se"] is not None else 0.0 for r in rows], dtype=float)
        line = ax.errorbar(x, acc, yerr=se, marker="o", capsize=3, label=name)
        ax.axhline(summary["probe_baseline"], color=line[0].get_color(), linestyle=":", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels(["emb" if v < 0 else str(int(v)) for v in x])
    ax.set_xlabel("residual stream after layer")
    ax.set_ylabel("held-out probe accuracy")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(title or "current-state probe by layer (dotted: majority class)", fontsize=10)
    return save_png(fig, path)


def draw_direct_total(verdicts: Any, path: str | Path, title: str | None = None) -> Path:
    """PNG of each layer's total effect (MLP zero-out, the bar coloured by its verdict) beside its
    direct effect (the logit lens of its output, final norm scale frozen; hatched), both with the
    intervals of the verdicts' band, from :class:`~interp.analysis.verdicts.layers.LayerVerdicts` with
    the ``direct_effect`` columns (:func:`interp.analysis.verdicts.direct_effects.add_direct_effects`). The gap
    between the two bars is what the later layers do with the removal."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    f = verdicts.frame
    if f.empty or "direct_effect" not in f:
        raise ValueError("no direct effects to draw (run the sweep with the logit-difference metric)")
    layers = f["layer"].to_numpy(dtype=int)
    total = f["mean_effect"].to_numpy(dtype=float)
    lo, hi = verdicts.effect_interval()
    direct = f["direct_effect"].to_numpy(dtype=float)
    dlo, dhi = f["direct_low"].to_numpy(dtype=float), f["direct_high"].to_numpy(dtype=float)

    def err(m: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        e = np.vstack([np.clip(m - a, 0, None), np.clip(b - m, 0, None)])
        return np.where(np.isfinite(e), e, 0.0)

    fig = Figure(figsize=(max(4.5, 0.5 * len(layers) + 2.5), 3.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(layers))
    colours = [VERDICT_COLOURS.get(str(v), "#9a9a9a") for v in f["verdict"]]
    ax.bar(x - 0.2, total, width=0.4, color=colours, edgecolor="0.3", linewidth=0.5, zorder=2)
    ax.bar(x + 0.2, direct, width=0.4, color="white", edgecolor="0.3", hatch="///", linewidth=0.5, zorder=2)
    ax.errorbar(x - 0.2, total, yerr=err(total, lo, hi), fmt="none", ecolor="0.15", capsize=3, zorder=3)
    ax.errorbar(x + 0.2, direct, yerr=err(direct, dlo, dhi), fmt="none", ecolor="0.15", capsize=3, zorder=3)
    ax.axhline(0.0, color="0.3", linewidth=0.8)
    ax.set_xticks(x)
    ax.set_xticklabels([str(v) for v in layers], fontsize=7)
    ax.set_xlabel("layer whose MLP output is removed")
    ax.set_ylabel(f"effect on {verdicts.meta.get('metric') or 'the logit difference'}\n(removed − clean)")
    handles = [
        Patch(facecolor="0.6", edgecolor="0.3", label="total (zero-out; colour: verdict)"),
        Patch(facecolor="white", edgecolor="0.3", hatch="///", label="direct (logit lens, norm frozen)"),
    ]
    ax.legend(handles=handles, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title:
        ax.set_title(title, fontsize=9)
    return save_png(fig, path)


__all__ = ["VERDICT_COLOURS", "draw_direct_total", "draw_layer_effects", "draw_patching_heatmap", "draw_probe_layers"]


def draw_layer_accuracy(verdicts: Any, path: str | Path, title: str | None = None, ylabel: str = "accuracy") -> Path:
    """PNG in the layout of PragWorld's layer plots (the Phi-3.5-mini figures of §6.2): the
    accuracy with each layer's MLP zeroed (``a_layer``, the paper's A_ℓ), bars coloured by the
    verdict, against the unablated accuracy A_0 (dashed). From
    :class:`~interp.analysis.verdicts.layers.LayerVerdicts` computed with a ``threshold``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    f = verdicts.frame
    if f.empty:
        raise ValueError("no layers to draw")
    layers = f["layer"].to_numpy(dtype=int)
    acc = 100 * f["a_layer"].to_numpy(dtype=float)
    a0 = 100 * float(f["a_0"].iloc[0])
    fig = Figure(figsize=(max(4.0, 0.32 * len(layers) + 2.5), 3.4), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(layers))
    ax.bar(x, acc, color=[VERDICT_COLOURS.get(str(v), "#9a9a9a") for v in f["verdict"]], edgecolor="0.3", linewidth=0.4)
    ax.axhline(a0, color="0.2", linestyle="--", linewidth=1.0, label=f"no layer zeroed: {a0:.1f}")
    ax.set_xticks(x)
    ax.set_xticklabels([str(v) for v in layers], fontsize=7)
    ax.set_xlabel("layer whose MLP output is zeroed")
    ax.set_ylabel(f"{ylabel} (%)")
    lo = max(0.0, min(acc.min(), a0) - 5)
    ax.set_ylim(lo, min(100.0, max(acc.max(), a0) + 5))
    handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items()] + ax.get_legend_handles_labels()[0]
    ax.legend(
        handles=handles,
        fontsize=7,
        frameon=False,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        title="verdict (bootstrap)",
        title_fontsize=7,
    )
    if title:
        ax.set_title(title, fontsize=9)
    return save_png(fig, path)


def draw_category_effects(
    by_category: Any, path: str | Path, title: str | None = None, label: str = "mean effect on P(gold)"
) -> Path:
    """PNG heatmap of the mean effect per layer × alteration category (``LayerVerdicts.by_category``):
    which alterations each layer's removal helps (red) or hurts (blue) — PragWorld §6.2 reads it to
    name the alteration most affected by harmful layers."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if by_category is None or by_category.empty:
        raise ValueError("no per-category effects to draw")
    grid = by_category.sort_index()
    vals = grid.to_numpy(dtype=float).T  # categories × layers
    lim = float(np.nanmax(np.abs(vals))) or 1.0
    fig = Figure(figsize=(max(4.5, 0.3 * grid.shape[0] + 3.0), 0.42 * grid.shape[1] + 1.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(vals, aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_xticks(np.arange(grid.shape[0]))
    ax.set_xticklabels([str(v) for v in grid.index], fontsize=7)
    ax.set_yticks(np.arange(grid.shape[1]))
    ax.set_yticklabels([str(c) for c in grid.columns], fontsize=7)
    ax.set_xlabel("layer")
    fig.colorbar(im, ax=ax, label=label, shrink=0.9)
    if title:
        ax.set_title(title, fontsize=9)
    return save_png(fig, path)
