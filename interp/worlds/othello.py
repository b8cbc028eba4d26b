"""Othello as a world (Vafa et al. 2024, Othello experiments; synthetic games as in Li et al. 2023).

Standard 8×8 Othello; black moves first. A token is the square a disk is placed on. Squares are
named ``<column><row>``: columns ``a``…``h`` from left to right, rows ``1``…``8`` from top to
bottom, so the opening position has white on ``d4``/``e5`` and black on ``e4``/``d5``, and black's
four legal first moves are ``d3 c4 f5 e6`` (the usual notation). The 60 tokens are the squares
other than the four centre ones, in row-major order ``a1 b1 … h8``; square index ``8·(row-1) +
column``, with ``a1 = 0`` and ``h8 = 63``.

State = ``(board, side)``: ``board`` a 64-tuple in square-index order (0 empty, 1 black, 2 white)
and ``side`` the player to move (1 black, 2 white, 0 when the game is over). Passes are implicit:
when the player who would move next has no legal move but the other player has one, the turn
passes at once, so the state after a move already has the pass applied; when neither can move,
the game is over and ``legal`` is empty. Every state accepts (the language is prefix-closed).

Internally a position is two 64-bit bitboards (bit ``i`` = square ``i``) so that random games are
fast: legal moves come from eight shift-and-fill scans, flips from precomputed rays.
CLI: ``othello`` or ``othello:max_nodes=50000`` (the search budget of :meth:`sample_prefix`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from interp.worlds._options import check_int, check_spec_keys, parse_int_options
from interp.worlds.base import IllegalTokenError, State, World, WorldError

EMPTY, BLACK, WHITE = 0, 1, 2
GAME_OVER = 0
FULL = (1 << 64) - 1
SQUARE_NAMES: tuple[str, ...] = tuple(f"{'abcdefgh'[i % 8]}{i // 8 + 1}" for i in range(64))
CENTRE: tuple[int, ...] = (27, 28, 35, 36)  # d4 e4 d5 e5
MOVE_MASK = FULL ^ sum(1 << i for i in CENTRE)  # squares a move may land on
TOKENS: tuple[str, ...] = tuple(SQUARE_NAMES[i] for i in range(64) if i not in CENTRE)
SQUARE_OF: dict[str, int] = {name: i for i, name in enumerate(SQUARE_NAMES) if i not in CENTRE}
_LEGAL_SQUARES = frozenset(SQUARE_OF.values())
INITIAL_BLACK = (1 << 28) | (1 << 35)  # e4, d5
INITIAL_WHITE = (1 << 27) | (1 << 36)  # d4, e5
_OPTIONS = ("max_nodes",)
DEFAULT_MAX_NODES = 50_000

Board = tuple[int, ...]
OthelloState = tuple[Board, int]

# ---- bitboard engine --------------------------------------------------------------------------

_FILE_A = sum(1 << (8 * r) for r in range(8))
_NOT_A, _NOT_H = FULL ^ _FILE_A, FULL ^ (_FILE_A << 7)
# (shift, mask of valid destinations): left shifts move towards higher indices (east/south).
_LEFT = ((1, _NOT_A), (8, FULL), (9, _NOT_A), (7, _NOT_H))
_RIGHT = ((1, _NOT_H), (8, FULL), (9, _NOT_H), (7, _NOT_A))
_DELTAS = ((0, 1), (1, 0), (1, 1), (1, -1), (0, -1), (-1, 0), (-1, -1), (-1, 1))  # (drow, dcol)


def _ray(sq: int, dr: int, dc: int) -> tuple[int, ...]:
    """Single-bit masks of the squares from ``sq`` (exclusive) to the edge in one direction."""
    r, c, out = sq // 8 + dr, sq % 8 + dc, []
    while 0 <= r < 8 and 0 <= c < 8:
        out.append(1 << (8 * r + c))
        r, c = r + dr, c + dc
    return tuple(out)


#: the 8 rays from each square, in ``_DELTAS`` order (direction d and d + 4 are opposite)
_RAYS8: tuple[tuple[tuple[int, ...], ...], ...] = tuple(
    tuple(_ray(sq, dr, dc) for dr, dc in _DELTAS) for sq in range(64)
)
#: the rays along which a placed disk can flip something (at least 2 squares long)
_RAYS: tuple[tuple[tuple[int, ...], ...], ...] = tuple(tuple(ray for ray in rays if len(ray) >= 2) for rays in _RAYS8)


def _moves(own: int, opp: int) -> int:
    """Bitmask of the legal moves of ``own``: empty squares that outflank a line of ``opp`` disks."""
    empty = MOVE_MASK & ~(own | opp)
    moves = 0
    for s, m in _LEFT:
        o = opp & m
        x = (own << s) & o
        for _ in range(5):
            x |= (x << s) & o
        moves |= (x << s) & m & empty
    for s, m in _RIGHT:
        o = opp & m
        x = (own >> s) & o
        for _ in range(5):
            x |= (x >> s) & o
        moves |= (x >> s) & m & empty
    return moves


def _flips(own: int, opp: int, sq: int) -> int:
    """Bitmask of the ``opp`` disks that a disk of ``own`` placed on ``sq`` turns over."""
    flips = 0
    for ray in _RAYS[sq]:
        run = 0
        for bit in ray:
            if opp & bit:
                run |= bit
            elif own & bit:
                flips |= run
                break
            else:
                break
    return flips


def _squares(mask: int) -> list[int]:
    """Indices of the set bits of ``mask``, ascending (= vocabulary order)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _play(black: int, white: int, side: int, sq: int) -> tuple[int, int, int] | None:
    """Place ``side``'s disk on ``sq`` and apply flips and implicit passes; None if illegal."""
    if side == GAME_OVER or sq not in _LEGAL_SQUARES or (black | white) >> sq & 1:
        return None
    own, opp = (black, white) if side == BLACK else (white, black)
    flips = _flips(own, opp, sq)
    if not flips:
        return None
    own |= flips | (1 << sq)
    opp ^= flips
    other = WHITE if side == BLACK else BLACK
    if _moves(opp, own):
        nxt = other
    elif _moves(own, opp):
        nxt = side  # the opponent must pass
    else:
        nxt = GAME_OVER
    return (own, opp, nxt) if side == BLACK else (opp, own, nxt)


