"""How well a model does a contrast task: accuracy and mean logit difference, with intervals, per
template (``interp eval``).

For each example of a :class:`~interp.tasks.ContrastTask` (an IOI prompt, a PragWorld label prompt
as a :class:`~interp.tasks.YesNoTask`, any contrast file) one forward gives, at the last prompt
token,

- ``logit_diff`` = logit(correct) − logit(foil) (Wang et al. 2022 §2: IO − S on IOI),
- ``p_correct`` = P(correct) in the softmax over the two logits (PragWorld's P(gold)),
- ``right`` = ``logit_diff > 0`` (the model prefers the correct token; the same as
  ``p_correct > 0.5``).

The summary (overall, per template = the task's categories, and per ABBA/BABA order where the
examples' meta has one) holds their means with intervals from the bootstrap over the task's
*groups* (IOI: template × name pair; PragWorld: an original and its alterations) — the group sums
and seeded draws of :mod:`interp.analysis.verdicts.bands`, and the *percentile* interval of the resampled
means (:func:`cluster_percentile`), as PragWorld's accuracies are reported
(:func:`interp.metrics.pragworld.score_pragworld`). Not the verdicts' bootstrap-t: an accuracy
near 1 has a standard error near 0 in most replicates, and its t interval leaves [0, 1] or becomes
infinite; a percentile interval stays inside the values' range. Where every group is right the
interval is [1, 1]: read it as "no resampled group was wrong", not as certainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.analysis.engines.scoring import Batch, forward
from interp.analysis.verdicts.bands import group_index, group_sums, resample_counts
from interp.results import save_result

#: the per-example columns the summary averages, and how tables name them
QUANTITIES = {"right": "accuracy", "logit_diff": "logit_diff", "p_correct": "p_correct"}


@dataclass
class ContrastEval:
    """A contrast task's evaluation (module docstring): ``frame`` one row per example; ``table`` one
    row per subset (``all``, each template, each order) with ``n``, ``groups`` and each quantity's
    mean, ``_lo`` and ``_hi``; ``settings`` the task, model and bootstrap."""

    frame: pd.DataFrame
    table: pd.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """The headline numbers (the ``all`` row) and the settings."""
        row = self.table[self.table["subset"] == "all"].iloc[0]
        out: dict[str, Any] = {"n": int(row["n"]), "groups": int(row["groups"])}
        for name in QUANTITIES.values():
            out[name], out[f"{name}_lo"], out[f"{name}_hi"] = (
                float(row[name]),
                float(row[f"{name}_lo"]),
                float(row[f"{name}_hi"]),
            )
        out["n_right"] = int(self.frame["right"].sum())
        return {**out, "settings": self.settings}

    def save(self, folder: str | Path, stem: str = "contrast_eval") -> Path:
        """``<stem>.json`` (summary), ``<stem>.csv`` (per example), ``<stem>_table.csv``."""
        return save_result(folder, stem, self.summary(), **{"": self.frame, "table": self.table})

    def markdown(self, digits: int = 2) -> str:
        """The table as Markdown: subset, n, groups, accuracy, mean logit difference and P(correct),
        each ``mean [low, high]``."""

        def cell(r: Any, name: str, pct: bool = False) -> str:
            k = 100.0 if pct else 1.0
            m, lo, hi = (float(r[name]) * k, float(r[f"{name}_lo"]) * k, float(r[f"{name}_hi"]) * k)
            if math.isnan(lo) or math.isnan(hi):
                return f"{m:.{digits}f}"
            return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"

        lines = [
            "| subset | n | groups | right | accuracy % | logit diff | P(correct) |",
            "|---|---|---|---|---|---|---|",
        ]
        for _, r in self.table.iterrows():
            lines.append(
                f"| {r['subset']} | {int(r['n'])} | {int(r['groups'])} | {int(r['n_right'])} | "
                f"{cell(r, 'accuracy', True)} | {cell(r, 'logit_diff')} | {cell(r, 'p_correct')} |"
            )
        return "\n".join(lines)


def contrast_scores(
    bridge: Any, task: Any, batch_size: int = 32, progress: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """``(logit_diff, p_correct)`` of every example of ``task`` (a ContrastTask) on ``bridge``, in
    the task's order. Prompts that start alike (one template's opening) are read as token tries,
    each distinct prefix once, both metrics from one packed forward per batch of about
    ``batch_size`` rows (:func:`interp.analysis.engines.prefix.score_rows`); while a hook is registered on
    the bridge's hook points (it may be tied to positions), or a prompt exceeds a sliding attention
    window, the rows are read unshared in length buckets of ``batch_size`` (right padding; position
    ids over real tokens)."""
    from tqdm.auto import tqdm

    from interp.analysis.engines.prefix import score_rows
    from interp.metrics.pragworld_eval import can_share_prefix, length_buckets

    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    ld, pc = task.logit_diff_metric(), task.prob_metric()
    seqs = task.ids
    if can_share_prefix(bridge, seqs):
        both, _ = score_rows(bridge, seqs, [ld, pc], batch_tokens=batch_size * max(map(len, seqs)), pad_id=task.pad_id)
        return both[0], both[1]
    out_ld, out_pc = np.zeros(len(task)), np.zeros(len(task))
    for idx in tqdm(
        length_buckets([len(s) for s in seqs], batch_size), disable=not progress, desc="contrast eval", unit="batch"
    ):
        rows = [int(i) for i in idx]
        ids, mask = task.inputs(rows=rows)
        logits = forward(bridge, ids, mask)
        batch = Batch(ids, mask, torch.tensor(rows))
        out_ld[idx] = ld(logits, batch).float().cpu().numpy()
        out_pc[idx] = pc(logits, batch).float().cpu().numpy()
    return out_ld, out_pc


def cluster_percentile(
    values: Any, groups: Any, *, n_boot: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(mean, low, high, n_groups)`` of each column of ``values`` [rows, k]: the percentile
    interval of the mean over ``n_boot`` resamples of whole groups (the draws of
    :func:`~interp.analysis.verdicts.bands.resample_counts`, seeded). The interval stays inside the values'
    range (an accuracy in [0, 1]); fewer than 2 groups: NaN bounds."""
    values = np.asarray(values, dtype=float)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be ≥ 1, got {n_boot}")
    index, g = group_index(np.asarray(groups), values.shape[0])
    s, m = group_sums(values, index, g)
    est = s.sum(0) / m.sum(0)
    if g < 2:
        nan = np.full(values.shape[1], np.nan)
        return est, nan, nan, g
    w = resample_counts(g, n_boot, np.random.default_rng(seed)).astype(float)
    boot = (w @ s) / (w @ m)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(boot, alpha, axis=0), np.quantile(boot, 1 - alpha, axis=0)
    return est, low, high, g


