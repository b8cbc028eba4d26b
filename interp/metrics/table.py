"""The Table-1-style comparison of models (Vafa et al. 2024, Table 1).

Rows are models; columns are the next-token test, the best layer's current-state probe, the
compression precision, and the distinction precision and recall, each as mean ± standard error.
Missing cells (e.g. no probe for the oracle) print as "—".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from interp.results import Estimate

COLUMNS: tuple[str, ...] = ("next_token", "probe", "compression_precision", "distinction_precision",
                            "distinction_recall")
HEADERS = {"next_token": "next-token", "probe": "probe (best layer)",
           "compression_precision": "compression prec.", "distinction_precision": "distinction prec.",
           "distinction_recall": "distinction rec."}


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
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    csv, md = folder / f"{stem}.csv", folder / f"{stem}.md"
    table.to_csv(csv, index=False)
    md.write_text(to_markdown(table))
    return csv, md
