"""Long sweeps that survive an interruption: finished units written as they go, resumed on a rerun.

A sweep is cut into *units* — one removal × one chunk of rows, every swept layer — and each unit's
rows are written to ``<out>/units/`` the moment it finishes. A rerun of the same command with the
same ``--out`` reads the finished units back, runs only the rest, and ends with the files an
uninterrupted run writes (the units are the same computations: chunk boundaries are fixed when the
folder is first written and recorded in its manifest, so a rerun batches rows exactly as before).

The folder (:class:`UnitStore`):

- ``manifest.json`` — the config fingerprint (the settings that decide a unit's numbers: data file
  and its SHA-256, rows, kind, method, layers, metric, removals, folds …; not the verdict rule,
  which is recomputed from the units) and the model fingerprint (architecture hash,
  :func:`~interp.analysis.engines.fingerprint.model_fingerprint`, and a hash of the weights,
  :func:`weights_hash`), and the rows per unit. A rerun whose config or model differs is refused
  with :class:`ResumeMismatchError`, naming each difference, unless ``overwrite`` (``--overwrite``)
  clears the folder.
- ``<unit>.csv`` and ``<unit>.json`` per finished unit: the rows, then a record of their count,
  SHA-256 and the unit's meta. Each file is written to a temporary name, flushed, synced and
  renamed, the CSV before its record, so a unit counts as done only once both are whole. SIGKILL at
  any moment leaves at worst a stray temporary file (ignored) or a CSV without its record (redone);
  a unit whose CSV no longer matches its record (a corrupted or truncated file) is redone, never
  trusted, and counted.

:class:`UnitRunner` runs a sweep function over the units with one progress bar for the job (layers ×
rows, an ETA from the measured rate and the memory estimate; off under ``--quiet``, in CI and when
stderr is not a terminal). Ctrl-C leaves the finished units in place and says how to resume.
:class:`LongRun` carries the user's settings (``--max-memory``, ``--overwrite``, ``--quiet``)
through the job functions. One process only: under a multi-process launcher the sweep runs as
before, unresumable (the runner says so).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.analysis.engines.sweeps import OWN_GROUP, SweepResult
from interp.results import atomic_write

#: the format of ``units/manifest.json`` (a folder of another format is refused)
FORMAT = 1
#: bytes a unit's row takes on disk, about (the free-space check before the work starts)
ROW_BYTES = 160


#: the units folder this process opened last, and whether its interruption was already explained
_LAST: dict[str, Any] = {"folder": None, "hinted": False}


def resume_hint(out: str | Path | None = None) -> str | None:
    """What to tell a user whose sweep was interrupted outside the units (loading, verdicts,
    files): how to resume, when this process opened a units folder (or ``out`` holds one) and
    the runner did not say so already; None otherwise."""
    folder = _LAST["folder"]
    if folder is None and out is not None and (Path(out) / "units" / "manifest.json").exists():
        folder = Path(out) / "units"
    if folder is None or _LAST["hinted"]:
        return None
    return f"the finished units are kept in {folder}; rerun the same command (same --out) to resume"


class ResumeMismatchError(ValueError):
    """An output folder holds units of another config or model than the run at hand."""


@dataclass
class LongRun:
    """How a long job runs: ``max_memory`` the memory budget that sizes the default batch
    (:func:`~interp.analysis.engines.budget.choose_batch`; ``"4GB"``, ``"30%"``, bytes), ``overwrite`` to
    replace units of another config in ``--out`` instead of refusing, ``progress`` the progress bar
    (None: when stderr is a terminal and ``CI`` is unset), ``resume`` False to write no units."""

    max_memory: str | int | float | None = None
    overwrite: bool = False
    progress: bool | None = None
    resume: bool = True

    def show_progress(self) -> bool:
        """Whether to draw the bar."""
        if self.progress is not None:
            return bool(self.progress)
        return bool(getattr(sys.stderr, "isatty", lambda: False)()) and not os.environ.get("CI")


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (a data file in the config fingerprint;
    :func:`interp.models.registry.sha256_file`)."""
    from interp.models.registry import sha256_file

    return sha256_file(path)