def _subset_row(name: str, frame: pd.DataFrame, n_boot: int, confidence: float, seed: int) -> dict[str, Any]:
    cols = list(QUANTITIES)
    est, low, high, g = cluster_percentile(
        frame[cols].to_numpy(dtype=float),
        frame["group"].astype(str).to_numpy(),
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    row: dict[str, Any] = {"subset": name, "n": len(frame), "groups": int(g), "n_right": int(frame["right"].sum())}
    for j, c in enumerate(cols):
        name_c = QUANTITIES[c]
        row[name_c], row[f"{name_c}_lo"], row[f"{name_c}_hi"] = float(est[j]), float(low[j]), float(high[j])
    return row


def evaluate_contrast(
    bridge: Any,
    task: Any,
    *,
    batch_size: int = 32,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    progress: bool = False,
) -> ContrastEval:
    """Score every example of ``task`` (a :class:`~interp.tasks.ContrastTask`, a YesNoTask included)
    on ``bridge`` and summarise (module docstring): overall, per template, per order. ``n_boot``
    group resamples seeded by ``seed``; ``confidence`` of each interval."""
    ld, pc = contrast_scores(bridge, task, batch_size, progress)
    tok = task.tokenization.tokenizer
    frame = pd.DataFrame(
        {
            "example": np.arange(len(task)),
            "group": [str(g) for g in task.groups],
            "template": task.categories,
            "correct": tok.convert_ids_to_tokens([int(i) for i in task.correct_ids]),
            "foil": tok.convert_ids_to_tokens([int(i) for i in task.foil_ids]),
            "logit_diff": ld,
            "p_correct": pc,
            "right": (ld > 0).astype(float),
        }
    )
    examples = getattr(task, "examples", None)
    orders = [e.meta.get("order") for e in examples] if examples is not None else None  # a YesNoTask has rows
    if orders is not None and all(isinstance(o, str) for o in orders):
        frame["order"] = orders
    subsets = [("all", frame)]
    subsets += [(f"template: {t}", f) for t, f in frame.groupby("template", sort=False)]
    if "order" in frame:
        subsets += [(f"order: {o}", f) for o, f in frame.groupby("order", sort=True)]
    table = pd.DataFrame([_subset_row(name, f, n_boot, confidence, seed) for name, f in subsets])
    settings = {
        **task.settings(),
        "batch_size": batch_size,
        "n_boot": n_boot,
        "confidence": confidence,
        "seed": seed,
        "interval": "percentile bootstrap of whole groups (cluster_percentile), per quantity",
    }
    return ContrastEval(frame, table, settings)


__all__ = ["QUANTITIES", "ContrastEval", "cluster_percentile", "contrast_scores", "evaluate_contrast"]
