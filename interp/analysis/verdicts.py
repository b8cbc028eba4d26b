"""Layer verdicts: is a layer *useful*, *harmful* or *neutral* for a metric?

Input: a :class:`~interp.analysis.sweeps.SweepResult` of per-example effects
``effect = metric(with layer ℓ removed) − metric(clean)`` (PragWorld §6.2's MLP zero-out).

**Sign convention.** Effects are first oriented so that *higher = better*:
``benefit = effect`` when the metric's higher values are better (accuracy, P(gold), logit
difference) and ``benefit = −effect`` when lower is better (a loss; ``higher_is_better=False`` in the
sweep's meta). Then, per layer, with a paired bootstrap interval of the mean benefit:

- ``useful``  — interval entirely **below** 0: removing the layer makes the metric worse, so the
  layer helps;
- ``harmful`` — interval entirely **above** 0: removing the layer makes the metric better;
- ``neutral`` — the interval covers 0: no evidence either way at this sample size.

The bootstrap is *paired*: each resample draws examples (with replacement, seeded) and uses the
same draw for every layer, and each example's effect is already a within-example difference
(ablated − clean), so per-example difficulty cancels. Default: 2,000 resamples, 95 %
percentile interval.

**The paper's raw rule** is reported beside it (``raw_verdict``): PragWorld compares accuracy A_ℓ
with the layer ablated to A_0 unablated, useful if A_ℓ < A_0, harmful if A_ℓ > A_0, with no margin
and no test. Here A is the share of examples whose score exceeds ``threshold`` (0.5 for
:func:`~interp.analysis.scoring.two_way_prob` gives accuracy) or, with no threshold, the mean
score; for a lower-is-better metric the comparison is reversed. With examples carrying a
``category`` column (e.g. the PragWorld alteration type), :attr:`LayerVerdicts.by_category` holds
the mean effect per layer × category (PragWorld reports logical-connective change as the
alteration most affected by harmful layers).

A verdict file (:meth:`LayerVerdicts.save`) records the model's fingerprint
(:mod:`interp.analysis.fingerprint`), so the HLS/ULA fine-tuning that reads it can refuse the
verdicts of another model (:meth:`LayerVerdicts.check_model`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.fingerprint import check_fingerprint
from interp.analysis.sweeps import SweepResult
from interp.results import write_json

VERDICTS = ("useful", "harmful", "neutral")
FORMAT = "interp.layer_verdicts/1"


def _sign(higher_is_better: bool) -> float:
    return 1.0 if higher_is_better else -1.0


def _verdict(low: float, high: float) -> str:
    if high < 0:
        return "useful"
    if low > 0:
        return "harmful"
    return "neutral"


def _raw(diff: float) -> str:
    return "useful" if diff < 0 else "harmful" if diff > 0 else "neutral"


@dataclass
class LayerVerdicts:
    """Per-layer verdicts. ``frame`` columns: ``layer``, ``n``, ``mean_effect`` (raw, ablated − clean),
    ``mean_benefit`` (oriented, higher = better), ``ci_low`` / ``ci_high`` (bootstrap interval of the
    mean benefit), ``verdict``, ``a_0``, ``a_layer``, ``raw_verdict``. ``by_category``: mean effect,
    layer × category (None without categories). ``meta``: model fingerprint, metric, convention,
    bootstrap settings."""

    frame: pd.DataFrame
    by_category: pd.DataFrame | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def layers(self, verdict: str) -> list[int]:
        """Layers with this verdict (``useful``, ``harmful`` or ``neutral``), sorted."""
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
        """Raise :class:`~interp.analysis.fingerprint.ModelMismatchError` unless ``bridge`` has the
        architecture these verdicts were computed on."""
        check_fingerprint(self.meta.get("model") or {}, bridge, "these layer verdicts")

    def effect_interval(self) -> tuple[np.ndarray, np.ndarray]:
        """The bootstrap interval of each layer's mean *effect* (``frame`` holds that of the oriented
        benefit; for a lower-is-better metric the interval flips sign)."""
        lo, hi = self.frame["ci_low"].to_numpy(dtype=float), self.frame["ci_high"].to_numpy(dtype=float)
        if self.meta.get("higher_is_better", True):
            return lo, hi
        return -hi, -lo

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per layer: ``layer``, ``effect`` (mean ablated − clean), ``ci`` (its bootstrap interval,
        :meth:`effect_interval`), ``verdict``, ``raw_verdict``."""
        lo, hi = self.effect_interval()
        return [{"layer": int(r.layer), "effect": float(r.mean_effect), "ci": [float(lo[j]), float(hi[j])],
                 "verdict": str(r.verdict), "raw_verdict": str(r.raw_verdict)}
                for j, r in enumerate(self.frame.itertuples(index=False))]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, **self.meta, "useful": self.useful, "harmful": self.harmful,
                               "neutral": self.layers("neutral"), "layers": _records(self.frame)}
        if self.by_category is not None:
            out["by_category"] = {str(c): {str(int(k)): _num(v) for k, v in col.items()}
                                  for c, col in self.by_category.items()}
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
        recs.append({k: (int(v) if k in ("layer", "n") else v if isinstance(v, str) else _num(v))
                     for k, v in r.items()})
    return recs


