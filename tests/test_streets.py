"""Tests of the navigation world (interp.worlds.streets): graph, synthetic city, traversals, DFA."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from conftest import assert_legal_agrees_with_step
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.worlds import IllegalTokenError, WorldError, parse_world, world_from_spec
from interp.worlds.base import SPECIAL_TOKENS
from interp.worlds.split import split_sequences
from interp.worlds.streets import (
    DIRECTIONS,
    END,
    END_STATE,
    START,
    TRAVERSAL_KINDS,
    StreetGraph,
    StreetsWorld,
    SyntheticCityConfig,
    TraversalConfig,
    build_synthetic_city,
    random_walks,
    shortest_paths,
)
from interp.worlds.streets.graph import DIRECTION_VECTORS

MANHATTAN = Path(__file__).parents[2] / "shared/data/manhattan/edges.csv"


@pytest.fixture(scope="module")
def city() -> StreetGraph:
    return build_synthetic_city(SyntheticCityConfig.tiny())


def world_of(graph: StreetGraph, kind: str, **kw: object) -> StreetsWorld:
    return StreetsWorld(graph, TraversalConfig(kind=kind, **kw))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def worlds(city: StreetGraph) -> dict[str, StreetsWorld]:
    return {k: world_of(city, k, num_noisy_graphs=5, max_directions=40) for k in TRAVERSAL_KINDS}


def path_length(graph: StreetGraph, seq: list[str]) -> float:
    node, total = seq[0], 0.0
    for d in seq[2:-1]:
        total += graph.length(node, d)
        node = graph.neighbor(node, d)
    assert node == seq[1]
    return total


# ---- the DFA -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", TRAVERSAL_KINDS)
def test_generated_sequences_are_legal(worlds: dict[str, StreetsWorld], kind: str) -> None:
    w = worlds[kind]
    seqs = w.generate(60, np.random.default_rng(1))
    assert len(seqs) == 60
    for s in seqs:
        assert w.is_legal_sequence(s), s
        assert s[-1] == END and w.run(s) == END_STATE
        assert len(s) - 3 <= w.max_directions
    if kind != "random_walks":
        assert all(s[0] != s[1] for s in seqs)


def test_legal_agrees_with_step(worlds: dict[str, StreetsWorld]) -> None:
    w = worlds["random_walks"]
    rng = np.random.default_rng(2)
    states = {START, END_STATE}
    for s in w.generate(10, rng):
        states.update(w.states_along(s))
    states.update(w.sample_state(rng) for _ in range(20))
    states.update(("at", n, n) for n in w.graph.nodes[:5])
    assert_legal_agrees_with_step(w, states)


def test_dfa_semantics(city: StreetGraph) -> None:
    w = StreetsWorld(city)
    assert w.tokens == (*city.nodes, *DIRECTIONS, END)
    assert len(w.vocab) == len(SPECIAL_TOKENS) + city.num_nodes + 9
    assert w.legal(START) == city.nodes
    assert w.legal(("origin", "0")) == city.nodes
    q = w.run(["0", "0"])
    assert q == ("at", "0", "0") and END in w.legal(q)
    q = w.run(["0", "7"])
    assert END not in w.legal(q) and w.legal(q) == city.out_directions("0")
    assert w.legal(END_STATE) == ()
    assert w.state_label(("at", "3", "7")) == "3"
    assert w.state_label(("origin", "3")) == "3"
    assert w.state_label(START) is None
    assert not w.is_legal_sequence(["0", "7", "end"])
    with pytest.raises(IllegalTokenError):
        w.step(START, "N")
    with pytest.raises(WorldError):
        w.legal(("at", "nowhere", "0"))
    with pytest.raises(WorldError):
        w.legal(("bogus",))


def test_sampled_prefixes_reach_their_state(worlds: dict[str, StreetsWorld]) -> None:
    w = worlds["shortest_paths"]
    rng = np.random.default_rng(3)
    states = [START, END_STATE, ("origin", "4")] + [w.sample_state(rng) for _ in range(40)]
    for s in w.generate(5, rng):
        states += w.states_along(s)[2:-1]
    for q in states:
        for _ in range(3):
            p = w.sample_prefix(q, rng)
            assert w.run(p) == q, (q, p)
            if q[0] == "at":
                assert len(p) - 2 + w.shortest_distance_steps(q[1], q[2]) <= w.max_directions
    prefixes = {tuple(w.sample_prefix(("at", "5", "9"), rng)) for _ in range(20)}
    assert len(prefixes) > 1


def test_distances_match_networkx(city: StreetGraph) -> None:
    w = StreetsWorld(city)
    g = city.to_networkx()
    for d in city.nodes[:6]:
        truth = nx.shortest_path_length(g, target=d)
        for n in city.nodes:
            assert w.shortest_distance_steps(n, d) == truth[n]
    assert w.can_reach_within("0", "19", 100) and not w.can_reach_within("0", "19", 1)


# ---- traversals ----------------------------------------------------------------------------


def test_shortest_paths_are_shortest(city: StreetGraph) -> None:
    g = city.to_networkx()
    batch = shortest_paths(city, 60, np.random.default_rng(4), max_directions=99)
    assert batch.skipped == 0 and batch.attempts == 60
    for s in batch.sequences:
        best = nx.dijkstra_path_length(g, s[0], s[1], weight="length")
        assert path_length(city, s) == pytest.approx(best, rel=1e-9)


def test_noisy_paths_are_shortest_on_some_noisy_map(worlds: dict[str, StreetsWorld]) -> None:
    w = worlds["noisy_shortest_paths"]
    weights = w.noisy_weights()
    assert weights.shape == (5, w.graph.num_edges) and (weights > w.graph.edge_lengths).all()
    maps = []
    for row in weights:
        g = nx.DiGraph()
        for (u, _, v), x in zip(w.graph.edges, row.tolist()):
            g.add_edge(u, v, weight=x)
        maps.append((g, {(u, d): x for (u, d, _), x in zip(w.graph.edges, row.tolist())}))
    seqs = w.generate(30, np.random.default_rng(5))
    for s in seqs:
        found = False
        for g, wt in maps:
            node, total = s[0], 0.0
            for d in s[2:-1]:
                total += wt[(node, d)]
                node = w.graph.neighbor(node, d)
            if math.isclose(total, nx.dijkstra_path_length(g, s[0], s[1]), rel_tol=1e-9):
                found = True
                break
        assert found, s
    # the perturbed maps are part of the world: the same across calls and spec round trips
    rebuilt = StreetsWorld.from_spec(w.spec())
    assert np.array_equal(rebuilt.noisy_weights(), weights)


def test_overlong_routes_are_counted_not_dropped(city: StreetGraph) -> None:
    batch = shortest_paths(city, 30, np.random.default_rng(6), max_directions=2)
    assert len(batch.sequences) == 30
    assert batch.skipped_too_long > 0
    assert batch.attempts == 30 + batch.skipped
    assert all(len(s) - 3 <= 2 for s in batch.sequences)
    assert "over 2 directions" in batch.summary()
    islands = StreetGraph([("a", "N", "a"), ("b", "N", "b")])  # no route between them
    with pytest.raises(WorldError, match="no route"):
        shortest_paths(islands, 5, np.random.default_rng(0))


def test_random_walks_lengths_and_dead_ends() -> None:
    line = StreetGraph([("a", "E", "b"), ("b", "W", "a"), ("b", "E", "c")])  # c: dead end
    batch = random_walks(line, 50, np.random.default_rng(7), min_len=3, max_len=6)
    assert len(batch.sequences) == 50
    assert batch.stopped_at_dead_end > 0
    w = StreetsWorld(line)
    for s in batch.sequences:
        assert w.is_legal_sequence(s)
        k = len(s) - 3
        assert k <= 6 and (k >= 3 or s[1] == "c")


def test_unreachable_pairs_are_counted() -> None:
    line = StreetGraph([("a", "E", "b"), ("b", "W", "a"), ("b", "E", "c")])
    batch = shortest_paths(line, 20, np.random.default_rng(8))
    assert batch.skipped_unreachable > 0 and all(s[0] != "c" for s in batch.sequences)


@pytest.mark.parametrize("kind", TRAVERSAL_KINDS)
def test_seed_reproduces_data(worlds: dict[str, StreetsWorld], kind: str) -> None:
    w = worlds[kind]
    a = w.generate(20, np.random.default_rng(11))
    b = w.generate(20, np.random.default_rng(11))
    c = w.generate(20, np.random.default_rng(12))
    assert a == b and a != c


def test_split_keeps_each_origin_destination_pair_on_one_side(worlds: dict[str, StreetsWorld]) -> None:
    """The paper's split (App. F): no (origin, destination) pair in both train and test."""
    world = worlds["random_walks"]
    seqs = world.generate(150, np.random.default_rng(13))
    seqs += seqs[:20]  # repeated pairs must land together
    train, test = split_sequences(world, seqs, 0.2, seed=0)
    assert len(train) + len(test) == len(seqs) and train and test
    assert not {(s[0], s[1]) for s in train} & {(s[0], s[1]) for s in test}
    assert (train, test) == split_sequences(world, seqs, 0.2, seed=0)
    assert (train, test) != split_sequences(world, seqs, 0.2, seed=1)
    # depends on the pairs, not on the order of the sequences
    _, test_rev = split_sequences(world, seqs[::-1], 0.2, seed=0)
    assert sorted(map(tuple, test_rev)) == sorted(map(tuple, test))
    with pytest.raises(ValueError):
        split_sequences(world, seqs, 1.5, seed=0)


