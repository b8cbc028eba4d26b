"""``interp.load``: a result folder — written by the API or by the ``interp`` command, which write
the same files — read back as its result object, checked against a model's fingerprint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from interp.analysis.engines.fingerprint import check_fingerprint
from interp.api.model import Model
from interp.api.patching import Patching
from interp.api.results import ResultFolderError
from interp.api.sweeping import read_sweep


def load(folder: str | Path, model: Model | None = None) -> Any:
    """A result folder as its result object: a layer sweep (:class:`Sweep`) or activation-patching
    maps (:class:`~interp.api.patching.Patching`), written by the API or by the CLI. With
    ``model``, the folder's model fingerprint must match it
    (:class:`~interp.analysis.engines.fingerprint.ModelMismatchError` otherwise)."""
    folder = Path(folder)
    run_json = folder / "run.json"
    if not run_json.is_file():
        raise ResultFolderError(f"{folder} has no run.json: not a result folder written by interp")
    info = json.loads(run_json.read_text())
    if (folder / "patching_resid_pre.csv").is_file():
        result: Any = Patching.read(folder, info)
        result.model = model
    elif (folder / "sweep.csv").is_file():
        result = read_sweep(folder, info)
    else:
        raise ResultFolderError(f"{folder} has a run.json but neither sweep.csv nor patching_resid_pre.csv")
    if model is not None:
        expected = (info.get("provenance") or {}).get("model") or result.recorded_model()
        if expected is None:
            raise ResultFolderError(f"{folder} records no model fingerprint to check the model against")
        check_fingerprint(expected, model.bridge, what=f"the result in {folder}")
    return result


__all__ = ["load"]
