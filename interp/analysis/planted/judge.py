"""A planting judged against the unplanted model's own verdicts: which layers *become* harmful.

A real model has layers whose removal already raises the metric before anything is planted (the
negative name movers of IOI, Wang et al. 2022 §3.3), so "the sweep calls layer k harmful" says
nothing about a planting by itself. :func:`verdict_changes` puts the two sweeps' verdicts side by
side, layer by layer (the same examples, the same rule):

- ``changed``: the verdict differs; ``became_harmful``: harmful on the planted model and not on the
  unplanted one (the raw rule's the same way, from its ``raw_verdict`` columns);
- ``harm_rose`` (with :func:`harm_rise`, reported beside the verdicts, not counted as newly
  harmful): a layer harmful on both models whose harm *grew* — the paired change of its
  per-example effect (same prompts, planted − unplanted) has its band (the verdicts' rule: cluster
  bootstrap-t over groups, simultaneous over the layers) beyond the margin. A planting into a layer
  the model already uses against the answer leaves its verdict ``harmful`` and makes it more so
  (docs/reproductions/smollm2-ioi-planted.md: layer 20 of the planting 8 + 20, +1.41 → +4.48).
  Not counted, by measurement: on SmolLM2 a fine-tuning toward the *correct* answer makes the
  already-harmful late layers more harmful too (they push back harder against a stronger answer),
  so a rise alone does not say "planted";
- ``delta_effect``: the planted model's mean effect minus the unplanted one's (in the metric's units,
  oriented so that positive = removing the layer helps *more* than before); ``rank``: the order of
  the changed layers by their effect on the planted model (oriented: the benefit of removing
  them), largest first (1 = the layer whose removal helps the planted model most). Not by
  ``delta_effect``: a planting that lowers the clean metric shrinks every useful layer's loss on
  removal, so useful layers gain too without doing harm.

:func:`detection_scores` turns one comparison into the numbers a planting is judged by: whether the
planted layers became harmful and took the top ranks among the changed layers, and the precision
and recall of the newly harmful layers for the calibrated rule and the paper's raw rule (accuracy
with the layer ablated vs without, PragWorld §6.2) side by side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.verdicts.bands import cluster_band
from interp.analysis.verdicts.layers import LayerVerdicts


def harm_rise(
    unplanted: Any,
    planted: Any,
    *,
    min_effect: float,
    higher_is_better: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per layer, the paired change of the removal's benefit from the unplanted to the planted
    model on the same examples (two sweeps, :class:`~interp.analysis.engines.sweeps.SweepResult`, with ``example``,
    ``layer``, ``effect`` and ``group`` columns): ``rise`` (mean of planted − unplanted effect,
    oriented: + = removing the layer helps more), ``rise_low`` / ``rise_high`` (the verdicts' band:
    cluster bootstrap-t over groups, simultaneous over the layers) and ``rose`` (``rise_low`` >
    ``min_effect``)."""
    a = unplanted.frame.pivot(index="example", columns="layer", values="effect").sort_index()
    b = planted.frame.pivot(index="example", columns="layer", values="effect").sort_index()
    if list(a.index) != list(b.index) or list(a.columns) != list(b.columns):
        raise ValueError("the two sweeps must cover the same examples and layers (the same prompts, both sweeps)")
    groups = None
    if "group" in planted.frame.columns:
        groups = planted.frame.groupby("example")["group"].first().reindex(b.index).to_numpy()
    sign = 1.0 if higher_is_better else -1.0
    band = cluster_band(sign * (b.to_numpy(dtype=float) - a.to_numpy(dtype=float)), groups, n_boot=n_boot, seed=seed)
    return pd.DataFrame(
        {
            "layer": b.columns.astype(int),
            "rise": band.estimate,
            "rise_low": band.low,
            "rise_high": band.high,
            "rose": band.low > min_effect,
        }
    )


