"""The fine-tuning figure: before vs after per objective (``interp finetune``'s ``finetune.png``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def _error_bars(frame: pd.DataFrame, model: str, values: np.ndarray) -> np.ndarray:
    """``[2, n]`` distances from each value to its interval ends (``<model>_lo`` / ``_hi``), 0 where unknown."""
    err = np.vstack(
        [
            np.clip(values - frame[f"{model}_lo"].to_numpy(dtype=float), 0, None),
            np.clip(frame[f"{model}_hi"].to_numpy(dtype=float) - values, 0, None),
        ]
    )
    return np.nan_to_num(err)


def draw_finetune(
    table: pd.DataFrame,
    objectives: list[str],
    path: Path,
    focus: dict[int, str] | None = None,
    title: str | None = None,
) -> Path:
    """Three panels, before vs after per objective (mean over seeds, 95 % intervals): the layer
    sweep's per-layer effect, the mean squared MLP output per layer, and the scalar metrics.
    ``focus`` tags layers on the axis (``H``: suppressed by HLS, ``U``: amplified by ULA)."""
    focus = focus or {}
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from interp.stats import summarise

    wide = summarise(table, objectives)
    models = ["before"] + objectives
    colours = {"before": "#777777", "plain": "#4c72b0", "hls": "#d1372b", "ula": "#2a9d3f"}
    sweep_metric = next((m for m in wide.metric.unique() if str(m).startswith("sweep_effect")), None)
    panels: list[str] = [p for p in (sweep_metric, "mlp_out_sq") if p is not None and p in set(wide.metric)]
    scalars = wide[wide.layer.isna()]
    n = len(panels) + (1 if len(scalars) else 0)
    # constrained layout keeps the scalar panel's metric names clear of the panel beside it
    fig = Figure(figsize=(5.2 * max(n, 1), 4.0), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
    width = 0.8 / len(models)
    for k, metric in enumerate(panels):
        ax = fig.add_subplot(1, n, k + 1)
        sub = wide[wide.metric == metric].sort_values("layer")
        x = np.arange(len(sub))
        for j, m in enumerate(models):
            if m not in sub:
                continue
            v = sub[m].to_numpy(dtype=float)
            ax.bar(
                x + (j - (len(models) - 1) / 2) * width,
                v,
                width,
                yerr=_error_bars(sub, m, v),
                capsize=2,
                color=colours.get(m, None),
                label=m,
            )
        ax.set_xticks(x)
        ax.set_xticklabels([f"{int(v)}{' ' + focus[int(v)] if int(v) in focus else ''}" for v in sub.layer])
        ax.set_xlabel("layer (H: HLS-suppressed, U: ULA-amplified)" if focus else "layer")
        ax.axhline(0, color="0.3", linewidth=0.6)
        vals = sub[[m for m in models if m in sub]].to_numpy(dtype=float)
        spread = np.nanmin(vals) > 0 and np.nanmax(vals) / np.nanmin(vals) > 50
        if metric == "mlp_out_sq" or spread:
            ax.set_yscale("log")
        if metric == "mlp_out_sq":
            ax.set_ylabel("mean squared MLP output")
        else:
            ax.set_ylabel("effect of zeroing the MLP\n(ablated − clean " + metric.removeprefix("sweep_effect_") + ")")
        ax.legend(fontsize=7, frameon=False)
    if len(scalars):
        ax = fig.add_subplot(1, n, n)
        x = np.arange(len(scalars))
        for j, m in enumerate(models):
            if m not in scalars:
                continue
            v = scalars[m].to_numpy(dtype=float)
            ax.barh(
                x + (j - (len(models) - 1) / 2) * width,
                v,
                width,
                xerr=_error_bars(scalars, m, v),
                capsize=2,
                color=colours.get(m, None),
                label=m,
            )
        ax.set_yticks(x)
        ax.set_yticklabels([str(s) for s in scalars.metric], fontsize=7)
        ax.invert_yaxis()
        ax.legend(fontsize=7, frameon=False)
        ax.set_title("held-out metrics (95 % intervals)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


__all__ = ["draw_finetune"]
