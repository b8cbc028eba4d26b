"""Map reconstruction (Vafa et al. 2024, App. B): the map a model's traversals imply, as the true
map plus the streets needed to explain them.

Test 3 of :mod:`interp.metrics.navigation` (see its docstring); works on token sequences only, so it
does not depend on how the routes were decoded.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.results import save_result
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph

#: half a mile in metres: App. B's bound on how far an added street may reach
HALF_MILE_M = 804.672

_DIRECTION_SET = frozenset(DIRECTIONS)


@dataclass
class MapReconstruction:
    """The map implied by a model's traversals: the true map plus the edges needed to explain them.

    ``added_edges`` columns: ``node, direction, neighbor`` (a street the model believes in),
    ``distance`` (straight-line, coordinate units; NaN without coordinates), ``hops`` (fewest
    streets between the two in the true map, ignoring one-way signs; -1 if none),
    ``first_sequence`` (index of the sequence that added it), ``uses`` (explained sequences that
    walk it). ``per_sequence`` columns: ``sequence, origin, destination, directions, status``
    (``valid``: explained by the true map alone, ``explained`` with new edges, ``failed``,
    ``skipped``: malformed), ``reason`` (why a sequence failed or was skipped), ``new_edges``.
    """

    graph: StreetGraph = field(repr=False)
    added_edges: pd.DataFrame = field(repr=False)
    per_sequence: pd.DataFrame = field(repr=False)
    max_degree: int = 4
    bound: str = ""
    count_unused: bool = True
    #: true streets walked by explained sequences, as ``(node, direction)``
    used_true: list[tuple[str, str]] = field(default_factory=list, repr=False)

    @property
    def used_true_edges(self) -> int:
        return len(self.used_true)

    def out_degrees(self) -> dict[str, int]:
        """Out-degree of each node in the implied map, as the ``max_degree`` bound counts it."""
        deg = {v: len(self.graph.out_directions(v)) if self.count_unused else 0 for v in self.graph.nodes}
        if not self.count_unused:
            for u, _ in self.used_true:
                deg[u] += 1
        for u in self.added_edges["node"]:
            deg[u] += 1
        return deg

    def _count(self, status: str) -> int:
        return int((self.per_sequence["status"] == status).sum())

    @property
    def sequences(self) -> int:
        """Sequences reconstructed (malformed ones excluded)."""
        return len(self.per_sequence) - self.skipped

    @property
    def failed(self) -> int:
        return self._count("failed")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def valid(self) -> int:
        return self._count("valid")

    @property
    def num_added(self) -> int:
        return len(self.added_edges)

    def edges(self) -> list[tuple[str, str, str]]:
        """The added edges as ``(node, direction, neighbor)``."""
        return [
            tuple(r) for r in self.added_edges[["node", "direction", "neighbor"]].itertuples(index=False, name=None)
        ]

    def reasons(self) -> dict[str, int]:
        r = self.per_sequence["reason"]
        return {str(k): int(v) for k, v in r[r != ""].value_counts().sort_index().items()}

    def reconstructed_graph(self) -> StreetGraph:
        """True map + added edges as a :class:`StreetGraph` (added streets get their straight-line
        length when the map has coordinates, else 1)."""
        g = self.graph
        edges = [*g.edges, *self.edges()]
        lengths = None
        if g.has_explicit_lengths:
            lengths = {(u, d): float(x) for (u, d, _), x in zip(g.edges, g.edge_lengths.tolist())}
            for (u, d, _), dist in zip(self.edges(), self.added_edges["distance"].tolist()):
                lengths[(u, d)] = float(dist) if math.isfinite(dist) and dist > 0 else 1.0
        return StreetGraph(
            edges,
            nodes=g.nodes,
            coords=g.coords,
            lengths=lengths,
            name=f"{g.name} + {self.num_added} reconstructed edge(s)",
        )

    def summary(self) -> dict[str, Any]:
        return {
            "added_edges": self.num_added,
            "failed": self.failed,
            "sequences": self.sequences,
            "valid_sequences": self.valid,
            "skipped_malformed": self.skipped,
            "used_true_edges": self.used_true_edges,
            "true_edges": self.graph.num_edges,
            "max_degree": self.max_degree,
            "count_unused": self.count_unused,
            "bound": self.bound,
            "reasons": self.reasons(),
        }

    def __str__(self) -> str:
        s = (
            f"map reconstruction: {self.num_added} added edge(s); {self.failed} / {self.sequences} "
            f"sequence(s) failed, {self.valid} valid on the true map ({self.bound}, "
            f"out-degree <= {self.max_degree})"
        )
        if self.skipped:
            s += f"; {self.skipped} malformed sequence(s) skipped"
        return s

    @property
    def frame(self) -> pd.DataFrame:
        """One row per generated sequence (``per_sequence``)."""
        return self.per_sequence

    def save(self, folder: str | Path, stem: str = "map") -> Path:
        return save_result(folder, stem, self.summary(), added_edges=self.added_edges, sequences=self.per_sequence)


_Overlay = tuple[dict[tuple[str, str], str], set[tuple[str, str]]]  # tentative (added, used true)


class _Reconstructor:
    """Mutable state of :func:`reconstruct_map`: the map so far and the candidate search.

    A sequence is explained against the committed map plus a tentative overlay (streets it would
    add, true streets it would use for the first time); the overlay is committed only if the
    whole sequence is explained.
    """

    def __init__(
        self, graph: StreetGraph, max_degree: int, max_distance: float | None, max_hops: int, count_unused: bool
    ):
        self.graph, self.max_degree, self.max_hops = graph, max_degree, max_hops
        self.count_unused = count_unused
        self.true_out: dict[str, dict[str, str]] = {v: graph.out_edges(v) for v in graph.nodes}
        self.added: dict[tuple[str, str], str] = {}
        self.used_true: set[tuple[str, str]] = set()
        self.deg: dict[str, int] = {v: len(self.true_out[v]) if count_unused else 0 for v in graph.nodes}
        self.first: dict[tuple[str, str], int] = {}
        self.uses: dict[tuple[str, str], int] = {}
        coords = graph.coords
        self.use_distance = coords is not None and max_distance is not None
        self.max_distance = max_distance
        self.xy = None if coords is None else np.array([coords[v] for v in graph.nodes], dtype=float)
        self.undirected: list[list[int]] = [[] for _ in graph.nodes]
        for u, _, v in graph.edges:
            iu, iv = graph.index(u), graph.index(v)
            self.undirected[iu].append(iv)
            self.undirected[iv].append(iu)
        self._cand: dict[str, list[str]] = {}

    # ---- geometry ----------------------------------------------------------------------------

    def hops(self, u: str, limit: int | None = None) -> dict[int, int]:
        """Undirected BFS hop counts from ``u`` in the true map, up to ``limit`` hops."""
        start = self.graph.index(u)
        dist = {start: 0}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            if limit is not None and dist[x] >= limit:
                continue
            for y in self.undirected[x]:
                if y not in dist:
                    dist[y] = dist[x] + 1
                    queue.append(y)
        return dist

    def distance(self, u: str, v: str) -> float:
        if self.xy is None:
            return math.nan
        a, b = self.xy[self.graph.index(u)], self.xy[self.graph.index(v)]
        return float(np.hypot(*(a - b)))

    def candidates(self, u: str) -> list[str]:
        """Nodes a new street from ``u`` may reach, nearest first (ties: node order); not ``u``."""
        c = self._cand.get(u)
        if c is None:
            nodes, iu = self.graph.nodes, self.graph.index(u)
            if self.use_distance:
                assert self.xy is not None, "use_distance is set only for a graph with coordinates"
                d = np.hypot(*(self.xy - self.xy[iu]).T)
                idx = np.nonzero(d <= self.max_distance)[0]
                order = idx[np.lexsort((idx, d[idx]))]
                c = [nodes[i] for i in order.tolist() if i != iu]
            else:
                h = self.hops(u, self.max_hops)
                c = [nodes[i] for i in sorted(h, key=lambda i: (h[i], i)) if i != iu]
            self._cand[u] = c
        return c

    # ---- walking -----------------------------------------------------------------------------

    def degree(self, node: str, ov: _Overlay) -> int:
        """Out-degree of ``node`` in the map so far: counted streets (see ``count_unused``) + added."""
        added, used = ov
        return self.deg[node] + sum(1 for (u, _) in added if u == node) + sum(1 for (u, _) in used if u == node)

    def follow(self, node: str, dirs: Sequence[str], ov: _Overlay) -> tuple[str, int, str]:
        """Walk ``dirs`` from ``node`` while streets exist, recording first uses of true streets in
        ``ov``: (where it stopped, steps taken, ``done`` | ``missing`` (no street that way) |
        ``full`` (a true street that way, but using it would break the degree bound))."""
        added, used = ov
        k = 0
        while k < len(dirs):
            key = (node, dirs[k])
            nxt = self.true_out[node].get(dirs[k])
            if nxt is not None:
                if not (self.count_unused or key in self.used_true or key in used):
                    if self.degree(node, ov) >= self.max_degree:
                        return node, k, "full"
                    used.add(key)
            else:
                nxt = self.added.get(key) or added.get(key)
                if nxt is None:
                    return node, k, "missing"
            node, k = nxt, k + 1
        return node, k, "done"

    def explain(self, origin: str, dest: str, dirs: Sequence[str]) -> tuple[str, str, _Overlay]:
        """Explain one traversal: (status, reason, the tentative overlay it needs)."""
        ov: _Overlay = ({}, set())
        node, k = origin, 0
        while True:
            node, m, why = self.follow(node, dirs[k:], ov)
            k += m
            if why == "done":
                if node != dest:
                    return "failed", "wrong_destination", ov
                return ("valid" if not ov[0] else "explained"), "", ov
            if why == "full" or self.degree(node, ov) >= self.max_degree:
                return "failed", "degree", ov
            rest = dirs[k + 1 :]
            best: tuple[bool, int] | None = None
            best_v = None
            for v in self.candidates(node):
                trial: _Overlay = ({**ov[0], (node, dirs[k]): v}, set(ov[1]))
                end, fit, why = self.follow(v, rest, trial)
                if why == "done":
                    if end != dest:
                        continue  # every turn fits but it arrives elsewhere: no fix possible
                    score = (True, fit)
                elif why == "missing" and self.degree(end, trial) < self.max_degree:
                    score = (False, fit)  # stuck where another new street could still go
                else:
                    continue
                if best is None or score > best:
                    best, best_v = score, v
                    if score[0]:
                        break  # the nearest full explanation
            if best_v is None:
                return "failed", "no_candidate", ov
            ov[0][(node, dirs[k])] = best_v
            node, k = best_v, k + 1

    def commit(self, i: int, origin: str, dirs: Sequence[str], ov: _Overlay) -> None:
        added, used = ov
        for key, v in added.items():
            self.added[key] = v
            self.first[key] = i
            self.deg[key[0]] += 1
        for key in used:
            self.used_true.add(key)
            self.deg[key[0]] += 1
        node = origin
        walked: set[tuple[str, str]] = set()
        for t in dirs:
            walked.add((node, t))
            nxt = self.true_out[node].get(t)
            node = nxt if nxt is not None else self.added[(node, t)]
        for key in walked:
            if key in self.added:
                self.uses[key] = self.uses.get(key, 0) + 1
            else:
                self.used_true.add(key)  # already counted when count_unused


def parse_traversal(tokens: Sequence[str], graph: StreetGraph) -> tuple[str, str, list[str]] | str:
    """``o d d1 .. dk end`` → ``(o, d, [d1 .. dk])``, or the reason it is malformed (App. B keeps
    only sequences that end with ``end`` and have intersection tokens in front and turns between)."""
    if len(tokens) < 3:
        return "too_short"
    if tokens[-1] != END:
        return "no_end"
    if tokens[0] not in graph or tokens[1] not in graph:
        return "bad_endpoints"
    dirs = list(tokens[2:-1])
    if any(t not in _DIRECTION_SET for t in dirs):
        return "not_a_turn"
    return str(tokens[0]), str(tokens[1]), dirs


def reconstruct_map(
    graph: StreetGraph,
    sequences: Sequence[Sequence[str]],
    max_degree: int = 4,
    max_distance: float | None = HALF_MILE_M,
    max_hops: int = 3,
    count_unused: bool = True,
) -> MapReconstruction:
    """Reconstruct the map implied by traversals ``o d d1 .. dk end`` (App. B), greedily, in order.

    Starting from ``graph`` (the true map), each sequence is walked along existing streets. At a
    step with no street in its direction, a new street in that direction is added from the
    current node ``u`` to the candidate ``v`` that best explains the rest: for each candidate the
    remaining directions are followed from ``v`` on the map so far (with the new street); a
    candidate that reaches the destination with every turn explained wins (the nearest one), else
    the one that gets furthest before it is stuck at a node that can still take a new street.
    Candidates: nodes other than ``u`` within ``max_distance`` of it in straight line when the map
    has coordinates (coordinate units: metres for synthetic cities, so the default is App. B's
    half mile), else within ``max_hops`` streets of it in the true map ignoring one-way signs
    (``max_distance=None`` forces hops).

    Constraints, as in App. B: at most one street per direction per node (a street is only added
    where the map has none that way) and out-degree ≤ ``max_degree``. By default
    (``count_unused=True``) every true street counts, so a street is only added at a node with
    fewer than ``max_degree`` streets (true + added) and the true map alone always explains a legal
    traversal. ``count_unused=False`` is the authors' rule: the degree counts the streets of the
    *implied* map only, added streets and the true streets some explained sequence walks; a true
    street is then blocked once its node is full, so on a map with nodes above the bound (the
    diagonal of a synthetic city has 5-street nodes; Manhattan few) even legal traversals can fail.

    A sequence fails when no candidate fits (``no_candidate``), when the node that needs a street
    (or a true street it would use) is full (``degree``), or when every turn fits but it ends off
    its destination (``wrong_destination``); a failed sequence changes nothing (its tentative
    streets are dropped; the authors' code keeps those added before the failure). Malformed
    sequences (no ``end``, a non-turn inside) are skipped and counted. Unlike the authors' code, a
    true street, used or not, is never shadowed by a new street in its direction.
    """
    if max_degree < 1:
        raise ValueError(f"max_degree must be >= 1, got {max_degree}")
    if max_distance is not None and not max_distance > 0:
        raise ValueError(f"max_distance must be > 0 or None, got {max_distance}")
    if max_hops < 1:
        raise ValueError(f"max_hops must be >= 1, got {max_hops}")
    rec = _Reconstructor(graph, max_degree, max_distance, max_hops, count_unused)
    rows = []
    for i, seq in enumerate(sequences):
        parsed = parse_traversal(seq, graph)
        if isinstance(parsed, str):
            rows.append(
                {
                    "sequence": i,
                    "origin": seq[0] if seq else "",
                    "destination": seq[1] if len(seq) > 1 else "",
                    "directions": max(0, len(seq) - 3),
                    "status": "skipped",
                    "reason": parsed,
                    "new_edges": 0,
                }
            )
            continue
        o, d, dirs = parsed
        status, reason, overlay = rec.explain(o, d, dirs)
        if status != "failed":
            rec.commit(i, o, dirs, overlay)
        rows.append(
            {
                "sequence": i,
                "origin": o,
                "destination": d,
                "directions": len(dirs),
                "status": status,
                "reason": reason,
                "new_edges": len(overlay) if status != "failed" else 0,
            }
        )
    edge_rows = []
    for (u, t), v in rec.added.items():
        h = rec.hops(u).get(graph.index(v), -1)
        edge_rows.append(
            {
                "node": u,
                "direction": t,
                "neighbor": v,
                "distance": rec.distance(u, v),
                "hops": h,
                "first_sequence": rec.first[(u, t)],
                "uses": rec.uses.get((u, t), 0),
            }
        )
    bound = f"straight-line distance <= {max_distance:g}" if rec.use_distance else f"true-map hops <= {max_hops}"
    return MapReconstruction(
        graph=graph,
        added_edges=pd.DataFrame(
            edge_rows, columns=["node", "direction", "neighbor", "distance", "hops", "first_sequence", "uses"]
        ),
        per_sequence=pd.DataFrame(
            rows, columns=["sequence", "origin", "destination", "directions", "status", "reason", "new_edges"]
        ),
        max_degree=max_degree,
        bound=bound,
        count_unused=count_unused,
        used_true=sorted(rec.used_true, key=lambda e: (graph.index(e[0]), DIRECTIONS.index(e[1]))),
    )


__all__ = ["HALF_MILE_M", "MapReconstruction", "parse_traversal", "reconstruct_map"]
