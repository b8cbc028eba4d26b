"""The choices and checks of a layer sweep's options (``interp sweep``, :mod:`interp.jobs.sweep`):
``--kind`` (:data:`KINDS`), ``--method`` (:data:`RUN_METHODS`), and ``--layers`` parsed from its
text (:func:`parse_layers`) and checked against a model's depth (:func:`check_layers`). It imports
nothing heavy: ``interp sweep --help`` reads these choices without loading torch."""

from __future__ import annotations

from collections.abc import Sequence

#: the exact sweeps' strategies (:func:`interp.analysis.engines.sweeps.mlp_removal_sweep`): reuse the clean
#: run's early layers, one forward per layer, all layers stacked, shared prefixes once
METHODS = ("reuse", "loop", "batched", "prefix")
#: the bootstrap's resampling units (:mod:`interp.analysis.verdicts.bands`): groups of rows, or rows
RESAMPLE = ("groups", "rows")

#: ``--kind`` of a layer sweep: each layer's MLP zeroed, each alteration patched into its original
#: (direct effect), or a layer × position activation-patching map
KINDS = ("mlp-zero", "direct-effect", "activation-patching")
#: ``--method``: the exact sweeps' methods (:data:`~interp.analysis.engines.sweeps.METHODS`) and ``attribution``
#: (:mod:`interp.analysis.engines.attribution`: first-order estimates from one gradient run)
RUN_METHODS = (*METHODS, "attribution")


def parse_layers(text: str | None) -> list[int] | None:
    """``"0,1,3"`` → ``[0, 1, 3]``; None or empty → None (all layers)."""
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated layer indices, got {text!r}") from None


def check_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """All layers when None; else the given ones, each in ``0..n_layers-1`` (ValueError otherwise)."""
    if layers is None:
        return list(range(n_layers))
    out = [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n_layers]
    if not out:
        raise ValueError("--layers: no layer given")
    if bad:
        raise ValueError(
            f"--layers: layer {bad[0]} is out of range; this model has {n_layers} layers (valid: 0..{n_layers - 1})"
        )
    return out


__all__ = ["KINDS", "METHODS", "RESAMPLE", "RUN_METHODS", "check_layers", "parse_layers"]
