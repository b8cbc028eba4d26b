"""Navigation evaluations (Vafa et al. 2024 §3, Table 2, App. B) against oracles with known answers:
a shortest-path world model routes perfectly and survives any detours; map reconstruction adds
nothing for legal traversals and adds back exactly a removed street."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from interp.metrics.navigation import (
    DETOUR_KINDS,
    ShortestPathLM,
    decode_routes,
    detour_test,
    greedy_routes,
    pairs_from_sequences,
    reconstruct_map,
    sample_pairs,
    sample_routes,
)
from interp.models.lm import UniformLM, WorldLM
from interp.worlds.streets import DIRECTIONS, END, StreetGraph, StreetsWorld, TraversalConfig


class RankedLM(ShortestPathLM):
    """The hops oracle, but with a strict, state-independent ranking of the other turns
    (N > S > E > W > NE > NW > SE > SW below the planned one), so detour picks can be checked."""

    def _row(self, state):
        row = super()._row(state).clone()
        if isinstance(state, tuple) and state and state[0] == "at" and state[1] != state[2]:
            for rank, t in enumerate(DIRECTIONS):
                i = self.vocab.id(t)
                if not torch.isfinite(row[i]):
                    row[i] = -10.0 - rank
        return torch.log_softmax(torch.where(torch.isfinite(row), row, torch.tensor(-1e9)), dim=-1)


def _world(edges, max_directions, coords=None):
    return StreetsWorld(
        StreetGraph(edges, coords=coords),
        TraversalConfig(kind="random_walks", max_directions=max_directions, min_walk=1),
    )


@pytest.fixture(scope="module")
def pairs(tiny_city):
    return sample_pairs(tiny_city, 40, np.random.default_rng(0))


@pytest.fixture(scope="module")
def walks(tiny_city):
    return tiny_city.generate(150, np.random.default_rng(1))


# ---- greedy routes ---------------------------------------------------------------------------


def test_shortest_path_oracle_routes_are_valid_and_shortest(tiny_city, pairs):
    r = greedy_routes(ShortestPathLM(tiny_city), tiny_city, pairs)
    assert r.valid.mean == 1.0 and r.shortest.mean == 1.0 and r.shortest_given_valid.mean == 1.0
    assert r.valid.n == len(pairs) and len(r.routes) == len(pairs)
    df = r.per_route
    assert np.allclose(df["length"], df["shortest_length"]) and (df["failure"] == "").all()
    for route, (o, d) in zip(r.routes, pairs):
        assert route[:2] == [o, d] and route[-1] == END and tiny_city.is_legal_sequence(route)


def test_non_shortest_valid_route_is_valid_but_not_shortest():
    # a -E-> b -E-> c is 2 long; a -N-> x -SE-> c is the detour, made 10 long
    edges = [("a", "E", "b"), ("b", "E", "c"), ("a", "N", "x"), ("x", "SE", "c"), ("c", "W", "a")]
    lengths = {("a", "E"): 1.0, ("b", "E"): 1.0, ("a", "N"): 5.0, ("x", "SE"): 5.0, ("c", "W"): 1.0}
    g = StreetGraph(edges, lengths=lengths)
    w = StreetsWorld(g, TraversalConfig(max_directions=4, min_walk=1))

    class TakeNorth(ShortestPathLM):
        def _allowed(self, state):
            if state[0] == "at" and state[1] == "a":
                return ["N"]
            return super()._allowed(state)

    r = greedy_routes(TakeNorth(w), w, [("a", "c")])
    assert r.routes[0] == ["a", "c", "N", "SE", END]
    assert r.valid.mean == 1.0 and r.shortest.mean == 0.0
    assert r.per_route["length"].iloc[0] == 10.0 and r.per_route["shortest_length"].iloc[0] == 2.0


def test_uniform_and_uniform_oracle_greedy_routes_are_invalid(tiny_city, pairs):
    u = greedy_routes(UniformLM(tiny_city), tiny_city, pairs)
    assert u.valid.mean == 0.0  # argmax over ties is <pad>: not a turn
    assert u.failures() == {"not_a_turn": len(pairs)}
    assert all(len(r) == 3 for r in u.routes)  # a row stops at a token that cannot continue a route
    o = greedy_routes(WorldLM(tiny_city), tiny_city, pairs)  # legal argmax, but never `end`
    assert o.valid.mean < 0.5 and set(o.failures()) <= {"no_end"}
    assert all(len(r) == 2 + o.step_cap for r in o.routes if r[-1] != END)


def test_sampled_routes_are_seeded_and_legal_for_the_oracle(tiny_city, pairs):
    a = sample_routes(WorldLM(tiny_city), tiny_city, pairs, seed=3)
    b = sample_routes(WorldLM(tiny_city), tiny_city, pairs, seed=3)
    c = sample_routes(WorldLM(tiny_city), tiny_city, pairs, seed=4)
    assert a.routes == b.routes and a.routes != c.routes
    assert set(a.failures()) <= {"no_end"}  # the true model never emits an illegal token
    ended = [r for r in a.routes if r[-1] == END]
    assert ended and all(tiny_city.is_legal_sequence(r) for r in ended)


def test_bridge_lm_greedy_routes_equal_uncached_argmax(tmp_path, tiny_city, tiny_model_config, pairs):
    from interp.models import build_gpt2, load_checkpoint, save_checkpoint
    from interp.models.lm import BridgeLM

    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, tmp_path)
    lm = BridgeLM(load_checkpoint(tmp_path).bridge, tiny_city.vocab)
    r = greedy_routes(lm, tiny_city, pairs[:4], batch_size=3)  # two chunks, rows finish apart
    for route in r.routes:
        ref = list(route[:2])
        for _ in range(r.step_cap):
            tok = tiny_city.vocab.tokens[int(lm.logprobs([ref])[0].argmax())]
            ref.append(tok)
            if tok not in DIRECTIONS:
                break
        assert route == ref


# ---- detours -----------------------------------------------------------------------------------


def test_detours_with_p0_equal_plain_greedy(tiny_city, pairs):
    lm = WorldLM(tiny_city)
    plain = greedy_routes(lm, tiny_city, pairs)
    for kind in DETOUR_KINDS:
        assert decode_routes(lm, tiny_city, pairs, detour=kind, p=0.0, seed=5).routes == plain.routes
    res = detour_test(lm, tiny_city, pairs, probs=(0.0,), seed=5)
    assert all(run.routes == plain.routes for run in res.runs.values())
    assert (res.table["detours"] == 0).all() and list(res.table["kind"]) == list(DETOUR_KINDS)


def test_true_world_model_stays_valid_under_any_detours(tiny_city, pairs):
    res = detour_test(ShortestPathLM(tiny_city, "hops"), tiny_city, pairs, probs=(0.0, 0.1, 0.5, 0.75), seed=0)
    assert (res.table["valid"] == 1.0).all()
    high = res.table[res.table["p"] == 0.75]
    assert (high["detours"] > 0).all() and (high["blocked"] > 0).all()
    assert (res.table[res.table["p"] > 0]["shortest"] < 1.0).any()  # detours do take it off course
    wide = res.wide()
    assert list(wide.columns) == [0.0, 0.1, 0.5, 0.75] and "adversarial" in str(res)
    # the feasibility rule: every detour is legal, differs from the model's token, and keeps the
    # destination reachable within what is left of the cap
    g = tiny_city.graph
    for run in res.runs.values():
        ev = run.detour_events
        assert len(ev) == int(run.per_route["detours"].sum())
        for e in ev.itertuples():
            assert e.turn != e.model_token and g.neighbor(e.node, e.turn) is not None
            assert e.distance_after is not None and e.distance_after <= e.budget
            assert e.budget == tiny_city.max_directions - e.step - 1


def test_detour_picks_follow_the_model_ranking(tiny_city, pairs):
    lm = RankedLM(tiny_city, "hops")
    g = tiny_city.graph
    for kind in ("adversarial", "second"):
        run = decode_routes(lm, tiny_city, pairs, detour=kind, p=0.5, seed=1)
        assert run.valid.mean == 1.0 and len(run.detour_events)
        for e in run.detour_events.itertuples():
            options = [
                t
                for t in g.out_directions(e.node)
                if t != e.model_token and tiny_city.can_reach_within(g.neighbor(e.node, t), e.destination, e.budget)
            ]
            ranked = sorted(options, key=DIRECTIONS.index)  # the other turns, best first
            assert e.turn == (ranked[-1] if kind == "adversarial" else ranked[0])


def test_infeasible_detours_are_blocked_and_counted():
    # a -E-> b -E-> c, and a side loop a -N-> x -S-> a that costs two streets
    edges = [("a", "E", "b"), ("b", "E", "c"), ("a", "N", "x"), ("x", "S", "a"), ("c", "W", "b"), ("b", "W", "a")]
    tight = _world(edges, max_directions=2)
    r = decode_routes(ShortestPathLM(tight, "hops"), tight, [("a", "c")], detour="random", p=1.0)
    assert r.routes[0] == ["a", "c", "E", "E", END]  # the loop would not get back in time
    assert r.per_route["detours"].iloc[0] == 0 and r.per_route["blocked"].iloc[0] == 2
    roomy = _world(edges, max_directions=4)
    r = decode_routes(ShortestPathLM(roomy, "hops"), roomy, [("a", "c")], detour="random", p=1.0)
    assert r.routes[0] == ["a", "c", "N", "S", "E", "E", END] and r.valid.mean == 1.0
    assert r.per_route["detours"].iloc[0] == 1 and r.per_route["blocked"].iloc[0] == 3


def test_detours_replace_an_early_end_or_a_node_token_too():
    # as the reference's detour_analysis.py: whatever the model emits away from the destination is
    # replaced, not only a direction (a model that says `end` at once gets turned onto the map)
    edges = [("a", "E", "b"), ("b", "E", "c"), ("c", "W", "b"), ("b", "W", "a")]
    world = _world(edges, max_directions=4)

    class Says(UniformLM):
        def __init__(self, world, token):
            super().__init__(world)
            self._tokens = (token,)

    for token in (END, "b"):
        plain = decode_routes(Says(world, token), world, [("a", "c")])
        assert plain.valid.mean == 0.0 and plain.routes[0] == ["a", "c", token]
        r = decode_routes(Says(world, token), world, [("a", "c")], detour="random", p=1.0)
        assert r.routes[0][:4] == ["a", "c", "E", "E"] and list(r.detour_events.model_token[:2]) == [token, token]
        # at the destination the model's own token stands: `end` makes the route valid
        assert r.valid.mean == (1.0 if token == END else 0.0)


# ---- map reconstruction ------------------------------------------------------------------------


def test_legal_traversals_need_no_new_streets(tiny_city, walks):
    m = reconstruct_map(tiny_city.graph, walks)
    assert m.num_added == 0 and m.failed == 0 and m.skipped == 0
    assert m.sequences == len(walks) == m.valid
    assert m.used_true_edges > 0 and m.added_edges.empty


@pytest.mark.parametrize("bound", ["distance", "hops"])
def test_a_removed_street_is_added_back(tiny_city, walks, bound):
    g = tiny_city.graph
    used = {}
    for s in walks:
        node = s[0]
        for t in s[2:-1]:
            used[(node, t)] = used.get((node, t), 0) + 1
            node = g.neighbor(node, t)
    # the most used street out of a node with room for it under the degree bound
    u, t = max((k for k in used if len(g.out_directions(k[0])) <= 4), key=lambda k: (used[k], k))
    removed = (u, t, g.neighbor(u, t))
    missing = StreetGraph([e for e in g.edges if e != removed], nodes=g.nodes, coords=g.coords)
    m = reconstruct_map(missing, walks, max_distance=None if bound == "hops" else 804.672)
    assert m.edges() == [removed] and m.failed == 0
    row = m.added_edges.iloc[0]
    assert row["hops"] == 1 and row["uses"] == sum(1 for s in walks if _walks_street(g, s, u, t))
    assert m.reconstructed_graph() == StreetGraph(g.edges, nodes=g.nodes, coords=g.coords)


def _walks_street(g, seq, u, t):
    node = seq[0]
    for d in seq[2:-1]:
        if (node, d) == (u, t):
            return True
        node = g.neighbor(node, d)
    return False


def _corrupt(walks, frac, seed):
    rng = np.random.default_rng(seed)
    out = []
    for s in walks:
        s = list(s)
        if len(s) > 3 and rng.random() < frac:
            i = int(rng.integers(2, len(s) - 1))
            s[i] = str(rng.choice([d for d in DIRECTIONS if d != s[i]]))
        out.append(s)
    return out


@pytest.mark.parametrize("count_unused", [True, False])
def test_reconstruction_respects_degree_direction_and_distance(tiny_city, walks, count_unused):
    g = tiny_city.graph
    seqs = _corrupt(walks, 0.6, seed=0)
    m = reconstruct_map(g, seqs, max_degree=4, max_distance=600.0, count_unused=count_unused)
    assert m.num_added > 0 and 0 < m.failed < m.sequences
    keys = [(u, d) for u, d, _ in m.edges()]
    assert len(set(keys)) == len(keys)  # one street per direction per node ...
    assert all(g.neighbor(u, d) is None for u, d in keys)  # ... never on top of a true one
    assert all(u != v for u, _, v in m.edges()) and (m.added_edges["distance"] <= 600.0).all()
    deg = m.out_degrees()
    if count_unused:
        assert all(deg[u] <= 4 for u in m.added_edges["node"])
    else:
        assert max(deg.values()) <= 4
    # every explained sequence is a legal route on the reconstructed map
    rw = StreetsWorld(m.reconstructed_graph(), tiny_city.traversal)
    ok = m.per_sequence["status"].isin(["valid", "explained"]).to_numpy()
    assert all(rw.is_legal_sequence(s) for s, good in zip(seqs, ok) if good)
    assert sum(m.added_edges["uses"] > 0) == m.num_added
    assert set(m.reasons()) <= {"degree", "no_candidate", "wrong_destination"}


def test_hop_bound_failures_and_malformed_sequences():
    # a line a - b - c - d (two-way E/W) without coordinates
    edges = [("a", "E", "b"), ("b", "E", "c"), ("c", "E", "d"), ("b", "W", "a"), ("c", "W", "b"), ("d", "W", "c")]
    g = StreetGraph(edges)
    seqs = [
        ["a", "c", "N", END],  # needs a street a -N-> c: 2 hops, allowed with max_hops=2
        ["a", "d", "S", END],  # a -S-> d is 3 hops away: no candidate
        ["a", "b", "E", "E", END],  # every turn fits, but it ends at c
        ["a", "b", "E"],  # no `end`: malformed
        ["a", "b", "b", END],  # a node where a turn should be: malformed
        ["b", "d", "E", "E", END],  # legal
    ]
    m = reconstruct_map(g, seqs, max_hops=2)
    assert m.edges() == [("a", "N", "c")]
    assert list(m.per_sequence["status"]) == ["explained", "failed", "failed", "skipped", "skipped", "valid"]
    assert list(m.per_sequence["reason"]) == ["", "no_candidate", "wrong_destination", "no_end", "not_a_turn", ""]
    assert (m.failed, m.skipped, m.sequences, m.valid) == (2, 2, 4, 1)
    assert np.isnan(m.added_edges["distance"].iloc[0]) and m.added_edges["hops"].iloc[0] == 2


def test_a_failed_sequence_adds_nothing_and_full_nodes_take_no_street():
    edges = [("a", "E", "b"), ("b", "W", "a"), ("b", "E", "c"), ("c", "W", "b")]
    g = StreetGraph(edges)
    # a -N-> b would explain the first turn, but the walk then needs b -N-> c and a third street
    # that ends at a: with max_hops=1 the last step has no candidate, so nothing is kept
    m = reconstruct_map(g, [["a", "a", "N", "N", "N", END]], max_hops=1)
    assert m.failed == 1 and m.num_added == 0
    m = reconstruct_map(g, [["b", "a", "N", END]], max_degree=2)  # b already has E and W
    assert m.failed == 1 and m.reasons() == {"degree": 1}
    m = reconstruct_map(g, [["b", "a", "N", END]], max_degree=2, count_unused=False)
    assert m.edges() == [("b", "N", "a")]  # the authors' rule: unused true streets do not count


def test_best_candidate_explains_the_rest_of_the_route():
    # from a, "N" is missing; x and y are both 1 hop away, but only from y does the rest ("E")
    # lead to the destination z
    edges = [
        ("a", "E", "x"),
        ("a", "W", "y"),
        ("x", "W", "a"),
        ("y", "E", "a"),
        ("y", "N", "z"),
        ("x", "S", "q"),
        ("q", "N", "x"),
    ]
    g = StreetGraph(edges)
    m = reconstruct_map(g, [["a", "z", "N", "N", END]], max_hops=1)
    assert m.edges() == [("a", "N", "y")] and m.failed == 0


# ---- figures and CLI ---------------------------------------------------------------------------


def test_map_and_route_pngs(tmp_path, tiny_city, walks):
    from interp.viz import draw_map, draw_reconstruction, draw_route

    m = reconstruct_map(tiny_city.graph, _corrupt(walks[:60], 0.5, seed=2))
    assert m.num_added > 0
    for path in (
        draw_reconstruction(m, tmp_path / "map.png"),
        draw_route(tiny_city.graph, walks[0], tmp_path / "route.png"),
        draw_map(StreetGraph([("a", "E", "b"), ("b", "W", "a")]), tmp_path / "nocoords.png", added=[("a", "N", "b")]),
    ):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_cli_navigate(tmp_path):
    from test_cli import _cli

    out = _cli(
        "navigate",
        "--model",
        "oracle",
        "--world",
        "streets:tiny",
        "--pairs",
        "8",
        "--detours",
        "random,second",
        "--p",
        "0,0.5",
        "--reconstruct",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    import json

    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["routes"]["routes"] == 8 and len(summary["detours"]) == 4 and "map" in summary
    for name in ("routes.csv", "detours.csv", "map_added_edges.csv", "map.png", "navigate.json"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "detours.csv")) == 4
    bad = _cli("navigate", "--model", "oracle", "--world", "streets:tiny", "--p", "x")
    assert bad.returncode == 2 and "--p" in bad.stderr


def test_cli_navigate_route_oracle_is_the_reference():
    import json

    from test_cli import _cli

    out = _cli("navigate", "--model", "route-oracle", "--world", "streets:tiny", "--pairs", "20", "--json")
    assert out.returncode == 0, out.stderr
    routes = json.loads(out.stdout.strip().splitlines()[-1])["routes"]
    assert routes["routes"] == 20 and routes["valid"] == 1.0 and routes["shortest"] == 1.0
    bad = _cli("navigate", "--model", "route-oracle", "--pairs", "2")
    assert bad.returncode == 2 and "--world" in bad.stderr


def test_pairs_helpers(tiny_city, walks):
    pairs = pairs_from_sequences(walks + walks)
    assert len(pairs) == len(set(pairs)) == len({tuple(s[:2]) for s in walks})
    drawn = sample_pairs(tiny_city, 30, np.random.default_rng(0))
    assert all(o != d and tiny_city.can_reach_within(o, d, tiny_city.max_directions) for o, d in drawn)


def test_end_at_destination_by_hand(tiny_city):
    from interp.metrics.navigation import end_at_destination

    seqs = tiny_city.generate(60, np.random.default_rng(7))
    r = end_at_destination(WorldLM(tiny_city), tiny_city, seqs)
    # the uniform world model gives `end` 1/|legal| at every destination visit, and its argmax
    # (the first legal token in vocabulary order, a direction) is never `end`
    visits = [
        1 / len(tiny_city.legal(q)) for s in seqs for q in tiny_city.states_along(s) if q[0] == "at" and q[1] == q[2]
    ]
    assert r["visits"] == len(visits) and r["p_end"] == pytest.approx(np.mean(visits), rel=1e-5)
    assert r["argmax_end"] == 0.0 and r["p_end_se"] > 0
