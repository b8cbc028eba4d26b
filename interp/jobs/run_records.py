"""Records of finished sweep jobs, and the verdict settings every sweep job shares: :class:`SweepRun`
(a sweep, its verdicts, where it wrote) and :class:`PatchingRun` (activation-patching maps and their
cell verdicts, :func:`cell_verdicts`), the verdict rule's flags (:func:`verdict_rule`) and how a run
states them (:func:`rule_line`, :func:`verdict_words`), and the task sweeps' constants. Used by
:mod:`interp.jobs.sweep` (world checkpoints) and :mod:`interp.jobs.task_sweep` (PragWorld and
contrast files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from interp.analysis.config.sweep_config import PRAGWORLD_KINDS
from interp.analysis.config.sweep_job import check_folds
from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.verdicts.agreement import agreement_lines
from interp.analysis.verdicts.layers import LayerVerdicts
from interp.analysis.verdicts.verify_attribution import verify_text

#: what a sweep's summary says about its verdict rule
RULE_KEYS = (
    "rule",
    "min_effect",
    "min_effect_reason",
    "family",
    "per_layer",
    "confidence",
    "resample",
    "groups",
    "n_groups",
    "n_boot",
    "seed",
)


def rule_line(verdicts: LayerVerdicts) -> str:
    """One line saying how the verdicts were reached: the interval, the family, the resampling
    unit and the margin."""
    m = verdicts.meta
    conf = int(round(100 * float(m.get("confidence", 0.95))))
    family = "per layer" if m.get("per_layer") else f"simultaneous over {len(verdicts.frame)} layers"
    unit = f"{m.get('n_groups')} groups ({m.get('groups')})" if m.get("resample") == "groups" else "rows"
    return (
        f"verdicts: {conf} % intervals {family}, resampling {unit}; margin ±{verdicts.min_effect:g} "
        f"({m.get('min_effect_reason')})"
    )


def verdict_words(verdicts: LayerVerdicts) -> list[str]:
    """The sentences the verdicts carry beyond the table: the prior-shift flag
    (``meta["prior_shift"]``), the direct beside the total effect (``meta["direct"]``) and the
    confirmation on held-out groups (``meta["confirmation"]``)."""
    out = []
    for key in ("prior_shift", "direct", "confirmation"):
        out += list((verdicts.meta.get(key) or {}).get("words") or [])
    return out


def verdict_rule(
    n_boot: int = 2000,
    confidence: float = 0.95,
    per_layer: bool = False,
    min_effect: float | None = None,
    resample: str = "groups",
) -> dict[str, Any]:
    """The verdict settings of a sweep job (``--n-boot``, ``--confidence``, ``--per-layer``,
    ``--min-effect``, ``--resample``) as keyword arguments of
    :func:`~interp.analysis.verdicts.layers.layer_verdicts`; checked here (by
    :class:`~interp.analysis.config.sweep_config.VerdictRule`), before any model loads."""
    from interp.analysis.config.sweep_config import VerdictRule

    rule = VerdictRule.flagged(
        n_boot=int(n_boot),
        confidence=float(confidence),
        per_layer=bool(per_layer),
        min_effect=min_effect,
        resample=resample,
    )
    return rule.kwargs()


@dataclass
class SweepRun:
    """What :func:`~interp.jobs.sweep.run_sweep` did: the sweep, its verdicts, where it wrote, and the settings."""

    sweep: SweepResult
    verdicts: LayerVerdicts
    out: Path
    figure: Path
    info: dict[str, Any] = field(default_factory=dict)
    #: every removal's sweep by name (the first is ``sweep``); one entry for a single removal
    sweeps: dict[str, SweepResult] = field(default_factory=dict)

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per layer: ``layer``, ``effect`` (mean ablated − clean), ``ci`` (its bootstrap interval),
        ``verdict``, ``raw_verdict``."""
        return self.verdicts.layer_rows()

    def table(self) -> str:
        rows = self.layer_rows()
        lines = [
            rule_line(self.verdicts),
            f"{'layer':>5}  {'mean effect':>12}  {'interval':>24}  {'verdict':<12}  raw verdict",
        ]
        for r in rows:
            ci = f"[{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}]"
            lines.append(f"{r['layer']:>5}  {r['effect']:>+12.4f}  {ci:>24}  {r['verdict']:<12}  {r['raw_verdict']}")
        if self.info.get("verify"):
            lines.append(verify_text(self.info["verify"]))
        lines += verdict_words(self.verdicts) + agreement_lines(self.info.get("agreement"))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """The settings, where it wrote, the verdict rule (the ``RULE_KEYS`` of the verdicts' meta)
        and the per-layer rows."""
        rule = {k: self.verdicts.meta.get(k) for k in RULE_KEYS}
        return {
            **self.info,
            "out": str(self.out),
            "verdict_rule": rule,
            "layers": self.layer_rows(),
            "words": verdict_words(self.verdicts),
        }