@lru_cache(maxsize=1 << 16)
def _legal_tokens(black: int, white: int, side: int) -> tuple[str, ...]:
    if side == GAME_OVER:
        return ()
    own, opp = (black, white) if side == BLACK else (white, black)
    return tuple(SQUARE_NAMES[sq] for sq in _squares(_moves(own, opp)))


@lru_cache(maxsize=1 << 16)
def _unpack(board: Board) -> tuple[int, int]:
    """(black, white) bitboards of a validated 64-tuple board."""
    if len(board) != 64 or not set(board) <= {EMPTY, BLACK, WHITE}:
        raise WorldError(f"othello: a board is 64 values in {{0, 1, 2}}, got {board!r:.120}")
    black = white = 0
    for i, v in enumerate(board):
        if v == BLACK:
            black |= 1 << i
        elif v == WHITE:
            white |= 1 << i
    return black, white


def _pack(black: int, white: int) -> Board:
    return tuple((black >> i & 1) | ((white >> i & 1) << 1) for i in range(64))


class _BudgetExhausted(Exception):
    """Internal: the prefix search visited its node budget."""


# ---- the world ------------------------------------------------------------------------------------


class OthelloWorld(World):
    """8×8 Othello with implicit passes; state = (board 64-tuple, side to move)."""

    kind = "othello"

    def __init__(self, max_nodes: int = DEFAULT_MAX_NODES):
        """``max_nodes`` bounds the search of :meth:`sample_prefix`."""
        self.max_nodes = check_int(max_nodes, "max_nodes", self.kind, 1)

    @classmethod
    def from_arg(cls, arg: str) -> "OthelloWorld":
        """``othello`` or ``othello:max_nodes=N``."""
        return cls(**parse_int_options(arg, _OPTIONS, cls.kind))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "OthelloWorld":
        check_spec_keys(dict(spec), _OPTIONS, cls.kind)
        return cls(**{k: spec[k] for k in _OPTIONS if k in spec})

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "max_nodes": self.max_nodes}

    # ---- the DFA -----------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[str, ...]:
        return TOKENS

    def start(self) -> OthelloState:
        return _pack(INITIAL_BLACK, INITIAL_WHITE), BLACK

    @staticmethod
    def _bits(state: State) -> tuple[int, int, int]:
        """(black, white, side) of a state; the board may be a list (as read back from JSON)."""
        try:
            if not isinstance(state, (tuple, list)):
                raise TypeError(type(state).__name__)
            board, side = state
            board = tuple(board)
        except (TypeError, ValueError):
            raise WorldError(f"othello: a state is (board, side), got {state!r:.120}") from None
        if isinstance(side, bool) or side not in (GAME_OVER, BLACK, WHITE):
            raise WorldError(f"othello: side must be 0 (game over), 1 (black) or 2 (white), got {side!r}")
        return (*_unpack(board), int(side))

    def legal(self, state: State) -> tuple[str, ...]:
        return _legal_tokens(*self._bits(state))

    def step(self, state: State, token: str) -> OthelloState:
        black, white, side = self._bits(state)
        nxt = _play(black, white, side, SQUARE_OF.get(token, -1))
        if nxt is None:
            raise IllegalTokenError(state, token)
        return _pack(nxt[0], nxt[1]), nxt[2]

    def state_label(self, state: State) -> Board:
        """The probe target: the board (which square holds which colour)."""
        black, white, _ = self._bits(state)
        return _pack(black, white)

    def render(self, state: State) -> str:
        """ASCII board (X black, O white, . empty) and whose move it is, for debugging."""
        black, white, side = self._bits(state)
        rows = ["  a b c d e f g h"]
        for r in range(8):
            cells = ("X" if black >> (8 * r + c) & 1 else "O" if white >> (8 * r + c) & 1 else "." for c in range(8))
            rows.append(f"{r + 1} " + " ".join(cells))
        who = {BLACK: "black (X) to move", WHITE: "white (O) to move", GAME_OVER: "game over"}[side]
        rows.append(f"{who}; black {black.bit_count()}, white {white.bit_count()}")
        return "\n".join(rows)

    # ---- sampling ------------------------------------------------------------------------------

    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` random games played to the end, each move uniform among the legal ones."""
        return [self._random_game(rng) for _ in range(n)]

    @staticmethod
    def _random_game(rng: np.random.Generator) -> list[str]:
        black, white, side = INITIAL_BLACK, INITIAL_WHITE, BLACK
        game: list[str] = []
        while side != GAME_OVER:
            own, opp = (black, white) if side == BLACK else (white, black)
            options = _squares(_moves(own, opp))
            sq = options[int(rng.integers(len(options)))]
            black, white, side = _play(black, white, side, sq)  # type: ignore[misc]
            game.append(SQUARE_NAMES[sq])
        return game

    def sample_prefix(self, state: State, rng: np.random.Generator) -> list[str]:
        """A random move sequence from the opening that reaches exactly ``state`` (board and side).

        Every move adds one disk and disks are never removed, so the moves are exactly the occupied
        non-centre squares of the target; only their order is unknown. We search the orders
        depth-first: at each position only legal moves onto still-empty target squares are tried,
        in random order except that moves placing the square's final colour go first. A branch is
        cut when a disk has the wrong colour and no remaining move can ever flip it (see
        :func:`_fixers`), and refuted positions are remembered (different orders often meet).

        The search visits at most ``max_nodes`` positions, then raises a :class:`WorldError` (the
        state may be unreachable or merely hard; raise ``max_nodes``); an exhausted search means
        the state is unreachable and says so. The problem is hard in general. Measured on states of
        random games with the default budget (about 1-2 s when exhausted): up to 16 plies always
        found, typically in milliseconds; at 20 plies about a quarter, beyond 24 most, exhaust the
        budget. For deep states reached by a known sequence use :meth:`resample_prefix`.
        Prefixes are random but not uniform over all orders reaching ``state``.
        """
        tb, tw, side = self._bits(state)
        centre = sum(1 << i for i in CENTRE)
        if (tb | tw) & centre != centre:
            raise WorldError("othello: the four centre squares are always occupied; this state is unreachable")
        return self._search((INITIAL_BLACK, INITIAL_WHITE, BLACK), (tb, tw, side), rng, state)

    def resample_prefix(self, prefix: Sequence[str], rng: np.random.Generator, max_tail: int = 8) -> list[str]:
        """Another move order reaching the same state as the legal ``prefix``, by reordering a tail.

        Keeps the first ``len(prefix) - m`` moves, ``m ~ U{1..min(max_tail, len(prefix))}``, and
        searches the orders of the last ``m`` moves as :meth:`sample_prefix` does. The original
        tail is itself a solution, so short tails succeed quickly (8 moves: a few hundred nodes,
        far below ``max_nodes``). The result may equal ``prefix`` when the tail has one order.
        Use it for deep states, where :meth:`sample_prefix` from scratch may exceed its budget.
        """
        if not prefix:
            return []
        state = self.run(prefix)
        m = int(rng.integers(1, min(max_tail, len(prefix)) + 1))
        head = list(prefix[: len(prefix) - m])
        tail = self._search(self._bits(self.run(head)), self._bits(state), rng, state)
        return head + tail

    def _search(
        self, origin: tuple[int, int, int], target: tuple[int, int, int], rng: np.random.Generator, state: State
    ) -> list[str]:
        """Moves leading from ``origin`` to ``target`` (bitboards and side), or a WorldError."""
        search = _PrefixSearch(target, rng, self.max_nodes)
        try:
            found = search.run(*origin)
        except _BudgetExhausted:
            raise WorldError(
                f"othello: no move sequence reaching this state found within "
                f"max_nodes={self.max_nodes} search nodes (it may be unreachable, "
                f"or just hard: raise max_nodes)\n{self.render(state)}"
            ) from None
        if not found:
            raise WorldError(
                f"othello: this state is unreachable (exhaustive search over move orders)\n{self.render(state)}"
            )
        return [SQUARE_NAMES[sq] for sq in search.path]

    def describe(self) -> str:
        return "othello: 8x8, 60 move tokens, black first, passes implicit, state = (board, side)"


class _PrefixSearch:
    """Randomised depth-first search over move orders for :meth:`OthelloWorld.sample_prefix`."""

    def __init__(self, target: tuple[int, int, int], rng: np.random.Generator, max_nodes: int):
        self.tb, self.tw, self.tside = target
        occupied = self.tb | self.tw
        self.targets = occupied & MOVE_MASK
        self.fixers = _fixers(occupied)
        self.rng, self.nodes_left = rng, max_nodes
        self.refuted: set[tuple[int, int, int]] = set()
        self.path: list[int] = []

    def _hopeless(self, black: int, white: int, remaining: int) -> bool:
        """Some disk has the wrong colour and no remaining move can ever flip it."""
        wrong = (black & self.tw) | (white & self.tb)
        fixers = self.fixers
        while wrong:
            low = wrong & -wrong
            if not fixers[low.bit_length() - 1] & remaining:
                return True
            wrong ^= low
        return False

    def _order(self, options: list[int], side: int) -> list[int]:
        """Random order, moves that place the square's target colour first (the usual case)."""
        target_colour = self.tb if side == BLACK else self.tw
        shuffled = [options[i] for i in self.rng.permutation(len(options))]
        return sorted(shuffled, key=lambda sq: not target_colour >> sq & 1)

    def run(self, black: int, white: int, side: int) -> bool:
        """True (with ``self.path`` filled) when the moves from here can reach the target."""
        remaining = self.targets & ~(black | white)
        if not remaining:
            return (black, white, side) == (self.tb, self.tw, self.tside)
        key = (black, white, side)
        if key in self.refuted or side == GAME_OVER:
            return False
        self.nodes_left -= 1
        if self.nodes_left < 0:
            raise _BudgetExhausted
        if not self._hopeless(black, white, remaining):
            own, opp = (black, white) if side == BLACK else (white, black)
            for sq in self._order(_squares(_moves(own, opp) & remaining), side):
                self.path.append(sq)
                if self.run(*_play(black, white, side, sq)):  # type: ignore[misc]
                    return True
                self.path.pop()
        self.refuted.add(key)
        return False


def _fixers(occupied: int) -> tuple[int, ...]:
    """Per square x: the squares from which a future move could flip a disk on x.

    A move at r flips x only if x lies between r and an anchor disk on one line, with every square
    from r to the anchor occupied. Given the final occupancy ``occupied``, r must therefore lie in
    the occupied run leading away from x on one side of a line whose other side starts with an
    occupied square. Corners get no fixers: they never flip.
    """
    out = []
    for x in range(64):
        mask = 0
        for d in range(8):
            anchor_side, mover_side = _RAYS8[x][d], _RAYS8[x][(d + 4) % 8]
            if not anchor_side or not occupied & anchor_side[0]:
                continue
            for bit in mover_side:
                if not occupied & bit:
                    break
                mask |= bit
        out.append(mask)
    return tuple(out)
