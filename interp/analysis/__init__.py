"""Analysis: layer sweeps (PragWorld §6.2 MLP zero-out, and mean / resample / scale removals:
:mod:`interp.analysis.removals`, their agreement: :mod:`interp.analysis.agreement`), direct-effect patching (§6.1), and
useful / harmful / negligible / inconclusive layer verdicts (a cluster bootstrap band over all
layers at once against a practical margin: :mod:`interp.analysis.verdicts`), saved with the model's
fingerprint for the fine-tuning that reads them.

The names below load on first use (``import interp.analysis.sweep_config`` stays light: the CLI's
parser reads the sweep's flags from it without torch)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interp.analysis.agreement import RemovalComparison, compare_removals
    from interp.analysis.attribution import activation_attribution, direct_effect_attribution, mlp_zero_attribution
    from interp.analysis.fingerprint import ModelMismatchError, check_fingerprint, model_fingerprint
    from interp.analysis.patching import PatchPair, direct_effect_patching, resid_cache
    from interp.analysis.path_removal import mlp_path_removal
    from interp.analysis.pragworld_sweep import pair_activation_patching, reference_pairs
    from interp.analysis.probe_verdicts import probe_verdicts
    from interp.analysis.removals import Removal
    from interp.analysis.scoring import Batch, Metric, forward, logit_diff, token_loss, two_way_prob
    from interp.analysis.sweeps import SweepResult, SweepRows, mlp_removal_sweep, mlp_zero_sweep
    from interp.analysis.verdicts import LayerVerdicts, layer_verdicts, load_verdicts

_EXPORTS = {
    "RemovalComparison": "interp.analysis.agreement",
    "compare_removals": "interp.analysis.agreement",
    "activation_attribution": "interp.analysis.attribution",
    "direct_effect_attribution": "interp.analysis.attribution",
    "mlp_zero_attribution": "interp.analysis.attribution",
    "ModelMismatchError": "interp.analysis.fingerprint",
    "check_fingerprint": "interp.analysis.fingerprint",
    "model_fingerprint": "interp.analysis.fingerprint",
    "PatchPair": "interp.analysis.patching",
    "direct_effect_patching": "interp.analysis.patching",
    "resid_cache": "interp.analysis.patching",
    "mlp_path_removal": "interp.analysis.path_removal",
    "pair_activation_patching": "interp.analysis.pragworld_sweep",
    "reference_pairs": "interp.analysis.pragworld_sweep",
    "probe_verdicts": "interp.analysis.probe_verdicts",
    "Removal": "interp.analysis.removals",
    "Batch": "interp.analysis.scoring",
    "Metric": "interp.analysis.scoring",
    "forward": "interp.analysis.scoring",
    "logit_diff": "interp.analysis.scoring",
    "token_loss": "interp.analysis.scoring",
    "two_way_prob": "interp.analysis.scoring",
    "SweepResult": "interp.analysis.sweeps",
    "SweepRows": "interp.analysis.sweeps",
    "mlp_removal_sweep": "interp.analysis.sweeps",
    "mlp_zero_sweep": "interp.analysis.sweeps",
    "LayerVerdicts": "interp.analysis.verdicts",
    "layer_verdicts": "interp.analysis.verdicts",
    "load_verdicts": "interp.analysis.verdicts",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp.analysis' has no attribute {name!r}")


__all__ = [
    "activation_attribution",
    "direct_effect_attribution",
    "mlp_zero_attribution",
    "Batch",
    "LayerVerdicts",
    "Metric",
    "ModelMismatchError",
    "PatchPair",
    "SweepResult",
    "SweepRows",
    "check_fingerprint",
    "direct_effect_patching",
    "forward",
    "layer_verdicts",
    "load_verdicts",
    "logit_diff",
    "mlp_path_removal",
    "mlp_zero_sweep",
    "model_fingerprint",
    "pair_activation_patching",
    "probe_verdicts",
    "reference_pairs",
    "resid_cache",
    "token_loss",
    "two_way_prob",
    "Removal",
    "RemovalComparison",
    "compare_removals",
    "mlp_removal_sweep",
]
