"""Analysis: what a layer sweep or a patching run measures, and what its numbers say. Five sub-rooms,
in import order (a module imports its own sub-room and those listed before it, never a later one;
``tests/test_imports.py`` checks it):

- :mod:`interp.analysis.engines` — how a sweep or patching run is executed: the MLP zero-out and
  removal sweeps (PragWorld §6.2) and their strategies (loop, reuse, prefix-shared, stacked,
  attribution), direct-effect and activation patching (§6.1), scoring, batching, resumable units;
- :mod:`interp.analysis.config` — a sweep's settings as frozen dataclasses (light: no torch);
- :mod:`interp.analysis.verdicts` — the statistics that turn effects into useful / harmful /
  negligible / inconclusive verdicts (a cluster bootstrap band over all layers at once against a
  practical margin), and their checks: confirmation, agreement across removals, prior shift, probes;
- :mod:`interp.analysis.evaluation` — how well a model does a task: contrast accuracy, the dialogue
  tables, probes and Myhill–Nerode boundary, the fine-tuning suite;
- :mod:`interp.analysis.planted` — a planting judged against its known answer.

The names below load on first use (``import interp.analysis.config.sweep_config`` stays light: the
CLI's parser reads the sweep's flags from it without torch)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interp.analysis.engines.attribution import (
        activation_attribution,
        direct_effect_attribution,
        mlp_zero_attribution,
    )
    from interp.analysis.engines.direct_patching import PatchPair, direct_effect_patching, resid_cache
    from interp.analysis.engines.fingerprint import ModelMismatchError, check_fingerprint, model_fingerprint
    from interp.analysis.engines.path_removal import mlp_path_removal
    from interp.analysis.engines.pragworld_sweep import pair_activation_patching, reference_pairs
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.scoring import Batch, Metric, forward, logit_diff, token_loss, two_way_prob
    from interp.analysis.engines.sweeps import SweepResult, SweepRows, mlp_removal_sweep, mlp_zero_sweep
    from interp.analysis.verdicts.agreement import RemovalComparison, compare_removals
    from interp.analysis.verdicts.layers import LayerVerdicts, layer_verdicts, load_verdicts
    from interp.analysis.verdicts.probes import probe_verdicts

_EXPORTS = {
    "RemovalComparison": "interp.analysis.verdicts.agreement",
    "compare_removals": "interp.analysis.verdicts.agreement",
    "activation_attribution": "interp.analysis.engines.attribution",
    "direct_effect_attribution": "interp.analysis.engines.attribution",
    "mlp_zero_attribution": "interp.analysis.engines.attribution",
    "ModelMismatchError": "interp.analysis.engines.fingerprint",
    "check_fingerprint": "interp.analysis.engines.fingerprint",
    "model_fingerprint": "interp.analysis.engines.fingerprint",
    "PatchPair": "interp.analysis.engines.direct_patching",
    "direct_effect_patching": "interp.analysis.engines.direct_patching",
    "resid_cache": "interp.analysis.engines.direct_patching",
    "mlp_path_removal": "interp.analysis.engines.path_removal",
    "pair_activation_patching": "interp.analysis.engines.pragworld_sweep",
    "reference_pairs": "interp.analysis.engines.pragworld_sweep",
    "probe_verdicts": "interp.analysis.verdicts.probes",
    "Removal": "interp.analysis.engines.removals",
    "Batch": "interp.analysis.engines.scoring",
    "Metric": "interp.analysis.engines.scoring",
    "forward": "interp.analysis.engines.scoring",
    "logit_diff": "interp.analysis.engines.scoring",
    "token_loss": "interp.analysis.engines.scoring",
    "two_way_prob": "interp.analysis.engines.scoring",
    "SweepResult": "interp.analysis.engines.sweeps",
    "SweepRows": "interp.analysis.engines.sweeps",
    "mlp_removal_sweep": "interp.analysis.engines.sweeps",
    "mlp_zero_sweep": "interp.analysis.engines.sweeps",
    "LayerVerdicts": "interp.analysis.verdicts.layers",
    "layer_verdicts": "interp.analysis.verdicts.layers",
    "load_verdicts": "interp.analysis.verdicts.layers",
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
