"""Layer verdicts: is a layer *useful*, *harmful*, *negligible* — or can the data not tell?

Input: a :class:`~interp.analysis.engines.sweeps.SweepResult` of per-example effects
``effect = metric(with layer ℓ removed) − metric(clean)`` (PragWorld §6.2's MLP zero-out), each
example in a ``group`` (a PragWorld original and its alterations; a world sequence alone).

**Sign convention.** Effects are first oriented so that *higher = better*:
``benefit = effect`` when the metric's higher values are better (accuracy, P(gold), logit
difference) and ``benefit = −effect`` when lower is better (a loss; ``higher_is_better=False`` in the
sweep's meta). A positive benefit means removing the layer made the model better.

**The rule** (``interp.layer_verdicts/2``). With a margin δ > 0 in the metric's units
(``min_effect``; default per metric, :data:`MIN_EFFECTS`) and, per layer, an interval of the mean
benefit that holds *for all layers of the sweep at once* (a studentized max-|t| band of a paired
cluster bootstrap over groups, :func:`interp.analysis.verdicts.bands.cluster_band`):

- ``harmful`` — the interval lies entirely **above +δ**: removing the layer makes the metric
  better by more than the margin;
- ``useful`` — the interval lies entirely **below −δ**: removing it makes the metric worse by more
  than the margin;
- ``negligible`` — the interval lies entirely **inside [−δ, +δ]**: whatever the layer does to
  this metric is smaller than the margin (an equivalence test, TOST/ROPE);
- ``inconclusive`` — none of these: the interval straddles a margin; more data would decide.

Because the intervals cover every layer's true mean together with probability ≥ ``confidence``,
the chance that *any* verdict of the sweep is wrong is at most 1 − ``confidence`` (family-wise
control; ``per_layer=True`` gives each layer its own interval instead, today's marginal rule,
with ≈ (1 − confidence) × L false verdicts on a model with no effects). Groups, not rows, are
resampled by default (``resample="groups"``); a sweep without a ``group`` column has every
example its own group. ``bench/verdict_calibration.py`` measures the error rate, coverage and
power on simulated sweeps with known truth (``docs/benchmarks/verdict-calibration.md``).

**The /1 rule** (``legacy_verdicts``, and how old files read): rows resampled one by one, a 95 %
percentile interval per layer, no margin: useful when the interval is below 0, harmful above 0,
``neutral`` otherwise — read today as ``inconclusive`` (the old rule could not tell "no effect"
from "too few data").

**The paper's raw rule** is reported beside it (``raw_verdict``): PragWorld compares accuracy A_ℓ
with the layer ablated to A_0 unablated, useful if A_ℓ < A_0, harmful if A_ℓ > A_0, with no margin
and no test (an exact tie: ``negligible``). Here A is the share of examples whose score exceeds
``threshold`` (0.5 for :func:`~interp.analysis.engines.scoring.two_way_prob` gives accuracy) or, with no
threshold, the mean score; for a lower-is-better metric the comparison is reversed. With examples
carrying a ``category`` column (e.g. the PragWorld alteration type), :attr:`LayerVerdicts.by_category`
holds the mean effect per layer × category.

A verdict file (:meth:`LayerVerdicts.save`) records the rule's settings and the model's
fingerprint (:mod:`interp.analysis.engines.fingerprint`), so the HLS/ULA fine-tuning that reads it can
refuse the verdicts of another model (:meth:`LayerVerdicts.check_model`).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.engines.fingerprint import check_fingerprint
from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.verdicts.bands import RESAMPLE, cluster_band, percentile_band
from interp.results import write_json

VERDICTS = ("useful", "harmful", "negligible", "inconclusive")
FORMAT = "interp.layer_verdicts/2"
#: formats :func:`load_verdicts` still reads, and how a /1 verdict maps to today's
OLD_FORMATS = {"interp.layer_verdicts/1": {"useful": "useful", "harmful": "harmful", "neutral": "inconclusive"}}

#: the default margin δ per metric (``metric`` in a sweep's meta), in the metric's units, and why
MIN_EFFECTS: dict[str, tuple[float, str]] = {
    "token_loss": (0.01, "nats per token: a 1 % change of perplexity (e^0.01 ≈ 1.01)"),
    "continuation_loss": (0.01, "nats per token: a 1 % change of perplexity (e^0.01 ≈ 1.01)"),
    "two_way_prob": (0.01, "one percentage point of P(gold), the unit PragWorld's accuracies are reported in"),
    "legal_mass": (0.01, "one percentage point of the probability on the legal next tokens"),
    "logit_diff": (
        0.1,
        "0.1 nats of log-odds: the odds of the gold answer ×1.105, about 2.5 percentage points of a "
        "two-way probability near 0.5, and the same odds ratio anywhere (P(gold) saturates)",
    ),
    "accuracy": (0.01, "one percentage point of accuracy, the unit PragWorld reports"),
    "probe_accuracy_change": (0.01, "one percentage point of held-out probe accuracy"),
}


#: the columns :meth:`LayerVerdicts.layer_rows` carries when the frame has them
#: (:mod:`interp.analysis.verdicts.prior_shift`, :mod:`interp.analysis.verdicts.direct_effects`,
#: :mod:`interp.analysis.verdicts.confirmation`)
EXTRA_COLUMNS = (
    "yes_effect",
    "yes_low",
    "yes_high",
    "yes_verdict",
    "no_effect",
    "no_low",
    "no_high",
    "no_verdict",
    "acc_effect",
    "recentred_effect",
    "bias",
    "bias_reason",
    "towards",
    "direct_effect",
    "direct_low",
    "direct_high",
    "repair",
    "discovery_verdict",
    "confirmation_effect",
    "confirmation_low",
    "confirmation_high",
    "confirmation_verdict",
    "confirmed",
)


def default_min_effect(metric: str | None) -> tuple[float, str]:
    """``(δ, reason)`` for a metric name (:data:`MIN_EFFECTS`); a metric without a default gets
    δ = 0 (no ``negligible`` verdict, only significance) with a warning naming ``min_effect=``."""
    if metric in MIN_EFFECTS:
        return MIN_EFFECTS[metric]
    warnings.warn(
        f"no default margin for metric {metric!r}: min_effect = 0 (verdicts test only the sign; "
        "pass min_effect= / --min-effect in the metric's units)",
        stacklevel=3,
    )
    return 0.0, f"no default for metric {metric!r}: 0 (sign only)"


def outcome(low: Any, high: Any, margin: float) -> np.ndarray:
    """Where each interval lies against ±``margin``: ``above`` (low > +δ), ``below`` (high < −δ),
    ``negligible`` (−δ ≤ low and high ≤ +δ) or ``inconclusive`` (otherwise, or NaN)."""
    if not margin >= 0:
        raise ValueError(f"the margin must be ≥ 0, got {margin}")
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    out = np.full(low.shape, "inconclusive", dtype=object)
    with np.errstate(invalid="ignore"):
        out[(low >= -margin) & (high <= margin)] = "negligible"
        out[low > margin] = "above"
        out[high < -margin] = "below"
    return out


def classify(low: Any, high: Any, margin: float, harmful: str = "above") -> np.ndarray:
    """Verdicts of benefit intervals: ``harmful`` on the ``harmful`` side of the margin
    (``above`` for a removal's benefit, :func:`layer_verdicts`; ``below`` for a change a block
    makes, :func:`~interp.analysis.verdicts.probes.probe_verdicts`), ``useful`` on the other,
    else ``negligible`` / ``inconclusive`` (:func:`outcome`)."""
    if harmful not in ("above", "below"):
        raise ValueError(f"harmful must be 'above' or 'below', got {harmful!r}")
    names = {
        harmful: "harmful",
        "below" if harmful == "above" else "above": "useful",
        "negligible": "negligible",
        "inconclusive": "inconclusive",
    }
    return np.array([names[o] for o in outcome(low, high, margin)], dtype=object).reshape(np.shape(low))


def _raw(diff: float) -> str:
    return "useful" if diff < 0 else "harmful" if diff > 0 else "negligible"


@dataclass
class LayerVerdicts:
    """Per-layer verdicts. ``frame`` columns: ``layer``, ``n``, ``n_groups``, ``mean_effect`` (raw,
    ablated − clean), ``mean_benefit`` (oriented, higher = better), ``se`` (its cluster-robust
    standard error), ``ci_low`` / ``ci_high`` (the interval of the mean benefit the verdict reads:
    simultaneous unless per layer), ``marginal_low`` / ``marginal_high`` (each layer's own
    interval), ``verdict``, ``a_0``, ``a_layer``, ``raw_verdict``. ``by_category``: mean effect,
    layer × category (None without categories). ``meta``: the rule's settings (margin, family,
    resampling unit, bootstrap), the metric, the model fingerprint."""

    frame: pd.DataFrame
    by_category: pd.DataFrame | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def layers(self, verdict: str) -> list[int]:
        """Layers with this verdict (one of :data:`VERDICTS`), sorted."""
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        return sorted(int(x) for x in self.frame.loc[self.frame["verdict"] == verdict, "layer"])

    @property
    def useful(self) -> list[int]:
        return self.layers("useful")

    @property
    def harmful(self) -> list[int]:
        return self.layers("harmful")

    def check_model(self, bridge: Any) -> None:
        """Raise :class:`~interp.analysis.engines.fingerprint.ModelMismatchError` unless ``bridge`` has the
        architecture these verdicts were computed on."""
        check_fingerprint(self.meta.get("model") or {}, bridge, "these layer verdicts")

    def effect_interval(self, marginal: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The interval of each layer's mean *effect* — the one the verdict reads, or with
        ``marginal`` each layer's own (``frame`` holds those of the oriented benefit; for a
        lower-is-better metric the interval flips sign)."""
        lo_col, hi_col = ("marginal_low", "marginal_high") if marginal else ("ci_low", "ci_high")
        if lo_col not in self.frame:
            lo_col, hi_col = "ci_low", "ci_high"
        lo, hi = self.frame[lo_col].to_numpy(dtype=float), self.frame[hi_col].to_numpy(dtype=float)
        if self.meta.get("higher_is_better", True):
            return lo, hi
        return -hi, -lo

    @property
    def min_effect(self) -> float:
        """The margin δ, in the metric's units."""
        return float(self.meta.get("min_effect") or 0.0)

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per layer: ``layer``, ``effect`` (mean ablated − clean), ``ci`` (its interval,
        :meth:`effect_interval`), ``verdict``, ``raw_verdict``, and those of :data:`EXTRA_COLUMNS`
        the frame has (per-class effects and the prior-shift flag, the direct effect, the
        confirmation)."""
        lo, hi = self.effect_interval()
        rows = [
            {
                "layer": int(r.layer),
                "effect": float(r.mean_effect),
                "ci": [float(lo[j]), float(hi[j])],
                "verdict": str(r.verdict),
                "raw_verdict": str(r.raw_verdict),
            }
            for j, r in enumerate(self.frame.itertuples(index=False))
        ]
        extra = [c for c in EXTRA_COLUMNS if c in self.frame.columns]  # per-class, prior shift, direct, confirmation
        for row, rec in zip(rows, self.frame[extra].to_dict(orient="records")):
            row.update({k: (v if isinstance(v, (str, bool, np.bool_)) else _num(v)) for k, v in rec.items()})
            row.update({k: bool(v) for k, v in rec.items() if isinstance(v, np.bool_)})
        return rows

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            **self.meta,
            **{v: self.layers(v) for v in VERDICTS},
            "layers": _records(self.frame),
        }
        if self.by_category is not None:
            out["by_category"] = {
                str(c): {str(int(k)): _num(v) for k, v in col.items()} for c, col in self.by_category.items()
            }
        return out

    def summary(self) -> dict[str, Any]:
        """What the verdict file holds: the layers of each verdict, the per-layer rows, the settings."""
        return self.to_dict()

    def save(self, folder: str | Path, stem: str = "verdicts") -> Path:
        """Write the verdict file ``<stem>.json`` into ``folder`` (:func:`load_verdicts` reads it
        back); returns the folder."""
        write_json(Path(folder) / f"{stem}.json", self.to_dict())
        return Path(folder)


def _num(v: Any) -> float | None:
    v = float(v)
    return None if math.isnan(v) else v


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    recs = []
    for r in frame.to_dict(orient="records"):
        recs.append(
            {
                k: (
                    int(v)
                    if k in ("layer", "n", "n_groups")
                    else v
                    if isinstance(v, (str, bool, np.bool_))
                    else _num(v)
                )
                for k, v in r.items()
            }
        )
    return recs


def _upgrade(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """A /1 file as a /2 one: ``neutral`` → ``inconclusive``, the raw rule's tie → ``negligible``,
    the old rule's settings stated."""
    mapping = OLD_FORMATS[data["format"]]
    data = dict(data)
    layers = []
    for r in data["layers"]:
        r = dict(r)
        if r.get("verdict") not in mapping:
            raise ValueError(f"{path}: verdict {r.get('verdict')!r} is not one of {sorted(mapping)}")
        r["verdict"] = mapping[r["verdict"]]
        if r.get("raw_verdict") == "neutral":
            r["raw_verdict"] = "negligible"
        layers.append(r)
    data["layers"] = layers
    data.setdefault(
        "rule",
        "interp.layer_verdicts/1: rows resampled, per-layer percentile interval, no margin "
        "(neutral read as inconclusive)",
    )
    data.update(
        read_from=data["format"],
        resample=data.get("resample", "rows"),
        family=data.get("family", "per layer"),
        min_effect=data.get("min_effect", 0.0),
    )
    return data


