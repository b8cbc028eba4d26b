"""Which model a result belongs to: a hash of the architecture fields of ``bridge.cfg``.

A verdict file (``interp.analysis.verdicts.layers``) names layers of one model; a later fine-tuning step
(HLS / ULA regularisers, PragWorld §"Regularised fine-tuning") must refuse verdicts of another
model. The hash covers the shape of the network (layer count, widths, heads, vocabulary, norm and
activation kinds, architecture), not its weights, so a fine-tuned copy of a model still matches
the verdicts computed on its base, while a model of another size or family does not. Device,
dtype and the model's name/path are left out (the path is recorded beside the hash, for humans).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

#: the ``bridge.cfg`` fields the hash covers
ARCH_FIELDS = (
    "architecture",
    "n_layers",
    "d_model",
    "n_heads",
    "d_head",
    "d_mlp",
    "d_vocab",
    "n_ctx",
    "n_key_value_heads",
    "act_fn",
    "normalization_type",
    "positional_embedding_type",
    "gated_mlp",
    "parallel_attn_mlp",
)


class ModelMismatchError(ValueError):
    """A result (e.g. a verdict file) belongs to a different model than the one at hand."""


def model_fingerprint(bridge: Any, path: str | Path | None = None) -> dict[str, Any]:
    """``{"config_hash", "n_layers", "path", "config"}`` of a bridge (``path``: where it was loaded from)."""
    cfg = bridge.cfg
    fields = {k: _plain(getattr(cfg, k, None)) for k in ARCH_FIELDS}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    if path is None:
        path = getattr(cfg, "model_name", None)
    return {
        "config_hash": digest,
        "n_layers": int(cfg.n_layers),
        "path": None if path is None else str(path),
        "config": fields,
    }


def check_fingerprint(expected: dict[str, Any], bridge: Any, what: str = "this result") -> None:
    """Raise :class:`ModelMismatchError` unless ``bridge`` has the architecture ``expected`` records."""
    got = model_fingerprint(bridge)
    if expected.get("config_hash") != got["config_hash"] or int(expected.get("n_layers", -1)) != got["n_layers"]:
        diffs = {
            k: (v, got["config"].get(k)) for k, v in (expected.get("config") or {}).items() if got["config"].get(k) != v
        }
        raise ModelMismatchError(
            f"{what} was computed on model {expected.get('path')!r} (config hash {expected.get('config_hash')}, "
            f"{expected.get('n_layers')} layers); the model at hand has hash {got['config_hash']}, "
            f"{got['n_layers']} layers; differing fields (recorded, here): {diffs or 'unknown'}"
        )


def _plain(v: Any) -> Any:
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


__all__ = ["ARCH_FIELDS", "ModelMismatchError", "check_fingerprint", "model_fingerprint"]
