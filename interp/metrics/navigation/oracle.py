"""The route-planning reference: a true world model of the streets world that *routes*.

:class:`~interp.models.lm.WorldLM` (``--model oracle``) is uniform over the legal tokens, so its
argmax is a legal turn but never ``end`` at a destination with streets out (argmax ties go to the
lowest token id, and ``end`` comes after the turns in the vocabulary): its greedy routes run to the
cap and are invalid (``no_end``). :class:`ShortestPathLM`
(``interp navigate --model route-oracle``) is the model a perfect navigator would be: its greedy
routes are all valid, they are all shortest under its metric, and it stays valid under any
detours because it re-plans from wherever it is put.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from interp.metrics.navigation.routes import streets_world
from interp.models.lm import StateLM
from interp.worlds.base import World
from interp.worlds.streets.graph import END

#: ways :class:`ShortestPathLM` measures a shortest route
_METRICS: tuple[str, ...] = ("length", "hops")


class ShortestPathLM(StateLM):
    """A true world model that always heads for the destination: all mass on the next turn of a
    shortest route from the *current* state (``length``: Dijkstra on street length; ``hops``:
    fewest streets), ``end`` at the destination. It re-plans after any detour.

    Before the destination is known (after ``<bos>`` and after the origin) it is uniform over the
    legal tokens (the intersections), like :class:`~interp.models.lm.WorldLM`; after ``end``
    nothing is legal. At an intersection away from the destination the turn is the out-street
    ``t`` minimising ``length(node, t) + dist(next, destination)`` (``length``, the default: the
    same street lengths :class:`~interp.metrics.navigation.routes.RouteResult` scores, so its
    greedy routes are all *shortest*) or the BFS street count from the next node (``hops``);
    ties go to the first turn in the node's out-street order.
    """

    def __init__(self, world: World, metric: str = "length"):
        world = streets_world(world)
        if metric not in _METRICS:
            raise ValueError(f"unknown route metric {metric!r}; known: {', '.join(_METRICS)}")
        super().__init__(world.vocab)
        self.world, self.metric = world, metric
        self._rev = world.graph.to_networkx().reverse()
        self._dist: dict[str, dict[str, float]] = {}

    def _initial(self) -> Any:
        return self.world.start()

    def _step(self, state: Any, token: str) -> Any:
        return self.world.step(state, token)

    def _score(self, node: str, turn: str, dest: str) -> float | int:
        g = self.world.graph
        nxt = g.street_to(node, turn)
        if self.metric == "hops":
            d = int(self.world.distances_to(dest)[g.index(nxt)])
            return np.inf if d < 0 else d
        if dest not in self._dist:
            import networkx as nx

            self._dist[dest] = nx.single_source_dijkstra_path_length(self._rev, dest, weight="length")
        return g.length(node, turn) + self._dist[dest].get(nxt, np.inf)

    def _allowed(self, state: Any) -> Sequence[str]:
        if state[0] != "at":
            return self.world.legal(state)
        node, dest = state[1], state[2]
        if node == dest:
            return [END]
        return [min(self.world.graph.out_directions(node), key=lambda t: self._score(node, t, dest))]

    def describe(self) -> str:
        return f"route oracle (shortest paths by {self.metric})"


__all__ = ["ShortestPathLM"]
