"""Traversal generators: the three training distributions of Vafa et al. 2024 (§3.1, App. F).

A *traversal* is a walk along streets, written as the token sequence
``origin destination d1 ... dk end`` (``di`` the direction of the i-th street). The three kinds:

- ``shortest_paths``: origin and destination uniform and distinct; the route is the
  length-weighted shortest path (Dijkstra; ties go to the route found first when edges are
  relaxed in node order, then direction order, so a graph always gives the same routes);
- ``noisy_shortest_paths``: ``K`` perturbed copies of the map are drawn once, each street's
  weight ``length + Gamma(shape=length, scale=1)`` (the paper used ``K = 50``); each sequence
  picks one copy uniformly and takes its shortest path. Routes are near-shortest and varied,
  as taxi rides are under traffic;
- ``random_walks``: uniform start, a number of steps uniform in ``[min_len, max_len]`` (paper:
  ``[3, 100]``), each step a uniform choice among the streets out of the current node; the
  destination is wherever the walk ends (possibly the origin). A walk that reaches a dead end
  (a node with no way out, e.g. 17 in Manhattan, none in a synthetic city) stops there.

Filtering. The paper keeps sequences with *fewer than 100 directions*, so the default cap
``max_directions = 99`` is inclusive (``k <= 99``). (The public code instead kept sequences of
fewer than 100 *tokens*.) A longer route, or an origin-destination pair with no route at all, is
not emitted but counted: every generator returns a :class:`TraversalBatch` with the sequences
and the counts, and draws until it has ``n`` sequences (raising if almost nothing fits).
"""

from __future__ import annotations

import heapq
import logging
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interp.worlds.base import WorldError
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph

log = logging.getLogger(__name__)

TRAVERSAL_KINDS: tuple[str, ...] = ("shortest_paths", "noisy_shortest_paths", "random_walks")

#: The paper keeps sequences with fewer than 100 directions.
DEFAULT_MAX_DIRECTIONS = 99


@dataclass(frozen=True)
class TraversalConfig:
    """How a world draws its sequences (stored in the world's spec).

    ``max_walk = None`` means ``max_directions`` (walks never need filtering). ``noise_seed``
    fixes the ``num_noisy_graphs`` perturbed maps, so that every call of ``generate`` (train and
    test data alike) uses the same ones, as in the paper.
    """

    kind: str = "random_walks"
    max_directions: int = DEFAULT_MAX_DIRECTIONS
    min_walk: int = 3
    max_walk: int | None = None
    num_noisy_graphs: int = 50
    noise_seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in TRAVERSAL_KINDS:
            raise WorldError(f"unknown traversal kind {self.kind!r}; known: {', '.join(TRAVERSAL_KINDS)}")
        if not (isinstance(self.max_directions, int) and self.max_directions >= 1):
            raise WorldError(f"max_directions must be an int >= 1, got {self.max_directions!r}")
        hi = self.walk_range[1]
        if not (isinstance(self.min_walk, int) and 0 <= self.min_walk <= hi):
            raise WorldError(f"need 0 <= min_walk <= max_walk, got {self.min_walk}..{hi}")
        if hi > self.max_directions:
            raise WorldError(
                f"max_walk {hi} exceeds max_directions {self.max_directions}: longer walks could never be emitted"
            )
        if not (isinstance(self.num_noisy_graphs, int) and self.num_noisy_graphs >= 1):
            raise WorldError(f"num_noisy_graphs must be an int >= 1, got {self.num_noisy_graphs!r}")

    @property
    def walk_range(self) -> tuple[int, int]:
        """``(min_len, max_len)`` of random walks, inclusive."""
        return self.min_walk, self.max_directions if self.max_walk is None else self.max_walk


@dataclass(frozen=True)
class TraversalBatch:
    """Sequences of one traversal kind, with what was drawn but not emitted.

    ``attempts = len(sequences) + skipped_too_long + skipped_unreachable``.
    ``stopped_at_dead_end`` counts emitted random walks cut short by a node with no way out.
    """

    kind: str
    sequences: list[list[str]]
    max_directions: int
    attempts: int = 0
    skipped_too_long: int = 0
    skipped_unreachable: int = 0
    stopped_at_dead_end: int = 0

    @property
    def skipped(self) -> int:
        return self.skipped_too_long + self.skipped_unreachable

    def summary(self) -> str:
        s = (
            f"{len(self.sequences)} {self.kind} sequence(s) from {self.attempts} draw(s): "
            f"skipped {self.skipped_too_long} over {self.max_directions} directions, "
            f"{self.skipped_unreachable} with no route"
        )
        if self.stopped_at_dead_end:
            s += f"; {self.stopped_at_dead_end} walk(s) stopped at a dead end"
        return s


