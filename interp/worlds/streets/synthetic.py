"""Seeded synthetic cities: a small, Manhattan-like street grid for tests and demos.

The paper's world (Vafa et al. 2024, §3.1) is the Manhattan street graph. A synthetic city keeps
its features that matter for world models, at any size and with no download:

- ``rows`` E-W *streets* (two-way: edges E and W) crossing ``cols`` N-S *avenues* (one-way,
  alternating: avenue 0 runs N, avenue 1 runs S, ...), so that a route north and a route south
  differ, as on real avenues;
- optionally one *diagonal* two-way avenue (a Broadway) through the grid nodes
  ``(0, cols-1), (1, cols-2), ...``, labelled NW going up and SE going down;
- random *closures*: each street segment (both directions of a two-way segment, or the one edge
  of an avenue segment) is closed with probability ``closure_prob``, in a seeded random order; a
  closure that would break strong connectivity is re-opened at once, so the result is always
  strongly connected (every destination reachable from every origin);
- coordinates in meters (x east, y north): avenues ``avenue_block_m`` apart (a long E-W block,
  ~250 m in Manhattan), streets ``street_block_m`` apart (a short N-S block, ~80 m), each node
  moved by a uniform ``±jitter_m`` so that shortest paths are rarely tied; edge lengths are the
  Euclidean distances.

Intersection ``(r, c)`` (row ``r`` from the south, column ``c`` from the west) has node id
``str(r * cols + c)``. A node keeps at most one street per direction by construction.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from interp.worlds.base import WorldError
from interp.worlds.streets.graph import StreetGraph


@dataclass(frozen=True)
class SyntheticCityConfig:
    """Everything that determines a synthetic city; the same config gives the same graph."""

    rows: int = 8
    cols: int = 8
    seed: int = 0
    closure_prob: float = 0.1
    diagonal: bool = True
    street_block_m: float = 80.0
    avenue_block_m: float = 250.0
    jitter_m: float = 8.0

    def __post_init__(self) -> None:
        if not (isinstance(self.rows, int) and isinstance(self.cols, int) and self.rows >= 2 and self.cols >= 2):
            raise WorldError(
                f"a synthetic city needs rows >= 2 and cols >= 2 (two avenues, one "
                f"each way, keep it strongly connected); got {self.rows}x{self.cols}"
            )
        if not 0.0 <= self.closure_prob < 1.0:
            raise WorldError(f"closure_prob must be in [0, 1), got {self.closure_prob}")
        if not (self.street_block_m > 0 and self.avenue_block_m > 0):
            raise WorldError("block lengths must be > 0")
        if not 0.0 <= self.jitter_m < min(self.street_block_m, self.avenue_block_m) / 4:
            raise WorldError(
                f"jitter_m must be in [0, min block / 4) so that the grid keeps its shape, got {self.jitter_m}"
            )

    @classmethod
    def tiny(cls, seed: int = 0) -> "SyntheticCityConfig":
        """4 x 5 = 20 intersections: the city the unit tests use."""
        return cls(rows=4, cols=5, seed=seed)

    @property
    def num_nodes(self) -> int:
        return self.rows * self.cols


def _reachable(src: int, dst: int, out: list[set[int]]) -> bool:
    """BFS from ``src`` until ``dst`` is found (usually a few blocks away)."""
    if src == dst:
        return True
    seen = {src}
    queue = deque([src])
    while queue:
        for j in out[queue.popleft()]:
            if j == dst:
                return True
            if j not in seen:
                seen.add(j)
                queue.append(j)
    return False


def build_synthetic_city(cfg: SyntheticCityConfig) -> StreetGraph:
    """Build the street graph of ``cfg`` (always strongly connected, seeded).

    Closing a set of edges keeps a strongly connected graph strongly connected iff each closed
    edge ``u -> v`` can still be replaced by some path ``u ~> v``; that local check (a BFS that
    stops at ``v``) is what makes 50 x 60 cities build in well under a second.
    """
    rng = np.random.default_rng(cfg.seed)
    rows, cols = cfg.rows, cfg.cols

    def nid(r: int, c: int) -> int:
        return r * cols + c

    # segments: each a list of directed edges (u, direction, v) opened or closed together
    segments: list[list[tuple[int, str, int]]] = []
    for r in range(rows):  # two-way E-W streets
        for c in range(cols - 1):
            a, b = nid(r, c), nid(r, c + 1)
            segments.append([(a, "E", b), (b, "W", a)])
    for c in range(cols):  # one-way N-S avenues, alternating
        for r in range(rows - 1):
            a, b = nid(r, c), nid(r + 1, c)
            segments.append([(a, "N", b)] if c % 2 == 0 else [(b, "S", a)])
    if cfg.diagonal:  # a two-way Broadway from the south-east corner going north-west
        for i in range(min(rows, cols) - 1):
            a, b = nid(i, cols - 1 - i), nid(i + 1, cols - 2 - i)
            segments.append([(a, "NW", b), (b, "SE", a)])

    n = rows * cols
    out: list[set[int]] = [set() for _ in range(n)]
    for seg in segments:
        for u, _, v in seg:
            out[u].add(v)

    closed = [False] * len(segments)
    draws = rng.random(len(segments)) < cfg.closure_prob
    for s in rng.permutation(len(segments)).tolist():
        if not draws[s]:
            continue
        seg = segments[s]
        for u, _, v in seg:
            out[u].discard(v)
        if all(_reachable(u, v, out) for u, _, v in seg):
            closed[s] = True
        else:  # re-open: this closure would cut some intersection off
            for u, _, v in seg:
                out[u].add(v)

    jitter = rng.uniform(-cfg.jitter_m, cfg.jitter_m, size=(n, 2)) if cfg.jitter_m > 0 else np.zeros((n, 2))
    coords = {
        str(nid(r, c)): (
            c * cfg.avenue_block_m + float(jitter[nid(r, c), 0]),
            r * cfg.street_block_m + float(jitter[nid(r, c), 1]),
        )
        for r in range(rows)
        for c in range(cols)
    }
    edges = [(str(u), d, str(v)) for s, seg in enumerate(segments) if not closed[s] for u, d, v in seg]
    name = f"synthetic {rows}x{cols} city, seed {cfg.seed}, {sum(closed)} closed segment(s)"
    graph = StreetGraph(edges, nodes=[str(i) for i in range(n)], coords=coords, name=name)
    if not graph.is_strongly_connected():  # guaranteed by construction; a cheap final check
        raise AssertionError(f"internal error: {name} is not strongly connected")
    return graph
