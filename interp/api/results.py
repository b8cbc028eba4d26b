"""What every API result shares: a folder of files (:class:`SavedResult`), figures that show
themselves in a notebook (:class:`Figure`), the record of the task, and the error for a folder that
is not a result."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ResultFolderError(ValueError):
    """A folder that is not a result interp wrote (or is missing a file), named."""


@dataclass(frozen=True)
class Figure:
    """A figure file that shows itself in a notebook (``_repr_png_``) and knows its ``path``."""

    path: Path

    def _repr_png_(self) -> bytes:
        return self.path.read_bytes()


def describe_task(task: Any) -> dict[str, Any]:
    """What a result records about its task: its type, source, size and tokenization."""
    return {"type": type(task).__name__, "source": getattr(task, "source", None), "n": len(task), **task.settings()}


class SavedResult:
    """A result whose files live in ``folder``: :meth:`save` copies them elsewhere."""

    folder: Path

    def save(self, folder: str | Path) -> Path:
        """Copy the result's files to ``folder`` (read back with :func:`interp.load`)."""
        folder = Path(folder)
        if folder.resolve() != self.folder.resolve():
            shutil.copytree(self.folder, folder, dirs_exist_ok=True)
        return folder


__all__ = ["Figure", "ResultFolderError", "SavedResult", "describe_task"]
