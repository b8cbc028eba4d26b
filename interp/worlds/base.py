"""The World protocol: a deterministic finite automaton with meaning.

A *world* (Vafa et al. 2024, §2) is a DFA ``W = (Σ, F, δ, q0, accept)``: string tokens ``Σ``,
states ``F``, a partial transition function ``δ(q, a)`` and a start state ``q0``. Everything
downstream (data generation, the next-token test, probes, Myhill–Nerode metrics) talks to a
world only through the small interface below, so any world works with any metric.

States are hashable, immutable Python values (tuples, strings, ints). Tokens are strings without
whitespace; a world's token list is fixed and ordered, so token ids are stable across runs.

Conventions every world follows
- ``legal(q)`` lists the tokens ``a`` for which ``δ(q, a)`` is defined, in vocabulary order.
- ``step(q, a)`` returns ``δ(q, a)`` or raises :class:`IllegalTokenError` when it is undefined.
- ``accepts(q)`` says whether a sequence may stop in ``q``. A sequence ``x`` is in ``L(q)`` when
  every transition along it is defined and the last state accepts (paper §2.1). For the
  prefix-closed worlds (streets with its ``end`` token, Connect-4, Othello) every state accepts.
- ``sample_prefix(q, rng)`` draws a random token sequence that leads from ``q0`` to ``q``; the
  Myhill–Nerode metrics compare models on two different prefixes reaching one state.
- ``generate(n, rng)`` draws training/evaluation sequences (the world's default traversal).
- ``spec()`` is a JSON-serialisable dict from which :func:`interp.worlds.world_from_spec` rebuilds
  an identical world; checkpoints store it so a model carries its world.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

State = Hashable

PAD = "<pad>"
BOS = "<bos>"
#: never produced by a world; the word-level tokenizer of a checkpoint maps unknown words to it
UNK = "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, UNK)


class WorldError(ValueError):
    """A world was given input it cannot accept (bad file, unknown state, malformed spec)."""


class IllegalTokenError(WorldError):
    """``step(state, token)`` was called with a token that has no transition from ``state``."""

    def __init__(self, state: State, token: str, where: str = ""):
        self.state, self.token = state, token
        loc = f" at position {where}" if where else ""
        super().__init__(f"token {token!r} is not legal in state {state!r}{loc}")


@dataclass(frozen=True)
class Vocab:
    """Token ↔ id map shared by a world and its model.

    Ids ``0``, ``1``, ``2`` are the special tokens ``<pad>``, ``<bos>`` and ``<unk>``; the world's
    tokens follow in the world's order. Every sequence fed to a model starts with ``<bos>`` so that the model
    also predicts the first real token (e.g. the origin of a route).
    """

    tokens: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.tokens[: len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
            raise WorldError(f"a Vocab must start with {SPECIAL_TOKENS}, got {self.tokens[:3]}")
        if len(set(self.tokens)) != len(self.tokens):
            dup = sorted({t for t in self.tokens if self.tokens.count(t) > 1})
            raise WorldError(f"duplicate tokens in vocabulary: {dup[:10]}")
        for t in self.tokens:
            if not t or any(c.isspace() for c in t):
                raise WorldError(f"token {t!r} is empty or contains whitespace")
        object.__setattr__(self, "_index", {t: i for i, t in enumerate(self.tokens)})

    @classmethod
    def for_tokens(cls, world_tokens: Iterable[str]) -> "Vocab":
        return cls(SPECIAL_TOKENS + tuple(world_tokens))

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self._index  # type: ignore[attr-defined]

    def id(self, token: str) -> int:
        try:
            return self._index[token]  # type: ignore[attr-defined]
        except KeyError:
            raise WorldError(f"unknown token {token!r} (vocabulary of {len(self)} tokens)") from None

    def encode(self, tokens: Sequence[str], bos: bool = True) -> list[int]:
        ids = [self.id(t) for t in tokens]
        return [self.bos_id, *ids] if bos else ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def to_json(self) -> str:
        return json.dumps(list(self.tokens))


class World(ABC):
    """Base class of every world. See the module docstring for the contract."""

    #: registry name, e.g. ``"streets"``
    kind: str = "world"

    @property
    @abstractmethod
    def tokens(self) -> tuple[str, ...]:
        """The alphabet Σ in a fixed order (no special tokens)."""

    @abstractmethod
    def start(self) -> State:
        """The start state q0."""

    @abstractmethod
    def legal(self, state: State) -> tuple[str, ...]:
        """Tokens with a defined transition from ``state``, in vocabulary order."""

    @abstractmethod
    def step(self, state: State, token: str) -> State:
        """δ(state, token); raises :class:`IllegalTokenError` when undefined."""

    def accepts(self, state: State) -> bool:
        """Whether a sequence may end in ``state`` (default: every state accepts)."""
        return True

    @abstractmethod
    def sample_prefix(self, state: State, rng: np.random.Generator) -> list[str]:
        """A random token sequence from q0 that reaches ``state``."""

    @abstractmethod
    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` sequences of the world's default traversal (each one legal from q0)."""

    @abstractmethod
    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description; ``world_from_spec(w.spec())`` rebuilds ``w``."""

    def describe(self) -> str:
        """One line for ``interp worlds`` and logs."""
        return f"{self.kind}: {len(self.tokens)} tokens"

    # ---- derived helpers (worlds may override for speed) -------------------------------------

    @property
    def vocab(self) -> Vocab:
        cached = self.__dict__.get("_vocab")
        if cached is None:
            cached = Vocab.for_tokens(self.tokens)
            self.__dict__["_vocab"] = cached
        return cached

    def run(self, tokens: Sequence[str], state: State | None = None) -> State:
        """The state reached by reading ``tokens`` from ``state`` (default q0)."""
        q = self.start() if state is None else state
        for i, t in enumerate(tokens):
            try:
                q = self.step(q, t)
            except IllegalTokenError as e:
                raise IllegalTokenError(e.state, e.token, where=str(i)) from None
        return q

    def states_along(self, tokens: Sequence[str]) -> list[State]:
        """``[q0, δ(q0,t1), δ(δ(q0,t1),t2), ...]``: len(tokens)+1 states."""
        q = self.start()
        out = [q]
        for i, t in enumerate(tokens):
            try:
                q = self.step(q, t)
            except IllegalTokenError as e:
                raise IllegalTokenError(e.state, e.token, where=str(i)) from None
            out.append(q)
        return out

    def is_legal_sequence(self, tokens: Sequence[str]) -> bool:
        """Every transition defined and the final state accepts: ``tokens ∈ L(q0)``."""
        try:
            q = self.run(tokens)
        except IllegalTokenError:
            return False
        return self.accepts(q)

    def split_key(self, sequence: Sequence[str]) -> Hashable:
        """Sequences with equal keys always land on the same side of a train/test split.

        Default: the whole sequence (duplicates never straddle the split). Streets overrides it
        with the (origin, destination) pair, as the paper's split does (App. F).
        """
        return tuple(sequence)

    def state_label(self, state: State) -> Any:
        """The state component a linear probe predicts (default: the whole state)."""
        return state
