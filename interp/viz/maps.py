"""Street-map figures: the map a model implies (Vafa et al. 2024, Fig. 3 / App. B) and single routes.

Drawing conventions follow the paper's reconstructed maps: true streets are straight grey lines,
streets that had to be *added* to explain the model's traversals are red curves, each bent toward
the direction it is labelled with (a quadratic Bézier whose control point sits off the start in
that direction's unit vector), so that an "E" street drawn toward a node to the north-west visibly
leaves eastward. Nodes sit at their coordinates; a map without coordinates gets a deterministic
spring layout (networkx, fixed seed).

matplotlib is imported inside the functions and drawn on an Agg canvas (no GUI, no pyplot state).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Float

from interp.worlds.base import WorldError
from interp.worlds.streets.graph import DIRECTION_VECTORS, DIRECTIONS, END, StreetGraph

if TYPE_CHECKING:
    from interp.metrics.navigation import MapReconstruction


def node_positions(graph: StreetGraph, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Coordinates when the map has them, else a seeded spring layout (same graph, same picture)."""
    coords = graph.coords
    if coords is not None:
        return coords
    import networkx as nx

    pos = nx.spring_layout(graph.to_networkx().to_undirected(), seed=seed)
    return {v: (float(pos[v][0]), float(pos[v][1])) for v in graph.nodes}


def bezier_toward(
    start: Sequence[float], end: Sequence[float], direction: str, bend: float, num: int = 32
) -> Float[np.ndarray, "num 2"]:
    """Points of a quadratic Bézier from ``start`` to ``end`` whose control point is
    ``start + bend * unit(direction)``: the curve leaves ``start`` heading roughly ``direction``."""
    if direction not in DIRECTION_VECTORS:
        raise ValueError(f"unknown direction {direction!r} (known: {' '.join(DIRECTIONS)})")
    p0, p2 = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    p1 = p0 + bend * np.asarray(DIRECTION_VECTORS[direction])
    t = np.linspace(0.0, 1.0, num)[:, None]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2


def _figure(pos: dict[str, tuple[float, float]]) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    xy = np.array(list(pos.values()), dtype=float)
    span = np.ptp(xy, axis=0) if len(xy) else np.ones(2)
    ratio = float(np.clip((span[1] or 1.0) / (span[0] or 1.0), 0.4, 2.0))
    fig = Figure(figsize=(8.0, max(3.5, 8.0 * ratio)), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_axis_off()
    return fig, ax


def _typical_length(graph: StreetGraph, pos: dict[str, tuple[float, float]]) -> float:
    lens = [float(np.hypot(pos[v][0] - pos[u][0], pos[v][1] - pos[u][1])) for u, _, v in graph.edges]
    lens = [x for x in lens if x > 0]
    if lens:
        return float(np.median(lens))
    xy = np.array(list(pos.values()), dtype=float)
    return float(np.ptp(xy, axis=0).max() or 1.0) / 10


def _draw_true(ax: Any, graph: StreetGraph, pos: dict[str, tuple[float, float]], alpha: float = 0.6) -> None:
    from matplotlib.collections import LineCollection

    segs = [[pos[u], pos[v]] for u, _, v in graph.edges]
    if segs:
        ax.add_collection(LineCollection(segs, colors="0.6", linewidths=1.0, alpha=alpha, zorder=1))
    xy = np.array([pos[v] for v in graph.nodes], dtype=float)
    ax.scatter(xy[:, 0], xy[:, 1], s=6, c="0.2", zorder=3)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


def draw_map(
    graph: StreetGraph,
    path: str | Path,
    added: Iterable[tuple[str, str, str]] = (),
    title: str | None = None,
    bend: float = 0.5,
    seed: int = 0,
) -> Path:
    """PNG of ``graph`` (grey, straight) plus ``added`` ``(node, direction, neighbor)`` streets (red
    curves bent toward their direction by ``bend`` × the street's length, at least a quarter of a
    typical street, so a short added street still shows its direction)."""
    from matplotlib.collections import LineCollection

    pos = node_positions(graph, seed)
    fig, ax = _figure(pos)
    _draw_true(ax, graph, pos)
    typical = _typical_length(graph, pos)
    curves, heads = [], []
    for u, d, v in added:
        length = float(np.hypot(pos[v][0] - pos[u][0], pos[v][1] - pos[u][1]))
        c = bezier_toward(pos[u], pos[v], d, bend * max(length, 0.25 * typical))
        curves.append(c)
        heads.append(c[-1])
    if curves:
        ax.add_collection(LineCollection(curves, colors="tab:red", linewidths=1.4, alpha=0.85, zorder=2))
        h = np.array(heads)
        ax.scatter(h[:, 0], h[:, 1], s=14, c="tab:red", marker="o", zorder=4)
    ax.autoscale_view()
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


def draw_reconstruction(
    result: "MapReconstruction", path: str | Path, title: str | None = None, bend: float = 0.5, seed: int = 0
) -> Path:
    """The reconstructed map of :func:`interp.metrics.navigation.reconstruct_map`, titled with its
    counts (added edges, failed / total sequences)."""
    if title is None:
        title = f"{result.num_added} added street(s) (red); {result.failed} / {result.sequences} sequence(s) failed" + (
            f"; {result.skipped} malformed skipped" if result.skipped else ""
        )
    return draw_map(result.graph, path, result.edges(), title=title, bend=bend, seed=seed)


def draw_route(
    graph: StreetGraph, route: Sequence[str], path: str | Path, title: str | None = None, seed: int = 0
) -> Path:
    """PNG of one route ``o d t1 .. [end]`` on ``graph``: legal steps as blue arrows, the first
    illegal turn as a red stub in its direction (and the route stops there), origin green,
    destination a gold star."""
    if len(route) < 2 or route[0] not in graph or route[1] not in graph:
        raise WorldError(f"a route starts with two intersections of the map, got {list(route[:2])!r}")
    pos = node_positions(graph, seed)
    fig, ax = _figure(pos)
    _draw_true(ax, graph, pos, alpha=0.4)
    typical = _typical_length(graph, pos)
    o, d = route[0], route[1]
    node, ok = o, True
    for t in route[2:]:
        if t == END:
            ok = node == d
            break
        nxt = graph.neighbor(node, t) if t in DIRECTION_VECTORS else None
        if nxt is None:
            ok = False
            if t in DIRECTION_VECTORS:
                dx, dy = (0.5 * typical * c for c in DIRECTION_VECTORS[t])
                ax.annotate(
                    "",
                    xy=(pos[node][0] + dx, pos[node][1] + dy),
                    xytext=pos[node],
                    arrowprops={"arrowstyle": "->", "color": "tab:red", "lw": 2},
                    zorder=5,
                )
            ax.scatter([pos[node][0]], [pos[node][1]], s=80, c="tab:red", marker="x", zorder=6)
            break
        ax.annotate(
            "", xy=pos[nxt], xytext=pos[node], arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 1.8}, zorder=4
        )
        node = nxt
    else:
        ok = False  # no `end`
    ax.scatter([pos[o][0]], [pos[o][1]], s=60, c="tab:green", zorder=7)
    ax.scatter([pos[d][0]], [pos[d][1]], s=140, c="gold", marker="*", edgecolors="k", zorder=7)
    ax.autoscale_view()
    if title is None:
        text = " ".join(route)
        title = (text if len(text) <= 80 else text[:77] + "...") + ("  (valid)" if ok else "  (invalid)")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


__all__ = ["bezier_toward", "draw_map", "draw_reconstruction", "draw_route", "node_positions"]