def verdict_changes(
    unplanted: LayerVerdicts,
    planted: LayerVerdicts,
    planted_layers: Sequence[int] = (),
    rise: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per layer: ``layer``, ``planted`` (a planted layer?), ``verdict_before`` /
    ``verdict_after``, ``effect_before`` / ``effect_after`` (mean ablated − clean), ``delta_effect``
    (oriented: + = removal helps more), ``benefit_after`` (the planted model's effect, oriented),
    ``ci_low`` / ``ci_high`` (the planted model's interval of the
    benefit), ``changed``, ``became_harmful``, ``raw_before`` / ``raw_after``, ``raw_became_harmful``
    and ``rank`` (1 = the largest benefit of removal on the planted model among the changed layers;
    NaN if unchanged). With ``rise`` (:func:`harm_rise`): its columns joined, and ``harm_rose`` — a
    layer harmful on both models whose harm grew (reported; ``changed`` and ``became_harmful`` stay
    the verdicts')."""
    for name, v in (("unplanted", unplanted), ("planted", planted)):
        if v.meta.get("metric") != unplanted.meta.get("metric"):
            raise ValueError(
                f"the {name} verdicts are on metric {v.meta.get('metric')!r}, the unplanted ones on "
                f"{unplanted.meta.get('metric')!r}: compare sweeps of one metric"
            )
    a = unplanted.frame.set_index("layer")
    b = planted.frame.set_index("layer")
    if list(a.index) != list(b.index):
        raise ValueError(f"the two sweeps cover different layers ({list(a.index)} vs {list(b.index)})")
    sign = 1.0 if planted.meta.get("higher_is_better", True) else -1.0
    out = pd.DataFrame(
        {
            "layer": a.index.astype(int),
            "planted": [int(x) in set(int(p) for p in planted_layers) for x in a.index],
            "verdict_before": a["verdict"].to_numpy(),
            "verdict_after": b["verdict"].to_numpy(),
            "effect_before": a["mean_effect"].to_numpy(dtype=float),
            "effect_after": b["mean_effect"].to_numpy(dtype=float),
            "ci_low": b["ci_low"].to_numpy(dtype=float),
            "ci_high": b["ci_high"].to_numpy(dtype=float),
            "raw_before": a["raw_verdict"].to_numpy(),
            "raw_after": b["raw_verdict"].to_numpy(),
        }
    )
    out["delta_effect"] = sign * (out["effect_after"] - out["effect_before"])
    out["changed"] = out["verdict_before"] != out["verdict_after"]
    out["became_harmful"] = (out["verdict_after"] == "harmful") & (out["verdict_before"] != "harmful")
    out["raw_became_harmful"] = (out["raw_after"] == "harmful") & (out["raw_before"] != "harmful")
    out["harm_rose"] = False
    if rise is not None:
        r = rise.set_index("layer").reindex(out["layer"])
        for c in ("rise", "rise_low", "rise_high"):
            out[c] = r[c].to_numpy(dtype=float)
        both = (out["verdict_before"] == "harmful") & (out["verdict_after"] == "harmful")
        out["harm_rose"] = both & r["rose"].fillna(False).astype(bool).to_numpy()
    out["benefit_after"] = sign * out["effect_after"]
    order = out[out["changed"]].sort_values("benefit_after", ascending=False)
    out["rank"] = np.nan
    out.loc[order.index, "rank"] = np.arange(1, len(order) + 1)
    return out


def _precision_recall(found: set[int], truth: set[int]) -> tuple[float, float]:
    tp = len(found & truth)
    precision = tp / len(found) if found else math.nan
    recall = tp / len(truth) if truth else math.nan
    return precision, recall


def detection_scores(changes: pd.DataFrame) -> dict[str, Any]:
    """The judgement of one planting from :func:`verdict_changes`: ``newly_harmful`` (calibrated
    rule) and ``raw_newly_harmful`` (raw rule) layers; ``planted_harmful`` (every planted layer
    became harmful), ``planted_top`` (the planted layers hold the top ranks among the changed
    layers), ``found`` (both); precision / recall of each rule's newly harmful layers against the
    planted ones; ``other_changed``: the changed layers that were not planted; ``harm_rose``: the
    layers harmful before and after whose harm grew (:func:`harm_rise`; empty without it). A control (no planted
    layer) has NaN recall, and its precision is NaN unless it calls a layer newly harmful (then 0)."""
    truth = set(int(x) for x in changes.loc[changes["planted"], "layer"])
    new = set(int(x) for x in changes.loc[changes["became_harmful"], "layer"])
    raw = set(int(x) for x in changes.loc[changes["raw_became_harmful"], "layer"])
    ranks = changes.loc[changes["planted"], "rank"]
    top = bool(truth) and bool(ranks.notna().all()) and set(ranks.astype(int)) == set(range(1, len(truth) + 1))
    harmful = bool(truth) and truth <= new
    p, r = _precision_recall(new, truth)
    rp, rr = _precision_recall(raw, truth)
    other = sorted(int(x) for x in changes.loc[changes["changed"] & ~changes["planted"], "layer"])
    return {
        "planted": sorted(truth),
        "newly_harmful": sorted(new),
        "raw_newly_harmful": sorted(raw),
        "planted_harmful": harmful,
        "planted_top": top,
        "found": harmful and top,
        "precision": p,
        "recall": r,
        "raw_precision": rp,
        "raw_recall": rr,
        "other_changed": other,
        "harm_rose": sorted(int(x) for x in changes.loc[changes["harm_rose"], "layer"])
        if "harm_rose" in changes
        else [],
    }


__all__ = ["detection_scores", "harm_rise", "verdict_changes"]
