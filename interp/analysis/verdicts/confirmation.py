"""Confirmation on held-out groups: are a sweep's verdicts found again on data that did not choose them?

Choosing the layers with the largest effects and reporting those same effects inflates them (the
winner's curse). :func:`confirm_verdicts` splits the **groups** (never rows of one group apart)
into ``folds`` folds, seeded: round k makes the verdicts on every fold but k (*discovery*, the
rule of :func:`~interp.analysis.verdicts.layers.layer_verdicts`, same margin, confidence and resampling)
and re-estimates the layers it called ``harmful`` or ``useful`` (*selected*) on fold k alone
(*confirmation*), with the same rule: the same bootstrap band — simultaneous over the selected
layers only, a family fixed before the confirmation data are seen — and the same margin δ.

**Confirmed**: a selected layer whose confirmation interval lies beyond the margin on the same side
as its discovery verdict (harmful: entirely above +δ in benefit; useful: entirely below −δ), i.e.
the confirmation half gives it the same verdict. A layer whose effect is pure noise is selected
by chance on the discovery half and then confirmed with probability at most (1 − confidence)/2
(one side of the band), so a winner's-curse selection is rarely confirmed; a layer with a real
effect beyond the margin is confirmed with the power of the half-size sweep.

``folds = 2`` (``--confirm``): the discovery and confirmation halves, round 0 reported (the
verdict columns ``discovery_verdict``, ``confirmation_effect`` / ``_low`` / ``_high``,
``confirmation_verdict``, ``confirmed``); both rounds are run and counted (``selected_rounds``,
``confirmed_rounds``: in how many rounds the layer was selected, and confirmed). ``folds = K``:
K rounds, discovery on K − 1 folds; round 0's columns, the counts over all K.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.engines.sweeps import SweepResult

#: the discovery verdicts a confirmation re-estimates
SELECTED = ("harmful", "useful")


def fold_groups(groups: Any, folds: int, seed: int = 0) -> np.ndarray:
    """Each row's fold (0..folds−1): the distinct groups shuffled with ``seed`` and dealt into
    ``folds`` folds of (almost) equal numbers of groups."""
    groups = np.asarray(groups)
    uniq, index = np.unique(groups, return_inverse=True)
    if len(uniq) < 2 * folds:
        raise ValueError(
            f"{folds} folds need at least {2 * folds} groups (2 per fold for an interval), got {len(uniq)}"
        )
    order = np.random.default_rng(seed).permutation(len(uniq))
    fold_of_group = np.empty(len(uniq), dtype=int)
    fold_of_group[order] = np.arange(len(uniq)) % folds
    return fold_of_group[index.reshape(-1)]


def _subset(sweep: SweepResult, keep: np.ndarray, layers: list[int] | None = None) -> SweepResult:
    f = sweep.frame
    rows = np.isin(f["example"].to_numpy(), np.flatnonzero(keep))
    if layers is not None:
        rows &= f["layer"].isin(layers).to_numpy()
    return SweepResult(f[rows].reset_index(drop=True), dict(sweep.meta))


def confirm_verdicts(
    verdicts: Any, sweep: SweepResult, folds: int = 2, *, seed: int = 0, threshold: float | None = None, **rule: Any
) -> Any:
    """Add the confirmation (module docstring) to ``verdicts`` (the full-data
    :class:`~interp.analysis.verdicts.layers.LayerVerdicts` of ``sweep``; their own ``verdict`` column is
    kept): per-layer columns and ``meta["confirmation"]`` (settings, the selected and confirmed
    layers of round 0, sentences). ``rule``: the verdicts' settings (``n_boot``, ``confidence``,
    ``per_layer``, ``min_effect``, ``resample``)."""
    from interp.analysis.verdicts.layers import layer_verdicts

    f = sweep.frame
    n_examples = int(f["example"].max()) + 1
    first = f.groupby("example")["group"].first() if "group" in f.columns else pd.Series(np.arange(n_examples))
    groups = first.reindex(range(n_examples)).to_numpy()
    fold = fold_groups(groups, folds, seed)
    layers = [int(x) for x in verdicts.frame["layer"]]
    selected_rounds = dict.fromkeys(layers, 0)
    confirmed_rounds = dict.fromkeys(layers, 0)
    round0: dict[str, Any] = {}
    for k in range(folds):
        disc = layer_verdicts(_subset(sweep, fold != k), seed=seed, threshold=threshold, **rule)
        dv = dict(zip(disc.frame["layer"].astype(int), disc.frame["verdict"]))
        chosen = [x for x in layers if dv.get(x) in SELECTED]
        conf = None
        if chosen:
            conf = layer_verdicts(_subset(sweep, fold == k, chosen), seed=seed, threshold=threshold, **rule)
            cv = dict(zip(conf.frame["layer"].astype(int), conf.frame["verdict"]))
            for x in chosen:
                selected_rounds[x] += 1
                confirmed_rounds[x] += int(cv[x] == dv[x])
        if k == 0:
            round0 = {
                "discovery": disc,
                "confirmation": conf,
                "chosen": chosen,
                "groups": (len(np.unique(groups[fold != 0])), len(np.unique(groups[fold == 0]))),
            }
    disc, conf = round0["discovery"], round0["confirmation"]
    fr = verdicts.frame
    fr["discovery_verdict"] = [
        str(dict(zip(disc.frame["layer"].astype(int), disc.frame["verdict"]))[x]) for x in layers
    ]
    est = {x: np.nan for x in layers}
    lo, hi = dict(est), dict(est)
    cver = dict.fromkeys(layers, "")
    if conf is not None:
        clo, chi = conf.effect_interval()
        for j, r in enumerate(conf.frame.itertuples(index=False)):
            est[int(r.layer)], lo[int(r.layer)], hi[int(r.layer)] = float(r.mean_effect), clo[j], chi[j]
            cver[int(r.layer)] = str(r.verdict)
    fr["confirmation_effect"] = [est[x] for x in layers]
    fr["confirmation_low"], fr["confirmation_high"] = [lo[x] for x in layers], [hi[x] for x in layers]
    fr["confirmation_verdict"] = [cver[x] for x in layers]
    fr["confirmed"] = [
        bool(x in round0["chosen"] and cver[x] == fr["discovery_verdict"].iloc[j]) for j, x in enumerate(layers)
    ]
    fr["selected_rounds"] = [selected_rounds[x] for x in layers]
    fr["confirmed_rounds"] = [confirmed_rounds[x] for x in layers]
    g_disc, g_conf = round0["groups"]
    meta = {
        "folds": int(folds),
        "seed": int(seed),
        "discovery_groups": g_disc,
        "confirmation_groups": g_conf,
        "rule": "discovery: the verdict rule on every fold but one; confirmation: the layers it calls harmful or "
        "useful re-estimated on the held-out fold with the same rule (band simultaneous over those "
        "layers, same margin); confirmed: the same verdict there",
        "selected": {
            v: [x for x in round0["chosen"] if fr.loc[fr.layer == x, "discovery_verdict"].iloc[0] == v]
            for v in SELECTED
        },
        "confirmed": {
            v: [
                x
                for x in layers
                if fr.loc[fr.layer == x, "confirmed"].iloc[0]
                and fr.loc[fr.layer == x, "discovery_verdict"].iloc[0] == v
            ]
            for v in SELECTED
        },
    }
    meta["words"] = [confirmation_words(meta, selected_rounds, confirmed_rounds)]
    verdicts.meta["confirmation"] = meta
    return verdicts


def confirmation_words(meta: dict[str, Any], selected_rounds: dict[int, int], confirmed_rounds: dict[int, int]) -> str:
    """One sentence: what round 0 found on the discovery groups and what the held-out groups confirmed."""

    def ls(x: list[int]) -> str:
        return "[" + ", ".join(str(v) for v in x) + "]"

    parts = []
    for v in SELECTED:
        found, conf = meta["selected"][v], meta["confirmed"][v]
        parts.append(f"{v} {ls(found)} found, {ls(conf)} confirmed")
    text = (
        f"Confirmation ({meta['folds']} folds of the groups, seed {meta['seed']}): on {meta['discovery_groups']} "
        f"discovery groups {'; '.join(parts)} on the {meta['confirmation_groups']} held-out groups."
    )
    if meta["folds"] > 1:
        counts = [f"{x}: {confirmed_rounds[x]}/{selected_rounds[x]}" for x in selected_rounds if selected_rounds[x]]
        text += (
            " Over all " + str(meta["folds"]) + " rounds (confirmed/selected): " + (", ".join(counts) or "none") + "."
        )
    return text


__all__ = ["SELECTED", "confirm_verdicts", "confirmation_words", "fold_groups"]