def load_verdicts(path: str | Path, bridge: Any | None = None) -> LayerVerdicts:
    """Read a verdict file (or ``verdicts.json`` in a folder; format /2, or /1 mapped by
    :data:`OLD_FORMATS`); with ``bridge``, also check it belongs to that model."""
    path = Path(path)
    if path.is_dir():
        path = path / "verdicts.json"
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a layer-verdict file (invalid JSON: {e})") from None
    if data.get("format") in OLD_FORMATS:
        data = _upgrade(data, path)
    elif data.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a layer-verdict file (format {data.get('format')!r}, expected {FORMAT!r} "
            f"or one of {sorted(OLD_FORMATS)})"
        )
    frame = pd.DataFrame(data["layers"])
    bad = sorted(set(frame["verdict"]) - set(VERDICTS)) if len(frame) else []
    if bad:
        raise ValueError(f"{path}: unknown verdicts {bad} (expected {VERDICTS})")
    by_cat = None
    if "by_category" in data:
        by_cat = pd.DataFrame(
            {
                c: {int(k): (math.nan if v is None else v) for k, v in col.items()}
                for c, col in data["by_category"].items()
            }
        )
        by_cat.index.name = "layer"
    skip = {"format", "layers", "by_category", "neutral", *VERDICTS}
    meta = {k: v for k, v in data.items() if k not in skip}
    out = LayerVerdicts(frame, by_cat, meta)
    if bridge is not None:
        out.check_model(bridge)
    return out


