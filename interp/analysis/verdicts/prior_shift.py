"""Bias or mechanism? Per-gold-class effects and the prior-shift flag of a yes/no layer sweep.

On a yes/no task a layer can change P(gold) or accuracy without changing what the model knows:
by moving its yes/no *prior*. Its removal then helps the rows of one gold class and hurts the
other's (Zhao et al. 2021, "Calibrate before use": majority-label bias), and on a skewed set the
mean effect looks like harm or use. Two checks separate a prior shift from a mechanism, both from
the sweep's own per-example scores (``frame`` with a ``gold`` column: 1 = yes, 0 = no):

**Per-class effects.** The mean effect on the yes-rows and on the no-rows, each with an interval
from the same paired cluster bootstrap as the verdicts (:func:`~interp.analysis.verdicts.bands.cluster_band`:
groups resampled, one band simultaneous over the 2 × L (class, layer) cells), and each class's
verdict against the same margin δ (:func:`~interp.analysis.verdicts.layers.classify`).

**Re-centred accuracy.** Accuracy at the fixed threshold (P(yes) > 0.5, i.e. logit yes − no > 0)
against accuracy after re-centring the decision threshold on *held-out* rows: the groups are split
in two halves (seeded); for the rows of one half, the threshold is the quantile of the other
half's yes-scores that makes the share of yes answers there equal the share of yes gold there —
computed separately for the clean run and for each layer's ablated run. A constant shift of the
yes-score (a pure prior change) moves the threshold with it and leaves the re-centred answers
unchanged; a change of what the model separates does not. Per row, ``correct(ablated) −
correct(clean)`` at each threshold gives the two accuracy effects, each with the band
(simultaneous over the 2 × L cells) and the margin δ = 0.01 (one point of accuracy).

**The flag** (``bias`` column, ``bias_reason``): a layer *shifts the prior* when

1. its yes-row and no-row verdicts are opposite — one class ``harmful``, the other ``useful``
   (each interval beyond the margin, on opposite sides), or
2. its fixed-threshold accuracy verdict is ``harmful`` or ``useful`` and its re-centred accuracy
   effect is not significant in the same direction (its interval reaches 0 or lies on the other
   side): the accuracy effect vanishes once the threshold is re-centred.

``towards``: the answer the layer's *removal* pushes to (``yes`` when removing it helps the
yes-rows: the layer itself pushes towards ``no``). A layer with both classes hurt (or helped) by
its removal and a re-centred effect that stays is not flagged: that is a mechanism.

The yes-score is recovered from the metric: P(yes) from P(gold) (``two_way_prob``), the logit
difference yes − no from ``logit_diff`` (gold − other); for another metric (e.g. ``accuracy``,
whose scores are 0/1) only the per-class check runs (said in ``meta``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.verdicts.bands import cluster_band

#: metric name → (how to get the yes-score from the gold-oriented score, the fixed threshold)
YES_SCORES = {
    "two_way_prob": ("P(yes) = P(gold) on yes-rows, 1 − P(gold) on no-rows", 0.5),
    "logit_diff": ("logit yes − no = ±(logit gold − other)", 0.0),
}
#: the margin of the two accuracy effects: one percentage point, the unit PragWorld reports
ACCURACY_MARGIN = 0.01


def _wide(sweep: SweepResult, column: str) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """``(layers, matrix[example, layer], gold[example], group[example])`` of one frame column."""
    f = sweep.frame
    if "gold" not in f.columns:
        raise ValueError("per-class effects need a 'gold' column (1 = yes, 0 = no) in the sweep frame")
    wide = f.pivot(index="example", columns="layer", values=column).sort_index()
    first = f.groupby("example").first().reindex(wide.index)
    gold = first["gold"].to_numpy(dtype=int)
    group = first["group"].to_numpy() if "group" in f.columns else wide.index.to_numpy()
    return [int(x) for x in wide.columns], wide.to_numpy(dtype=float), gold, group


def _verdicts(low: np.ndarray, high: np.ndarray, margin: float, sign: float) -> np.ndarray:
    from interp.analysis.verdicts.layers import classify

    lo, hi = (low, high) if sign > 0 else (-high, -low)  # benefit intervals
    return classify(lo, hi, margin, harmful="above")


def recentred_correct(
    yes_score: np.ndarray, gold: np.ndarray, groups: np.ndarray, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``(correct, thresholds)``: per row, whether the yes-score clears a threshold re-centred on
    the *other* half of the groups (module docstring), and that threshold. ``yes_score``: [rows]
    or [rows, runs] (one column per run, each re-centred on its own scores); halves drawn with
    ``seed`` over the distinct groups."""
    s = np.asarray(yes_score, dtype=float)
    one = s.ndim == 1
    s = s[:, None] if one else s
    uniq = np.unique(groups)
    if len(uniq) < 2:
        raise ValueError("re-centring on held-out rows needs at least 2 groups")
    perm = np.random.default_rng(seed).permutation(len(uniq))
    half = np.isin(groups, uniq[perm[: len(uniq) // 2]])
    correct = np.zeros_like(s)
    thresholds = np.zeros_like(s)
    for mine in (half, ~half):
        other = ~mine
        yes_share = float(gold[other].mean())
        tau = np.quantile(s[other], 1.0 - yes_share, axis=0, method="linear")  # a share yes_share above tau
        thresholds[mine] = tau
        correct[mine] = ((s[mine] > tau) == (gold[mine][:, None] == 1)).astype(float)
    return (correct[:, 0], thresholds[:, 0]) if one else (correct, thresholds)


def prior_shift(
    sweep: SweepResult,
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float | None = None,
    resample: str = "groups",
    per_layer: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-class effects, fixed and re-centred accuracy effects and the prior-shift flag of each
    layer (module docstring): ``(frame, meta)``, one row per layer with ``yes_n``, ``yes_effect``,
    ``yes_low``, ``yes_high``, ``yes_verdict`` (and ``no_…``), ``acc_effect`` / ``acc_low`` /
    ``acc_high`` / ``acc_verdict``, ``recentred_effect`` / ``…_low`` / ``…_high`` /
    ``recentred_verdict``, ``bias`` (bool), ``bias_reason``, ``towards``. Intervals are of the
    mean *effect* (ablated − clean). The settings are the verdicts' (same band, same seed)."""
    from interp.analysis.verdicts.layers import default_min_effect

    metric = sweep.meta.get("metric")
    sign = 1.0 if sweep.meta.get("higher_is_better", True) else -1.0
    delta = default_min_effect(metric)[0] if min_effect is None else float(min_effect)
    layers, eff, gold, groups = _wide(sweep, "effect")
    if resample == "rows":
        groups = np.arange(len(gold))
    n_l = len(layers)
    by_class = np.full((len(gold), 2 * n_l), np.nan)
    by_class[gold == 1, :n_l] = eff[gold == 1]
    by_class[gold == 0, n_l:] = eff[gold == 0]
    band = cluster_band(
        sign * by_class, groups, n_boot=n_boot, confidence=confidence, seed=seed, simultaneous=not per_layer
    )
    lo, hi = (band.low, band.high) if sign > 0 else (-band.high, -band.low)
    est = sign * band.estimate
    cls = _verdicts(lo, hi, delta, sign)
    out = pd.DataFrame({"layer": layers})
    for k, name in enumerate(("yes", "no")):
        sl = slice(k * n_l, (k + 1) * n_l)
        out[f"{name}_n"] = band.n[sl]
        out[f"{name}_effect"], out[f"{name}_low"], out[f"{name}_high"] = est[sl], lo[sl], hi[sl]
        out[f"{name}_verdict"] = cls[sl]
    opposite = ((out["yes_verdict"] == "harmful") & (out["no_verdict"] == "useful")) | (
        (out["yes_verdict"] == "useful") & (out["no_verdict"] == "harmful")
    )
    meta: dict[str, Any] = {
        "per_class": f"mean effect on the yes-rows ({int((gold == 1).sum())}) and on the no-rows "
        f"({int((gold == 0).sum())}); one band simultaneous over the {2 * n_l} (class, layer) cells; "
        f"verdicts against ±{delta:g}",
        "flag": "bias (the layer shifts the yes/no prior): yes-row and no-row verdicts opposite (one harmful, the "
        "other useful), or the fixed-threshold accuracy verdict harmful/useful while the re-centred "
        "accuracy effect's interval reaches 0 or lies on the other side",
        "clean_yes_rate": None,
        "gold_yes_rate": float(gold.mean()),
    }
    vanish = np.zeros(n_l, dtype=bool)
    if metric in YES_SCORES and len(np.unique(groups)) >= 2:
        how, fixed = YES_SCORES[metric]
        _, clean, _, _ = _wide(sweep, "clean")
        _, abl, _, _ = _wide(sweep, "ablated")
        orient = np.where(gold == 1, 1.0, -1.0)[:, None]
        if metric == "two_way_prob":
            y_clean, y_abl = np.where(gold[:, None] == 1, clean, 1 - clean), np.where(gold[:, None] == 1, abl, 1 - abl)
        else:
            y_clean, y_abl = orient * clean, orient * abl
        right = gold[:, None] == 1
        acc_fixed = ((y_abl > fixed) == right).astype(float) - ((y_clean > fixed) == right).astype(float)
        c_rc, _ = recentred_correct(np.column_stack([y_clean[:, 0], y_abl]), gold, groups, seed=seed)
        acc_rc = c_rc[:, 1:] - c_rc[:, :1]
        acc_band = cluster_band(
            np.column_stack([acc_fixed, acc_rc]),
            groups,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
            simultaneous=not per_layer,
        )
        acc_v = _verdicts(acc_band.low, acc_band.high, ACCURACY_MARGIN, 1.0)
        for k, name in enumerate(("acc", "recentred")):
            sl = slice(k * n_l, (k + 1) * n_l)
            out[f"{name}_effect"] = acc_band.estimate[sl]
            out[f"{name}_low"], out[f"{name}_high"] = acc_band.low[sl], acc_band.high[sl]
            out[f"{name}_verdict"] = acc_v[sl]
        rc_lo, rc_hi = acc_band.low[n_l:], acc_band.high[n_l:]
        harmful, useful = out["acc_verdict"] == "harmful", out["acc_verdict"] == "useful"
        vanish = ((harmful & ~(rc_lo > 0)) | (useful & ~(rc_hi < 0))).to_numpy()
        meta.update(
            yes_score=how,
            fixed_threshold=fixed,
            clean_yes_rate=float((y_clean[:, 0] > fixed).mean()),
            recentring="threshold per run = the quantile of the other half's yes-scores that gives it the "
            "gold yes share; halves of the groups drawn with the seed",
            accuracy_margin=ACCURACY_MARGIN,
        )
    elif metric in YES_SCORES:
        meta["recentring"] = "not run: fewer than 2 groups (re-centring needs held-out groups)"
    else:
        meta["recentring"] = f"not run: the yes-score cannot be recovered from metric {metric!r}"
    out["bias"] = opposite.to_numpy() | vanish
    vanishes = "accuracy effect vanishes when re-centred"
    out["bias_reason"] = [
        "; ".join(r for r, on in (("opposite class effects", o), (vanishes, v)) if on) for o, v in zip(opposite, vanish)
    ]
    diff = out["yes_effect"].to_numpy() - out["no_effect"].to_numpy()
    out["towards"] = np.where(out["bias"], np.where(sign * diff > 0, "yes", "no"), "")
    meta["layers"] = [int(x) for x in out.loc[out["bias"], "layer"]]
    meta["words"] = prior_shift_words(out, metric)
    return out, meta


def prior_shift_words(frame: pd.DataFrame, metric: str | None = None) -> list[str]:
    """One sentence per flagged layer (and one when none is): what its removal does to each
    class, in the metric's units, and which check flagged it."""

    def iv(r: Any, k: str) -> str:
        return f"{r[f'{k}_effect']:+.3g} [{r[f'{k}_low']:+.3g}, {r[f'{k}_high']:+.3g}]"

    flagged = frame[frame["bias"]]
    if flagged.empty:
        return [
            (
                "No layer is flagged as shifting the yes/no prior (no opposite per-class verdicts, no accuracy "
                "effect that vanishes when the threshold is re-centred)."
            )
        ]
    out = []
    for _, r in flagged.iterrows():
        layer_pushes = "no" if r["towards"] == "yes" else "yes"
        text = (
            f"Layer {int(r['layer'])} shifts the yes/no prior ({r['bias_reason']}): removing it moves answers "
            f"towards {r['towards']} (the layer pushes towards {layer_pushes}); effect on {metric or 'the metric'} "
            f"of yes-rows {iv(r, 'yes')}, of no-rows {iv(r, 'no')}"
        )
        if "recentred_effect" in r and not pd.isna(r.get("recentred_effect")):
            text += f"; accuracy {iv(r, 'acc')}, re-centred {iv(r, 'recentred')}"
        out.append(text + ". Its verdict reflects the prior, not what the model understands.")
    return out


def add_prior_shift(verdicts: Any, sweep: SweepResult, **rule: Any) -> Any:
    """``verdicts`` (:class:`~interp.analysis.verdicts.layers.LayerVerdicts`) with the :func:`prior_shift`
    columns joined on ``layer`` and ``meta["prior_shift"]`` (its settings, the flagged layers,
    the sentences); the rule (``n_boot``, ``confidence``, ``seed``, ``min_effect``, ``resample``,
    ``per_layer``) should be the verdicts' own."""
    frame, meta = prior_shift(sweep, **rule)
    verdicts.frame = verdicts.frame.merge(frame, on="layer", how="left")
    verdicts.meta["prior_shift"] = meta
    return verdicts


__all__ = ["ACCURACY_MARGIN", "YES_SCORES", "add_prior_shift", "prior_shift", "prior_shift_words", "recentred_correct"]