# ---- synthetic city ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows,cols,seed,p",
    [
        (2, 2, 0, 0.5),
        (4, 5, 0, 0.1),
        (4, 5, 1, 0.9),
        (7, 3, 2, 0.3),
        (12, 10, 3, 0.2),
        (6, 6, 4, 0.0),
    ],
)
def test_synthetic_city_is_strongly_connected(rows: int, cols: int, seed: int, p: float) -> None:
    cfg = SyntheticCityConfig(rows=rows, cols=cols, seed=seed, closure_prob=p)
    g = build_synthetic_city(cfg)
    assert g.num_nodes == rows * cols and g.nodes == tuple(str(i) for i in range(rows * cols))
    assert g.is_strongly_connected() and nx.is_strongly_connected(g.to_networkx())
    pairs = [(u, d) for u, d, _ in g.edges]
    assert len(pairs) == len(set(pairs))  # at most one street per direction
    coords = g.coords
    assert coords is not None
    for u, d, v in g.edges:  # labels agree with geometry
        (x0, y0), (x1, y1) = coords[u], coords[v]
        dx, dy = DIRECTION_VECTORS[d]
        assert (x1 - x0) * dx + (y1 - y0) * dy > 0
        assert g.length(u, d) == pytest.approx(math.dist(coords[u], coords[v]))
    assert build_synthetic_city(cfg) == g  # seeded


