"""The navigation world: turn-by-turn directions on a street map as a DFA (Vafa et al. 2024, §3.1).

Language. A route is ``origin destination d1 ... dk end``: two intersection tokens, the
directions taken, and ``end`` once the route has arrived. Tokens, in this fixed order: one per
intersection (graph node order), the 8 directions ``N S E W NE NW SE SW``, then ``end``.

States (|V|² + |V| + 2: the paper's |V|² + 1, plus the start and the |V| origin states that
exist before the route is set up):

- ``("start",)``: nothing read; any intersection may be the origin;
- ``("origin", o)``: origin read; any intersection may be the destination, ``o`` itself
  included (a random walk may come back to where it began);
- ``("at", n, d)``: standing at ``n`` heading for ``d``; legal: the directions with a street out
  of ``n`` (vocabulary order), plus ``end`` iff ``n == d``;
- ``("end",)``: the route is over; nothing is legal.

Every state accepts (the language is prefix-closed). Two routes that reach the same
``(n, d)`` are Myhill–Nerode equivalent whatever their past, which is what the compression metric
tests; the probe target (:meth:`StreetsWorld.state_label`) is the current intersection ``n``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from interp.worlds.base import IllegalTokenError, State, World, WorldError
from interp.worlds.streets.config import StreetsSource, dataclass_from_table, resolve_arg
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph
from interp.worlds.streets.synthetic import SyntheticCityConfig, build_synthetic_city
from interp.worlds.streets.traversals import (
    TraversalBatch,
    TraversalConfig,
    generate_traversals,
    sample_noisy_weights,
)

START: State = ("start",)
END_STATE: State = ("end",)
_DIRECTION_SET = frozenset(DIRECTIONS)


class StreetsWorld(World):
    """Navigation DFA over a :class:`StreetGraph`, with a traversal distribution for data.

    Parameters
    ----------
    graph:
        The street map.
    traversal:
        How :meth:`generate` draws routes (kind, ``max_directions``, walk lengths, noisy maps).
    city:
        The synthetic-city config the graph was built from, if any (kept for ``describe`` and
        ``spec``; the graph itself is what the world runs on).
    """

    kind = "streets"
    #: the token that ends a route: nothing after it is scored, sampling stops there (the
    #: reference code's ``eos_token_id``)
    end_token = END
    #: the tokens that set a route up (origin, destination): the reference next-token test scores
    #: the positions after them only (any intersection is legal before)
    prompt_length = 2

    def __init__(
        self, graph: StreetGraph, traversal: TraversalConfig | None = None, city: SyntheticCityConfig | None = None
    ) -> None:
        if graph.num_nodes < 1:
            raise WorldError("a streets world needs at least one intersection")
        self.graph = graph
        self.traversal = traversal or TraversalConfig()
        self.city = city
        self._tokens: tuple[str, ...] = (*graph.nodes, *DIRECTIONS, END)
        self._node_set = frozenset(graph.nodes)
        self._out_dirs: dict[str, tuple[str, ...]] = {v: graph.out_directions(v) for v in graph.nodes}
        self._out_dirs_end = {v: (*dirs, END) for v, dirs in self._out_dirs.items()}
        self._dist_cache: dict[str, np.ndarray] = {}
        self._dist_cache_max = max(16, 20_000_000 // graph.num_nodes)
        self._noisy_weights: np.ndarray | None = None

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_arg(cls, arg: str) -> "StreetsWorld":
        """``""`` default 8x8 city, ``"tiny"`` 4x5 city, ``"edges.csv"``, ``"config.toml"``."""
        src: StreetsSource = resolve_arg(arg)
        return cls(src.graph, src.traversal, src.city)

    @classmethod
    def from_city(cls, city: SyntheticCityConfig, traversal: TraversalConfig | None = None) -> "StreetsWorld":
        """A world on a freshly built synthetic city."""
        return cls(build_synthetic_city(city), traversal, city)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "StreetsWorld":
        """Inverse of :meth:`spec`; the embedded graph is authoritative."""
        if not isinstance(spec, dict) or spec.get("kind") != cls.kind:
            raise WorldError(f"not a streets spec: {spec!r:.200}")
        unknown = set(spec) - {"kind", "graph", "traversal", "city"}
        if unknown:
            raise WorldError(f"streets spec: unknown key(s) {sorted(unknown)}")
        if "graph" not in spec:
            raise WorldError("streets spec lacks 'graph'")
        graph = StreetGraph.from_dict(spec["graph"])
        traversal = dataclass_from_table(TraversalConfig, spec.get("traversal", {}), "streets spec 'traversal'")
        city = None
        if spec.get("city") is not None:
            city = dataclass_from_table(SyntheticCityConfig, spec["city"], "streets spec 'city'")
        return cls(graph, traversal, city)

    def spec(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "graph": self.graph.to_dict(),
            "traversal": {f: getattr(self.traversal, f) for f in self.traversal.__dataclass_fields__},
            "city": None if self.city is None else {f: getattr(self.city, f) for f in self.city.__dataclass_fields__},
        }

    def describe(self) -> str:
        t = self.traversal
        where = (
            f"synthetic {self.city.rows}x{self.city.cols} city (seed {self.city.seed})"
            if self.city is not None
            else (self.graph.name or "graph")
        )
        return (
            f"streets: {self.graph.num_nodes} intersections, {self.graph.num_edges} streets, "
            f"{t.kind} (<= {t.max_directions} directions), {where}"
        )

    # ---- the DFA -----------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[str, ...]:
        return self._tokens

    @property
    def max_directions(self) -> int:
        return self.traversal.max_directions

    def start(self) -> State:
        return START

    def _unpack_at(self, state: State) -> tuple[str, str]:
        if (
            not isinstance(state, tuple)
            or len(state) != 3
            or state[1] not in self._node_set
            or state[2] not in self._node_set
        ):
            raise WorldError(f"not a streets state: {state!r}")
        return state[1], state[2]

    def legal(self, state: State) -> tuple[str, ...]:
        parts: tuple = state if isinstance(state, tuple) else ()
        tag = parts[0] if parts else None
        if tag == "at":
            n, d = self._unpack_at(state)
            return self._out_dirs_end[n] if n == d else self._out_dirs[n]
        if state == START:
            return self.graph.nodes
        if tag == "origin" and len(parts) == 2 and parts[1] in self._node_set:
            return self.graph.nodes
        if state == END_STATE:
            return ()
        raise WorldError(f"not a streets state: {state!r}")

    def step(self, state: State, token: str) -> State:
        parts: tuple = state if isinstance(state, tuple) else ()
        tag = parts[0] if parts else None
        if tag == "at":
            n, d = self._unpack_at(state)
            if token in _DIRECTION_SET:
                nxt = self.graph.neighbor(n, token)
                if nxt is not None:
                    return ("at", nxt, d)
            elif token == END and n == d:
                return END_STATE
            raise IllegalTokenError(state, token)
        if state == START:
            if token in self._node_set:
                return ("origin", token)
            raise IllegalTokenError(state, token)
        if tag == "origin" and len(parts) == 2 and parts[1] in self._node_set:
            if token in self._node_set:
                return ("at", parts[1], token)
            raise IllegalTokenError(state, token)
        if state == END_STATE:
            raise IllegalTokenError(state, token)
        raise WorldError(f"not a streets state: {state!r}")

    def split_key(self, sequence: Sequence[str]) -> Hashable:
        """The (origin, destination) pair: no pair is in both train and test (§3.1)."""
        return tuple(sequence[:2])

    def state_label(self, state: State) -> str | None:
        """The current intersection (the paper's probe target); ``None`` at start and end."""
        if isinstance(state, tuple) and state and state[0] in ("at", "origin"):
            return state[1]
        return None

    # ---- distances ---------------------------------------------------------------------------

    def distances_to(self, dest: str) -> np.ndarray:
        """BFS street counts from every node to ``dest`` (graph node order; -1: unreachable).

        Cached per destination (bounded memory): detours and map reconstruction call this a lot.
        """
        cached = self._dist_cache.get(dest)
        if cached is not None:
            return cached
        j = self.graph.index(dest)
        radj = self.graph.reverse_index_adjacency
        dist = np.full(self.graph.num_nodes, -1, dtype=np.int32)
        dist[j] = 0
        queue = deque([j])
        while queue:
            v = queue.popleft()
            dv = int(dist[v]) + 1
            for u, _ in radj[v]:
                if dist[u] < 0:
                    dist[u] = dv
                    queue.append(u)
        dist.setflags(write=False)
        if len(self._dist_cache) >= self._dist_cache_max:
            self._dist_cache.clear()
        self._dist_cache[dest] = dist
        return dist

    def shortest_distance_steps(self, node: str, dest: str) -> int | None:
        """Fewest streets from ``node`` to ``dest`` (BFS hops), or ``None`` if unreachable."""
        d = int(self.distances_to(dest)[self.graph.index(node)])
        return None if d < 0 else d

    def can_reach_within(self, node: str, dest: str, steps: int) -> bool:
        """Whether ``dest`` can be reached from ``node`` in at most ``steps`` streets."""
        d = self.shortest_distance_steps(node, dest)
        return d is not None and d <= steps

    # ---- sampling ----------------------------------------------------------------------------

    def noisy_weights(self) -> np.ndarray:
        """The ``num_noisy_graphs`` perturbed maps, fixed by ``traversal.noise_seed``."""
        if self._noisy_weights is None:
            self._noisy_weights = sample_noisy_weights(
                self.graph, self.traversal.num_noisy_graphs, np.random.default_rng(self.traversal.noise_seed)
            )
        return self._noisy_weights

    def traversal_process(self):
        """The exact next-token distribution of :meth:`generate`'s process
        (:mod:`interp.worlds.streets.process`): what an ideal predictor of this data outputs."""
        from interp.worlds.streets.process import traversal_process

        return traversal_process(self)

    def generate_traversals(self, n: int, rng: np.random.Generator) -> TraversalBatch:
        """``n`` routes of the configured kind, with counts of what was skipped."""
        weights = self.noisy_weights() if self.traversal.kind == "noisy_shortest_paths" else None
        return generate_traversals(self.graph, self.traversal, n, rng, weights)

    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` routes (see :meth:`generate_traversals` for the skip counts, also logged)."""
        return self.generate_traversals(n, rng).sequences

    def sample_state(self, rng: np.random.Generator, max_tries: int = 1000) -> State:
        """A uniform ``("at", n, d)`` with ``n != d`` whose destination is reachable within
        ``max_directions``.

        As the reference code samples states: its states are the (origin, destination) pairs of
        the data, which never coincide, so a state standing at its destination is not drawn.
        """
        nodes = self.graph.nodes
        if len(nodes) < 2:
            raise WorldError("sampling a state needs two intersections (current ≠ destination)")
        for _ in range(max_tries):
            n = nodes[int(rng.integers(len(nodes)))]
            d = nodes[int(rng.integers(len(nodes)))]
            if n != d and self.can_reach_within(n, d, self.max_directions):
                return ("at", n, d)
        raise WorldError(f"no reachable (intersection, destination) pair in {max_tries} draws")

    def sample_prefix_length(self, state: State, rng: np.random.Generator) -> int:
        """The number of directions of a prefix reaching ``state``: uniform in
        ``[1, max_directions - dist(n, d)]`` so that the route can still arrive within the cap (the
        reference draws ``range(1, 100 - shortest_path - 3)``, i.e. a 100-token context); 0 when
        there is no room. The Myhill–Nerode metrics draw it once per prefix pair (for the first
        state) and use it for both prefixes, as the reference does."""
        budget = self._prefix_budget(state)
        return int(rng.integers(1, budget + 1)) if budget >= 1 else 0

    def _prefix_budget(self, state: State) -> int:
        """``max_directions - dist(n, d)``: the directions a prefix of ``state`` may have."""
        n, d = self._unpack_at(state)
        dist = self.shortest_distance_steps(n, d)
        if dist is None or dist > self.max_directions:
            raise WorldError(
                f"state {state!r} cannot reach its destination within "
                f"{self.max_directions} directions (distance "
                f"{'infinite' if dist is None else dist})"
            )
        return self.max_directions - dist

    def sample_prefix(self, state: State, rng: np.random.Generator, length: int | None = None) -> list[str]:
        """A random prefix from q0 reaching ``state``.

        For ``("at", n, d)``: walk ``k`` streets backwards from ``n`` on the reversed graph, each
        step uniform over the streets into the current node, with ``k = length`` or, when
        ``length`` is None, drawn by :meth:`sample_prefix_length` (as the reference code does);
        the walk's far end is the origin. A walk that meets a node with no street into it stops
        there (shorter prefix). Raises :class:`WorldError` if ``d`` cannot be reached from ``n``
        within ``max_directions``.
        """
        parts: tuple = state if isinstance(state, tuple) else ()
        tag = parts[0] if parts else None
        if state == START:
            return []
        if tag == "origin":
            self.legal(state)  # validates
            return [parts[1]]
        if state == END_STATE:
            d = self.graph.nodes[int(rng.integers(self.graph.num_nodes))]
            return [*self.sample_prefix(("at", d, d), rng), END]
        if tag != "at":
            raise WorldError(f"not a streets state: {state!r}")
        n, d = self._unpack_at(state)
        if length is None:
            k = self.sample_prefix_length(state, rng)
        else:
            self._prefix_budget(state)  # validates reachability
            if not (isinstance(length, (int, np.integer)) and length >= 0):
                raise WorldError(f"prefix length must be an int >= 0, got {length!r}")
            k = int(length)
        radj = self.graph.reverse_index_adjacency
        edges, nodes = self.graph.edges, self.graph.nodes
        v = self.graph.index(n)
        back: list[str] = []
        for _ in range(k):
            options = radj[v]
            if not options:
                break
            v, e = options[int(rng.integers(len(options)))]
            back.append(edges[e][1])
        back.reverse()
        return [nodes[v], d, *back]