def weights_hash(model: Any, sample: int = 4096) -> str:
    """A hash of a model's weights: every parameter's name, shape, dtype, sum and up to ``sample``
    evenly spaced values (a fine-tuned copy of a model differs; reading it all would cost a second
    on a 135M model for nothing)."""
    import torch

    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.device.type == "meta":  # offloaded by a device map: its values are not here to read
                h.update(f"{name}|{tuple(p.shape)}|{p.dtype}|offloaded|".encode())
                continue
            flat = p.detach().reshape(-1)
            step = max(1, flat.numel() // sample)
            vals = flat[::step][:sample].float().cpu().numpy()
            h.update(f"{name}|{tuple(p.shape)}|{p.dtype}|{float(flat.float().sum()):.6e}|".encode())
            h.update(np.ascontiguousarray(vals).tobytes())
    return h.hexdigest()[:16]


def differences(recorded: dict[str, Any], now: dict[str, Any], what: str) -> list[str]:
    """One line per key whose value differs between a recorded fingerprint and the current one."""
    keys = sorted(set(recorded) | set(now))
    return [
        f"{what} {k}: {recorded.get(k)!r} in the folder, {now.get(k)!r} now"
        for k in keys
        if recorded.get(k) != now.get(k)
    ]


class UnitStore:
    """The finished units of one sweep in ``folder`` (module docstring): :meth:`get` reads a unit
    back (None when absent or not whole), :meth:`put` writes one. Opening checks the manifest
    against ``config`` / ``model`` and writes it when new; ``need_bytes`` of free space are checked
    before any work starts."""

    def __init__(
        self,
        folder: str | Path,
        config: dict[str, Any],
        model: dict[str, Any],
        *,
        unit_rows: int,
        overwrite: bool = False,
        need_bytes: int = 0,
    ):
        self.folder = Path(folder)
        self.config = json.loads(json.dumps(config, default=str))
        self.model = json.loads(json.dumps(model, default=str))
        self.redone = 0  # units found but not whole: rerun
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            probe = self.folder / f".probe{os.getpid()}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as e:
            raise ValueError(
                f"--out {self.folder.parent} is not writable ({e.strerror or e}); choose another folder"
            ) from e
        free = shutil.disk_usage(self.folder).free
        if free < need_bytes:
            raise ValueError(
                f"--out {self.folder.parent}: {free / 1e6:.1f} MB free on its disk, the sweep writes about "
                f"{need_bytes / 1e6:.1f} MB; free space or choose another folder"
            )
        manifest = self.folder / "manifest.json"
        recorded = self._read_manifest(manifest)
        if recorded is not None:
            diffs = differences(recorded.get("config", {}), self.config, "config")
            diffs += differences(
                {k: v for k, v in recorded.get("model", {}).items() if k != "path"},
                {k: v for k, v in self.model.items() if k != "path"},
                "model",
            )
            if recorded.get("format") != FORMAT:
                diffs.append(f"format {recorded.get('format')!r} in the folder, {FORMAT} now")
            if diffs and not overwrite:
                raise ResumeMismatchError(
                    f"--out {self.folder.parent} holds units of another sweep ({'; '.join(diffs)}); "
                    "rerun with --overwrite to replace them, or choose another --out"
                )
            if diffs:
                self.clear()
                recorded = None
        _LAST.update(folder=self.folder, hinted=False)
        if recorded is None:
            self.unit_rows = int(unit_rows)
            body = {"format": FORMAT, "config": self.config, "model": self.model, "unit_rows": self.unit_rows}
            atomic_write(manifest, (json.dumps(body, indent=2) + "\n").encode())
        else:
            self.unit_rows = int(recorded["unit_rows"])  # the chunking of the first run, so units match

    @staticmethod
    def _read_manifest(path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            got = json.loads(path.read_text())
        except (OSError, ValueError):
            return {"format": "unreadable"}
        return got if isinstance(got, dict) else {"format": "unreadable"}

    def clear(self) -> None:
        """Remove every unit and the manifest (``--overwrite``)."""
        for p in self.folder.iterdir():
            if p.is_file() and (p.suffix in (".csv", ".json") or ".tmp" in p.name):
                p.unlink()

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.folder / f"{key}.csv", self.folder / f"{key}.json"

    def count(self) -> int:
        """How many unit records the folder holds now."""
        return sum(1 for p in self.folder.glob("*.json") if p.name != "manifest.json")

    def done(self, key: str) -> bool:
        """Whether ``key`` has a record (its rows are checked by :meth:`get`)."""
        return self._paths(key)[1].exists()

    def get(self, key: str, kind: Any = SweepResult) -> Any:
        """The unit's result (``kind(frame, meta)``: a :class:`SweepResult`, or a patching map) when
        its CSV and record are whole and agree (row count and SHA-256); None otherwise (a corrupted
        unit is removed, counted in ``redone``, and rerun)."""
        csv, rec = self._paths(key)
        if not rec.exists():
            return None
        try:
            record = json.loads(rec.read_text())
            data = csv.read_bytes()
            ok = hashlib.sha256(data).hexdigest() == record["sha256"]
            frame = self._frame(csv, record) if ok else None
            ok = ok and frame is not None and len(frame) == int(record["rows"])
        except (OSError, ValueError, KeyError, TypeError):
            ok, frame = False, None
        if not ok or frame is None:
            self.redone += 1
            for p in (rec, csv):
                p.unlink(missing_ok=True)
            return None
        return kind(frame, record["meta"])

    @staticmethod
    def _frame(csv: Path, record: dict[str, Any]) -> pd.DataFrame:
        dtypes = record["dtypes"]
        text = [c for c, t in dtypes.items() if t == "object"]
        frame = pd.read_csv(csv, dtype={c: str for c in text}, keep_default_na=False, na_values={c: [] for c in text})
        frame = frame.astype({c: t for c, t in dtypes.items() if t != "object"})
        for c in text:  # None / NaN in a text column was written as an empty field
            frame[c] = frame[c].where(frame[c] != "", None)
        return frame[list(dtypes)]

    def put(self, key: str, result: Any) -> None:
        """Write a finished unit (anything with a ``frame`` and a JSON-able ``meta``): its CSV, then
        its record (module docstring)."""
        csv, rec = self._paths(key)
        data = result.frame.to_csv(index=False).encode()
        atomic_write(csv, data)
        record = {
            "rows": len(result.frame),
            "sha256": hashlib.sha256(data).hexdigest(),
            "dtypes": {c: str(t) for c, t in result.frame.dtypes.items()},
            "meta": result.meta,
        }
        atomic_write(rec, json.dumps(record, default=_plain).encode())


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def release_heap() -> None:
    """Hand the heap pages freed by a finished unit back to the operating system (glibc's
    ``malloc_trim``; nothing elsewhere). Units of different shapes leave the allocator holding
    freed blocks of many sizes, so without it a long sweep's resident set creeps up with the number
    of units, not the batch (``bench/sweep_memory.py``). ``INTERP_NO_TRIM=1`` turns it off."""
    trim = None if os.environ.get("INTERP_NO_TRIM") else _malloc_trim()
    if trim is not None:
        trim(0)


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim`` (looked up once), or None off Linux / off glibc."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # no glibc (musl has no malloc_trim)
        return None


def unit_chunks(sort_key: Sequence[int] | np.ndarray, unit_rows: int) -> list[np.ndarray]:
    """The rows of each unit: ``unit_rows`` at a time in the order of ``sort_key`` — the rows'
    lengths (so a unit's rows pad little), or the prefix sweep's rank of each row in token order (so
    the rows that share a prefix fall into one unit and it is computed once) — each chunk sorted."""
    order = np.argsort(np.asarray(sort_key), kind="stable")
    size = max(1, int(unit_rows))
    return [np.sort(order[i : i + size]) for i in range(0, len(order), size)]


def _merge_meta(metas: list[dict[str, Any]], n: int) -> dict[str, Any]:
    meta = {**metas[0], "n_examples": n}
    skipped: dict[str, int] = {}
    for m in metas:
        for k, v in (m.get("skipped") or {}).items():
            skipped[k] = skipped.get(k, 0) + int(v)
    if skipped:
        meta["skipped"] = skipped
    else:
        meta.pop("skipped", None)
    packs = [m["packing"] for m in metas if isinstance(m.get("packing"), dict)]
    if packs:
        total = {
            k: sum(p.get(k, 0) for p in packs)
            for k in ("rows", "packs", "batches", "row_tokens", "unique_tokens", "padding", "plain_padding")
        }
        total["shared_share"] = round(1 - total["unique_tokens"] / max(1, total["row_tokens"]), 4)
        meta["packing"] = {**packs[0], **total}
    resumed = [set(m["resumed_after_block"]) for m in metas if "resumed_after_block" in m]
    if resumed:
        meta["resumed_after_block"] = [x for x in metas[0]["resumed_after_block"] if all(x in r for r in resumed)]
    return meta


def join_units(parts: list[tuple[np.ndarray, SweepResult]], n: int) -> SweepResult:
    """One sweep from its units (``(rows, result)``; a unit's ``example`` k is ``rows[k]``): example
    numbers made global, rows in the one-call order (layer as swept, then example)."""
    frames = []
    for rows, res in parts:
        f = res.frame.copy()
        local = f["example"].to_numpy(dtype=int)
        f["example"] = rows[local]
        if res.meta.get("groups") == OWN_GROUP and "group" in f:
            f["group"] = rows[f["group"].to_numpy(dtype=int)]
        frames.append(f)
    frame = pd.concat(frames, ignore_index=True)
    rank = {layer: i for i, layer in enumerate(parts[0][1].meta.get("layers") or pd.unique(frames[0]["layer"]))}
    frame = (
        frame.assign(_rank=frame["layer"].map(rank))
        .sort_values(["_rank", "example"], kind="stable")
        .drop(columns="_rank")
        .reset_index(drop=True)
    )
    return SweepResult(frame, _merge_meta([r.meta for _, r in parts], n))


class _UnitJob:
    """What :class:`UnitRunner` and :class:`MapUnits` share: the progress bar, the sentence Ctrl-C
    prints, and the ``run.json["units"]`` record."""

    store: UnitStore | None
    bar: Any
    log: Any
    total_units: int
    ran: int

    def close(self) -> None:
        """Close the progress bar."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def _say_interrupted(self, kept: int, what: str) -> None:
        self.close()
        if self.store is not None:
            _LAST["hinted"] = True
            print(
                f"interrupted: {kept} of {self.total_units} {what} are kept in {self.store.folder}; "
                "rerun the same command (same --out) to resume",
                file=self.log,
            )

    def _record(self, unit_rows: int | None, resumed: int) -> dict[str, Any]:
        return {
            "folder": None if self.store is None else str(self.store.folder),
            "unit_rows": unit_rows,
            "units": self.total_units,
            "ran": self.ran,
            "resumed": resumed,
            "redone": 0 if self.store is None else self.store.redone,
        }


class UnitRunner(_UnitJob):
    """Runs each removal's sweep unit by unit through a :class:`UnitStore` (module docstring).

    ``lengths``: each row's token count (units group rows of similar length); ``layers``: how many
    layers a unit sweeps (the progress bar counts layers × rows); ``names``: the removals the job
    will run, in order (the finished units are read back and checked first, so the bar starts at
    what is done and its ETA counts only what runs); ``memory``: a note for the bar (the batch's
    estimate). ``lengths``: the rows' sort key (:func:`unit_chunks`). ``store`` None: nothing is written (one unit per removal, as before)."""

    def __init__(
        self,
        store: UnitStore | None,
        lengths: Sequence[int] | np.ndarray,
        layers: int,
        names: Sequence[str],
        *,
        progress: bool = False,
        memory: str = "",
        log: Any = None,
    ):
        self.store, self.layers, self.log = store, int(layers), log or sys.stderr
        self.lengths = np.asarray(lengths)
        self.n = len(self.lengths)
        self.chunks = unit_chunks(self.lengths, store.unit_rows if store is not None else max(1, self.n))
        self.names = list(dict.fromkeys(names))
        self.total_units = len(self.chunks) * len(self.names)
        self.found: dict[str, SweepResult] = {}
        if store is not None:
            for name in self.names:
                for k in range(len(self.chunks)):
                    got = store.get(self.key(name, k))
                    if got is not None:
                        self.found[self.key(name, k)] = got
        self.skipped = len(self.found)
        self.ran = 0
        done_rows = sum(
            len(c) for name in self.names for k, c in enumerate(self.chunks) if self.key(name, k) in self.found
        )
        self.bar: Any = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=len(self.names) * self.n * self.layers,
                initial=done_rows * self.layers,
                unit=" layer·rows",
                desc=f"sweep ({len(self.names)} × {self.layers} layers × {self.n} rows)",
                file=sys.stderr,
                dynamic_ncols=True,
            )
            if memory:
                self.bar.set_postfix_str(memory)

    def key(self, name: str, k: int) -> str:
        """The file stem of unit ``k`` of removal ``name``."""
        return f"{name}-{k:05d}"

    def run(self, name: str, run_part: Callable[[np.ndarray], SweepResult]) -> SweepResult:
        """The sweep of removal ``name`` over all rows, unit by unit: a finished unit is read back,
        the others run (``run_part(rows) -> SweepResult`` on the sorted row indices ``rows``) and
        written."""
        parts: list[tuple[np.ndarray, SweepResult]] = []
        try:
            for k, rows in enumerate(self.chunks):
                res = self.found.pop(self.key(name, k), None)
                if res is None:
                    res = run_part(rows)
                    if self.store is not None:
                        self.store.put(self.key(name, k), res)
                    self.ran += 1
                    release_heap()
                    if self.bar is not None:
                        self.bar.update(len(rows) * self.layers)
                parts.append((rows, res))
        except KeyboardInterrupt:
            self._say_interrupted(self.store.count() if self.store is not None else 0, "units")
            raise
        return join_units(parts, self.n)

    def summary(self) -> dict[str, Any]:
        """What ``run.json["units"]`` holds: the folder, rows per unit, units run / read back / redone."""
        return self._record(None if self.store is None else self.store.unit_rows, self.skipped)

    def line(self) -> str | None:
        """The sentence a resumed run prints before it works (None when nothing was found)."""
        if self.store is None or not (self.skipped or self.store.redone):
            return None
        redone = f"; {self.store.redone} damaged units found, to be redone" if self.store.redone else ""
        return (
            f"resuming: {self.skipped} of {self.total_units} units already done in {self.store.folder}, skipped{redone}"
        )


class MapUnits(_UnitJob):
    """The finished chunks of a patching run (:func:`~interp.analysis.engines.pair_patching.patch_by_length`):
    each chunk's maps, one unit per component, written to ``store`` as the chunk finishes and read
    back on a rerun; one progress bar over the pairs. ``store`` None: nothing is written.
    ``chunk_rows``: the chunk size recorded in the folder (the first run's, so a rerun's chunks are
    the same)."""

    def __init__(self, store: UnitStore | None, *, progress: bool = False, memory: str = "", log: Any = None):
        self.store, self.progress, self.memory, self.log = store, progress, memory, log or sys.stderr
        self.chunk_rows = store.unit_rows if store is not None else None
        self.total_units = self.ran = self.resumed = 0
        self.bar: Any = None

    def begin(self, chunks: int, pairs: int) -> None:
        """Start the job's bar: ``chunks`` chunks over ``pairs`` pairs."""
        self.total_units = chunks
        if self.progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=pairs, unit=" pairs", desc="activation patching", file=sys.stderr, dynamic_ncols=True)
            if self.memory:
                self.bar.set_postfix_str(self.memory)

    def __call__(
        self, key: str, components: Sequence[str], compute: Callable[[], dict[str, Any]], pairs: int
    ) -> dict[str, Any]:
        """The chunk ``key``'s maps: read back when every component's unit is whole, else computed
        by ``compute()`` and written."""
        from interp.analysis.engines.activation_patching import PatchingMap

        got = None
        if self.store is not None:
            found = {c: self.store.get(f"{key}-{c}", kind=PatchingMap) for c in components}
            got = found if all(m is not None for m in found.values()) else None
        if got is not None:
            self.resumed += 1
        else:
            got = compute()
            if self.store is not None:
                for c in components:
                    self.store.put(f"{key}-{c}", got[c])
            self.ran += 1
            release_heap()
        if self.bar is not None:
            self.bar.update(pairs)
        return got

    def interrupted(self) -> None:
        """Ctrl-C: close the bar and say how to resume."""
        self._say_interrupted(self.ran + self.resumed, "chunks")

    def summary(self) -> dict[str, Any]:
        """What ``run.json["units"]`` holds: the folder, pairs per chunk, chunks run / read back / redone."""
        return self._record(self.chunk_rows, self.resumed)


__all__ = [
    "FORMAT",
    "LongRun",
    "MapUnits",
    "ResumeMismatchError",
    "UnitRunner",
    "UnitStore",
    "differences",
    "file_sha256",
    "join_units",
    "resume_hint",
    "unit_chunks",
    "weights_hash",
]
