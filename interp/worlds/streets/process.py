"""The exact next-token distribution of the process that generated a streets world's data.

The true world model (uniform over the legal tokens) is the ceiling of the *world-model* metrics;
the ceiling of a model trained by next-token prediction is the Bayes-optimal predictor of its
training data: ``P(next token | prefix)`` under the traversal process of
:mod:`interp.worlds.streets.traversals` (Vafa et al. 2024, App. F). This module computes it
exactly, so a trained model can be compared with what it could have learnt (e.g. how likely
``end`` is when a route stands at its destination).

**Random walks** (uniform origin ``o``, a number of steps ``L`` uniform in ``[lo, hi]``, each step
uniform over the streets out of the current node, destination ``d`` = where the walk ends; a walk
that reaches a dead end stops there). With ``P`` the walk's transition matrix (a dead end keeps
its walker) and ``h_r = P^r e_d`` (the chance that ``r`` more steps end at ``d``), let
``A_t(v) = Σ_{l ≥ t} P(L = l) · h_{l-t}(v)`` — computed backwards as
``A_t = P(L = t)·e_d + P·A_{t+1}``. After ``t`` directions standing at ``v``:

- ``P(end) = P(L = t)·[v = d] / A_t(v)`` (1 at a dead end, where the walk stops),
- ``P(direction to v') = A_{t+1}(v') / (deg(v) · A_t(v))``,

and before that ``P(origin) = 1/|V|``, ``P(d | o) = A_0(o)`` for destination ``d``. The walk is
*conditioned* on ending at ``d``: turns towards ``d`` are likelier than others late in a walk,
and ``end`` at the destination is likely only when ``t`` is a plausible length.

**Shortest paths** (origin uniform, destination uniform over the other nodes, a route kept when
it exists and has at most ``max_directions`` streets): the routing oracle, one direction with
probability 1 along the route, then ``end``; ``P(d | o)`` is uniform over the destinations whose
route is kept. **Noisy shortest paths**: a mixture over the ``K`` perturbed maps; after ``o, d``
each map whose route from ``o`` to ``d`` is kept is equally likely, and reading directions keeps
the maps whose route begins with them. The origin is taken as uniform, which is exact when every
origin has the same number of kept routes (always on a strongly connected map whose routes fit in
``max_directions``, such as the synthetic cities; the generator redraws a rejected route's origin).

A prefix the process cannot produce (probability 0: e.g. a prefix the Myhill–Nerode metrics drew
by walking backwards, or a route off its shortest path) has no conditional distribution; there the
process falls back to the best it can say and the caller can count it (:attr:`fallbacks`):
random walks: uniform over the legal tokens; shortest paths: the route from the current node.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from interp.worlds.base import IllegalTokenError, WorldError
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph
from interp.worlds.streets.traversals import ShortestPathTrees, TraversalConfig


@runtime_checkable
class StreetsLike(Protocol):
    """What a process reads of its :class:`~interp.worlds.streets.world.StreetsWorld` (that module
    imports this one, so the world is named by what it offers)."""

    graph: StreetGraph
    traversal: TraversalConfig

    def legal(self, state: Hashable) -> tuple[str, ...]: ...

    def noisy_weights(self) -> np.ndarray: ...


#: a process state: ``()``, ``(o,)``, a kind-specific tuple, or :data:`DONE`
ProcessState = tuple[Any, ...]
#: the process state after ``end`` (nothing follows)
DONE: ProcessState = ("done",)
_DIRECTION_SET = frozenset(DIRECTIONS)


class TraversalProcess(ABC):
    """``P(next token | prefix)`` of a traversal kind, read token by token through states.

    States: ``()`` before the origin, ``(o,)`` after it, then a kind-specific tuple; ``DONE``
    after ``end``. :meth:`step` raises :class:`IllegalTokenError` on a token the world refuses.
    ``world`` is a :class:`~interp.worlds.streets.world.StreetsWorld` (typed by what a process
    reads of it, ``StreetsLike``: the world module imports this one).
    """

    def __init__(self, world: StreetsLike):
        self.world = world
        self.graph = world.graph
        self.nodes = world.graph.nodes
        #: prefixes the process cannot produce, answered by the fallback (see the module docstring)
        self.fallbacks = 0

    def initial(self) -> ProcessState:
        return ()

    @abstractmethod
    def step(self, state: ProcessState, token: str) -> ProcessState: ...

    @abstractmethod
    def distribution(self, state: ProcessState) -> dict[str, float]:
        """Token → probability after ``state`` (sums to 1; empty after ``end``)."""

    def _uniform_nodes(self) -> dict[str, float]:
        p = 1.0 / len(self.nodes)
        return {v: p for v in self.nodes}

    def _legal_uniform(self, node: str, dest: str) -> dict[str, float]:
        legal = self.world.legal(("at", node, dest))
        return {t: 1.0 / len(legal) for t in legal} if legal else {}


class RandomWalkProcess(TraversalProcess):
    """Random walks with ``L`` uniform in ``[lo, hi]`` (see the module docstring).

    State after the destination: ``(o, d, v, t)`` — origin, destination, current node, directions
    read. ``A_t`` is computed once per destination (``(hi + 2) × |V|`` floats, cached, bounded).
    """

    def __init__(self, world: StreetsLike, max_cached: int = 512):
        super().__init__(world)
        self.lo, self.hi = world.traversal.walk_range
        n = self.graph.num_nodes
        self.p_len = np.zeros(self.hi + 2)
        self.p_len[self.lo : self.hi + 1] = 1.0 / (self.hi - self.lo + 1)
        adj = self.graph.index_adjacency
        self.deg = np.array([len(a) for a in adj], dtype=np.float64)
        self.dead = self.deg == 0
        self.src = np.array([u for u, a in enumerate(adj) for _ in a], dtype=np.int64)
        self.dst = np.array([v for a in adj for v, _ in a], dtype=np.int64)
        self.w = 1.0 / self.deg[self.src] if len(self.src) else np.zeros(0)
        self.n = n
        self._a: dict[int, np.ndarray] = {}
        self._dest: dict[int, np.ndarray] = {}
        self.max_cached = max_cached

    def _push(self, x: np.ndarray) -> np.ndarray:
        """``P x``: the expected value of ``x`` one step on (a dead end keeps its walker)."""
        out = np.bincount(self.src, weights=self.w * x[self.dst], minlength=self.n)
        out[self.dead] = x[self.dead]
        return out

    def _pull(self, u: np.ndarray) -> np.ndarray:
        """``u P``: a distribution over nodes one step on."""
        out = np.bincount(self.dst, weights=u[self.src] * self.w, minlength=self.n)
        out[self.dead] += u[self.dead]
        return out

    def arrival(self, dest: int) -> np.ndarray:
        """``A[t, v]`` for ``t = 0 … hi + 1`` (see the module docstring)."""
        a = self._a.get(dest)
        if a is None:
            a = np.zeros((self.hi + 2, self.n))
            e = np.zeros(self.n)
            e[dest] = 1.0
            for t in range(self.hi, -1, -1):
                a[t] = self.p_len[t] * e + self._push(a[t + 1])
            if len(self._a) >= self.max_cached:
                self._a.clear()
            self._a[dest] = a
        return a

    def destinations(self, origin: int) -> np.ndarray:
        """``P(d | o)`` over every node ``d``: ``Σ_l P(L = l) (e_o P^l)(d)``."""
        p = self._dest.get(origin)
        if p is None:
            u = np.zeros(self.n)
            u[origin] = 1.0
            p = np.zeros(self.n)
            for length in range(self.hi + 1):
                p += self.p_len[length] * u
                u = self._pull(u)
            if len(self._dest) >= self.max_cached:
                self._dest.clear()
            self._dest[origin] = p
        return p

    def step(self, state: ProcessState, token: str) -> ProcessState:
        if state == DONE:
            raise IllegalTokenError(state, token)
        if len(state) < 2:
            if token not in self.graph:
                raise IllegalTokenError(state, token)
            if len(state) == 0:
                return (token,)
            return (state[0], token, state[0], 0)
        o, d, v, t = state
        if token == END and v == d:
            return DONE
        nxt = self.graph.neighbor(v, token) if token in _DIRECTION_SET else None
        if nxt is None:
            raise IllegalTokenError(("at", v, d), token)
        return (o, d, nxt, t + 1)

    def distribution(self, state: ProcessState) -> dict[str, float]:
        if state == DONE:
            return {}
        if len(state) == 0:
            return self._uniform_nodes()
        if len(state) == 1:
            p = self.destinations(self.graph.index(state[0]))
            return {v: float(x) for v, x in zip(self.nodes, p) if x > 0}
        o, d, v, t = state
        vi, di = self.graph.index(v), self.graph.index(d)
        if self.dead[vi]:
            return {END: 1.0} if v == d else {}
        a = self.arrival(di)
        if t > self.hi or a[t, vi] <= 0:
            self.fallbacks += 1
            return self._legal_uniform(v, d)
        out: dict[str, float] = {}
        for direction, nxt in self.graph.out_edges(v).items():
            p = a[t + 1, self.graph.index(nxt)] / (self.deg[vi] * a[t, vi])
            out[direction] = out.get(direction, 0.0) + float(p)
        if v == d:
            out[END] = float(self.p_len[t] / a[t, vi])
        return {k: p for k, p in out.items() if p > 0}


class ShortestPathProcess(TraversalProcess):
    """Shortest (``K = 1``) or noisy shortest (``K`` perturbed maps) paths.

    State after the destination: ``(o, d, v, t, ks)`` — ``ks`` the maps whose kept route from
    ``o`` to ``d`` begins with the directions read (empty: off every route, the fallback routes
    from ``v``).
    """

    def __init__(self, world: StreetsLike, weights: np.ndarray):
        super().__init__(world)
        budget = 5_000_000 // max(1, len(weights))
        self.trees = [ShortestPathTrees(self.graph, w, budget) for w in weights]
        self.cap = world.traversal.max_directions
        self._routes: dict[tuple[int, int, int], tuple[str, ...] | None] = {}

    def route(self, k: int, origin: str, dest: str) -> tuple[str, ...] | None:
        """The directions of map ``k``'s kept route (None: no route or over ``max_directions``)."""
        key = (k, self.graph.index(origin), self.graph.index(dest))
        if key not in self._routes:
            path = self.trees[k].route(key[1], key[2])
            edges = self.graph.edges
            keep = path is not None and len(path) <= self.cap
            if len(self._routes) >= 1_000_000:
                self._routes.clear()
            self._routes[key] = tuple(edges[e][1] for e in path) if keep else None  # type: ignore[union-attr]
        return self._routes[key]

    def _kept(self, origin: str, dest: str) -> tuple[int, ...]:
        if origin == dest:
            return ()
        return tuple(k for k in range(len(self.trees)) if self.route(k, origin, dest) is not None)

    def step(self, state: ProcessState, token: str) -> ProcessState:
        if state == DONE:
            raise IllegalTokenError(state, token)
        if len(state) < 2:
            if token not in self.graph:
                raise IllegalTokenError(state, token)
            if len(state) == 0:
                return (token,)
            return (state[0], token, state[0], 0, self._kept(state[0], token))
        o, d, v, t, ks = state
        if token == END and v == d:
            return DONE
        nxt = self.graph.neighbor(v, token) if token in _DIRECTION_SET else None
        if nxt is None:
            raise IllegalTokenError(("at", v, d), token)
        ks = tuple(k for k in ks if (r := self.route(k, o, d)) is not None and t < len(r) and r[t] == token)
        return (o, d, nxt, t + 1, ks)

    def distribution(self, state: ProcessState) -> dict[str, float]:
        if state == DONE:
            return {}
        if len(state) == 0:
            return self._uniform_nodes()
        if len(state) == 1:
            o = state[0]
            counts = {d: len(self._kept(o, d)) for d in self.nodes}
            total = sum(counts.values())
            if total == 0:
                self.fallbacks += 1
                return self._uniform_nodes()
            return {d: c / total for d, c in counts.items() if c}
        o, d, v, t, ks = state
        out: dict[str, float] = {}
        if ks:
            for k in ks:
                r = self.route(k, o, d)
                tok = r[t] if t < len(r) else END  # type: ignore[arg-type,index]
                out[tok] = out.get(tok, 0.0) + 1.0 / len(ks)
            return out
        self.fallbacks += 1
        if v == d:
            return {END: 1.0}
        firsts = [r[0] for k in range(len(self.trees)) if (r := self.route(k, v, d))]
        if not firsts:
            return self._legal_uniform(v, d)
        for tok in firsts:
            out[tok] = out.get(tok, 0.0) + 1.0 / len(firsts)
        return out


def traversal_process(world: StreetsLike) -> TraversalProcess:
    """The process behind ``world.generate`` (its traversal kind)."""
    kind = world.traversal.kind
    if kind == "random_walks":
        return RandomWalkProcess(world)
    if kind == "shortest_paths":
        return ShortestPathProcess(world, world.graph.edge_lengths[None, :])
    if kind == "noisy_shortest_paths":
        return ShortestPathProcess(world, world.noisy_weights())
    raise WorldError(f"no traversal process for kind {kind!r}")


__all__ = ["DONE", "RandomWalkProcess", "ShortestPathProcess", "StreetsLike", "TraversalProcess", "traversal_process"]
