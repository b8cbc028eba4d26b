"""Street graphs: intersections joined by directed, direction-labelled streets.

The navigation world of Vafa et al. 2024 (§3.1) lives on a weighted directed graph
``G = (V, E, W)``: ``V`` intersections, ``E`` streets, ``W`` street lengths, and a labelling
``D : V × V → {N, S, E, W, NE, NW, SE, SW}``. *Each intersection has at most one street in each
direction*, which is what makes a turn-by-turn instruction such as ``NE`` unambiguous: the pair
``(node, direction)`` names at most one neighbour. A one-way street is a single directed edge; a
two-way street is two edges with opposite labels.

:class:`StreetGraph` is an immutable value. Node ids are strings because they become tokens of
the navigation language (one token per intersection), so they may not contain whitespace nor
clash with the direction tokens, ``end`` or the special tokens.

Lengths. An edge's length is, in order of preference: the length given explicitly (CSV column
``length``); the Euclidean distance between its endpoints when every node has coordinates; else 1
(so shortest paths count streets, as they must on the public Manhattan table, which has neither).

CSV form (``from_csv`` / ``to_csv``), one row per directed street::

    node,direction,neighbor[,length][,x_node,y_node][,x_neighbor,y_neighbor]

- required: ``node``, ``direction`` (one of N S E W NE NW SE SW), ``neighbor``;
- ``length``: positive street length (any unit; the synthetic city uses meters);
- ``x_node,y_node``: coordinates of ``node`` (both or neither); ``x_neighbor,y_neighbor``: of
  ``neighbor``, needed only to place nodes that never appear in the ``node`` column (dead ends).
  When coordinate columns are present every node must end up with coordinates, and a node given
  twice must get the same ones;
- any other column is an error (a typo such as ``lenght`` would otherwise be ignored silently).
Identical duplicate rows are accepted once; the same ``(node, direction)`` with a different
neighbour (or a different length) is an error naming both lines. Blank lines are skipped.
Nodes are numbered in order of first appearance (``node`` then ``neighbor`` column, row by row).
(So ``to_csv`` then ``from_csv`` gives an equal graph only up to node order; use
``to_dict``/``from_dict``, which keep it, wherever token ids must stay stable.)
"""

from __future__ import annotations

import csv
import math
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from interp.worlds.base import SPECIAL_TOKENS, WorldError

#: The eight direction tokens, in vocabulary order.
DIRECTIONS: tuple[str, ...] = ("N", "S", "E", "W", "NE", "NW", "SE", "SW")
#: End-of-route token; legal only at the destination.
END = "end"
#: Unit vector (dx, dy) of each direction (x east, y north), for drawing and synthetic maps.
DIRECTION_VECTORS: dict[str, tuple[float, float]] = {
    "N": (0.0, 1.0),
    "S": (0.0, -1.0),
    "E": (1.0, 0.0),
    "W": (-1.0, 0.0),
    "NE": (math.sqrt(0.5), math.sqrt(0.5)),
    "NW": (-math.sqrt(0.5), math.sqrt(0.5)),
    "SE": (math.sqrt(0.5), -math.sqrt(0.5)),
    "SW": (-math.sqrt(0.5), -math.sqrt(0.5)),
}
#: The label of the same street walked the other way.
OPPOSITE: dict[str, str] = {
    "N": "S",
    "S": "N",
    "E": "W",
    "W": "E",
    "NE": "SW",
    "SW": "NE",
    "NW": "SE",
    "SE": "NW",
}
_DIRECTION_INDEX = {d: i for i, d in enumerate(DIRECTIONS)}
_RESERVED = frozenset(DIRECTIONS) | {END} | set(SPECIAL_TOKENS)

_REQUIRED_COLUMNS = ("node", "direction", "neighbor")
_OPTIONAL_COLUMNS = ("length", "x_node", "y_node", "x_neighbor", "y_neighbor")
_COORD_PAIRS = (("x_node", "y_node"), ("x_neighbor", "y_neighbor"))


def check_node_id(node: Any, where: str = "") -> str:
    """Return ``node`` if it can serve as a token, else raise :class:`WorldError`."""
    loc = f"{where}: " if where else ""
    if not isinstance(node, str) or not node:
        raise WorldError(f"{loc}node id must be a non-empty string, got {node!r}")
    if any(c.isspace() for c in node):
        raise WorldError(f"{loc}node id {node!r} contains whitespace (node ids become tokens)")
    if node in _RESERVED:
        raise WorldError(f"{loc}node id {node!r} clashes with a reserved token ({' '.join(sorted(_RESERVED))})")
    return node