def _cells(sweep: SweepResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(examples, layers, row_of_example, col_of_layer)`` of the frame (sorted ids and each row's
    position among them); a repeated (example, layer) is an error."""
    f = sweep.frame
    examples, ei = np.unique(f["example"].to_numpy(), return_inverse=True)
    layers, li = np.unique(f["layer"].to_numpy(), return_inverse=True)
    cell = ei.reshape(-1) * len(layers) + li.reshape(-1)
    if len(np.unique(cell)) != len(cell):
        raise ValueError("the sweep frame has more than one row for some (example, layer)")
    return examples, layers, ei.reshape(-1), li.reshape(-1)


def _wide(sweep: SweepResult) -> tuple[list[int], dict[str, np.ndarray]]:
    """The layers and, per column (``effect``, ``clean``, ``ablated``), the [example, layer] matrix
    (NaN where the frame has no row)."""
    examples, layers, ei, li = _cells(sweep)
    out = {}
    for c in ("effect", "clean", "ablated"):
        m = np.full((len(examples), len(layers)), np.nan)
        m[ei, li] = sweep.frame[c].to_numpy(dtype=float)
        out[c] = m
    return [int(x) for x in layers], out


def example_groups(sweep: SweepResult) -> tuple[np.ndarray | None, str]:
    """Each example's group (in example order) and what a group is; ``(None, why)`` when the
    frame has no ``group`` column. An example in two groups is an error."""
    f = sweep.frame
    if "group" not in f.columns:
        return None, "no group column: every example its own group"
    examples, _, ei, _ = _cells(sweep)
    g = f["group"].to_numpy()
    first = np.empty(len(examples), dtype=g.dtype)
    first[ei[::-1]] = g[::-1]  # each example's first row wins
    bad = np.flatnonzero(first[ei] != g)
    if len(bad):
        raise ValueError(f"example {examples[ei[bad[0]]]} has more than one group id")
    return first, str(sweep.meta.get("groups") or "the frame's group column")


def _raw_accuracies(wide: dict[str, np.ndarray], threshold: float | None) -> tuple[float, np.ndarray]:
    clean, abl = wide["clean"], wide["ablated"]
    if threshold is not None:
        clean, abl = (clean > threshold).astype(float), (abl > threshold).astype(float)
    a_0 = float(np.nanmean(clean[:, 0])) if len(clean) else math.nan  # the clean score is the same for every layer
    return a_0, np.nanmean(abl, axis=0)


def _by_category(sweep: SweepResult) -> pd.DataFrame | None:
    if "category" not in sweep.frame.columns:
        return None
    by_cat = sweep.frame.pivot_table(index="layer", columns="category", values="effect", aggfunc="mean")
    by_cat.columns = [str(c) for c in by_cat.columns]
    return by_cat


def _group_sizes(groups: np.ndarray) -> dict[str, Any]:
    _, sizes = np.unique(groups, return_counts=True)
    return {
        "n_groups": int(len(sizes)),
        "rows_per_group": {"min": int(sizes.min()), "median": float(np.median(sizes)), "max": int(sizes.max())},
    }


def layer_verdicts(
    sweep: SweepResult,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    threshold: float | None = None,
    higher_is_better: bool | None = None,
    *,
    min_effect: float | None = None,
    per_layer: bool = False,
    resample: str = "groups",
) -> LayerVerdicts:
    """Verdict per layer from a sweep's per-example effects (see the module docstring).

    ``min_effect``: the margin δ in the metric's units (None: :func:`default_min_effect` of the
    sweep's metric); ``per_layer``: marginal intervals instead of the simultaneous band;
    ``resample``: ``groups`` (the frame's ``group`` column; none: each example alone) or ``rows``.
    ``higher_is_better`` defaults to the sweep's meta (True if absent). ``threshold``: the score
    above which an example counts as correct for the raw A_ℓ vs A_0 rule (None: mean score).
    """
    if resample not in RESAMPLE:
        raise ValueError(f"resample must be one of {RESAMPLE}, got {resample!r}")
    hib = sweep.meta.get("higher_is_better", True) if higher_is_better is None else higher_is_better
    sign = 1.0 if hib else -1.0
    metric = sweep.meta.get("metric")
    if min_effect is None:
        delta, reason = default_min_effect(metric)
    else:
        delta, reason = float(min_effect), "given"
    if not delta >= 0:
        raise ValueError(f"min_effect must be ≥ 0 (in the metric's units), got {min_effect}")
    layers, wide = _wide(sweep)
    eff = wide["effect"]  # [examples, layers]
    groups, unit = example_groups(sweep)
    if resample == "rows":
        groups, unit = None, "rows resampled one by one (resample='rows')"
    if groups is None:
        groups = np.arange(len(eff))
    band = cluster_band(sign * eff, groups, n_boot=n_boot, confidence=confidence, seed=seed, simultaneous=not per_layer)
    verdict = classify(band.low, band.high, delta, harmful="above")
    a_0, a_l = _raw_accuracies(wide, threshold)
    _, gi = np.unique(groups, return_inverse=True)
    n_groups = [
        int(len(np.unique(gi[np.isfinite(eff[:, j])]))) if not np.isfinite(eff[:, j]).all() else int(gi.max()) + 1
        for j in range(len(layers))
    ]
    frame = pd.DataFrame(
        {
            "layer": layers,
            "n": band.n,
            "n_groups": n_groups,
            "mean_effect": sign * band.estimate,
            "mean_benefit": band.estimate,
            "se": band.se,
            "ci_low": band.low,
            "ci_high": band.high,
            "marginal_low": band.marginal_low,
            "marginal_high": band.marginal_high,
            "verdict": verdict,
            "a_0": a_0,
            "a_layer": a_l,
            "raw_verdict": [_raw(sign * (x - a_0)) for x in a_l],
        }
    )
    family = (
        "per layer (marginal intervals)"
        if per_layer
        else f"simultaneous over the {len(layers)} layers (max-|t| band, critical value {band.critical:.3f})"
    )
    meta = {
        "metric": metric,
        "kind": sweep.meta.get("kind"),
        "ablation": sweep.meta.get("ablation"),
        "higher_is_better": bool(hib),
        "rule": FORMAT + ": interval of the mean benefit vs ±min_effect",
        "sign_convention": "effect = ablated − clean; benefit = effect × (+1 if higher_is_better else −1); "
        "harmful: interval > +min_effect; useful: < −min_effect; negligible: inside "
        "±min_effect; inconclusive: otherwise",
        "min_effect": delta,
        "min_effect_reason": reason,
        "family": family,
        "per_layer": bool(per_layer),
        "critical_value": None if per_layer else band.critical,
        "resample": resample,
        "groups": unit,
        **_group_sizes(groups),
        "interval": band.settings["method"],
        "n_boot": int(n_boot),
        "confidence": float(confidence),
        "seed": int(seed),
        "threshold": threshold,
        "n_examples": int(len(eff)),
        "model": sweep.meta.get("model"),
    }
    return LayerVerdicts(frame, _by_category(sweep), meta)


def legacy_verdicts(
    sweep: SweepResult,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    threshold: float | None = None,
    higher_is_better: bool | None = None,
) -> LayerVerdicts:
    """The ``interp.layer_verdicts/1`` rule, to compare against: rows resampled one by one, a
    percentile interval per layer, no margin (its ``neutral`` reported as ``inconclusive``)."""
    hib = sweep.meta.get("higher_is_better", True) if higher_is_better is None else higher_is_better
    sign = 1.0 if hib else -1.0
    layers, wide = _wide(sweep)
    eff = wide["effect"]
    est, low, high = percentile_band(sign * eff, n_boot=n_boot, confidence=confidence, seed=seed)
    a_0, a_l = _raw_accuracies(wide, threshold)
    frame = pd.DataFrame(
        {
            "layer": layers,
            "n": np.isfinite(eff).sum(0),
            "mean_effect": sign * est,
            "mean_benefit": est,
            "ci_low": low,
            "ci_high": high,
            "verdict": classify(low, high, 0.0),
            "a_0": a_0,
            "a_layer": a_l,
            "raw_verdict": [_raw(sign * (x - a_0)) for x in a_l],
        }
    )
    frame.loc[frame.verdict == "negligible", "verdict"] = "inconclusive"  # /1 had no margin: no negligible
    meta = {
        "metric": sweep.meta.get("metric"),
        "kind": sweep.meta.get("kind"),
        "higher_is_better": bool(hib),
        "rule": "interp.layer_verdicts/1: rows resampled, per-layer percentile interval, no margin",
        "min_effect": 0.0,
        "family": "per layer",
        "per_layer": True,
        "resample": "rows",
        "n_boot": int(n_boot),
        "confidence": float(confidence),
        "seed": int(seed),
        "threshold": threshold,
        "n_examples": int(len(eff)),
        "model": sweep.meta.get("model"),
    }
    return LayerVerdicts(frame, _by_category(sweep), meta)


@dataclass
class MapVerdicts:
    """Cells of an activation-patching map (layer × position or head) that move the metric by more
    than a margin, with intervals simultaneous over **every cell** of the map (:func:`map_verdicts`).

    ``frame``: one row per cell — ``layer``, the map's axis (``pos`` / ``head``), ``n``,
    ``mean_effect`` (patched − corrupted, mean over examples), ``se``, ``ci_low`` / ``ci_high``,
    ``marginal_low`` / ``marginal_high``, ``outcome`` (:func:`outcome`: ``above`` — patching the cell
    raises the metric by more than δ, ``below``, ``negligible``, ``inconclusive``). ``meta``: the
    rule's settings."""

    frame: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def cells(self, which: str = "above") -> list[tuple[int, int]]:
        """The (layer, position-or-head) cells with this outcome."""
        axis = self.meta["axis"]
        sel = self.frame[self.frame["outcome"] == which]
        return [(int(a), int(b)) for a, b in zip(sel["layer"], sel[axis])]

    def summary(self) -> dict[str, Any]:
        """The settings and the number of cells of each outcome."""
        counts = self.frame["outcome"].value_counts()
        return {
            **self.meta,
            "outcomes": {k: int(counts.get(k, 0)) for k in ("above", "below", "negligible", "inconclusive")},
        }

    def save(self, folder: str | Path, stem: str = "cell_verdicts") -> Path:
        """``<stem>.json`` (summary) and ``<stem>.csv`` (one row per cell)."""
        from interp.results import save_result

        return save_result(folder, stem, self.summary(), **{"": self.frame})


def map_verdicts(
    pmap: Any,
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    min_effect: float | None = None,
    per_cell: bool = False,
    resample: str = "groups",
) -> MapVerdicts:
    """Family-wise verdicts on the cells of a :class:`~interp.analysis.engines.activation_patching.PatchingMap`
    (its per-example ``effect``, patched − corrupted): the same bootstrap band as
    :func:`layer_verdicts` with every cell a member of the family (a 4-layer × 13-position map is a
    family of 52), resampling the frame's ``group`` column (none: each example alone). A cell some
    examples lack (merged maps of several prompt lengths) uses the examples that have it.
    ``min_effect``: δ in the metric's units (default :data:`MIN_EFFECTS` of ``meta["metric"]``);
    ``per_cell``: marginal intervals instead."""
    axis = pmap.meta["axis"]
    f = pmap.frame
    wide = f.pivot_table(index="example", columns=["layer", axis], values="effect", aggfunc="first", dropna=False)
    wide = wide.sort_index(axis=1)
    metric = pmap.meta.get("metric")
    delta, reason = default_min_effect(metric) if min_effect is None else (float(min_effect), "given")
    groups = None
    unit = "each example its own group"
    if "group" in f.columns and resample == "groups":
        groups = f.groupby("example")["group"].first().reindex(wide.index).to_numpy()
        unit = str(pmap.meta.get("groups") or "the frame's group column")
    if resample not in RESAMPLE:
        raise ValueError(f"resample must be one of {RESAMPLE}, got {resample!r}")
    band = cluster_band(
        wide.to_numpy(dtype=float), groups, n_boot=n_boot, confidence=confidence, seed=seed, simultaneous=not per_cell
    )
    cells = wide.columns.to_frame(index=False)
    frame = pd.DataFrame(
        {
            "layer": cells["layer"].astype(int),
            axis: cells[axis].astype(int),
            "n": band.n,
            "mean_effect": band.estimate,
            "se": band.se,
            "ci_low": band.low,
            "ci_high": band.high,
            "marginal_low": band.marginal_low,
            "marginal_high": band.marginal_high,
            "outcome": outcome(band.low, band.high, delta),
        }
    )
    meta = {
        "kind": "activation_patching_cells",
        "component": pmap.meta.get("component"),
        "axis": axis,
        "metric": metric,
        "min_effect": delta,
        "min_effect_reason": reason,
        "cells": int(len(frame)),
        "family": f"{'per cell' if per_cell else 'simultaneous'} over the {len(frame)} cells"
        + ("" if per_cell else f" (max-|t| band, critical value {band.critical:.3f})"),
        "resample": resample,
        "groups": unit,
        "n_groups": band.n_groups,
        "interval": band.settings["method"],
        "n_boot": int(n_boot),
        "confidence": float(confidence),
        "seed": int(seed),
    }
    return MapVerdicts(frame, meta)


__all__ = [
    "EXTRA_COLUMNS",
    "FORMAT",
    "MIN_EFFECTS",
    "OLD_FORMATS",
    "VERDICTS",
    "LayerVerdicts",
    "MapVerdicts",
    "classify",
    "default_min_effect",
    "example_groups",
    "layer_verdicts",
    "legacy_verdicts",
    "load_verdicts",
    "map_verdicts",
    "outcome",
]
