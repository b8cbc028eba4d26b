"""The main job's stages resume: a rerun of ``interp run`` reads back every stage already finished.

Each stage of :func:`interp.jobs.pipeline.run_main_job` (world model, plant, layers, fix) ends by
writing ``<run>/stages/<stage>.json`` — its part of ``results.json`` and its *key*: the settings
that decide its numbers (its config section) and the SHA-256 of the weights it read — atomically
(:func:`interp.results.atomic_write`), after every file of the stage is written. A rerun into the
same run folder whose key is unchanged reads the record back instead of running the stage (and
says so); a stage whose settings or input model changed is run again, naming what changed, as are
the stages after it that read its output (their keys hold its output's hash or its verdicts).
Ctrl-C or SIGKILL inside a stage leaves no record, so the rerun runs that stage again from its
start (the training stage resumes from its own last checkpoint,
:func:`interp.jobs.experiment.run_experiment`). ``interp run --fresh`` starts the folder over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interp.analysis.engines.unitstore import differences, file_sha256
from interp.results import as_json, write_json

#: the format of a stage record (a record of another format is run again)
FORMAT = 1


def weights_sha256(checkpoint: str | Path) -> str | None:
    """The SHA-256 of a checkpoint folder's ``model.safetensors`` (None when it has none)."""
    path = Path(checkpoint) / "model.safetensors"
    return file_sha256(path) if path.is_file() else None


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested settings as ``{"fix.steps": 20, …}``: a change is named by its own key."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


class StageRecords:
    """``run(name, key, fn)``: ``fn()``'s result, read back from ``<run>/stages/<name>.json`` when a
    record with an equal ``key`` is there, else computed and recorded. ``read_back``: the stages
    read back in this process."""

    def __init__(self, run_dir: str | Path, log: Callable[[str], Any] = print) -> None:
        self.folder = Path(run_dir) / "stages"
        self.log = log
        self.read_back: list[str] = []

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def _record(self, name: str) -> dict[str, Any] | None:
        path = self.path(name)
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            self.log(f"{name}: its record {path} is unreadable ({e}); running the stage again")
            return None
        if not isinstance(record, dict) or record.get("format") != FORMAT or "result" not in record:
            self.log(f"{name}: its record {path} is not a stage record of format {FORMAT}; running the stage again")
            return None
        return record

    def run(self, name: str, key: dict[str, Any], fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        key = as_json(key)
        record = self._record(name)
        if record is not None and record.get("key") == key:
            self.log(
                f"{name}: finished before ({record.get('finished', '?')}, {record.get('seconds', '?')} s), read back "
                f"from {self.path(name)} (interp run --fresh redoes every stage)"
            )
            self.read_back.append(name)
            return dict(record["result"])
        if record is not None:
            changed = differences(_flat(record.get("key") or {}), _flat(key), "")
            self.log(f"{name}: running again, its inputs changed: " + "; ".join(c.strip() for c in changed))
        started = time.perf_counter()
        result = as_json(fn())  # the first run hands on what a rerun reads back
        write_json(
            self.path(name),
            {
                "format": FORMAT,
                "key": key,
                "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "seconds": round(time.perf_counter() - started, 1),
                "result": result,
            },
        )
        return result


__all__ = ["FORMAT", "StageRecords", "weights_sha256"]
