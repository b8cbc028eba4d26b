"""The ideal predictor (``IdealLM``): the exact next-token distribution of the traversal process
behind a streets world's data, checked against a hand-worked walk and against the empirical
frequencies of many sampled walks (calibration z-scores), for random walks and shortest paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from interp.models.lm import IdealLM
from interp.worlds.base import WorldError
from interp.worlds.dfa import DFAWorld
from interp.worlds.streets import DIRECTIONS, StreetGraph, StreetsWorld, TraversalConfig


def _probs(lm, prefix):
    lp = lm.logprobs([prefix])[0]
    return {lm.vocab.tokens[i]: float(p) for i, p in enumerate(lp.exp()) if p > 0}


def test_hand_worked_walk():
    # a —E→ b, a —N→ c, b —W→ a, c —S→ a; walks of L ∈ {1, 2, 3} steps (uniform)
    g = StreetGraph([("a", "E", "b"), ("a", "N", "c"), ("b", "W", "a"), ("c", "S", "a")])
    world = StreetsWorld(g, TraversalConfig(kind="random_walks", min_walk=1, max_directions=3))
    lm = IdealLM(world)
    assert _probs(lm, []) == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    # from b: L=1 → a; L=2 → b→a→{b,c}; L=3 → b→a→x→a: P(a) = 1/3 + 1/3, P(b) = P(c) = 1/6
    assert _probs(lm, ["b"]) == pytest.approx({"a": 2 / 3, "b": 1 / 6, "c": 1 / 6})
    # after "b a W" at a with t = 1: A_1(a) = 1/3 + 1/3 = 2/3, P(end) = (1/3)/(2/3);
    # each turn: A_2(x)/(2 · A_1(a)) with A_2(b) = A_2(c) = 1/3
    assert _probs(lm, ["b", "a", "W"]) == pytest.approx({"end": 0.5, "E": 0.25, "N": 0.25})
    assert _probs(lm, ["b", "a", "W", "E"]) == pytest.approx({"W": 1.0})  # must come back
    assert _probs(lm, ["b", "a", "W", "E", "W"]) == pytest.approx({"end": 1.0})  # L = 3 is the cap
    assert _probs(lm, ["b", "a", "W", "end"]) == {}  # nothing after end
    assert lm.fallbacks == 0


def _calibration(world, n, seed, lm):
    """z-scores of Σ(1[next = a] − P(a | prefix)) over every visited prefix, per (token, kind of
    position): a correct P gives N(0, 1) values; a wrong one grows like √n."""
    seqs = world.generate(n, np.random.default_rng(seed))
    sums: dict = {}
    process = lm.process
    for s in seqs:
        state = process.initial()
        for tok in s:
            dist = process.distribution(state)
            t = state[3] if len(state) >= 4 else -1
            at_dest = len(state) >= 4 and state[1] == state[2]
            for a, p in dist.items():
                if a in world.graph.nodes:
                    continue  # origin/destination tokens: checked separately
                key = (a, min(t, 6), at_dest)
                acc = sums.setdefault(key, [0.0, 0.0, 0])
                acc[0] += (tok == a) - p
                acc[1] += p * (1 - p)
                acc[2] += 1
            state = process.step(state, tok)
    return {k: v[0] / math.sqrt(v[1]) for k, v in sums.items() if v[1] > 5}


def test_random_walk_probabilities_match_sampled_frequencies(tiny_city):
    lm = IdealLM(tiny_city)
    z = _calibration(tiny_city, 4000, 0, lm)
    assert len(z) > 30 and max(abs(v) for v in z.values()) < 4.5, sorted(z.items(), key=lambda kv: -abs(kv[1]))[:5]
    assert lm.fallbacks == 0
    # P(end | at the destination) against its frequency; the world model (uniform over the legal
    # tokens) is far off: it is the world's ceiling, not the data's
    seqs = tiny_city.generate(2000, np.random.default_rng(1))
    p_end_ideal, p_end_world, hits = [], [], 0
    for s in seqs:
        state, q = lm.process.initial(), tiny_city.start()
        for tok in s:
            if q[0] == "at" and q[1] == q[2]:
                p_end_ideal.append(lm.process.distribution(state).get("end", 0.0))
                p_end_world.append(1 / len(tiny_city.legal(q)))  # WorldLM: uniform over legal tokens
                hits += tok == "end"
            state, q = lm.process.step(state, tok), tiny_city.step(q, tok)
    freq = hits / len(p_end_ideal)
    se = math.sqrt(freq * (1 - freq) / len(p_end_ideal))
    assert abs(np.mean(p_end_ideal) - freq) < 4 * se
    assert abs(np.mean(p_end_world) - freq) > 10 * se


def test_origin_and_destination_frequencies(tiny_city):
    lm = IdealLM(tiny_city)
    seqs = tiny_city.generate(6000, np.random.default_rng(2))
    counts: dict = {}
    for s in seqs:
        counts.setdefault(s[0], []).append(s[1])
    worst = 0.0
    for o, dests in counts.items():
        p = _probs(lm, [o])
        assert sum(p.values()) == pytest.approx(1.0, abs=1e-5)
        for d, q in p.items():
            f = dests.count(d) / len(dests)
            worst = max(worst, abs(f - q) / math.sqrt(max(q * (1 - q), 1e-9) / len(dests)))
    assert worst < 4.5


def test_shortest_paths_is_the_routing_oracle(tiny_city):
    world = StreetsWorld(tiny_city.graph, TraversalConfig(kind="shortest_paths", max_directions=12))
    lm = IdealLM(world)
    for s in world.generate(50, np.random.default_rng(3)):
        lp = lm.start([s[:i] for i in range(2, len(s))]).logprobs
        # every step of a generated route has probability 1 under the ideal predictor
        ids = torch.tensor([world.vocab.id(t) for t in s[2:]])
        assert torch.allclose(lp.gather(1, ids[:, None]).exp(), torch.ones(len(ids), 1))
    o = world.graph.nodes[0]
    p = _probs(lm, [o])
    assert o not in p and sum(p.values()) == pytest.approx(1.0, abs=1e-5)
    assert lm.fallbacks == 0
    # off the route: the route from where the walker stands
    s = world.generate(1, np.random.default_rng(4))[0]
    off = [t for t in world.legal(world.run(s[:2])) if t != s[2]]
    if off:
        probs = _probs(lm, [*s[:2], off[0]])
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5) and lm.fallbacks == 1


def test_illegal_prefix_accepts_nothing_and_other_worlds_are_refused(tiny_city):
    lm = IdealLM(tiny_city)
    s = tiny_city.generate(1, np.random.default_rng(5))[0]
    bad = next(d for d in DIRECTIONS if d not in tiny_city.legal(tiny_city.run(s[:2])))
    row = lm.logprobs([[*s[:2], bad]])[0]
    assert torch.isneginf(row).all()  # a prefix the world refuses: the ideal predictor accepts nothing
    with pytest.raises(WorldError, match="no traversal process"):
        IdealLM(DFAWorld.from_dict({"alphabet": ["a"], "start": "q", "transitions": {"q": {"a": "q"}}}))