def test_synthetic_city_features() -> None:
    g = build_synthetic_city(SyntheticCityConfig(rows=5, cols=6, closure_prob=0.0))
    assert g.neighbor("0", "N") == "6" and g.neighbor("6", "S") is None  # avenue 0 runs north
    assert g.neighbor("7", "S") == "1" and g.neighbor("1", "N") is None  # avenue 1 runs south
    assert g.neighbor("0", "E") == "1" and g.neighbor("1", "W") == "0"  # streets are two-way
    assert g.neighbor("5", "NW") == "10" and g.neighbor("10", "SE") == "5"  # the diagonal
    assert g.length("0", "N") == pytest.approx(80, abs=20)
    assert g.length("0", "E") == pytest.approx(250, abs=20)
    closed = build_synthetic_city(SyntheticCityConfig(rows=5, cols=6, closure_prob=0.5))
    assert closed.num_edges < g.num_edges
    assert build_synthetic_city(SyntheticCityConfig(seed=1)) != build_synthetic_city(SyntheticCityConfig(seed=2))
    with pytest.raises(WorldError):
        SyntheticCityConfig(rows=1)


def test_large_city_builds_fast() -> None:
    t0 = time.perf_counter()
    g = build_synthetic_city(SyntheticCityConfig(rows=50, cols=60, seed=5))
    assert time.perf_counter() - t0 < 5.0
    assert g.num_nodes == 3000 and g.is_strongly_connected()


# ---- graph files and specs -----------------------------------------------------------------


def test_spec_round_trip(worlds: dict[str, StreetsWorld]) -> None:
    rng = np.random.default_rng(14)
    for w in worlds.values():
        spec = json.loads(json.dumps(w.spec()))
        w2 = StreetsWorld.from_spec(spec)
        assert w2.tokens == w.tokens and w2.graph == w.graph and w2.traversal == w.traversal
        for _ in range(20):
            q = w.sample_state(rng)
            assert w2.legal(q) == w.legal(q)
        assert w2.generate(5, np.random.default_rng(0)) == w.generate(5, np.random.default_rng(0))
    with pytest.raises(WorldError, match="unknown"):
        StreetsWorld.from_spec({**w.spec(), "colour": 1})


def test_registry_and_args(tmp_path: Path) -> None:
    w = parse_world("streets:tiny")
    assert isinstance(w, StreetsWorld) and w.graph.num_nodes == 20
    assert "20 intersections" in w.describe()
    assert world_from_spec(w.spec()).tokens == w.tokens
    cfg = tmp_path / "city.toml"
    cfg.write_text('[city]\nrows = 3\ncols = 4\nseed = 2\n[traversal]\nkind = "shortest_paths"\nmax_directions = 20\n')
    w = parse_world(f"streets:{cfg}")
    assert w.graph.num_nodes == 12 and w.traversal.kind == "shortest_paths"  # type: ignore
    (tmp_path / "g.csv").write_text("node,direction,neighbor\na,N,b\nb,S,a\n")
    cfg.write_text('graph = "g.csv"\n[traversal]\nkind = "random_walks"\n')
    assert StreetsWorld.from_arg(str(cfg)).graph.num_nodes == 2
    assert StreetsWorld.from_arg(str(tmp_path / "g.csv")).graph.num_edges == 2
    for text, key in [
        ("[city]\nrowz = 3\n", "rowz"),
        ("[city]\n[traversal]\nkind2 = 1\n", "kind2"),
        ("colour = 1\n[city]\n", "colour"),
    ]:
        cfg.write_text(text)
        with pytest.raises(WorldError, match=key):
            StreetsWorld.from_arg(str(cfg))
    cfg.write_text('[city]\nrows = "many"\n')
    with pytest.raises(WorldError, match="rows"):
        StreetsWorld.from_arg(str(cfg))
    with pytest.raises(WorldError):
        StreetsWorld.from_arg("nonsense")


