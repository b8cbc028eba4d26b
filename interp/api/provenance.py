"""What a result records about how it was made (as lm-eval-harness's ``simple_evaluate`` does): the
versions of interp and of the libraries that compute, the git commit of the interp source when it
runs from a checkout, the date, and the machine."""

from __future__ import annotations

import datetime as _dt
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from interp.hardware import machine

#: the distributions whose versions a result records
PACKAGES = ("interp", "torch", "transformers", "transformer-lens", "numpy", "pandas")


def versions() -> dict[str, str | None]:
    """Installed version of each of :data:`PACKAGES` (None where it is not installed)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit() -> str | None:
    """The commit of the checkout interp's source sits in (``+dirty`` with uncommitted changes);
    None outside a git checkout or without git."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def provenance(**extra: Any) -> dict[str, Any]:
    """Versions, git commit, UTC date and machine (no matmul peak: that is measured beside timings),
    with ``extra`` (the model's fingerprint, the task, the seed …)."""
    return {
        "versions": versions(),
        "git_commit": git_commit(),
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(peak=False),
        **extra,
    }


__all__ = ["PACKAGES", "git_commit", "provenance", "versions"]
