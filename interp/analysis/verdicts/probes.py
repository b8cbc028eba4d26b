"""Layer verdicts from current-state probes: a layer after which the state is *less* decodable.

The design card asks that "linear current-state probes … sort layers into useful and harmful"
beside the MLP zero-out sweep. Here a probe (:func:`interp.metrics.probes.fit_probe`, the same
multinomial logistic regression as Table 1's probe) is fitted on the residual stream entering
block 0 (the embeddings) and after every block, on the training sequences, and scored on held-out
positions. The evidence about block ℓ is the change of held-out probe accuracy across it::

    Δ_ℓ = accuracy(after block ℓ) − accuracy(before block ℓ)

and per position the change of its hit, ``d = correct(after) − correct(before)`` ∈ {−1, 0, 1},
so Δ_ℓ is the mean of d over the test positions. Its interval is the same rule as
:func:`interp.analysis.verdicts.layers.layer_verdicts`: a studentized cluster bootstrap that resamples
**test sequences** (positions of one sequence are correlated, so they are resampled together; the
same draw serves every block), simultaneous over the blocks by default, against a margin δ
(default 0.01: one percentage point of accuracy). Verdicts:

- ``harmful`` — entirely below −δ: the state is less linearly decodable after the block;
- ``useful`` — entirely above +δ: the block makes the state more decodable;
- ``negligible`` — inside ±δ; ``inconclusive`` — otherwise.

This reads the whole block (attention and MLP), not the MLP alone, and a probe measures what is
*decodable*, not what the model *uses*: a block can leave the state perfectly decodable and still
push wrong predictions (then the probes call it negligible while the zero-out sweep calls it harmful).
That difference is the point of reporting both.

The result is a :class:`~interp.analysis.verdicts.layers.LayerVerdicts` (``mean_effect`` = ``mean_benefit``
= Δ_ℓ, ``a_0`` / ``a_layer`` = accuracy before / after the block, ``raw_verdict`` = the sign of Δ_ℓ
with no interval), so it saves, loads and prints like the sweep's verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from jaxtyping import Bool, Int

from interp.analysis.config.sweep_config import VerdictRule
from interp.analysis.verdicts.bands import cluster_band
from interp.analysis.verdicts.layers import LayerVerdicts, classify, default_min_effect
from interp.config import merge_options

#: the metric name of these verdicts (its default margin: :data:`~interp.analysis.verdicts.layers.MIN_EFFECTS`)
METRIC = "probe_accuracy_change"


def accuracy_changes(correct: Bool[np.ndarray, "row layer"]) -> Int[np.ndarray, "row step"]:
    """Per row, the change of its hit between consecutive columns (column j+1 minus column j):
    the mean of column j is the accuracy change across block j."""
    if correct.ndim != 2 or correct.shape[1] < 2:
        raise ValueError(f"need correct [rows, ≥2 layers], got {correct.shape}")
    return np.diff(correct.astype(np.int8), axis=1)


def probe_verdicts(
    bridge: Any,
    world: Any,
    train_sequences: Sequence[Sequence[str]],
    test_sequences: Sequence[Sequence[str]],
    rule: VerdictRule | None = None,
    *,
    seed: int = 0,
    l2: float | None = None,
    max_iter: int | None = None,
    **rule_settings: Any,
) -> LayerVerdicts:
    """Per block ℓ, the verdict of the held-out probe-accuracy change across it (module docstring).

    Probes are fitted at the embeddings and after every block on ``train_sequences`` and scored on
    ``test_sequences``; scalar state labels (streets: the current intersection, dialogue: the
    state's label) are one class each. Test labels unseen in training count as errors. ``rule``: a
    :class:`~interp.analysis.config.sweep_config.VerdictRule` (``n_boot``, ``confidence``, ``per_layer``,
    ``min_effect`` — default :data:`~interp.analysis.verdicts.layers.MIN_EFFECTS`
    ``probe_accuracy_change``), whose fields may also be given as keywords (``n_boot=200``); the
    bootstrap always resamples test sequences (``resample="groups"``). ``seed``: the bootstrap;
    ``l2``, ``max_iter``: the probes' (:func:`~interp.metrics.probes.fit_probe`; None: its defaults)."""
    rule = merge_options(VerdictRule, rule, rule_settings, "probe_verdicts")
    if rule.resample != "groups":
        raise ValueError(f"probe verdicts resample test sequences (resample='groups'), got resample={rule.resample!r}")
    hits = _probe_hits(bridge, world, train_sequences, test_sequences, l2, max_iter)
    correct, test = hits["correct"], hits["test"]
    delta, reason = default_min_effect(METRIC) if rule.min_effect is None else (float(rule.min_effect), "given")
    band = cluster_band(
        accuracy_changes(correct),
        test.sequence,
        n_boot=rule.n_boot,
        confidence=rule.confidence,
        seed=seed,
        simultaneous=not rule.per_layer,
    )
    acc = correct.mean(0)
    change = band.estimate
    n_layers = correct.shape[1] - 1
    frame = pd.DataFrame(
        {
            "layer": range(n_layers),
            "n": band.n,
            "n_groups": band.n_groups,
            "mean_effect": change,
            "mean_benefit": change,
            "se": band.se,
            "ci_low": band.low,
            "ci_high": band.high,
            "marginal_low": band.marginal_low,
            "marginal_high": band.marginal_high,
            "verdict": classify(band.low, band.high, delta, harmful="below"),
            "a_0": acc[:-1],
            "a_layer": acc[1:],
            "raw_verdict": ["harmful" if d < 0 else "useful" if d > 0 else "negligible" for d in change],
        }
    )
    meta = {
        "metric": METRIC,
        "kind": "probe",
        "higher_is_better": True,
        "rule": "interp.layer_verdicts/2 on the accuracy change across each block",
        "sign_convention": "effect = accuracy after block ℓ − before it; harmful: interval < −min_effect; "
        "useful: > +min_effect; negligible: inside ±min_effect; inconclusive: otherwise",
        "min_effect": delta,
        "min_effect_reason": reason,
        "per_layer": bool(rule.per_layer),
        "family": "per layer (marginal intervals)"
        if rule.per_layer
        else f"simultaneous over the {n_layers} blocks (max-|t| band, critical value {band.critical:.3f})",
        "critical_value": None if rule.per_layer else band.critical,
        "resample": "groups",
        "groups": "test sequences (the positions of one sequence)",
        "n_groups": band.n_groups,
        "interval": band.settings["method"],
        "n_boot": int(rule.n_boot),
        "confidence": float(rule.confidence),
        "seed": int(seed),
        "n_examples": int(test.n_sequences),
        "train_positions": hits["train_positions"],
        "test_positions": len(test.labels),
        "unseen_test_labels": hits["unseen"],
        "probes_converged": hits["converged"],
        "embedding_accuracy": float(acc[0]),
    }
    return LayerVerdicts(frame, None, meta)


def _probe_hits(
    bridge: Any,
    world: Any,
    train_sequences: Sequence[Sequence[str]],
    test_sequences: Sequence[Sequence[str]],
    l2: float | None,
    max_iter: int | None,
) -> dict[str, Any]:
    """Fit a probe at the embeddings and after every block; per test position and column,
    whether it decodes the state (``correct`` [positions, 1 + n_layers]), with the test
    activations (``test``), each probe's convergence and the counts the verdicts record."""
    from interp.metrics import probes as P

    layers = [P.EMBED, *range(int(bridge.cfg.n_layers))]
    train = P.collect_activations(bridge, world, train_sequences, layers)
    test = P.collect_activations(bridge, world, test_sequences, train.layers)
    if not train.labels or not test.labels:
        raise ValueError(f"no labelled positions to probe ({len(train.labels)} train, {len(test.labels)} test)")
    coding = P.LabelCoding.fit([(x,) for x in train.labels])
    y_train = coding.encode([(x,) for x in train.labels])
    y_test = coding.encode([(x,) for x in test.labels])
    kw: dict[str, Any] = {}
    if l2 is not None:
        kw["l2"] = l2
    if max_iter is not None:
        kw["max_iter"] = max_iter
    n_classes = [len(c) for c in coding.classes]
    correct = np.zeros((len(test.labels), len(layers)), dtype=bool)
    converged = []
    for j, layer in enumerate(train.layers):
        probe = P.fit_probe(train.layer(layer), y_train, n_classes, **kw)
        correct[:, j] = (probe.predict(test.layer(layer)) == y_test)[:, 0].numpy()
        converged.append(bool(probe.converged))
    if len(test.sequence) != len(correct):
        raise ValueError(f"{len(test.sequence)} sequence ids for {len(correct)} test positions")
    return {
        "correct": correct,
        "test": test,
        "converged": converged,
        "train_positions": len(train.labels),
        "unseen": int((y_test < 0).sum()),
    }


__all__ = ["METRIC", "accuracy_changes", "probe_verdicts"]
