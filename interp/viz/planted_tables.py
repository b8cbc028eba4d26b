"""Markdown tables of the planted-harm runs. On IOI (``experiments/ioi_planted.py``,
:func:`interp.jobs.ioi_planted.run_ioi_planted`): detection per model, pooled precision / recall per
rule, the harm each planted layer carries, and the repair table. Values print with 3 significant
digits and their interval in brackets; a missing value is "–". On a world model
(``experiments/planted_harm.py``, :func:`interp.jobs.planted_harm.run_planted_harm`): any frame as
it stands (:func:`frame_markdown`) and the repair with one column per metric
(:func:`metric_columns_markdown`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd


def fmt_interval(v: Any, lo: Any = None, hi: Any = None, digits: int = 3) -> str:
    """``v [lo, hi]`` to ``digits`` significant digits; ``v`` alone without a finite interval, "–" for no value."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def unplant_markdown(rows: list[dict], unplanted_ld: float) -> str:
    """The harm each layer of a several-layer planting carries (:func:`interp.analysis.planted.ioi.unplant_rows`'s
    rows), the unplanted model's logit difference last."""
    lines = [
        "| planting | MLP weights | held-out logit diff IO − S | accuracy | harm carried (LD gained by restoring) |",
        "|---|---|---|---|---|",
    ]
    planted = {r["model"]: r["logit_diff"] for r in rows if r["restored"].startswith("none")}
    for r in rows:
        gain = "–" if r["restored"].startswith("none") else f"{r['logit_diff'] - planted[r['model']]:+.2f}"
        lines.append(
            f"| {r['model']} | {r['restored']} | {fmt_interval(r['logit_diff'], r['lo'], r['hi'])} | {r['accuracy']:.2f} | "
            f"{gain} |"
        )
    lines.append(f"| unplanted | all original | {unplanted_ld:.3g} | | |")
    return "\n".join(lines)


def detection_markdown(rows: list[dict]) -> str:
    """One row per model: accuracy, logit difference, the newly harmful layers under each rule, the
    planted layers' ranks, the layers whose harm rose and the other changed layers."""
    cols = [
        "model",
        "planted",
        "accuracy",
        "logit diff",
        "newly harmful (calibrated)",
        "rank of planted",
        "found",
        "precision",
        "recall",
        "newly harmful (raw rule)",
        "raw precision",
        "raw recall",
        "harmful before and after, harm rose",
        "other changed layers",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [
            r["model"],
            str(r["planted"]),
            fmt_interval(*r["accuracy"]),
            fmt_interval(*r["logit_diff"]),
            str(r["newly_harmful"]),
            r["ranks"],
            "yes" if r["found"] else ("–" if not r["planted"] else "no"),
            fmt_interval(r["precision"], digits=2),
            fmt_interval(r["recall"], digits=2),
            str(r["raw_newly_harmful"]),
            fmt_interval(r["raw_precision"], digits=2),
            fmt_interval(r["raw_recall"], digits=2),
            r["rose"],
            r["other"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled_markdown(rows: list[dict]) -> str:
    """Precision and recall of the newly harmful layers pooled over the plantings, per rule, and the
    layers each rule newly calls harmful on the controls."""
    lines = [
        "| rule | planted layers | found | false alarms (plantings) | precision | recall | "
        "newly harmful on the controls |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule, key in (
        ("calibrated (interp.layer_verdicts/2)", "newly_harmful"),
        ("raw (A_ℓ vs A_0)", "raw_newly_harmful"),
    ):
        tp = fp = fn = 0
        for r in rows:
            if r["kind"] != "planting":
                continue
            truth, new = set(r["planted"]), set(r[key])
            tp, fp, fn = tp + len(truth & new), fp + len(new - truth), fn + len(truth - new)
        controls = "; ".join(
            f"{r['model']}: {r[key]}" for r in rows if r["kind"] == "control" and r["model"] != "unplanted"
        )
        lines.append(
            f"| {rule} | {tp + fn} | {tp} | {fp} | {fmt_interval(tp / (tp + fp) if tp + fp else math.nan, digits=2)} | "
            f"{fmt_interval(tp / (tp + fn) if tp + fn else math.nan, digits=2)} | {controls or '–'} |"
        )
    return "\n".join(lines)


def repair_markdown(summary: pd.DataFrame) -> str:
    """The repair table (:func:`interp.analysis.planted.ioi.repair_summary`): per planting and model,
    held-out accuracy and logit difference with intervals and the gap to the unplanted model."""
    lines = [
        "| planting | model | seeds | held-out accuracy | held-out logit diff IO − S | logit diff gap to unplanted |",
        "|---|---|---|---|---|---|",
    ]
    for (planting, model), g in summary.groupby(["planting", "model"], sort=False):
        a = g[g.metric == "accuracy"].iloc[0]
        d = g[g.metric == "logit_diff"].iloc[0]
        lines.append(
            f"| {planting} | {model} | {int(a.seeds) or '–'} | {fmt_interval(a.value, a.lo, a.hi)} | "
            f"{fmt_interval(d.value, d.lo, d.hi)} | {d.gap_to_unplanted:+.2f} |"
        )
    return "\n".join(lines)


def frame_markdown(frame: pd.DataFrame) -> str:
    """A frame as a Markdown table, its columns as they stand; floats to 4 significant digits, NaN as "–"."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.4g}"
        return str(v)

    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def metric_columns_markdown(summary: pd.DataFrame) -> str:
    """One row per model, one column per metric, ``value [lo, hi]`` to 3 significant digits ("–" where a
    model lacks the metric), from :func:`interp.analysis.planted.world.repair_summary`."""
    models = list(dict.fromkeys(summary.model))
    metrics = list(dict.fromkeys(summary.metric))
    lines = ["| model | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    for m in models:
        cells = []
        for k in metrics:
            r = summary[(summary.model == m) & (summary.metric == k)]
            if not len(r):
                cells.append("–")
                continue
            r = r.iloc[0]
            ci = "" if pd.isna(r.lo) or pd.isna(r.hi) else f" [{r.lo:.3g}, {r.hi:.3g}]"
            cells.append(f"{r.value:.3g}{ci}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = [
    "detection_markdown",
    "fmt_interval",
    "frame_markdown",
    "metric_columns_markdown",
    "pooled_markdown",
    "repair_markdown",
    "unplant_markdown",
]
