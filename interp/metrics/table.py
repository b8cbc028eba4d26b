"""The Table-1-style comparison of models (Vafa et al. 2024, Table 1).

Rows are models; columns are the next-token test (positions from the first direction on), the
current-state probe of the last layer (after the final LayerNorm, HF ``hidden_states[-1]``, as the
reference code probes; ``probe_layer="best"`` takes the best layer instead), the compression
precision, and the distinction precision and recall, each as mean ± standard error.
Missing cells (e.g. no probe for the oracle) print as "—". The metrics come from the metric suite
(:func:`interp.metrics.named_metrics.world_model_metrics`), the same computation as the fix stage's
before/after rows; the columns keep the paper's short names (:data:`SUITE_NAMES` maps them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from interp.results import Estimate

COLUMNS: tuple[str, ...] = (
    "next_token",
    "probe",
    "compression_precision",
    "distinction_precision",
    "distinction_recall",
)
#: the table's columns that are metrics of the suite (:mod:`interp.metrics.named_metrics`): column → suite name
SUITE_NAMES = {
    "next_token": "next_token_position",
    "compression_precision": "mn_compression_precision",
    "distinction_precision": "mn_distinction_precision",
    "distinction_recall": "mn_distinction_recall",
}
HEADERS = {
    "next_token": "next-token",
    "probe": "probe",
    "compression_precision": "compression prec.",
    "distinction_precision": "distinction prec.",
    "distinction_recall": "distinction rec.",
}


def evaluate_lm(
    lm: Any,
    world: Any,
    test: Sequence[Sequence[str]],
    *,
    probe_data: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] | None = None,
    pairs: int = 300,
    depth: int = 5,
    estimators: Sequence[str] = ("exact",),
    seed: int = 0,
    max_nodes: int = 1024,
    probe_layer: str = "last",
) -> tuple[dict[str, dict[str, Estimate | None]], dict[str, Any]]:
    """The table's row for one LM: the next-token test on ``test``, the probe of the last layer
    (``probe_layer="last"``: after the final LayerNorm; ``"best"``: the best layer) when
    ``probe_data = (train, test)`` is given and the LM is a bridge, and the Myhill–Nerode metrics
    with each of ``estimators``. Returns ``({estimator: cells}, summaries)``: the cells of one row
    per estimator and every number behind them."""
    if probe_layer not in ("last", "best"):
        raise ValueError(f"probe_layer must be 'last' or 'best', got {probe_layer!r}")
    from interp.metrics.named_metrics import MYHILL_NERODE, NEXT_TOKEN, world_model_metrics
    from interp.metrics.probes import probe_layers

    nt, res = world_model_metrics(lm, world, test, NEXT_TOKEN)
    summaries: dict[str, Any] = {"next_token": res["next_token"].summary()}
    probe = None
    bridge = getattr(lm, "bridge", None)
    if probe_data is not None and bridge is not None:
        pr = probe_layers(bridge, world, probe_data[0], probe_data[1])
        row = (
            pr.layers.iloc[-1] if probe_layer == "last" else pr.layers.loc[pr.layers["index"] == pr.best_layer].iloc[0]
        )
        probe = Estimate(float(row["accuracy"]), float(row["se"]), int(row["n_test"]))
        summaries["probe"] = pr.summary()
    cells = {}
    for estimator in estimators:
        mn, res = world_model_metrics(
            lm,
            world,
            test,
            MYHILL_NERODE,
            mn_pairs=pairs,
            mn_depth=depth,
            estimator=estimator,
            seed=seed,
            max_nodes=max_nodes,
        )
        summaries[f"myhill_nerode_{estimator}"] = res["myhill_nerode"].summary()
        found = {**{col: {**nt, **mn}[name] for col, name in SUITE_NAMES.items()}, "probe": probe}
        cells[estimator] = {col: found[col] for col in COLUMNS}
    return cells, summaries


def results_table(rows: Mapping[str, Mapping[str, Estimate | None]]) -> pd.DataFrame:
    """A tidy frame: one row per model, ``<column>`` and ``<column>_se`` for each metric."""
    records = []
    for model, cells in rows.items():
        unknown = set(cells) - set(COLUMNS)
        if unknown:
            raise KeyError(f"unknown table columns for {model!r}: {sorted(unknown)} (known: {COLUMNS})")
        rec: dict[str, object] = {"model": model}
        for col in COLUMNS:
            est = cells.get(col)
            rec[col] = est.mean if est is not None else math.nan
            rec[f"{col}_se"] = est.se if est is not None else math.nan
        records.append(rec)
    return pd.DataFrame.from_records(records)


def _cell(mean: float, se: float) -> str:
    if math.isnan(mean):
        return "—"
    return f"{mean:.2f}" if math.isnan(se) else f"{mean:.2f} ± {se:.2f}"


def to_markdown(table: pd.DataFrame) -> str:
    """The table as GitHub Markdown (no extra dependency)."""
    head = ["model", *(HEADERS[c] for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in table.iterrows():
        cells = [str(r["model"]), *(_cell(r[c], r[f"{c}_se"]) for c in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def save_table(table: pd.DataFrame, folder: str | Path, stem: str = "table1") -> tuple[Path, Path]:
    """Write the world-model table as ``<stem>.csv`` and ``<stem>.md`` into ``folder``; returns both
    paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    csv, md = folder / f"{stem}.csv", folder / f"{stem}.md"
    table.to_csv(csv, index=False)
    md.write_text(to_markdown(table))
    return csv, md
