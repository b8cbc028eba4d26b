"""Verdicts across removal kinds: for each layer, the kinds under which it is harmful or useful, and
its dose-response under ``scale``.

A layer sweep can remove an MLP in several ways (:mod:`interp.analysis.engines.removals`: ``zero``,
``mean``, ``resample``, ``scale`` at factors α). :func:`compare_removals` takes one sweep per
removal, makes each one's verdicts with the same rule (the caller's ``judge``, e.g.
:func:`~interp.analysis.verdicts.layers.layer_verdicts` with its margin and band) and lines them up:

- ``agreement`` — one row per layer: its verdict under every removal, ``harmful_under`` /
  ``useful_under`` (the removals that call it so), ``agreement`` over the *full* removals (zero,
  mean, resample, scale at α = 0; a partial dose such as α = 0.75 may fall inside the margin and
  has the dose column instead): ``all harmful``, ``all useful``, ``mixed``, or ``none`` (harmful or
  useful under none of them), and with ``scale`` the ``dose_response`` shape below. A layer harmful under zero but not under mean or resample is one whose zero-out
  effect is the surprise of an off-distribution stream (``shared/reference/ablations.md``).
- ``dose`` — the dose-response curve: per layer and α (α = 1, the model itself, has effect 0 by
  definition and is not run), the mean effect, its band and verdict under ``scale α``.
  The shape, in the benefit (higher = better, so a harmful layer's curve rises as α falls), read
  from α = 1 down to the smallest α: ``rising`` / ``falling`` when every step goes the way of the
  total change or against it by less than the margin δ (a monotone curve up to noise smaller than
  what the verdicts call negligible), ``flat`` when the total change is within ±δ, else
  ``non-monotone`` (the reference's sign of an artefact).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.engines.removals import Removal
from interp.analysis.engines.sweeps import SweepResult
from interp.results import save_result


def _shape(alphas: np.ndarray, benefit: np.ndarray, margin: float) -> str:
    order = np.argsort(-alphas)
    b = np.concatenate([[0.0], benefit[order]])  # α = 1 first: the model, benefit 0
    total = b[-1] - b[0]
    if not np.isfinite(b).all():
        return "unknown"
    if abs(total) <= margin:
        return "flat"
    steps = np.diff(b) * np.sign(total)
    if (steps >= -margin).all():
        return "rising" if total > 0 else "falling"
    return "non-monotone"


@dataclass
class RemovalComparison:
    """Verdicts of one sweep under several removals (:func:`compare_removals`).

    ``verdicts``: removal name → :class:`~interp.analysis.verdicts.layers.LayerVerdicts`; ``frame``: the
    agreement table (one row per layer); ``dose``: the dose-response table (empty without
    ``scale``); ``meta``: the removals' settings."""

    verdicts: dict[str, Any]
    frame: pd.DataFrame
    dose: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The removals, and per layer its agreement row."""
        return {**self.meta, "agreement": self.frame.to_dict(orient="records")}

    def markdown(self) -> str:
        """The agreement table as Markdown (what ``agreement.md`` holds)."""
        cols = list(self.frame.columns)
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in self.frame.itertuples(index=False):
            lines.append("| " + " | ".join("" if v is None else str(v) for v in r) + " |")
        return "\n".join(lines)

    def save(self, folder: str | Path, stem: str = "agreement") -> Path:
        """``verdicts_<removal>.json`` for every removal, ``<stem>.json`` / ``.csv`` / ``.md`` and,
        with ``scale``, ``dose_response.csv``; returns the folder."""
        folder = Path(folder)
        for name, v in self.verdicts.items():
            v.save(folder, stem=f"verdicts_{name}")
        save_result(folder, stem, self.summary(), **{"": self.frame})
        (folder / f"{stem}.md").write_text(self.markdown() + "\n")
        if len(self.dose):
            self.dose.to_csv(folder / "dose_response.csv", index=False)
        return folder


def compare_removals(sweeps: dict[str, SweepResult], judge: Callable[[SweepResult], Any]) -> RemovalComparison:
    """Verdicts of every removal's sweep (``judge(sweep) -> LayerVerdicts``), the agreement table
    and the dose-response table (see the module docstring). ``sweeps``: removal name → sweep, in the
    order to report (their ``meta["ablation"]`` says what each removal was)."""
    if not sweeps:
        raise ValueError("compare_removals needs at least one sweep")
    verdicts = {name: judge(s) for name, s in sweeps.items()}
    layers = sorted({int(x) for v in verdicts.values() for x in v.frame["layer"]})
    table = pd.DataFrame({"layer": layers})
    for name, v in verdicts.items():
        table[name] = table["layer"].map(dict(zip(v.frame["layer"].astype(int), v.frame["verdict"])))
    names = list(verdicts)
    table["harmful_under"] = [",".join(n for n in names if r[n] == "harmful") for _, r in table.iterrows()]
    table["useful_under"] = [",".join(n for n in names if r[n] == "useful") for _, r in table.iterrows()]

    full = [
        n
        for n in names
        if (sweeps[n].meta.get("ablation") or {}).get("kind") != "scale"
        or (sweeps[n].meta.get("ablation") or {}).get("factor") == 0.0
    ]  # partial doses: the dose column

    def agreement(r: pd.Series) -> str:
        said = [r[n] for n in full]
        if all(v == "harmful" for v in said):
            return "all harmful"
        if all(v == "useful" for v in said):
            return "all useful"
        return "mixed" if any(v in ("harmful", "useful") for v in said) else "none"

    table["agreement"] = table.apply(agreement, axis=1)
    dose_rows = []
    for name, v in verdicts.items():
        abl = sweeps[name].meta.get("ablation") or {}
        if abl.get("kind") != "scale":
            continue
        lo, hi = v.effect_interval()
        for j, r in enumerate(v.frame.itertuples(index=False)):
            dose_rows.append(
                {
                    "layer": int(r.layer),
                    "alpha": float(abl["factor"]),
                    "mean_effect": float(r.mean_effect),
                    "mean_benefit": float(r.mean_benefit),
                    "ci_low": float(lo[j]),
                    "ci_high": float(hi[j]),
                    "verdict": str(r.verdict),
                    "margin": v.min_effect,
                }
            )
    dose = pd.DataFrame(
        dose_rows, columns=["layer", "alpha", "mean_effect", "mean_benefit", "ci_low", "ci_high", "verdict", "margin"]
    )
    if len(dose):
        shapes = {
            int(layer): _shape(g["alpha"].to_numpy(), g["mean_benefit"].to_numpy(), float(g["margin"].iloc[0]))
            for layer, g in dose.groupby("layer")
        }
        table["dose_response"] = table["layer"].map(shapes)
    meta = {
        "removals": {name: sweeps[name].meta.get("ablation") for name in names},
        "columns": "per removal its verdict; harmful_under / useful_under: the removals that call the layer so"
        + (
            "; dose_response: the shape of the benefit as α falls from 1 (rising: removing more helps more)"
            if len(dose)
            else ""
        ),
    }
    return RemovalComparison(verdicts, table, dose, meta)


def run_removals(
    run_one: Callable[[Removal, Any], SweepResult],
    n: int,
    acc: Any,
    removals: list[Removal],
    units: Any = None,
) -> dict[str, SweepResult]:
    """One sweep per removal (name → sweep, in order), each sharded over the processes of ``acc``
    (:func:`~interp.analysis.engines.processes.sharded`; ``run_one(removal, part)`` sweeps a share of the ``n``
    examples, ``part`` a slice or sorted row indices). ``scale`` at α = 0 is zero-out: the zero
    sweep is reused when it ran. ``units``: a :class:`~interp.analysis.engines.unitstore.UnitRunner` runs
    each removal unit by unit instead, writing each finished unit and reading back those a previous
    run finished (one process)."""
    from interp.analysis.engines.processes import sharded
    from interp.models.parallel import rank_and_size

    if units is not None and rank_and_size(acc)[1] > 1:
        units = None  # several processes share the rows: no units (interp.analysis.engines.unitstore)

    out: dict[str, SweepResult] = {}
    for r in removals:
        if r.kind == "scale" and r.factor == 0.0 and "zero" in out:
            out[r.name] = SweepResult(
                out["zero"].frame,
                {
                    **out["zero"].meta,
                    "ablation": {**r.to_dict(), "same_as": "zero (α = 0 is zero-out; the zero sweep is reused)"},
                },
            )
            continue

        def one(part: Any, r: Removal = r) -> SweepResult:
            return run_one(r, part)

        out[r.name] = units.run(r.name, one) if units is not None else sharded(one, n, acc)
    if units is not None:
        units.close()
    return out


def discovery_reference(groups: Any, folds: int | None, seed: int = 0) -> np.ndarray | None:
    """The reference rows of ``mean`` / ``resample`` under confirmation: the discovery groups of
    round 0 (every fold but fold 0, :func:`~interp.analysis.verdicts.confirmation.fold_groups` with the same
    seed), so the confirmation half never shapes the removal; None (all rows) without folds."""
    if not folds:
        return None
    from interp.analysis.verdicts.confirmation import fold_groups

    return np.flatnonzero(fold_groups(groups, folds, seed) != 0)


def agreement_lines(rows: list[dict[str, Any]] | None) -> list[str]:
    """The agreement table as text lines for a terminal (none without rows)."""
    if not rows:
        return []
    cols = [c for c in rows[0] if c not in ("harmful_under", "useful_under")]
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    out = ["verdicts by removal (agreement.csv):", "  ".join(f"{c:<{width[c]}}" for c in cols)]
    out += ["  ".join(f"{str(r[c]):<{width[c]}}" for c in cols) for r in rows]
    return out


__all__ = [
    "RemovalComparison",
    "agreement_lines",
    "compare_removals",
    "discovery_reference",
    "run_removals",
]
