"""Reading a streets world from a CLI argument or a TOML file.

``streets`` (empty argument) is the default 8 x 8 synthetic city, ``streets:tiny`` the 4 x 5 test
city, ``streets:EDGES.csv`` a graph file (see :mod:`interp.worlds.streets.graph`), and
``streets:CONFIG.toml`` a file such as::

    [city]                      # a synthetic city: any SyntheticCityConfig field
    rows = 8
    cols = 8
    seed = 3
    # graph = "edges.csv"       # ... or a graph file instead of [city] (top level, relative
    #                           #     to the TOML file)
    [traversal]                 # optional: any TraversalConfig field
    kind = "shortest_paths"
    max_directions = 99

Unknown keys are errors naming the key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from interp.config import ConfigError, from_dict
from interp.worlds.base import WorldError
from interp.worlds.streets.graph import StreetGraph
from interp.worlds.streets.synthetic import SyntheticCityConfig, build_synthetic_city
from interp.worlds.streets.traversals import TraversalConfig

T = TypeVar("T")

#: named cities accepted as ``streets:NAME``
PRESETS: dict[str, SyntheticCityConfig] = {
    "default": SyntheticCityConfig(),
    "tiny": SyntheticCityConfig.tiny(),
}


def dataclass_from_table(cls: type[T], table: Any, where: str) -> T:
    """Build the frozen dataclass ``cls`` from a TOML/JSON table, checking keys and types
    (:func:`interp.config.from_dict`), with errors as :class:`WorldError` naming ``where``."""
    if not isinstance(table, dict):
        raise WorldError(f"{where}: expected a table, got {type(table).__name__}")
    try:
        return from_dict(cls, table, where)
    except ConfigError as e:
        raise WorldError(str(e)) from None


@dataclass(frozen=True)
class StreetsSource:
    """What a streets argument resolved to: the graph, traversal settings, and its origin."""

    graph: StreetGraph
    traversal: TraversalConfig
    city: SyntheticCityConfig | None = None


def load_toml(path: Path) -> StreetsSource:
    """Read a ``[city]`` or ``graph = ...`` TOML file with an optional ``[traversal]`` table."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as e:
        raise WorldError(f"cannot read streets config {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise WorldError(f"{path}: invalid TOML: {e}") from None
    for key in data:
        if key not in ("city", "graph", "traversal"):
            raise WorldError(f"{path}: unknown key {key!r} (known: city, graph, traversal)")
    if ("city" in data) == ("graph" in data):
        raise WorldError(f'{path}: give exactly one of a [city] table or graph = "file.csv"')
    traversal = dataclass_from_table(TraversalConfig, data.get("traversal", {}), f"{path} [traversal]")
    if "city" in data:
        city = dataclass_from_table(SyntheticCityConfig, data["city"], f"{path} [city]")
        return StreetsSource(build_synthetic_city(city), traversal, city)
    if not isinstance(data["graph"], str):
        raise WorldError(f"{path}: graph must be a file path string, got {data['graph']!r}")
    graph_path = Path(data["graph"]).expanduser()
    if not graph_path.is_absolute():
        graph_path = path.parent / graph_path
    return StreetsSource(StreetGraph.from_csv(graph_path), traversal)


def resolve_arg(arg: str) -> StreetsSource:
    """``""`` / preset name / ``*.csv`` / ``*.toml`` -> :class:`StreetsSource`."""
    arg = arg.strip()
    key = arg.lower() or "default"
    if key in PRESETS:
        city = PRESETS[key]
        return StreetsSource(build_synthetic_city(city), TraversalConfig(), city)
    path = Path(arg).expanduser()
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return StreetsSource(StreetGraph.from_csv(path), TraversalConfig())
    if suffix == ".toml":
        return load_toml(path)
    raise WorldError(
        f"streets: cannot use {arg!r}; give nothing (default city), "
        f"{' or '.join(PRESETS)}, a graph file EDGES.csv, or a config CONFIG.toml"
    )
