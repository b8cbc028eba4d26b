"""Layer verdicts from current-state probes: a layer after which the state is *less* decodable.

The design card asks that "linear current-state probes … sort layers into useful and harmful"
beside the MLP zero-out sweep. Here a probe (:func:`interp.metrics.probes.fit_probe`, the same
multinomial logistic regression as Table 1's probe) is fitted on the residual stream entering
block 0 (the embeddings) and after every block, on the training sequences, and scored on held-out
positions. The evidence about block ℓ is the change of held-out probe accuracy across it::

    Δ_ℓ = accuracy(after block ℓ) − accuracy(before block ℓ)

with a percentile bootstrap interval that resamples **test sequences** (positions of one sequence
are correlated, so they are resampled together; the same draw serves every layer, as in
:func:`interp.analysis.verdicts.layer_verdicts`). Verdicts, on that interval:

- ``harmful`` — entirely below 0: the state is less linearly decodable after the block;
- ``useful`` — entirely above 0: the block makes the state more decodable;
- ``neutral`` — the interval covers 0.

This reads the whole block (attention and MLP), not the MLP alone, and a probe measures what is
*decodable*, not what the model *uses*: a block can leave the state perfectly decodable and still
push wrong predictions (then the probes call it neutral while the zero-out sweep calls it harmful).
That difference is the point of reporting both.

The result is a :class:`~interp.analysis.verdicts.LayerVerdicts` (``mean_effect`` = ``mean_benefit``
= Δ_ℓ, ``a_0`` / ``a_layer`` = accuracy before / after the block, ``raw_verdict`` = the sign of Δ_ℓ
with no interval), so it saves, loads and prints like the sweep's verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool, Float, Int

from interp.analysis.verdicts import LayerVerdicts


def bootstrap_accuracy_change(correct: Bool[np.ndarray, "row layer"], sequence: Int[np.ndarray, " row"],
                              n_boot: int = 2000, confidence: float = 0.95,
                              seed: int = 0) -> tuple[Float[np.ndarray, " step"], Float[np.ndarray, " step"],
                                                      Float[np.ndarray, " step"]]:
    """Accuracy change between consecutive columns of ``correct`` (column j+1 minus column j) and
    its percentile bootstrap interval over sequences (clusters): each resample draws sequences
    with replacement and recomputes every column's accuracy as hits / positions of the drawn
    sequences. Returns ``(change, low, high)``, one entry per consecutive pair."""
    if correct.ndim != 2 or correct.shape[1] < 2 or len(correct) != len(sequence):
        raise ValueError(f"need correct [rows, ≥2 layers] and one sequence id per row, got {correct.shape} "
                         f"and {len(sequence)}")
    if not 0 < confidence < 1 or n_boot < 1:
        raise ValueError(f"need 0 < confidence < 1 and n_boot ≥ 1, got {confidence}, {n_boot}")
    ids, inverse = np.unique(sequence, return_inverse=True)
    hits = np.zeros((len(ids), correct.shape[1]))
    np.add.at(hits, inverse, correct.astype(float))
    counts = np.bincount(inverse, minlength=len(ids)).astype(float)
    acc = hits.sum(0) / counts.sum()
    change = np.diff(acc)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(ids), size=(n_boot, len(ids)))
    boot_acc = hits[draws].sum(1) / counts[draws].sum(1)[:, None]  # [n_boot, layers]
    boot = np.diff(boot_acc, axis=1)
    alpha = (1 - confidence) / 2
    return change, np.quantile(boot, alpha, axis=0), np.quantile(boot, 1 - alpha, axis=0)


def probe_verdicts(bridge: Any, world: Any, train_sequences: Sequence[Sequence[str]],
                   test_sequences: Sequence[Sequence[str]], n_boot: int = 2000, confidence: float = 0.95,
                   seed: int = 0, l2: float | None = None, max_iter: int | None = None) -> LayerVerdicts:
    """Per block ℓ, the verdict of the held-out probe-accuracy change across it (module docstring).

    Probes are fitted at the embeddings and after every block on ``train_sequences`` and scored on
    ``test_sequences``; scalar state labels (streets: the current intersection, dialogue: the
    state's label) are one class each. Test labels unseen in training count as errors."""
    from interp.metrics import probes as P

    n_layers = int(bridge.cfg.n_layers)
    layers = [P.EMBED, *range(n_layers)]
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
    change, low, high = bootstrap_accuracy_change(correct, test.sequence, n_boot, confidence, seed)
    acc = correct.mean(0)
    rows = []
    for ell in range(n_layers):
        d, lo, hi = float(change[ell]), float(low[ell]), float(high[ell])
        verdict = "harmful" if hi < 0 else "useful" if lo > 0 else "neutral"
        raw = "harmful" if d < 0 else "useful" if d > 0 else "neutral"
        rows.append({"layer": ell, "n": int(len(test.labels)), "mean_effect": d, "mean_benefit": d,
                     "ci_low": lo, "ci_high": hi, "verdict": verdict, "a_0": float(acc[ell]),
                     "a_layer": float(acc[ell + 1]), "raw_verdict": raw})
    meta = {"metric": "probe accuracy change across the block (after − before)", "kind": "probe",
            "higher_is_better": True,
            "sign_convention": "effect = accuracy after block ℓ − before it; harmful: CI < 0; useful: CI > 0",
            "n_boot": int(n_boot), "confidence": float(confidence), "seed": int(seed),
            "n_examples": int(test.n_sequences), "resampled": "test sequences",
            "train_positions": len(train.labels), "test_positions": len(test.labels),
            "unseen_test_labels": int((y_test < 0).sum()), "probes_converged": converged,
            "embedding_accuracy": float(acc[0])}
    return LayerVerdicts(pd.DataFrame(rows), None, meta)


__all__ = ["bootstrap_accuracy_change", "probe_verdicts"]
