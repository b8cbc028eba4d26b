"""Ground-truth worlds: DFAs whose states give meaning to token sequences.

``parse_world("streets")``, ``parse_world("dfa:my.json")`` … build a world from a CLI-style
argument; ``world_from_spec(spec)`` rebuilds one from the JSON a checkpoint stores.
Modules are imported lazily so that ``interp --help`` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from interp.worlds.base import (
    BOS,
    PAD,
    IllegalTokenError,
    State,
    Vocab,
    World,
    WorldError,
)

#: kind → (module, class, one-line description). The CLI's `interp worlds` prints this table.
WORLD_KINDS: dict[str, tuple[str, str, str]] = {
    "dfa": (
        "interp.worlds.dfa",
        "DFAWorld",
        "any DFA from a JSON file (alphabet, start, accept, transitions): dfa:PATH",
    ),
    "connect4": (
        "interp.worlds.connect4",
        "Connect4World",
        "cumulative Connect-4: 7 columns, at most n disks each, state = column heights",
    ),
    "streets": (
        "interp.worlds.streets",
        "StreetsWorld",
        "turn-by-turn navigation on a street map (synthetic city or graph CSV): streets[:CONFIG.toml|EDGES.csv]",
    ),
    "othello": (
        "interp.worlds.othello",
        "OthelloWorld",
        "8x8 Othello, 60 move tokens, passes implicit, state = board and side to move",
    ),
    "dialogue": (
        "interp.worlds.dialogue",
        "DialogueWorld",
        "PragWorld-style conversations (objects placed at locations) with exact yes/no "
        "probes: dialogue[:objects=3,locations=3,max_utts=8,...]",
    ),
}


def world_class(kind: str) -> type[World]:
    """The :class:`World` class of a world kind (``streets``, ``dfa``, …), imported on demand."""
    if kind not in WORLD_KINDS:
        raise WorldError(f"unknown world {kind!r}; known worlds: {', '.join(WORLD_KINDS)}")
    module, cls, _ = WORLD_KINDS[kind]
    return getattr(importlib.import_module(module), cls)


def parse_world(arg: str) -> World:
    """Build a world from ``KIND`` or ``KIND:ARG`` (e.g. ``dfa:path.json``, ``streets:edges.csv``)."""
    kind, _, rest = arg.partition(":")
    return world_class(kind.strip().lower()).from_arg(rest)  # type: ignore[attr-defined]


def world_from_spec(spec: dict[str, Any]) -> World:
    """Rebuild a world from ``World.spec()`` (as stored in a checkpoint)."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise WorldError(f"a world spec must be a JSON object with a 'kind' key, got {spec!r:.200}")
    return world_class(spec["kind"]).from_spec(spec)  # type: ignore[attr-defined]


__all__ = [
    "BOS",
    "PAD",
    "IllegalTokenError",
    "State",
    "Vocab",
    "World",
    "WorldError",
    "WORLD_KINDS",
    "parse_world",
    "world_from_spec",
    "world_class",
]
