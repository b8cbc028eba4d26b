"""Cumulative Connect-4: the Myhill–Nerode illustration of Vafa et al. (2024, §2.3).

Seven columns; a move drops a disk into a column, which holds at most ``n`` disks (``n = 6`` on a
real board). Disks are never removed and nobody wins, so the only thing that matters for what
may come next is how full each column is: the state is the tuple of the 7 column heights, and
every state accepts. Two boards whose columns all have fewer than ``k`` disks accept the same next
``n - k`` moves, so a model that plays every column uniformly passes next-token tests almost
everywhere while distinguishing no states at all (recall 0 on every distinct pair).

Tokens are the column indices ``"0"`` … ``"6"`` (0 = leftmost); the paper writes them 1 … 7.
CLI: ``connect4`` or ``connect4:n=4,min_len=1,max_len=20``.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from typing import Any

import numpy as np

from interp.worlds._options import check_int, check_length_range, check_spec_keys, parse_int_options
from interp.worlds.base import IllegalTokenError, State, World, WorldError

COLUMNS = 7
_OPTIONS = ("n", "min_len", "max_len")

Heights = tuple[int, ...]


class Connect4World(World):
    """Cumulative Connect-4 with columns of capacity ``n``; state = column heights."""

    kind = "connect4"

    def __init__(self, n: int = 6, min_len: int = 1, max_len: int | None = None):
        """``generate`` draws game lengths ``~ U{min_len..max_len}`` (default ``1..7n``)."""
        self.n = check_int(n, "n", self.kind, 1)
        self.min_len, self.max_len = check_length_range(
            min_len, COLUMNS * self.n if max_len is None else max_len, self.kind
        )
        if self.max_len > COLUMNS * self.n:
            raise WorldError(
                f"connect4: max_len ({self.max_len}) exceeds the {COLUMNS * self.n} "
                f"moves that fill the board (n={self.n})"
            )
        self._tokens = tuple(str(c) for c in range(COLUMNS))

    # ---- constructors ----------------------------------------------------------------------

    @classmethod
    def from_arg(cls, arg: str) -> "Connect4World":
        """``connect4`` or ``connect4:n=4,min_len=1,max_len=20``."""
        return cls(**parse_int_options(arg, _OPTIONS, cls.kind))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "Connect4World":
        check_spec_keys(dict(spec), _OPTIONS, cls.kind)
        return cls(**{k: spec[k] for k in _OPTIONS if k in spec})

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "n": self.n, "min_len": self.min_len, "max_len": self.max_len}

    # ---- the DFA -----------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[str, ...]:
        return self._tokens

    def start(self) -> Heights:
        return (0,) * COLUMNS

    def _check_state(self, state: State) -> Heights:
        """The state as a tuple of 7 ints in ``0..n``; anything else raises :class:`WorldError`."""
        if (
            not isinstance(state, (tuple, list))
            or len(state) != COLUMNS
            or not all(isinstance(h, Integral) and not isinstance(h, bool) and 0 <= int(h) <= self.n for h in state)
        ):
            raise WorldError(f"connect4: a state is {COLUMNS} integer heights in 0..{self.n}, got {state!r:.80}")
        return tuple(int(h) for h in state)

    def legal(self, state: State) -> tuple[str, ...]:
        heights = self._check_state(state)
        return tuple(tok for tok, h in zip(self._tokens, heights) if h < self.n)

    def step(self, state: State, token: str) -> Heights:
        heights = self._check_state(state)
        col = self._tokens.index(token) if token in self._tokens else -1
        if col < 0 or heights[col] >= self.n:
            raise IllegalTokenError(heights, token)
        return heights[:col] + (heights[col] + 1,) + heights[col + 1 :]

    def state_label(self, state: State) -> Heights:
        """The probe target: the column heights (the whole state)."""
        return self._check_state(state)

    # ---- sampling ------------------------------------------------------------------------------

    def sample_prefix(self, state: State, rng: np.random.Generator) -> list[str]:
        """A uniformly random move order reaching ``state``.

        The sequences reaching heights ``h`` are exactly the interleavings of ``h_c`` copies of
        each column ``c``. A uniform permutation of that multiset hits each distinct interleaving
        equally often (each one arises from ``∏ h_c!`` permutations), so this is exact and uniform.
        """
        heights = self._check_state(state)
        moves = [tok for tok, h in zip(self._tokens, heights) for _ in range(h)]
        return [moves[i] for i in rng.permutation(len(moves))]

    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` random games: each move uniform among non-full columns, length ``~ U{min_len..max_len}``."""
        games = []
        for _ in range(n):
            heights = [0] * COLUMNS
            game = []
            for _ in range(int(rng.integers(self.min_len, self.max_len + 1))):
                open_cols = [c for c in range(COLUMNS) if heights[c] < self.n]
                col = open_cols[int(rng.integers(len(open_cols)))]
                heights[col] += 1
                game.append(self._tokens[col])
            games.append(game)
        return games

    def describe(self) -> str:
        return (
            f"connect4: cumulative, {COLUMNS} columns of at most {self.n} disks, "
            f"{(self.n + 1) ** COLUMNS} states, games of {self.min_len}..{self.max_len} moves"
        )