@dataclass
class PatchingRun:
    """What an ``activation-patching`` run did: one :class:`PatchingMap` per component (residual
    stream by layer × position, attention heads by layer × head), the heatmaps, the cells whose
    simultaneous interval clears the margin, the settings."""

    maps: dict[str, Any]
    out: Path
    figures: list[Path]
    info: dict[str, Any] = field(default_factory=dict)
    #: per map, the family-wise cell verdicts (:func:`interp.analysis.verdicts.layers.map_verdicts`)
    cells: dict[str, Any] = field(default_factory=dict)

    def table(self, max_positions: int = 24) -> str:
        """The residual-stream heatmap as text: share of the mean gap restored, layers × positions
        (beyond ``max_positions`` columns, those of largest |share| in any layer, in order; the
        full grid is in ``patching_resid_pre_mean.csv``)."""
        grid = self.maps["resid_pre"].restored()
        labels = self.info.get("labels") or [str(c) for c in grid.columns]
        lines = []
        if grid.shape[1] > max_positions:
            keep = np.sort(np.argsort(-grid.abs().max(axis=0).fillna(0).to_numpy(), kind="stable")[:max_positions])
            lines.append(
                f"(the {max_positions} of {grid.shape[1]} positions with the largest |share|; all in "
                "patching_resid_pre_mean.csv)"
            )
            grid = grid.iloc[:, keep]
            labels = [labels[j] for j in keep] if len(labels) > keep.max() else [str(c) for c in grid.columns]
            lines.append("  pos  " + " ".join(f"{str(c)[:6]:>6}" for c in grid.columns))
        lines.append("layer  " + " ".join(f"{str(t)[:6]:>6}" for t in labels))
        for layer, row in grid.iterrows():
            lines.append(f"{layer:>5}  " + " ".join(f"{v:>6.2f}" for v in row.to_numpy()))
        for comp, c in self.cells.items():
            got = c.summary()["outcomes"]
            lines.append(
                f"{comp}: {got['above'] + got['below']} of {c.meta['cells']} cells move the metric by more "
                f"than ±{c.meta['min_effect']:g} ({got['above']} up, {got['below']} down; "
                f"{int(round(100 * c.meta['confidence']))} % {c.meta['family'].split(' (')[0]}), "
                f"{got['negligible']} negligible"
            )
        for comp, rows in (self.info.get("verify") or {}).items():
            lines.append(f"{comp}: " + verify_text(rows))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        out = {**self.info, "out": str(self.out)}
        for comp, m in self.maps.items():
            out[comp] = {
                "clean_mean": m.meta["clean_mean"],
                "corrupted_mean": m.meta["corrupted_mean"],
                "restored": m.restored().round(4).to_numpy().tolist(),
            }
            if comp in self.cells:
                c = self.cells[comp]
                out[comp]["cells"] = {**c.summary(), "above": c.cells("above"), "below": c.cells("below")}
        return out


def cell_verdicts(maps: dict[str, Any], rule: dict[str, Any], seed: int, out_dir: Path | None) -> dict[str, Any]:
    """Per map, the family-wise cell verdicts (:func:`~interp.analysis.verdicts.layers.map_verdicts`;
    the margin of the map's metric, the sweep's confidence and resampling), saved as
    ``patching_<map>_cells.csv`` / ``.json`` when ``out_dir`` is given."""
    from interp.analysis.verdicts.layers import map_verdicts

    cells = {}
    for comp, m in maps.items():
        cells[comp] = map_verdicts(
            m,
            n_boot=rule["n_boot"],
            confidence=rule["confidence"],
            seed=seed,
            min_effect=rule["min_effect"],
            per_cell=rule["per_layer"],
            resample=rule["resample"],
        )
        if out_dir is not None:
            cells[comp].save(out_dir, f"patching_{comp}_cells")
    return cells


#: the default metric of a PragWorld sweep (``--metric``; docs/concepts/verdicts.md, "bias vs mechanism")
PRAGWORLD_METRIC = "p-gold"
#: per yes/no metric, the score above which a row counts as answered correctly (the raw rule's A_ℓ)
YESNO_THRESHOLDS = {"p-gold": 0.5, "logit-diff": 0.0, "accuracy": 0.5}


__all__ = [
    "PRAGWORLD_KINDS",
    "PRAGWORLD_METRIC",
    "RULE_KEYS",
    "YESNO_THRESHOLDS",
    "PatchingRun",
    "SweepRun",
    "cell_verdicts",
    "check_folds",
    "rule_line",
    "verdict_rule",
    "verdict_words",
]