def _header_columns(header: list[str], path: Path) -> dict[str, int]:
    """Each column's index, after checking a street CSV's header (module docstring): the required
    columns present, none unknown or repeated, coordinate columns in pairs."""
    missing = [c for c in _REQUIRED_COLUMNS if c not in header]
    if missing:
        raise WorldError(
            f"{path}:1: missing column(s) {missing}; the header must "
            f"contain {','.join(_REQUIRED_COLUMNS)} (got {header})"
        )
    unknown = [c for c in header if c not in _REQUIRED_COLUMNS + _OPTIONAL_COLUMNS]
    if unknown:
        raise WorldError(f"{path}:1: unknown column(s) {unknown}; optional columns are {','.join(_OPTIONAL_COLUMNS)}")
    dups = sorted({c for c in header if header.count(c) > 1})
    if dups:
        raise WorldError(f"{path}:1: repeated column(s) {dups}")
    for a, b in _COORD_PAIRS:
        if (a in header) != (b in header):
            raise WorldError(f"{path}:1: columns {a} and {b} go together")
    return {c: i for i, c in enumerate(header)}


class StreetGraph:
    """An immutable directed street graph with at most one street per (node, direction).

    Parameters
    ----------
    edges:
        ``(node, direction, neighbor)`` triples. Exact duplicates are merged; two different
        neighbours for one ``(node, direction)`` raise :class:`WorldError`.
    nodes:
        Optional node order (e.g. isolated nodes, or a fixed token order). Nodes met only in
        ``edges`` are appended in order of first appearance.
    coords:
        Optional ``node -> (x, y)``; if given it must cover every node.
    lengths:
        Optional ``(node, direction) -> length > 0``; if given it must cover every edge.
    name:
        Free text shown by ``describe`` (e.g. the file it came from).

    Edges are stored in canonical order (node order, then :data:`DIRECTIONS` order); an edge's
    position in :attr:`edges` is its *edge id*, used by :attr:`edge_lengths` and the integer
    adjacency :attr:`index_adjacency` that the path algorithms run on.
    """

    def __init__(
        self,
        edges: Iterable[tuple[str, str, str]],
        nodes: Iterable[str] | None = None,
        coords: Mapping[str, tuple[float, float]] | None = None,
        lengths: Mapping[tuple[str, str], float] | None = None,
        name: str = "",
    ) -> None:
        order: dict[str, None] = {}
        for v in nodes or ():
            order[check_node_id(v)] = None
        out: dict[str, dict[str, str]] = {}
        for triple in edges:
            if len(triple) != 3:
                raise WorldError(f"an edge must be (node, direction, neighbor), got {triple!r}")
            u, d, v = triple
            check_node_id(u)
            check_node_id(v)
            if d not in _DIRECTION_INDEX:
                raise WorldError(f"edge {triple!r}: unknown direction {d!r} (known: {' '.join(DIRECTIONS)})")
            order.setdefault(u, None)
            order.setdefault(v, None)
            prev = out.setdefault(u, {}).get(d)
            if prev is not None and prev != v:
                raise WorldError(f"node {u!r} has two streets going {d}: to {prev!r} and to {v!r}")
            out[u][d] = v

        self._nodes: tuple[str, ...] = tuple(order)
        self._index: dict[str, int] = {v: i for i, v in enumerate(self._nodes)}
        self._out: dict[str, dict[str, str]] = {
            v: {d: out[v][d] for d in DIRECTIONS if d in out.get(v, {})} for v in self._nodes
        }
        self._edges: tuple[tuple[str, str, str], ...] = tuple(
            (u, d, v) for u in self._nodes for d, v in self._out[u].items()
        )
        self._edge_id: dict[tuple[str, str], int] = {(u, d): i for i, (u, d, _) in enumerate(self._edges)}
        inc: dict[str, list[tuple[str, str]]] = {v: [] for v in self._nodes}
        for u, d, v in self._edges:
            inc[v].append((u, d))
        self._in: dict[str, tuple[tuple[str, str], ...]] = {v: tuple(p) for v, p in inc.items()}
        self.name = name

        self._coords: dict[str, tuple[float, float]] | None = None
        if coords is not None:
            missing = [v for v in self._nodes if v not in coords]
            if missing:
                raise WorldError(f"coordinates missing for {len(missing)} node(s), e.g. {missing[:5]}")
            extra = [v for v in coords if v not in self._index]
            if extra:
                raise WorldError(f"coordinates given for unknown node(s) {extra[:5]}")
            self._coords = {}
            for v in self._nodes:
                x, y = (float(c) for c in coords[v])
                if not (math.isfinite(x) and math.isfinite(y)):
                    raise WorldError(f"node {v!r}: coordinates must be finite, got {(x, y)}")
                self._coords[v] = (x, y)

        self._explicit_lengths = lengths is not None
        if lengths is not None:
            missing_e = [k for k in self._edge_id if k not in lengths]
            if missing_e:
                raise WorldError(f"lengths missing for {len(missing_e)} edge(s), e.g. {missing_e[:5]}")
            extra_e = [k for k in lengths if k not in self._edge_id]
            if extra_e:
                raise WorldError(f"lengths given for unknown edge(s) {extra_e[:5]}")
            vals = [float(lengths[(u, d)]) for u, d, _ in self._edges]
        elif self._coords is not None:
            vals = [math.dist(self._coords[u], self._coords[v]) for u, _, v in self._edges]
            # coincident endpoints (e.g. a self-loop) would give 0: keep lengths positive
            vals = [x if x > 0 else 1e-9 for x in vals]
        else:
            vals = [1.0] * len(self._edges)
        for (u, d, _), x in zip(self._edges, vals):
            if not (math.isfinite(x) and x > 0):
                raise WorldError(f"edge ({u!r}, {d!r}): length must be finite and > 0, got {x}")
        self._lengths = np.asarray(vals, dtype=np.float64)
        self._lengths.setflags(write=False)

        self._adj: tuple[tuple[tuple[int, int], ...], ...] = tuple(
            tuple((self._index[v], self._edge_id[(u, d)]) for d, v in self._out[u].items()) for u in self._nodes
        )
        self._radj: tuple[tuple[tuple[int, int], ...], ...] = tuple(
            tuple((self._index[u], self._edge_id[(u, d)]) for u, d in self._in[v]) for v in self._nodes
        )

    # ---- basic views -------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        """Node ids in their fixed order (the order of the node tokens)."""
        return self._nodes

    @property
    def edges(self) -> tuple[tuple[str, str, str], ...]:
        """``(node, direction, neighbor)`` in canonical order; the position is the edge id."""
        return self._edges

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    @property
    def num_edges(self) -> int:
        return len(self._edges)

    @property
    def coords(self) -> dict[str, tuple[float, float]] | None:
        """``node -> (x, y)`` or ``None`` when the graph has no coordinates."""
        return None if self._coords is None else dict(self._coords)

    @property
    def has_explicit_lengths(self) -> bool:
        return self._explicit_lengths

    @property
    def edge_lengths(self) -> np.ndarray:
        """Read-only float array of edge lengths, indexed by edge id."""
        return self._lengths

    @property
    def index_adjacency(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """``adj[i]`` = ``((neighbor index, edge id), ...)`` for node ``i``, in direction order."""
        return self._adj

    @property
    def reverse_index_adjacency(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """``radj[j]`` = ``((predecessor index, edge id), ...)``: the edges *into* node ``j``."""
        return self._radj

    def __contains__(self, node: object) -> bool:
        return node in self._index

    def __len__(self) -> int:
        return len(self._nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreetGraph):
            return NotImplemented
        return (
            self._nodes == other._nodes
            and self._edges == other._edges
            and self._coords == other._coords
            and np.array_equal(self._lengths, other._lengths)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        name = f" {self.name!r}" if self.name else ""
        return f"StreetGraph({self.num_nodes} nodes, {self.num_edges} edges{name})"

    def index(self, node: str) -> int:
        """Position of ``node`` in :attr:`nodes`."""
        try:
            return self._index[node]
        except KeyError:
            raise WorldError(f"unknown node {node!r}") from None

    def out_edges(self, node: str) -> dict[str, str]:
        """``direction -> neighbor`` for the streets leaving ``node``, in direction order."""
        try:
            return dict(self._out[node])
        except KeyError:
            raise WorldError(f"unknown node {node!r}") from None

    def out_directions(self, node: str) -> tuple[str, ...]:
        """The directions with a street out of ``node``, in direction order."""
        try:
            return tuple(self._out[node])
        except KeyError:
            raise WorldError(f"unknown node {node!r}") from None

    def neighbor(self, node: str, direction: str) -> str | None:
        """The intersection reached from ``node`` going ``direction``, or ``None``."""
        try:
            return self._out[node].get(direction)
        except KeyError:
            raise WorldError(f"unknown node {node!r}") from None

    def street_to(self, node: str, direction: str) -> str:
        """The intersection reached from ``node`` going ``direction``; a :class:`WorldError` when no
        street leaves ``node`` that way (:meth:`neighbor` returns ``None`` there)."""
        nxt = self.neighbor(node, direction)
        if nxt is None:
            raise WorldError(f"no street goes {direction} from {node!r}")
        return nxt

    def in_edges(self, node: str) -> tuple[tuple[str, str], ...]:
        """``(predecessor, direction)`` pairs of the streets *into* ``node`` (reversed graph)."""
        try:
            return self._in[node]
        except KeyError:
            raise WorldError(f"unknown node {node!r}") from None

    def reversed_adjacency(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """``node -> ((predecessor, direction), ...)`` for walking routes backwards."""
        return dict(self._in)

    def length(self, node: str, direction: str) -> float:
        """Length of the street leaving ``node`` in ``direction``."""
        try:
            return float(self._lengths[self._edge_id[(node, direction)]])
        except KeyError:
            raise WorldError(f"no street from {node!r} going {direction!r}") from None

    # ---- graph algorithms --------------------------------------------------------------------

    def _reach(self, start: int, adj: tuple[tuple[tuple[int, int], ...], ...]) -> int:
        seen = bytearray(len(self._nodes))
        seen[start] = 1
        count, queue = 1, deque([start])
        while queue:
            for j, _ in adj[queue.popleft()]:
                if not seen[j]:
                    seen[j] = 1
                    count += 1
                    queue.append(j)
        return count

    def is_strongly_connected(self) -> bool:
        """Every intersection reachable from every other (forward and backward BFS from one)."""
        n = len(self._nodes)
        if n == 0:
            return False
        return self._reach(0, self._adj) == n and self._reach(0, self._radj) == n

    def to_networkx(self) -> nx.DiGraph:
        """A ``networkx.DiGraph``: node attributes ``x, y`` (if any), edge attributes
        ``direction`` and ``length``. Two labels joining the same ordered pair (allowed here,
        absent from Manhattan) collapse to the shorter street, ties to the earlier direction."""
        g = nx.DiGraph(name=self.name)
        for v in self._nodes:
            if self._coords is not None:
                x, y = self._coords[v]
                g.add_node(v, x=x, y=y)
            else:
                g.add_node(v)
        for (u, d, v), length in zip(self._edges, self._lengths.tolist()):
            if g.has_edge(u, v) and g[u][v]["length"] <= length:
                continue
            g.add_edge(u, v, direction=d, length=length)
        return g

    # ---- serialisation -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form; ``StreetGraph.from_dict(g.to_dict()) == g``.

        ``lengths`` is stored only when it was given explicitly (otherwise it is recomputed from
        ``coords`` or is 1), so a round trip preserves how lengths were defined."""
        return {
            "name": self.name,
            "nodes": list(self._nodes),
            "edges": [list(e) for e in self._edges],
            "coords": None if self._coords is None else [list(self._coords[v]) for v in self._nodes],
            "lengths": self._lengths.tolist() if self._explicit_lengths else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "StreetGraph":
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping):
            raise WorldError(f"a street graph dict must be a JSON object, got {type(data).__name__}")
        unknown = set(data) - {"name", "nodes", "edges", "coords", "lengths"}
        if unknown:
            raise WorldError(f"unknown key(s) in street graph dict: {sorted(unknown)}")
        for key in ("nodes", "edges"):
            if key not in data:
                raise WorldError(f"street graph dict lacks {key!r}")
        nodes = list(data["nodes"])
        edges = [tuple(e) for e in data["edges"]]
        coords = None
        if data.get("coords") is not None:
            if len(data["coords"]) != len(nodes):
                raise WorldError("street graph dict: 'coords' must have one (x, y) per node")
            coords = {v: (float(xy[0]), float(xy[1])) for v, xy in zip(nodes, data["coords"])}
        lengths = None
        if data.get("lengths") is not None:
            if len(data["lengths"]) != len(edges):
                raise WorldError("street graph dict: 'lengths' must have one value per edge")
            lengths = {(e[0], e[1]): float(x) for e, x in zip(edges, data["lengths"])}
        return cls(edges, nodes=nodes, coords=coords, lengths=lengths, name=str(data.get("name", "")))

    @classmethod
    def from_csv(cls, path: str | Path, name: str | None = None) -> "StreetGraph":
        """Read the CSV form described in the module docstring; errors name file and line."""
        path = Path(path)
        try:
            fh = path.open(newline="", encoding="utf-8")
        except OSError as e:
            raise WorldError(f"cannot read street graph {path}: {e.strerror or e}") from None
        with fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise WorldError(f"{path}: empty file (expected header {','.join(_REQUIRED_COLUMNS)})")
            header = [h.strip() for h in header]
            col = _header_columns(header, path)
            has_len = "length" in col
            has_xy = "x_node" in col or "x_neighbor" in col

            edges: list[tuple[str, str, str]] = []
            seen: dict[tuple[str, str], tuple[str, float | None, int]] = {}
            lengths: dict[tuple[str, str], float] = {}
            coords: dict[str, tuple[float, float]] = {}
            coord_line: dict[str, int] = {}

            def number(row: list[str], c: str, line: int) -> float:
                raw = row[col[c]].strip()
                try:
                    x = float(raw)
                except ValueError:
                    raise WorldError(f"{path}:{line}: column {c}: {raw!r} is not a number") from None
                if not math.isfinite(x):
                    raise WorldError(f"{path}:{line}: column {c}: {raw!r} is not finite")
                return x

            def place(node: str, xc: str, yc: str, row: list[str], line: int) -> None:
                xy = (number(row, xc, line), number(row, yc, line))
                old = coords.get(node)
                if old is None:
                    coords[node], coord_line[node] = xy, line
                elif not all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) for a, b in zip(old, xy)):
                    raise WorldError(
                        f"{path}:{line}: node {node!r} placed at {xy}, but line {coord_line[node]} placed it at {old}"
                    )

            for row in reader:
                line = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise WorldError(
                        f"{path}:{line}: expected {len(header)} fields ({','.join(header)}), got {len(row)}"
                    )
                u, d, v = (row[col[c]].strip() for c in _REQUIRED_COLUMNS)
                where = f"{path}:{line}"
                check_node_id(u, where)
                check_node_id(v, where)
                if d not in _DIRECTION_INDEX:
                    raise WorldError(f"{where}: unknown direction {d!r} (known: {' '.join(DIRECTIONS)})")
                length = number(row, "length", line) if has_len else None
                if length is not None and not length > 0:
                    raise WorldError(f"{where}: length must be > 0, got {length}")
                prev = seen.get((u, d))
                if prev is not None:
                    if prev[:2] != (v, length):
                        raise WorldError(
                            f"{where}: node {u!r} already has a street going {d} on line "
                            f"{prev[2]} (to {prev[0]!r}"
                            + (f", length {prev[1]}" if has_len else "")
                            + f"); here it goes to {v!r}"
                            + (f", length {length}" if has_len else "")
                            + ": at most one street per direction"
                        )
                else:
                    seen[(u, d)] = (v, length, line)
                    edges.append((u, d, v))
                    if length is not None:
                        lengths[(u, d)] = length
                for (xc, yc), node in zip(_COORD_PAIRS, (u, v)):
                    if xc in col:
                        place(node, xc, yc, row, line)
            if not edges:
                raise WorldError(f"{path}: no streets (the file has a header but no rows)")

        graph_name = name if name is not None else str(path)
        if not has_xy:
            return cls(edges, lengths=lengths if has_len else None, name=graph_name)
        nodes = dict.fromkeys(n for e in edges for n in (e[0], e[2]))
        unplaced = [n for n in nodes if n not in coords]
        if unplaced:
            raise WorldError(
                f"{path}: {len(unplaced)} node(s) have no coordinates, e.g. "
                f"{unplaced[:5]} (add x_neighbor,y_neighbor columns to place nodes "
                f"that never appear in the node column)"
            )
        return cls(edges, coords=coords, lengths=lengths if has_len else None, name=graph_name)

    def to_csv(self, path: str | Path) -> None:
        """Write the CSV form (with ``length`` / coordinate columns when the graph has them)."""
        header = list(_REQUIRED_COLUMNS)
        if self._explicit_lengths:
            header.append("length")
        if self._coords is not None:
            header += ["x_node", "y_node", "x_neighbor", "y_neighbor"]
        with Path(path).open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(header)
            for (u, d, v), length in zip(self._edges, self._lengths.tolist()):
                row: list[Any] = [u, d, v]
                if self._explicit_lengths:
                    row.append(repr(length))
                if self._coords is not None:
                    row += [repr(c) for c in (*self._coords[u], *self._coords[v])]
                w.writerow(row)
