"""Any deterministic finite automaton, read from a JSON file.

Vafa et al. (2024, §2.1) evaluate world models against a DFA ``W = (Σ, F, δ, q0, accept)``: the
language ``L(q)`` is the set of token sequences whose every transition from ``q`` is defined and
whose last state accepts. This module lets a user bring their own DFA::

    {"alphabet": ["a", "b"],
     "start": "q0",
     "accept": ["q1"],                       # optional; default: every state accepts
     "transitions": {"q0": {"a": "q1"}, "q1": {"b": "q0"}},
     "min_len": 1, "max_len": 12,            # optional: lengths drawn by generate()
     "prefix_steps": 8,                      # optional: cap of sample_prefix's backward walk
     "end": "b",                             # optional: the token that ends a sequence
     "name": "ab", "description": "..."}     # optional: free text, kept in the spec

States are the strings named anywhere in the file: the start, the keys of ``transitions``, their
targets and the accept states. ``end`` names an alphabet token after which nothing is scored:
the Myhill–Nerode estimators never extend a suffix past it and sampled continuations stop there
(as streets' ``end``). ``name`` and ``description`` are strings for the user (``name`` shows in
:meth:`DFAWorld.describe`). Without ``accept`` every state accepts, so the language is
prefix-closed (like Connect-4 and Othello). Build a world with ``DFAWorld.from_file(path)``,
``parse_world("dfa:PATH")`` or ``DFAWorld.from_dict(d)``; malformed input raises
:class:`DFAFormatError` naming the source and the offending key.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interp.worlds.base import SPECIAL_TOKENS, IllegalTokenError, State, World, WorldError

log = logging.getLogger(__name__)

_REQUIRED_KEYS = ("alphabet", "start", "transitions")
_OPTIONAL_KEYS = ("accept", "min_len", "max_len", "prefix_steps", "end", "name", "description")
#: Default generation length and prefix walk: 2·|F| steps, capped here.
_LENGTH_CAP = 64


class DFAFormatError(WorldError):
    """A DFA definition is malformed; ``source`` names the file, ``key`` the offending entry."""

    def __init__(self, source: str, key: str, message: str):
        self.source, self.key = source, key
        super().__init__(f"{source}: {key}: {message}")


@dataclass(frozen=True)
class GenerationStats:
    """What the last :meth:`DFAWorld.generate` call did besides emitting sequences.

    ``rejected`` walks ended in a non-accepting state (or were shorter than ``min_len``) and were
    redrawn; ``truncated`` walks hit a state with no way on and were emitted shorter than the
    length drawn for them (still legal and accepted).
    """

    emitted: int
    rejected: int
    truncated: int


# ---- parsing and validation ----------------------------------------------------------------


def _key(*parts: str) -> str:
    """A JSON path such as ``transitions["q0"]["a"]`` for error messages."""
    return parts[0] + "".join(f"[{json.dumps(p)}]" for p in parts[1:])


def _check_alphabet(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise DFAFormatError(source, "alphabet", f"must be a non-empty list of strings, got {value!r:.80}")
    seen: set[str] = set()
    for i, tok in enumerate(value):
        where = f"alphabet[{i}]"
        if not isinstance(tok, str) or not tok:
            raise DFAFormatError(source, where, f"a token must be a non-empty string, got {tok!r}")
        if any(c.isspace() for c in tok):
            raise DFAFormatError(source, where, f"token {tok!r} contains whitespace")
        if tok in SPECIAL_TOKENS:
            raise DFAFormatError(source, where, f"token {tok!r} is reserved ({', '.join(SPECIAL_TOKENS)})")
        if tok in seen:
            raise DFAFormatError(source, where, f"duplicate token {tok!r}")
        seen.add(tok)
    return tuple(value)


def _check_transitions(value: Any, alphabet: tuple[str, ...], source: str) -> dict[str, dict[str, str]]:
    if not isinstance(value, Mapping):
        raise DFAFormatError(source, "transitions", f"must be an object state -> {{token: state}}, got {value!r:.80}")
    known = set(alphabet)
    out: dict[str, dict[str, str]] = {}
    for state, arcs in value.items():
        if not isinstance(state, str):
            raise DFAFormatError(source, _key("transitions", str(state)), "a state must be a string")
        if not isinstance(arcs, Mapping):
            raise DFAFormatError(
                source, _key("transitions", state), f"must be an object token -> state, got {arcs!r:.80}"
            )
        out[state] = {}
        for tok, target in arcs.items():
            if tok not in known:
                raise DFAFormatError(source, _key("transitions", state, tok), f"token {tok!r} is not in the alphabet")
            if not isinstance(target, str):
                raise DFAFormatError(
                    source, _key("transitions", state, tok), f"target state must be a string, got {target!r:.80}"
                )
            out[state][tok] = target
    return out


def _check_accept(value: Any, source: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise DFAFormatError(source, "accept", f"must be a list of state names, got {value!r:.80}")
    seen: set[str] = set()
    for i, state in enumerate(value):
        if not isinstance(state, str):
            raise DFAFormatError(source, f"accept[{i}]", f"a state must be a string, got {state!r:.80}")
        if state in seen:
            raise DFAFormatError(source, f"accept[{i}]", f"duplicate state {state!r}")
        seen.add(state)
    return tuple(value)


def _check_count(d: Mapping[str, Any], key: str, minimum: int, source: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise DFAFormatError(source, key, f"must be an integer >= {minimum}, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class _Definition:
    """A validated DFA definition, exactly as given (defaults not yet filled in)."""

    alphabet: tuple[str, ...]
    start: str
    transitions: dict[str, dict[str, str]]
    accept: tuple[str, ...] | None
    min_len: int | None
    max_len: int | None
    prefix_steps: int | None
    end: str | None = None
    name: str | None = None
    description: str | None = None


def _parse(d: Any, source: str) -> _Definition:
    """Validate a DFA definition (see the module docstring) or raise :class:`DFAFormatError`."""
    if not isinstance(d, Mapping):
        raise DFAFormatError(source, "(top level)", f"must be a JSON object, got {type(d).__name__}")
    unknown = [k for k in d if k not in _REQUIRED_KEYS + _OPTIONAL_KEYS]
    if unknown:
        raise DFAFormatError(
            source, str(unknown[0]), f"unknown key (allowed: {', '.join(_REQUIRED_KEYS + _OPTIONAL_KEYS)})"
        )
    for key in _REQUIRED_KEYS:
        if key not in d:
            raise DFAFormatError(source, key, "required key is missing")
    alphabet = _check_alphabet(d["alphabet"], source)
    if not isinstance(d["start"], str):
        raise DFAFormatError(source, "start", f"must be a state name (string), got {d['start']!r:.80}")
    transitions = _check_transitions(d["transitions"], alphabet, source)
    accept = None if d.get("accept") is None else _check_accept(d["accept"], source)
    min_len = _check_count(d, "min_len", 1, source)
    max_len = _check_count(d, "max_len", 1, source)
    if min_len is not None and max_len is not None and min_len > max_len:
        raise DFAFormatError(source, "min_len", f"min_len ({min_len}) exceeds max_len ({max_len})")
    prefix_steps = _check_count(d, "prefix_steps", 0, source)
    text = {}
    for key in ("name", "description"):
        value = d.get(key)
        if value is not None and not isinstance(value, str):
            raise DFAFormatError(source, key, f"must be a string, got {value!r:.80}")
        text[key] = value
    end = d.get("end")
    if end is not None and end not in alphabet:
        raise DFAFormatError(source, "end", f"must be a token of the alphabet, got {end!r:.80}")
    return _Definition(
        alphabet,
        d["start"],
        transitions,
        accept,
        min_len,
        max_len,
        prefix_steps,
        end,
        text["name"],
        text["description"],
    )


# ---- the world ----------------------------------------------------------------------------------


def _ordered_states(defn: _Definition) -> tuple[str, ...]:
    """F = start ∪ transition keys ∪ targets ∪ accept, in order of first mention."""
    names = [defn.start, *defn.transitions]
    names += [t for arcs in defn.transitions.values() for t in arcs.values()]
    names += list(defn.accept or ())
    return tuple(dict.fromkeys(names))


def _closure(seeds: set[str], edges: Mapping[str, tuple[tuple[str, str], ...]]) -> frozenset[str]:
    """States reachable from ``seeds`` along ``edges`` (state → ((token, next), ...))."""
    seen, todo = set(seeds), list(seeds)
    while todo:
        for _, nxt in edges.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return frozenset(seen)


class DFAWorld(World):
    """A user-supplied DFA (Vafa et al. 2024, §2.1). States and tokens are the file's strings."""

    kind = "dfa"

    def __init__(self, definition: Any, source: str = "<dict>"):
        """Validate ``definition`` (any parsed JSON value; it must be the object of the module
        docstring, else :class:`DFAFormatError`); see :meth:`from_dict`."""
        self._defn = _parse(definition, source)
        self.source = source
        d = self._defn
        self._states = _ordered_states(d)
        self._accept = frozenset(self._states if d.accept is None else d.accept)
        rank = {t: i for i, t in enumerate(d.alphabet)}
        self._arcs: dict[str, tuple[tuple[str, str], ...]] = {
            q: tuple(sorted(d.transitions.get(q, {}).items(), key=lambda arc: rank[arc[0]])) for q in self._states
        }
        self._legal = {q: tuple(tok for tok, _ in arcs) for q, arcs in self._arcs.items()}
        self._reachable, self._parent = self._bfs_tree()
        self._live = self._live_set()
        self._live_arcs = {q: tuple(a for a in arcs if a[1] in self._live) for q, arcs in self._arcs.items()}
        self._reachable_preds = self._predecessors()
        default_len = min(2 * len(self._states), _LENGTH_CAP)
        self.min_len = d.min_len or 1
        self.max_len = d.max_len or max(default_len, self.min_len)
        self.prefix_steps = default_len if d.prefix_steps is None else d.prefix_steps
        #: the token after which nothing is scored (None: no such token)
        self.end_token = d.end
        self.name = d.name
        self.last_generation: GenerationStats | None = None

    # ---- constructors ---------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "<dict>") -> "DFAWorld":
        """Build from a parsed JSON object; ``source`` names it in error messages."""
        return cls(d, source)

    @classmethod
    def from_file(cls, path: str | Path) -> "DFAWorld":
        """Load a DFA JSON file (see the module docstring for the format)."""
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise WorldError(f"{source}: cannot read DFA file: {e.strerror or e}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise DFAFormatError(
                source, "(file)", f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"
            ) from None
        return cls(d, source)

    @classmethod
    def from_arg(cls, arg: str) -> "DFAWorld":
        """``dfa:PATH`` on the command line: load the JSON file at ``PATH``."""
        if not arg.strip():
            raise WorldError("the dfa world needs a JSON file: dfa:PATH")
        return cls.from_file(arg.strip())

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "DFAWorld":
        """Inverse of :meth:`spec`."""
        if spec.get("kind") != cls.kind:
            raise WorldError(f"expected a 'dfa' spec, got kind {spec.get('kind')!r}")
        return cls({k: v for k, v in spec.items() if k != "kind"}, source="<spec>")

    def to_dict(self) -> dict[str, Any]:
        """The definition as given (optional keys only when they were set); JSON-serialisable."""
        d = self._defn
        out: dict[str, Any] = {
            "alphabet": list(d.alphabet),
            "start": d.start,
            "transitions": {q: dict(arcs) for q, arcs in d.transitions.items()},
        }
        optional = {
            "accept": None if d.accept is None else list(d.accept),
            "min_len": d.min_len,
            "max_len": d.max_len,
            "prefix_steps": d.prefix_steps,
            "end": d.end,
            "name": d.name,
            "description": d.description,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.to_dict()}

    # ---- the DFA -------------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[str, ...]:
        return self._defn.alphabet

    @property
    def states(self) -> tuple[str, ...]:
        """All states F, in order of first mention in the definition."""
        return self._states

    @property
    def prefix_closed(self) -> bool:
        """True when every state accepts (no ``accept`` list was given, or it lists every state)."""
        return len(self._accept) == len(self._states)

    def start(self) -> str:
        return self._defn.start

    def _check_state(self, state: State) -> str:
        if not isinstance(state, str) or state not in self._arcs:
            raise WorldError(f"{self.source}: unknown state {state!r}")
        return state

    def legal(self, state: State) -> tuple[str, ...]:
        return self._legal[self._check_state(state)]

    def step(self, state: State, token: str) -> str:
        target = self._defn.transitions.get(self._check_state(state), {}).get(token)
        if target is None:
            raise IllegalTokenError(state, token)
        return target

    def accepts(self, state: State) -> bool:
        return self._check_state(state) in self._accept

    def reachable_states(self) -> frozenset[str]:
        """States some token sequence leads to from the start (the start included)."""
        return self._reachable

    def live_states(self) -> frozenset[str]:
        """States from which an accepting state is reachable (so L(q) is non-empty)."""
        return self._live

    def _bfs_tree(self) -> tuple[frozenset[str], dict[str, tuple[str, str]]]:
        """Reachable states and a BFS parent map ``q -> (parent, token)`` of shortest paths."""
        start = self._defn.start
        parent: dict[str, tuple[str, str]] = {}
        seen, todo = {start}, deque([start])
        while todo:
            q = todo.popleft()
            for tok, nxt in self._arcs[q]:
                if nxt not in seen:
                    seen.add(nxt)
                    parent[nxt] = (q, tok)
                    todo.append(nxt)
        return frozenset(seen), parent

    def _live_set(self) -> frozenset[str]:
        reverse: dict[str, list[tuple[str, str]]] = {q: [] for q in self._states}
        for q, arcs in self._arcs.items():
            for tok, nxt in arcs:
                reverse[nxt].append((tok, q))
        return _closure(set(self._accept), {q: tuple(v) for q, v in reverse.items()})

    def _predecessors(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """``q -> ((pred, token), ...)`` over reachable predecessors only (a BFS path exists)."""
        preds: dict[str, list[tuple[str, str]]] = {q: [] for q in self._states}
        for q in self._reachable:
            for tok, nxt in self._arcs[q]:
                preds[nxt].append((q, tok))
        rank = {q: i for i, q in enumerate(self._states)}
        return {q: tuple(sorted(v, key=lambda pt: (rank[pt[0]], pt[1]))) for q, v in preds.items()}

    def shortest_path(self, state: State) -> list[str]:
        """A shortest token sequence from the start to ``state`` (BFS; ties by vocabulary order)."""
        q = self._check_state(state)
        if q not in self._reachable:
            raise WorldError(f"{self.source}: state {q!r} is unreachable from start {self.start()!r}")
        path: list[str] = []
        while q != self._defn.start:
            q, tok = self._parent[q]
            path.append(tok)
        return path[::-1]

    # ---- sampling ------------------------------------------------------------------------------

    def sample_prefix(self, state: State, rng: np.random.Generator) -> list[str]:
        """A random prefix reaching ``state``: BFS path to p, then a forward replay of a backward walk.

        We walk ``k ~ U{0..prefix_steps}`` steps backwards from ``state`` along reversed transitions
        (only through reachable predecessors), ending at some ``p``, and prepend a shortest path
        from the start to ``p``. Different walks give the diverse prefixes the compression metric
        needs (Vafa et al. 2024, §2.4), and every prefix provably ends in ``state``.
        """
        q = self._check_state(state)
        if q not in self._reachable:
            raise WorldError(
                f"{self.source}: state {q!r} is unreachable from start {self.start()!r}; no prefix leads to it"
            )
        back: list[str] = []
        for _ in range(int(rng.integers(0, self.prefix_steps + 1))):
            preds = self._reachable_preds[q]
            if not preds:
                break
            q, tok = preds[int(rng.integers(len(preds)))]
            back.append(tok)
        return self.shortest_path(q) + back[::-1]

    def _walk(self, length: int, rng: np.random.Generator) -> tuple[list[str], str]:
        """A random walk of up to ``length`` steps from the start, staying in live states."""
        q, walk = self._defn.start, []
        for _ in range(length):
            arcs = self._live_arcs[q]
            if not arcs:
                break
            tok, q = arcs[int(rng.integers(len(arcs)))]
            walk.append(tok)
        return walk, q

    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` accepted random walks from the start, lengths ``~ U{min_len..max_len}``.

        Each step picks uniformly among the legal tokens that lead to a live state, so a walk never
        enters a dead end. A walk that still ends in a non-accepting state (or stops before
        ``min_len``) is rejected and redrawn; a walk stuck in an accepting state with no way on is
        emitted shorter. Both are counted in :attr:`last_generation` and logged.
        """
        if self._defn.start not in self._live:
            raise WorldError(
                f"{self.source}: the language is empty (no accepting state is reachable from start {self.start()!r})"
            )
        out: list[list[str]] = []
        rejected = truncated = 0
        max_rejected = 1000 + 100 * n
        while len(out) < n:
            length = int(rng.integers(self.min_len, self.max_len + 1))
            walk, q = self._walk(length, rng)
            if q not in self._accept or len(walk) < self.min_len:
                rejected += 1
                if rejected > max_rejected:
                    raise WorldError(
                        f"{self.source}: gave up after {rejected} rejected walks ({len(out)}/{n} "
                        f"accepted); few walks of length {self.min_len}..{self.max_len} end in an "
                        f"accepting state: adjust min_len/max_len"
                    )
                continue
            truncated += len(walk) < length
            out.append(walk)
        self.last_generation = GenerationStats(len(out), rejected, truncated)
        if rejected or truncated:
            log.info(
                "%s: generated %d walks (%d rejected and redrawn, %d truncated at dead ends)",
                self.source,
                len(out),
                rejected,
                truncated,
            )
        return out

    def describe(self) -> str:
        n_arcs = sum(len(a) for a in self._arcs.values())
        closed = ", prefix-closed" if self.prefix_closed else ""
        named = f" {self.name!r}" if self.name else ""
        return (
            f"dfa{named}: {len(self._states)} states ({len(self._reachable)} reachable, "
            f"{len(self._accept)} accepting{closed}), {len(self.tokens)} tokens, "
            f"{n_arcs} transitions, from {self.source}"
        )