def load_verdicts(path: str | Path, bridge: Any | None = None) -> LayerVerdicts:
    """Read a verdict file (or ``verdicts.json`` in a folder); with ``bridge``, also check it
    belongs to that model."""
    path = Path(path)
    if path.is_dir():
        path = path / "verdicts.json"
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a layer-verdict file (format {data.get('format')!r}, expected {FORMAT!r})")
    frame = pd.DataFrame(data["layers"])
    by_cat = None
    if "by_category" in data:
        by_cat = pd.DataFrame({c: {int(k): (math.nan if v is None else v) for k, v in col.items()}
                               for c, col in data["by_category"].items()})
        by_cat.index.name = "layer"
    meta = {k: v for k, v in data.items()
            if k not in ("format", "layers", "by_category", "useful", "harmful", "neutral")}
    out = LayerVerdicts(frame, by_cat, meta)
    if bridge is not None:
        out.check_model(bridge)
    return out


def layer_verdicts(
    sweep: SweepResult,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    threshold: float | None = None,
    higher_is_better: bool | None = None,
) -> LayerVerdicts:
    """Verdict per layer from a sweep's per-example effects (see the module docstring).

    ``higher_is_better`` defaults to the sweep's meta (True if absent). ``threshold``: the score
    above which an example counts as correct for the raw A_ℓ vs A_0 rule (None: mean score).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be ≥ 1, got {n_boot}")
    hib = sweep.meta.get("higher_is_better", True) if higher_is_better is None else higher_is_better
    sign = _sign(bool(hib))
    df = sweep.frame
    wide = df.pivot(index="example", columns="layer", values="effect").sort_index(axis=1)
    layers = [int(x) for x in wide.columns]
    eff = wide.to_numpy(dtype=float)  # [examples, layers]
    benefit = sign * eff
    rng = np.random.default_rng(seed)
    n = eff.shape[0]
    draws = rng.integers(0, n, size=(n_boot, n))  # one draw of examples shared by every layer
    boot = np.stack([np.nanmean(benefit[d], axis=0) for d in draws])  # [n_boot, layers]
    alpha = (1 - confidence) / 2
    low, high = np.nanquantile(boot, alpha, axis=0), np.nanquantile(boot, 1 - alpha, axis=0)

    clean = df.pivot(index="example", columns="layer", values="clean").sort_index(axis=1).to_numpy(dtype=float)
    abl = df.pivot(index="example", columns="layer", values="ablated").sort_index(axis=1).to_numpy(dtype=float)
    if threshold is not None:
        clean, abl = (clean > threshold).astype(float), (abl > threshold).astype(float)
    a_0 = np.nanmean(clean[:, 0]) if n else math.nan  # the clean score is the same for every layer
    rows = []
    for j, layer in enumerate(layers):
        a_l = float(np.nanmean(abl[:, j]))
        rows.append({"layer": layer, "n": int(np.isfinite(eff[:, j]).sum()),
                     "mean_effect": float(np.nanmean(eff[:, j])), "mean_benefit": float(np.nanmean(benefit[:, j])),
                     "ci_low": float(low[j]), "ci_high": float(high[j]), "verdict": _verdict(low[j], high[j]),
                     "a_0": float(a_0), "a_layer": a_l, "raw_verdict": _raw(sign * (a_l - a_0))})
    by_cat = None
    if "category" in df.columns:
        by_cat = df.pivot_table(index="layer", columns="category", values="effect", aggfunc="mean")
        by_cat.columns = [str(c) for c in by_cat.columns]
    meta = {"metric": sweep.meta.get("metric"), "kind": sweep.meta.get("kind"), "higher_is_better": bool(hib),
            "sign_convention": "benefit = effect × (+1 if higher_is_better else −1); effect = ablated − clean; "
                               "useful: CI of mean benefit < 0; harmful: > 0; neutral: covers 0",
            "n_boot": int(n_boot), "confidence": float(confidence), "seed": int(seed), "threshold": threshold,
            "n_examples": int(n), "model": sweep.meta.get("model")}
    return LayerVerdicts(pd.DataFrame(rows), by_cat, meta)


__all__ = ["FORMAT", "VERDICTS", "LayerVerdicts", "layer_verdicts", "load_verdicts"]