def test_manhattan_loads() -> None:
    if not MANHATTAN.exists():
        pytest.skip(f"Manhattan graph not found at {MANHATTAN} (the shared data folder)")
    g = StreetGraph.from_csv(MANHATTAN)
    assert (g.num_nodes, g.num_edges) == (4579, 9705)
    assert set(g.edge_lengths.tolist()) == {1.0}  # no lengths or coordinates in the file
    w = StreetsWorld(g)
    assert len(w.tokens) == 4579 + 9
    seqs = w.generate(20, np.random.default_rng(0))
    assert all(w.is_legal_sequence(s) for s in seqs)


def test_lengths_and_coordinates_from_csv(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text(
        "node,direction,neighbor,x_node,y_node,x_neighbor,y_neighbor\na,E,b,0,0,3,0\nb,N,c,3,0,3,4\nc,SW,a,3,4,0,0\n"
    )
    g = StreetGraph.from_csv(f)
    assert g.length("a", "E") == 3 and g.length("b", "N") == 4 and g.length("c", "SW") == 5
    f.write_text("node,direction,neighbor,length\na,E,b,2.5\nb,W,a,7\n")
    g = StreetGraph.from_csv(f)
    assert g.length("b", "W") == 7 and g.has_explicit_lengths
    out = tmp_path / "out.csv"
    g.to_csv(out)
    assert StreetGraph.from_csv(out) == g
    assert StreetGraph.from_dict(json.loads(json.dumps(g.to_dict()))) == g


@pytest.mark.parametrize(
    "text,match",
    [
        ("", "empty file"),
        ("node,direction,neighbor\n", "no streets"),
        ("node,dir,neighbor\na,N,b\n", r":1: missing column"),
        ("node,direction,neighbor,colour\na,N,b,red\n", r":1: unknown column"),
        ("node,direction,neighbor\na,N,b\nb,UP,a\n", r":3: unknown direction 'UP'"),
        (
            "node,direction,neighbor\na,N,b\nb,S,a\na,N,c\n",
            r":4: node 'a' already has a street "
            r"going N on line 2",
        ),
        ("node,direction,neighbor\na,N,b\nb,S\n", r":3: expected 3 fields"),
        ("node,direction,neighbor\na,N,E\n", r":2: node id 'E' clashes"),
        ("node,direction,neighbor,length\na,N,b,-1\n", r":2: length must be > 0"),
        ("node,direction,neighbor,length\na,N,b,far\n", r":2: column length"),
        ("node,direction,neighbor,x_node\na,N,b,0\n", r"x_node and y_node go together"),
        ("node,direction,neighbor,x_node,y_node\na,N,b,0,0\n", r"no coordinates"),
        ("node,direction,neighbor,x_node,y_node\na,N,b,0,0\nb,S,a,0,1\na,E,b,5,5\n", r":4: node 'a' placed at"),
    ],
)
def test_malformed_csv_errors_name_the_line(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(WorldError, match=match) as e:
        StreetGraph.from_csv(f)
    assert str(f) in str(e.value)


def test_duplicate_identical_rows_are_merged(tmp_path: Path) -> None:
    f = tmp_path / "g.csv"
    f.write_text("node,direction,neighbor\na,N,b\n\na,N,b\nb,S,a\n")
    assert StreetGraph.from_csv(f).num_edges == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.sampled_from(DIRECTIONS), st.integers(0, 6)), min_size=1, max_size=25))
def test_graph_invariants(raw: list[tuple[int, str, int]]) -> None:
    first: dict[tuple[str, str], str] = {}
    edges = []
    for u, d, v in raw:
        key = (f"n{u}", d)
        if first.setdefault(key, f"n{v}") == f"n{v}":
            edges.append((f"n{u}", d, f"n{v}"))
    g = StreetGraph(edges)
    assert g.num_edges == len(set(edges))
    assert StreetGraph.from_dict(json.loads(json.dumps(g.to_dict()))) == g
    for u, d, v in g.edges:
        assert g.neighbor(u, d) == v and (u, d) in g.in_edges(v)
    assert g.is_strongly_connected() == nx.is_strongly_connected(g.to_networkx())
    w = StreetsWorld(g)
    for u in g.nodes:
        assert w.legal(("at", u, g.nodes[0]))[: len(g.out_directions(u))] == g.out_directions(u)
