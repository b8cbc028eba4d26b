"""The result protocol, and the shared pieces of result objects: an estimate with its
uncertainty, and CSV/JSON writing.

Every analysis and metric returns a :class:`Result`::

    result.frame          # pandas DataFrame, one row per example (per unit the estimate averages)
    result.summary()      # dict of plain JSON values: the headline numbers with their uncertainty
    result.save(folder)   # writes <stem>.json (the summary, perhaps with settings) and <stem>*.csv
                          # (<stem>.csv is the frame) into folder; returns folder

so a figure, a report or a table can read any of them the same way. ``save`` takes a folder,
never a file name (``stem=`` picks the file names inside it); :func:`save_result` is the writer.
A *run* record (``SweepRun``, ``PatchingRun``, ``EvalRun``: the files a command already wrote)
is not a result; it holds results. ``tests/test_results.py`` checks every class in ``interp``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Result(Protocol):
    """What every analysis / metric result offers (see the module docstring)."""

    @property
    def frame(self) -> Any:  # pandas.DataFrame: one row per example
        ...

    def summary(self) -> dict[str, Any]: ...

    def save(self, folder: str | Path) -> Path: ...


@dataclass(frozen=True)
class Estimate:
    """A mean with its standard error over ``n`` independent units."""

    mean: float
    se: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.se:.3f} (n={self.n})"

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def mean_se(values: Any) -> Estimate:
    """Sample mean and its standard error (ddof = 1; se = nan for n < 2)."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        return Estimate(math.nan, math.nan, 0)
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return Estimate(float(x.mean()), se, n)


def ratio_se(numerators: Any, denominators: Any) -> Estimate:
    """Σ num / Σ den with a cluster-robust (linearised) standard error.

    Used for per-position shares where positions are clustered in sequences: each sequence is one
    independent unit contributing ``num_i`` successes out of ``den_i`` positions, so the SE does
    not pretend positions of one sequence are independent.
    """
    a = np.asarray(numerators, dtype=float)
    b = np.asarray(denominators, dtype=float)
    m = int(a.size)
    if m == 0 or b.sum() == 0:
        return Estimate(math.nan, math.nan, m)
    r = a.sum() / b.sum()
    if m < 2:
        return Estimate(float(r), math.nan, m)
    resid = (a - r * b) / b.mean()
    se = math.sqrt((resid**2).sum() / (m * (m - 1)))
    return Estimate(float(r), float(se), m)


def atomic_write(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all: to a temporary name beside it, flushed and
    synced, then renamed over ``path`` (a rename within a folder is atomic on POSIX and Windows), so
    a reader — or a rerun after SIGKILL — never sees a half-written file. Returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def as_json(data: Any) -> Any:
    """``data`` as JSON reads it back after :func:`write_json` (tuples as lists, NumPy numbers as
    Python's, paths as strings): what a record is compared against and returned as."""
    return json.loads(json.dumps(data, default=_json_default))


def write_json(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` as indented JSON (NumPy and pandas values converted), creating the folder,
    atomically (:func:`atomic_write`); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, (json.dumps(data, indent=2, default=_json_default) + "\n").encode())


def save_result(folder: str | Path, stem: str, summary: dict[str, Any], **frames: Any) -> Path:
    """Write a result: ``<stem>.json`` (the summary) and one CSV per frame into ``folder``.

    A frame passed as ``frames[""]`` is written as ``<stem>.csv``; any other key ``k`` as
    ``<stem>_k.csv``. Returns the folder.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for key, frame in frames.items():
        frame.to_csv(folder / (f"{stem}.csv" if key == "" else f"{stem}_{key}.csv"), index=False)
    write_json(folder / f"{stem}.json", summary)
    return folder


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    raise TypeError(f"cannot serialise {type(o).__name__} to JSON")
