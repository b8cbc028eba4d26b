"""Are a half-precision sweep's verdicts float32's? Layer by layer, where float32's verdict is clear
of the rounding a half dtype may add.

A verdict reads an interval of a layer's mean benefit against the margin ``±min_effect``
(:func:`~interp.analysis.verdicts.layers.layer_verdicts`). Rounding moves every example's effect by at
most the *effect tolerance* ``t`` (:func:`interp.models.precision.effect_tolerance`), so the
mean moves by at most ``t``; a bound of the interval can then cross a threshold only if it lies
within about ``t`` of it. A layer is **clear** when both of float32's bounds lie farther than
``t`` from both thresholds ``±min_effect``; there the half dtype's verdict must be float32's. The
other layers are counted and shown, not asserted (their verdict is a near-tie of the rounding).

Both sweeps must be judged under one rule (margin, confidence, resampling, bootstrap seed): their
``meta`` is compared and a difference refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.verdicts.layers import LayerVerdicts
from interp.results import save_result

#: the settings two verdicts must share to be compared
RULE_KEYS = ("metric", "min_effect", "per_layer", "resample", "n_boot", "confidence", "higher_is_better")


@dataclass
class VerdictAgreement:
    """Per layer: float32's and the half dtype's ``mean_effect`` / interval / ``verdict``, the
    distance of float32's nearest bound to a threshold, ``clear`` (that distance > ``tolerance``)
    and ``agree``. :meth:`summary`: the counts a precision table quotes."""

    frame: pd.DataFrame
    tolerance: float
    dtype: str

    @property
    def clear(self) -> list[int]:
        return [int(x) for x in self.frame.loc[self.frame["clear"], "layer"]]

    @property
    def disagreeing_clear(self) -> list[int]:
        """Clear layers whose verdicts differ: each one is a failure of the tolerance's promise."""
        f = self.frame
        return [int(x) for x in f.loc[f["clear"] & ~f["agree"], "layer"]]

    def summary(self) -> dict[str, Any]:
        f = self.frame
        return {
            "dtype": self.dtype,
            "tolerance": self.tolerance,
            "layers": len(f),
            "clear": int(f["clear"].sum()),
            "agree_clear": int((f["clear"] & f["agree"]).sum()),
            "agree_all": int(f["agree"].sum()),
            "max_abs_mean_effect_diff": float(np.abs(f["mean_effect_half"] - f["mean_effect_float32"]).max()),
        }

    def save(self, folder: str | Path) -> Path:
        return save_result(folder, "verdict_agreement", self.summary(), **{"": self.frame})

    def __str__(self) -> str:
        s = self.summary()
        return (
            f"{self.dtype}: {s['agree_clear']}/{s['clear']} clear layers agree with float32 "
            f"({s['agree_all']}/{s['layers']} of all layers; effect tolerance {s['tolerance']:.3g}, "
            f"largest mean-effect difference {s['max_abs_mean_effect_diff']:.3g})"
        )


def _rule(v: LayerVerdicts) -> dict[str, Any]:
    return {k: v.meta.get(k) for k in RULE_KEYS}


def verdict_agreement(
    reference: LayerVerdicts, half: LayerVerdicts, tolerance: float, dtype: str = "bfloat16"
) -> VerdictAgreement:
    """Compare ``half``'s verdicts with float32's (``reference``) layer by layer (see the module
    docstring); ``tolerance`` the effect tolerance of the half dtype, in the metric's units."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    a, b = _rule(reference), _rule(half)
    if a != b:
        diff = {k: (a[k], b[k]) for k in RULE_KEYS if a[k] != b[k]}
        raise ValueError(f"the two verdicts were judged under different rules: {diff}")
    fa, fb = reference.frame.set_index("layer"), half.frame.set_index("layer")
    if list(fa.index) != list(fb.index):
        raise ValueError(f"the two sweeps cover different layers: {list(fa.index)} and {list(fb.index)}")
    delta = reference.min_effect
    bounds = fa[["ci_low", "ci_high"]].to_numpy(dtype=float)
    thresholds = np.array([-delta, delta])
    distance = np.abs(bounds[:, :, None] - thresholds[None, None, :]).min(axis=(1, 2))
    frame = pd.DataFrame(
        {
            "layer": fa.index.to_numpy(),
            "mean_effect_float32": fa["mean_effect"].to_numpy(),
            "mean_effect_half": fb["mean_effect"].to_numpy(),
            "ci_low_float32": fa["ci_low"].to_numpy(),
            "ci_high_float32": fa["ci_high"].to_numpy(),
            "ci_low_half": fb["ci_low"].to_numpy(),
            "ci_high_half": fb["ci_high"].to_numpy(),
            "verdict_float32": fa["verdict"].to_numpy(),
            "verdict_half": fb["verdict"].to_numpy(),
            "distance": distance,
        }
    )
    frame["clear"] = frame["distance"] > tolerance
    frame["agree"] = frame["verdict_float32"] == frame["verdict_half"]
    return VerdictAgreement(frame=frame, tolerance=float(tolerance), dtype=str(dtype).removeprefix("torch."))


__all__ = ["RULE_KEYS", "VerdictAgreement", "verdict_agreement"]
