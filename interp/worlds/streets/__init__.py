"""Navigation on a street map (Vafa et al. 2024, §3 and App. F).

- :mod:`~interp.worlds.streets.graph`: :class:`StreetGraph`, the map (CSV / dict / networkx);
- :mod:`~interp.worlds.streets.synthetic`: seeded Manhattan-like grid cities;
- :mod:`~interp.worlds.streets.traversals`: shortest paths, noisy shortest paths, random walks,
  and the train/test split by (origin, destination) pair;
- :mod:`~interp.worlds.streets.config`: ``streets:ARG`` and TOML configs;
- :mod:`~interp.worlds.streets.world`: :class:`StreetsWorld`, the navigation DFA.
"""

from interp.worlds.streets.graph import DIRECTIONS, END, OPPOSITE, StreetGraph
from interp.worlds.streets.synthetic import SyntheticCityConfig, build_synthetic_city
from interp.worlds.streets.traversals import (
    TRAVERSAL_KINDS,
    TraversalBatch,
    TraversalConfig,
    generate_traversals,
    noisy_shortest_paths,
    random_walks,
    sample_noisy_weights,
    shortest_paths,
)
from interp.worlds.streets.world import END_STATE, START, StreetsWorld

__all__ = [
    "DIRECTIONS",
    "END",
    "OPPOSITE",
    "StreetGraph",
    "SyntheticCityConfig",
    "build_synthetic_city",
    "TRAVERSAL_KINDS",
    "TraversalBatch",
    "TraversalConfig",
    "generate_traversals",
    "noisy_shortest_paths",
    "random_walks",
    "sample_noisy_weights",
    "shortest_paths",
    "START",
    "END_STATE",
    "StreetsWorld",
]