def _check_request(n: int, max_directions: int) -> None:
    if not (isinstance(n, (int, np.integer)) and n >= 0):
        raise WorldError(f"number of sequences must be an int >= 0, got {n!r}")
    if max_directions < 1:
        raise WorldError(f"max_directions must be >= 1, got {max_directions}")


def _max_attempts(n: int) -> int:
    return 20 * n + 1000


def _give_up(kind: str, n: int, attempts: int, too_long: int, unreachable: int, max_directions: int) -> WorldError:
    return WorldError(
        f"{kind}: only {n} of the requested sequences after {attempts} draws ({too_long} over "
        f"max_directions={max_directions}, {unreachable} with no route); raise max_directions "
        "or use a better connected graph"
    )


def _sequence(graph: StreetGraph, origin: int, dest: int, edge_ids: Sequence[int]) -> list[str]:
    nodes, edges = graph.nodes, graph.edges
    return [nodes[origin], nodes[dest], *(edges[e][1] for e in edge_ids), END]


class ShortestPathTrees:
    """Dijkstra trees from each origin, cached (bounded memory) for one set of weights."""

    def __init__(self, graph: StreetGraph, weights: np.ndarray, max_entries: int = 5_000_000):
        self.graph = graph
        self.weights = weights.tolist()
        self.adj = graph.index_adjacency
        self.src = [graph.index(u) for u, _, _ in graph.edges]
        self.cache: dict[int, array] = {}
        self.max_trees = max(16, max_entries // max(1, graph.num_nodes))

    def tree(self, origin: int) -> array:
        """``pred[v]`` = edge id entering ``v`` on the shortest route from ``origin`` (-1: none)."""
        t = self.cache.get(origin)
        if t is not None:
            return t
        n = self.graph.num_nodes
        dist = [float("inf")] * n
        pred = array("i", [-1]) * n
        dist[origin] = 0.0
        heap = [(0.0, origin)]
        done = bytearray(n)
        adj, w = self.adj, self.weights
        while heap:
            du, u = heapq.heappop(heap)
            if done[u]:
                continue
            done[u] = 1
            for v, e in adj[u]:
                nd = du + w[e]
                if nd < dist[v]:  # strict: the first route found keeps a tie
                    dist[v] = nd
                    pred[v] = e
                    heapq.heappush(heap, (nd, v))
        if len(self.cache) >= self.max_trees:
            self.cache.clear()
        self.cache[origin] = pred
        return pred

    def route(self, origin: int, dest: int) -> list[int] | None:
        """Edge ids of the shortest route, or ``None`` when ``dest`` is unreachable."""
        pred = self.tree(origin)
        path: list[int] = []
        v = dest
        while v != origin:
            e = pred[v]
            if e < 0:
                return None
            path.append(e)
            v = self.src[e]
        path.reverse()
        return path


def _routes(
    kind: str,
    graph: StreetGraph,
    n: int,
    rng: np.random.Generator,
    trees: list[ShortestPathTrees],
    max_directions: int,
) -> TraversalBatch:
    _check_request(n, max_directions)
    num = graph.num_nodes
    if num < 2:
        raise WorldError(f"{kind} need at least two intersections")
    out: list[list[str]] = []
    attempts = too_long = unreachable = 0
    while len(out) < n:
        if attempts >= _max_attempts(n):
            raise _give_up(kind, len(out), attempts, too_long, unreachable, max_directions)
        attempts += 1
        k = int(rng.integers(len(trees))) if len(trees) > 1 else 0
        origin = int(rng.integers(num))
        dest = int(rng.integers(num - 1))
        dest += dest >= origin  # uniform over the other nodes
        path = trees[k].route(origin, dest)
        if path is None:
            unreachable += 1
        elif len(path) > max_directions:
            too_long += 1
        else:
            out.append(_sequence(graph, origin, dest, path))
    batch = TraversalBatch(kind, out, max_directions, attempts, too_long, unreachable)
    if batch.skipped:
        log.info(batch.summary())
    return batch


def shortest_paths(
    graph: StreetGraph, n: int, rng: np.random.Generator, max_directions: int = DEFAULT_MAX_DIRECTIONS
) -> TraversalBatch:
    """``n`` shortest routes (by length) between uniform distinct origin/destination pairs."""
    return _routes("shortest_paths", graph, n, rng, [ShortestPathTrees(graph, graph.edge_lengths)], max_directions)


def sample_noisy_weights(graph: StreetGraph, num_graphs: int, rng: np.random.Generator) -> np.ndarray:
    """``(num_graphs, num_edges)`` weights ``length + Gamma(shape=length, scale=1)`` (App. F)."""
    lengths = graph.edge_lengths
    return lengths + rng.gamma(shape=lengths, scale=1.0, size=(num_graphs, lengths.size))


def noisy_shortest_paths(
    graph: StreetGraph,
    n: int,
    rng: np.random.Generator,
    num_graphs: int = 50,
    weights: np.ndarray | None = None,
    max_directions: int = DEFAULT_MAX_DIRECTIONS,
) -> TraversalBatch:
    """``n`` shortest routes on randomly perturbed maps.

    ``weights`` (from :func:`sample_noisy_weights`) fixes the perturbed maps; when ``None``,
    ``num_graphs`` maps are drawn from ``rng`` first.
    """
    if weights is None:
        weights = sample_noisy_weights(graph, num_graphs, rng)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != graph.num_edges or weights.shape[0] < 1:
        raise WorldError(f"noisy weights must have shape (K, {graph.num_edges}), got {weights.shape}")
    budget = 5_000_000 // weights.shape[0]  # cached tree entries, shared by the K maps
    trees = [ShortestPathTrees(graph, w, budget) for w in weights]
    return _routes("noisy_shortest_paths", graph, n, rng, trees, max_directions)


def random_walks(
    graph: StreetGraph,
    n: int,
    rng: np.random.Generator,
    min_len: int = 3,
    max_len: int | None = None,
    max_directions: int = DEFAULT_MAX_DIRECTIONS,
) -> TraversalBatch:
    """``n`` random walks; ``max_len = None`` means ``max_directions``."""
    _check_request(n, max_directions)
    hi = max_directions if max_len is None else max_len
    if not 0 <= min_len <= hi:
        raise WorldError(f"need 0 <= min_len <= max_len, got {min_len}..{hi}")
    adj, num = graph.index_adjacency, graph.num_nodes
    if num < 1:
        raise WorldError("random walks need at least one intersection")
    out: list[list[str]] = []
    attempts = too_long = dead_ends = 0
    while len(out) < n:
        if attempts >= _max_attempts(n):
            raise _give_up("random_walks", len(out), attempts, too_long, 0, max_directions)
        attempts += 1
        origin = node = int(rng.integers(num))
        steps = int(rng.integers(min_len, hi + 1))
        path: list[int] = []
        for _ in range(steps):
            options = adj[node]
            if not options:
                dead_ends += 1
                break
            node, e = options[int(rng.integers(len(options)))]
            path.append(e)
        if len(path) > max_directions:
            too_long += 1
            continue
        out.append(_sequence(graph, origin, node, path))
    batch = TraversalBatch("random_walks", out, max_directions, attempts, too_long, 0, dead_ends)
    if batch.skipped or dead_ends:
        log.info(batch.summary())
    return batch


def generate_traversals(
    graph: StreetGraph, cfg: TraversalConfig, n: int, rng: np.random.Generator, noisy_weights: np.ndarray | None = None
) -> TraversalBatch:
    """Dispatch on ``cfg.kind``; ``noisy_weights`` fixes the perturbed maps of the noisy kind."""
    if cfg.kind == "shortest_paths":
        return shortest_paths(graph, n, rng, cfg.max_directions)
    if cfg.kind == "noisy_shortest_paths":
        return noisy_shortest_paths(graph, n, rng, cfg.num_noisy_graphs, noisy_weights, cfg.max_directions)
    lo, hi = cfg.walk_range
    return random_walks(graph, n, rng, lo, hi, cfg.max_directions)


__all__ = [
    "DIRECTIONS",
    "END",
    "TRAVERSAL_KINDS",
    "DEFAULT_MAX_DIRECTIONS",
    "TraversalConfig",
    "TraversalBatch",
    "shortest_paths",
    "noisy_shortest_paths",
    "sample_noisy_weights",
    "random_walks",
    "generate_traversals",
]
