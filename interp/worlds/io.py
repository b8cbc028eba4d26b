"""Sequence files: one sequence per line, tokens separated by single spaces.

Reading validates every line against the world, so a malformed file fails with the line number
instead of training on garbage.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from interp.worlds.base import IllegalTokenError, World, WorldError


def write_sequences(path: str | Path, sequences: Iterable[Sequence[str]]) -> Path:
    """Write sequences one per line (tokens separated by spaces), atomically (a temporary file
    renamed); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as f:
        for s in sequences:
            f.write(" ".join(s) + "\n")
    tmp.replace(path)
    return path


def read_sequences(path: str | Path, world: World | None = None) -> list[list[str]]:
    """Read a sequence file; with ``world``, every line must be a legal sequence of that world."""
    path = Path(path)
    if not path.is_file():
        raise WorldError(f"sequence file {path} does not exist")
    out = []
    with path.open() as f:
        for lineno, line in enumerate(f, start=1):
            tokens = line.split()
            if not tokens:
                raise WorldError(f"{path}:{lineno}: empty line")
            if world is not None:
                unknown = [t for t in tokens if t not in world.vocab]
                if unknown:
                    raise WorldError(f"{path}:{lineno}: unknown token {unknown[0]!r} for world {world.describe()!r}")
                try:
                    q = world.run(tokens)
                except IllegalTokenError as e:
                    raise WorldError(f"{path}:{lineno}: {e}") from None
                if not world.accepts(q):
                    raise WorldError(f"{path}:{lineno}: sequence ends in non-accepting state {q!r}")
            out.append(tokens)
    if not out:
        raise WorldError(f"{path}: no sequences")
    return out
