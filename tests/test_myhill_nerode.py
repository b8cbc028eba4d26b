"""Myhill–Nerode metrics (Vafa et al. 2024, Def. 2.4–2.6): acceptance rules, hand-computed
boundaries, the oracle / uniform reference points, the batched exact estimator against a
brute-force reference on a real (tiny) transformer, skip accounting, and the CLI contract."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

from interp.metrics.acceptance import Epsilon, TopK, TopP, rule_from_args
from interp.metrics.mn_boundary import PairJob, evaluate_pairs
from interp.metrics.myhill_nerode import myhill_nerode, pair_boundaries
from interp.metrics.states import reachable_states, sample_states
from interp.models.lm import DFALM, BridgeLM, UniformLM, WorldLM
from interp.worlds import WorldError, parse_world
from interp.worlds.dfa import DFAWorld
from interp.worlds.streets.graph import DIRECTIONS

# ---- acceptance rules on hand-made distributions ----------------------------------------------------


def _lp(*rows):
    return torch.tensor(rows, dtype=torch.float32).log()


def test_epsilon_is_strict_and_never_accepts_zero():
    lp = _lp([0.5, 0.3, 0.19, 0.01, 0.0])
    assert Epsilon(0.01).accept(lp).tolist() == [[True, True, True, False, False]]
    assert Epsilon(0.0).accept(lp).tolist() == [[True, True, True, True, False]]
    assert Epsilon(0.3).accept(lp).tolist() == [[True, False, False, False, False]]


def test_top_k_includes_ties_at_the_kth_place():
    lp = _lp([0.4, 0.2, 0.2, 0.2, 0.0])
    assert TopK(1).accept(lp).tolist() == [[True, False, False, False, False]]
    assert TopK(2).accept(lp).tolist() == [[True, True, True, True, False]]  # three tied at 2nd
    assert TopK(10).accept(lp).tolist() == [[True, True, True, True, False]]  # zero never


def test_top_p_is_the_smallest_set_exceeding_p():
    lp = _lp([0.5, 0.375, 0.125, 0.0], [0.25, 0.5, 0.25, 0.0])
    assert TopP(0.4).accept(lp).tolist() == [[True, False, False, False], [False, True, False, False]]
    # {0.5} has mass 0.5, which does not exceed 0.5: the next token is needed (ties: both 0.25s)
    assert TopP(0.5).accept(lp).tolist() == [[True, True, False, False], [True, True, True, False]]
    assert TopP(0.875).accept(lp).tolist() == [[True, True, True, False], [True, True, True, False]]
    assert TopP(1.0).accept(lp).tolist() == [[True, True, True, False], [True, True, True, False]]


def test_a_row_of_minus_inf_accepts_nothing_and_rules_validate():
    dead = torch.full((1, 4), -math.inf)
    for rule in (Epsilon(0.0), TopK(3), TopP(1.0)):
        assert not rule.accept(dead).any()
    with pytest.raises(ValueError):
        Epsilon(1.5)
    with pytest.raises(ValueError):
        TopK(0)
    with pytest.raises(ValueError):
        TopP(0.0)
    with pytest.raises(ValueError, match="at most one"):
        rule_from_args(epsilon=0.1, top_k=2)
    assert rule_from_args() == Epsilon(0.01) and rule_from_args(top_p=0.9) == TopP(0.9)


# ---- a DFA and a DFA-induced model, boundaries by hand ---------------------------------------------
#
# World W: "at most three a's in a row", plus c allowed only in state 0.
#     0: a→1 b→0 c→0      legal L0 = {a, b, c}
#     1: a→2 b→0          L1 = {a, b}
#     2: a→3 b→0          L2 = {a, b}
#     3:     b→0          L3 = {b}
# Model M = W + one extra transition 1: c→1, so after any prefix reaching 1 the model also allows c
# (L1' = {a, b, c}). M only adds a transition on a token W refuses there, so every world-legal
# prefix reaches the same state in M as in W: the outcome of a pair depends on its states alone.
# Every state accepts (prefix-closed); b always leads both sides to 0, so nothing below b differs.
#
# True boundaries MNB^W(q1,q2), depth 2 (length 1: L(q1)\L(q2); length 2: below the interior a):
#   (0,1) {c}   (0,2) {c, aa}   (0,3) {a, c}   (1,2) {aa}   (1,3) {a}   (2,3) {a}
#   (1,0) (2,0) (2,1) (3,0) (3,1) (3,2): empty  → recall undefined for these six.
# Model boundaries MNB^m(q1,q2) with L1' (✓ = in L^W(q1)\L^W(q2)):
#   (0,1) {ac ✗}            precision 0     recall: c ∈ L^m(1) too → 0/1
#   (0,2) {c ✓, aa ✓, ac ✗} precision 2/3   recall: c ✓, aa ✓     → 2/2
#   (0,3) {a ✓, c ✓}        precision 1     recall 2/2
#   (1,2) {c ✗, aa ✓}       precision 1/2   recall 1/1
#   (1,3) {a ✓, c ✗}        precision 1/2   recall 1/1
#   (2,3) {a ✓}             precision 1     recall 1/1
#   the six reversed pairs: empty model boundary → precision 1
# Distinction precision = (0 + 2/3 + 1 + 1/2 + 1/2 + 1 + 6·1) / 12 = 29/36; recall = 5/6.
# Compression: q1 = q2 and M reaches q from both prefixes → empty model boundary → 1.

WORLD = {
    "alphabet": ["a", "b", "c"],
    "start": "0",
    "transitions": {
        "0": {"a": "1", "b": "0", "c": "0"},
        "1": {"a": "2", "b": "0"},
        "2": {"a": "3", "b": "0"},
        "3": {"b": "0"},
    },
}
MODEL = {**WORLD, "transitions": {**WORLD["transitions"], "1": {"a": "2", "b": "0", "c": "1"}}}


@pytest.fixture(scope="module")
def dfa_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dfa")
    (folder / "world.json").write_text(json.dumps(WORLD))
    (folder / "model.json").write_text(json.dumps(MODEL))
    return folder / "world.json", folder / "model.json"


@pytest.fixture(scope="module")
def dfa_world(dfa_files):
    return parse_world(f"dfa:{dfa_files[0]}")


@pytest.fixture(scope="module")
def dfa_model(dfa_files, dfa_world):
    return DFALM(parse_world(f"dfa:{dfa_files[1]}"), dfa_world)


def _sets(o):
    return ({"".join(s): ok for s, ok in o.model_set.items()}, {"".join(s): ok for s, ok in o.true_set.items()})


@pytest.mark.parametrize(
    "s1, s2, model, true",
    [
        ("", "a", {"ac": False}, {"c": False}),
        ("", "aa", {"c": True, "aa": True, "ac": False}, {"c": True, "aa": True}),
        ("b", "aaa", {"a": True, "c": True}, {"a": True, "c": True}),
        ("a", "baa", {"c": False, "aa": True}, {"aa": True}),
        ("ba", "aaa", {"a": True, "c": False}, {"a": True}),
        ("aaa", "a", {}, {}),
    ],
)
def test_boundaries_by_hand(dfa_world, dfa_model, s1, s2, model, true):
    o = pair_boundaries(dfa_world, dfa_model, list(s1), list(s2), depth=2)
    assert _sets(o) == (model, true)


@pytest.mark.parametrize("estimator", ["exact", "sampled"])
def test_dfa_model_scores_by_hand_over_all_pairs(dfa_world, dfa_model, estimator):
    r = myhill_nerode(dfa_world, dfa_model, depth=2, pairs="all", estimator=estimator, continuations="depth")
    s = r.summary()
    # sampled, continuations cut at 2 tokens: 30 of them find every cut-off of this small model
    # (checked by hand against the exact sets below), so both estimators land on the hand values
    assert s["compression_precision"] == 1.0 and s["compression_states"] == 4
    assert s["distinction_precision"] == pytest.approx(29 / 36)
    assert s["distinction_recall"] == pytest.approx(5 / 6)
    assert s["distinction_state_pairs"] == 12 and s["recall_state_pairs"] == 6
    assert s["recall_undefined"] == 6 and s["pairs_skipped_total"] == 0
    df = r.per_pair[r.per_pair.metric == "distinction"]
    by_states = {(a.strip("'"), b.strip("'")): p for a, b, p in zip(df.state1, df.state2, df.precision)}
    assert by_states[("0", "1")] == 0.0 and by_states[("0", "2")] == pytest.approx(2 / 3)
    assert by_states[("1", "2")] == 0.5 and by_states[("1", "3")] == 0.5


def test_sampled_cutoffs_are_model_boundary_elements(dfa_world, dfa_model):
    for s1, s2 in [("", "aa"), ("a", "baa"), ("b", "aaa")]:
        exact = pair_boundaries(dfa_world, dfa_model, list(s1), list(s2), depth=3)
        sampled = pair_boundaries(
            dfa_world,
            dfa_model,
            list(s1),
            list(s2),
            depth=3,
            estimator="sampled",
            samples=5,
            seed=1,
            continuations="depth",
        )
        assert set(sampled.model_set) <= set(exact.model_set)
        assert all(exact.model_set[x] == ok for x, ok in sampled.model_set.items())
        assert sampled.true_set == exact.true_set  # recall: the same exhaustive true boundary


# ---- the reference code's rules, each on a DFA where the earlier rule gives another value ------------
#
# A world that accepts every a/b string after its first token, and a model that remembers the first
# token: after "x" it allows a and b forever; after "y" it refuses b from the 7th token on. The two
# prefixes reach the same world state, so the compression pair's true boundary is empty, and the
# model's boundary is {w·b : |w| = 6}: deeper than 5 tokens.
DEEP_WORLD = {
    "alphabet": ["x", "y", "a", "b"],
    "start": "s",
    "transitions": {"s": {"x": "q", "y": "q"}, "q": {"a": "q", "b": "q"}},
}
DEEP_MODEL = {
    "alphabet": ["x", "y", "a", "b"],
    "start": "s",
    "transitions": {
        "s": {"x": "X", "y": "Y0"},
        "X": {"a": "X", "b": "X"},
        **{f"Y{i}": {"a": f"Y{i + 1}", "b": f"Y{i + 1}"} for i in range(6)},
        "Y6": {"a": "Y6"},
    },
}


def _compression_pair(world, lm, prefix1, prefix2, **kw):
    q = world.run(prefix1)
    assert world.run(prefix2) == q
    job = PairJob(tuple(prefix1), tuple(prefix2), q, q, recall=False)
    return evaluate_pairs(world, lm, [job], Epsilon(0.01), **kw)[0]


def test_sampled_continuations_run_to_the_cap_not_to_depth():
    world = DFAWorld.from_dict(DEEP_WORLD)
    lm = DFALM(DFAWorld.from_dict(DEEP_MODEL), world)
    deep = _compression_pair(world, lm, ["x"], ["y"], depth=5, estimator="sampled", seed=0)
    cut = _compression_pair(world, lm, ["x"], ["y"], depth=5, estimator="sampled", seed=0, continuations="depth")
    assert cut.precision == 1.0 and cut.cutoffs == 0 and cut.capped == 30  # blind below 5 tokens
    # 30 continuations of up to 128 - 1 tokens: each meets a "b" from its 7th token on (a miss has
    # probability 2^-121 per continuation), and every cut-off is 7 tokens long
    assert deep.precision == 0.0 and deep.cutoffs == 30 and deep.model_boundary >= 1
    exact7 = _compression_pair(world, lm, ["x"], ["y"], depth=7, exhaustive=True)
    exact5 = _compression_pair(world, lm, ["x"], ["y"], depth=5, exhaustive=True)
    assert exact5.model_boundary == 0 and exact7.model_boundary == 2**6
    short = _compression_pair(world, lm, ["x"], ["y"], depth=5, estimator="sampled", max_length=6)
    assert short.cutoffs == 0 and short.capped == 30  # <bos> x + 5 tokens: the cap is the limit


# The same world with an end token "e" (nothing is legal after it); the model, after "x", still
# allows "a" after "e" (an untrained output there), after "y" it allows nothing after "e".
END_WORLD = {
    "alphabet": ["x", "y", "a", "e"],
    "start": "s",
    "end": "e",
    "transitions": {"s": {"x": "q", "y": "q"}, "q": {"a": "q", "e": "E"}},
}
END_MODEL = {
    "alphabet": ["x", "y", "a", "e"],
    "start": "s",
    "transitions": {
        "s": {"x": "X", "y": "Y"},
        "X": {"a": "X", "e": "XE"},
        "XE": {"a": "XE"},
        "Y": {"a": "Y", "e": "YE"},
    },
}


@pytest.mark.parametrize("estimator", ["exact", "sampled"])
def test_nothing_after_the_end_token_is_scored(estimator):
    world = DFAWorld.from_dict(END_WORLD)
    lm = DFALM(DFAWorld.from_dict(END_MODEL), world)
    o = _compression_pair(world, lm, ["x"], ["y"], depth=3, estimator=estimator, exhaustive=True, keep_boundaries=True)
    assert o.model_boundary == 0 and o.precision == 1.0
    if estimator == "sampled":
        assert o.ended == 30 and o.cutoffs == 0  # every continuation stops at its "e"
    # without the end token the suffix "e a" is a (wrong) model-boundary element
    blind = DFAWorld.from_dict({k: v for k, v in END_WORLD.items() if k != "end"})
    o = _compression_pair(
        blind,
        DFALM(DFAWorld.from_dict(END_MODEL), blind),
        ["x"],
        ["y"],
        depth=3,
        estimator=estimator,
        exhaustive=True,
        keep_boundaries=True,
    )
    assert o.precision == 0.0 and any(x[-2:] == ("e", "a") and not ok for x, ok in o.model_set.items())


class _ParityLM(WorldLM):
    """The true world model, except that after an odd number of directions it also allows ``end``
    everywhere: a model whose boundary between two prefixes of one state is non-empty exactly
    when their lengths differ in parity."""

    def _initial(self):
        return (self.world.start(), 0)

    def _step(self, state, token):
        q, n = state
        return (self.world.step(q, token), n + (token in DIRECTIONS))

    def _allowed(self, state):
        q, n = state
        legal = self.world.legal(q)
        return (*legal, "end") if n % 2 and q[0] == "at" and "end" not in legal else legal


def test_both_prefixes_of_a_pair_share_one_length(tiny_city):
    lm = _ParityLM(tiny_city)
    kw = dict(depth=2, pairs=40, metrics=("compression",), seed=0)
    shared = myhill_nerode(tiny_city, lm, **kw)
    independent = myhill_nerode(tiny_city, lm, prefix_lengths="independent", **kw)
    ok = shared.per_pair[shared.per_pair.status == "ok"]
    assert len(ok) >= 30
    assert (ok.prefix1.str.split().str.len() == ok.prefix2.str.split().str.len()).all()
    assert shared.summary()["compression_precision"] == 1.0
    assert independent.summary()["compression_precision"] < 0.8


def test_states_stand_away_from_their_destination(tiny_city):
    rng = np.random.default_rng(0)
    states = [tiny_city.sample_state(rng) for _ in range(3000)]
    assert all(q[1] != q[2] for q in states)  # the reference's states are distinct (origin, destination) pairs
    assert len(set(states)) > 300  # and otherwise spread over the 20 × 19 pairs


def test_general_definition_uses_accepting_states():
    # accept = {P, R}: from Q, "a" lands in R (accepting); from P it lands in Q (not accepting), so
    # "a" ∈ L(Q) \ L(P) although it is legal from both; "aa" from P is not a boundary element
    # because its proper prefix "a" is not in the interior L(P) ∩ L(R) (Def. 2.4 taken literally).
    w = DFAWorld.from_dict(
        {
            "alphabet": ["a", "b"],
            "start": "P",
            "accept": ["P", "R"],
            "transitions": {"P": {"a": "Q", "b": "P"}, "Q": {"a": "R", "b": "P"}, "R": {"b": "P"}},
        }
    )
    lm = WorldLM(w)
    assert pair_boundaries(w, lm, ["a"], [], depth=3).true_set == {("a",): False}
    assert pair_boundaries(w, lm, [], ["a", "a"], depth=3).true_set == {}


# ---- reference points: the oracle and the uniform model ---------------------------------------------


@pytest.mark.parametrize("estimator", ["exact", "sampled"])
@pytest.mark.parametrize("world_arg, pairs, depth", [("DFA", "all", 5), ("connect4:n=2", 12, 4), ("TINY", 25, 5)])
def test_oracle_scores_one(world_arg, pairs, depth, estimator, dfa_world, tiny_city):
    world = {"DFA": dfa_world, "TINY": tiny_city}.get(world_arg) or parse_world(world_arg)
    s = myhill_nerode(world, WorldLM(world), depth=depth, pairs=pairs, estimator=estimator, seed=3).summary()
    assert (s["compression_precision"], s["distinction_precision"], s["distinction_recall"]) == (1.0, 1.0, 1.0)
    assert s["distinction_pairs_used"] > 0 and s["recall_state_pairs"] > 0
    assert set(s["pairs_skipped"]["distinction"]) == set()  # only compression may skip (one prefix)


@pytest.mark.parametrize("estimator", ["exact", "sampled"])
def test_uniform_model_has_no_boundary_and_zero_recall(estimator):
    world = parse_world("connect4:n=2")
    s = myhill_nerode(world, UniformLM(world), depth=4, pairs=12, estimator=estimator).summary()
    assert (s["compression_precision"], s["distinction_precision"], s["distinction_recall"]) == (1.0, 1.0, 0.0)
    assert s["recall_state_pairs"] > 0


# ---- the batched exact estimator vs brute force on a transformer --------------------------------------


@pytest.fixture(scope="module")
def bridge_lm(tmp_path_factory, tiny_city, tiny_model_config):
    from interp.models import build_gpt2, load_checkpoint, save_checkpoint

    path = tmp_path_factory.mktemp("ckpt")
    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    with torch.no_grad():  # sharpen the random model so that acceptance is selective
        model.transformer.wte.weight.mul_(4.0)
    save_checkpoint(model, tiny_city, path)
    return BridgeLM(load_checkpoint(path).bridge, tiny_city.vocab)


def _brute_force(world, lm, rule, s1, s2, depth):
    """Both boundaries by recursion, one plain full forward of the bridge per (prefix, node): no
    cursors, no cache, no padding (memoised per prefix). Nothing below the world's end token."""
    from interp.worlds.encoding import encode_sequences

    seen = {}

    def acc(prefix):
        key = tuple(prefix)
        if key not in seen:
            with torch.no_grad():
                logits = lm.bridge(encode_sequences([prefix], lm.vocab))[:, -1]
            seen[key] = rule.accept(torch.log_softmax(logits.float(), dim=-1))[0]
        return seen[key]

    def state(q, path):
        try:
            return world.run(path, q)
        except WorldError:
            return None

    q1, q2 = world.run(s1), world.run(s2)
    tokens = lm.vocab.tokens
    model, true = {}, {}

    def legal(q, path):
        r = state(q, path)
        return r is not None and world.accepts(r)

    def walk(y):  # y is in the model interior and/or the true interior
        in_m = all(acc(s1 + y[:i])[lm.vocab.id(y[i])] for i in range(len(y))) and all(
            acc(s2 + y[:i])[lm.vocab.id(y[i])] for i in range(len(y))
        )
        in_t = all(legal(q1, y[: i + 1]) and legal(q2, y[: i + 1]) for i in range(len(y)))
        a1, a2 = acc(s1 + y), acc(s2 + y)
        for tid, tok in enumerate(tokens):
            x = y + [tok]
            if in_m and a1[tid] and not a2[tid]:
                model[tuple(x)] = legal(q1, x) and not legal(q2, x)
            if in_t and legal(q1, x) and not legal(q2, x):
                m1 = all(acc(s1 + x[:i])[lm.vocab.id(x[i])] for i in range(len(x)))
                m2 = all(acc(s2 + x[:i])[lm.vocab.id(x[i])] for i in range(len(x)))
                true[tuple(x)] = m1 and not m2
            if tok == getattr(world, "end_token", None):
                continue
            if len(x) < depth and ((in_m and a1[tid] and a2[tid]) or (in_t and legal(q1, x) and legal(q2, x))):
                walk(x)

    walk([])
    return model, true


@pytest.mark.parametrize("rule", [TopK(3), Epsilon(0.03), TopP(0.4)])
def test_exact_estimator_equals_brute_force_on_a_transformer(bridge_lm, tiny_city, rule):
    rng = np.random.default_rng(0)
    states = sample_states(tiny_city, 6, rng)
    pairs = [
        (tiny_city.sample_prefix(states[i], rng), tiny_city.sample_prefix(states[i + 1], rng)) for i in range(0, 6, 2)
    ]
    pairs.append((pairs[0][0], tiny_city.sample_prefix(states[0], rng)))  # a compression-style pair
    jobs = [PairJob(tuple(a), tuple(b), tiny_city.run(a), tiny_city.run(b)) for a, b in pairs]
    # max_rows=7: small groups of pairs
    batched = evaluate_pairs(tiny_city, bridge_lm, jobs, rule, depth=3, keep_boundaries=True, max_rows=7)
    found_model = found_true = 0
    for (a, b), o in zip(pairs, batched):
        model, true = _brute_force(tiny_city, bridge_lm, rule, list(a), list(b), 3)
        assert o.model_set == model and o.true_set == true
        found_model += len(model)
        found_true += len(true)
    assert found_model > 0 and found_true > 0  # the comparison is not vacuous


@pytest.fixture(scope="module")
def trained_like(tmp_path_factory, tiny_city, tiny_model_config):
    """A GPT-2 trained for a few hundred steps on the tiny city's random walks: like the trained
    models of the benchmarks, it gives more than ε to several continuations after a prefix, legal
    and illegal ones, so the model interior is wide, mostly off the world's paths, and both
    boundaries hold right and wrong elements."""
    import torch.nn.functional as F

    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds.encoding import encode_sequences

    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    ids = encode_sequences(tiny_city.generate(512, np.random.default_rng(0)), tiny_city.vocab)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        batch = ids[torch.randint(len(ids), (32,), generator=gen)]
        targets = batch[:, 1:].masked_fill(batch[:, 1:] == tiny_city.vocab.pad_id, -100)
        logits = model(batch[:, :-1], attention_mask=(batch[:, :-1] != tiny_city.vocab.pad_id).long()).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path_factory.mktemp("trained_like")
    save_checkpoint(model.eval(), tiny_city, path)
    from interp.models import load_checkpoint

    rng = np.random.default_rng(0)
    states = sample_states(tiny_city, 8, rng)
    pairs = [
        (tiny_city.sample_prefix(states[i], rng), tiny_city.sample_prefix(states[i + 1], rng)) for i in range(0, 8, 2)
    ]
    lm = BridgeLM(load_checkpoint(path).bridge, tiny_city.vocab)
    return path, pairs, [_brute_force(tiny_city, lm, Epsilon(0.01), list(a), list(b), 4) for a, b in pairs]


@pytest.mark.parametrize("batch_size, slots, max_rows", [(1024, None, None), (16, None, 30), (7, 3, 12)])
def test_exact_estimator_equals_brute_force_on_a_trained_like_model(
    trained_like, tiny_city, batch_size, slots, max_rows
):
    """The packed, grouped engine (levels split into forwards of ``batch_size`` tokens, bins of
    ``slots`` queries, groups of ``max_rows`` rows) finds exactly the brute-force boundaries, to
    depth 4, on a model whose interior is wide; the plain run (no sets kept) counts the same."""
    from interp.models import load_checkpoint

    path, pairs, reference = trained_like
    lm = BridgeLM(load_checkpoint(path).bridge, tiny_city.vocab, batch_size=batch_size, slots=slots)
    jobs = [PairJob(tuple(a), tuple(b), tiny_city.run(a), tiny_city.run(b)) for a, b in pairs]
    rule = Epsilon(0.01)
    kept = evaluate_pairs(tiny_city, lm, jobs, rule, depth=4, keep_boundaries=True, max_rows=max_rows)
    plain = evaluate_pairs(tiny_city, lm, jobs, rule, depth=4, max_rows=max_rows)
    right = wrong = true_found = 0
    for (model, true), o, p in zip(reference, kept, plain):
        assert o.model_set == model and o.true_set == true
        assert (p.model_boundary, p.model_boundary_true) == (len(model), sum(model.values()))
        assert (p.true_boundary, p.true_boundary_recalled) == (len(true), sum(true.values()))
        right += sum(model.values())
        wrong += len(model) - sum(model.values())
        true_found += len(true)
    assert right > 0 and wrong > right and true_found > 0  # trained-like: mostly wrong, some right


def test_compression_pairs_stop_at_their_first_boundary_element(bridge_lm, tiny_city):
    rng = np.random.default_rng(2)
    jobs = []
    for q in sample_states(tiny_city, 4, rng):
        a, b = tiny_city.sample_prefix(q, rng), tiny_city.sample_prefix(q, rng)
        jobs.append(PairJob(tuple(a), tuple(b), q, q, recall=False))
    full = evaluate_pairs(tiny_city, bridge_lm, jobs, Epsilon(0.03), depth=3, exhaustive=True)
    fast = evaluate_pairs(tiny_city, bridge_lm, jobs, Epsilon(0.03), depth=3)
    assert [o.precision for o in fast] == [o.precision for o in full]  # the score is decided early
    assert any(not o.complete for o in fast) and all(o.complete for o in full)
    assert sum(o.nodes for o in fast) < sum(o.nodes for o in full)


def test_sampled_estimator_does_not_depend_on_batching(bridge_lm, tiny_city):
    rng = np.random.default_rng(1)
    jobs = []
    for _ in range(3):
        q1, q2 = sample_states(tiny_city, 2, rng)
        a, b = tiny_city.sample_prefix(q1, rng), tiny_city.sample_prefix(q2, rng)
        jobs.append(PairJob(tuple(a), tuple(b), q1, q2))
    kw = dict(depth=3, estimator="sampled", samples=6, seed=5, keep_boundaries=True)
    one = evaluate_pairs(tiny_city, bridge_lm, jobs, TopK(3), **kw)
    small = evaluate_pairs(tiny_city, bridge_lm, jobs, TopK(3), max_rows=5, **kw)
    assert [o.model_set for o in one] == [o.model_set for o in small]
    assert [o.cutoffs for o in one] == [o.cutoffs for o in small]


# ---- skips are counted, with reasons --------------------------------------------------------------------


def test_single_prefix_states_are_skipped_as_identical_prefixes():
    # connect4:n=1 has 2^7 states; the empty board and the 7 one-disk boards have one prefix each
    world = parse_world("connect4:n=1")
    r = myhill_nerode(world, WorldLM(world), depth=2, pairs="all", metrics=("compression",), prefix_tries=40)
    s = r.summary()
    assert s["pairs_skipped"] == {"compression": {"identical prefixes": 8}}
    assert s["compression_pairs_used"] == 120 and s["compression_precision"] == 1.0
    assert r.per_pair.status.value_counts().to_dict() == {"ok": 120, "identical prefixes": 8}


def test_frontier_and_context_limits_skip_with_reasons(tiny_city):
    world = parse_world("connect4:n=2")
    s = myhill_nerode(world, UniformLM(world), depth=4, pairs=5, max_nodes=40).summary()
    assert s["pairs_used"] == 0 and s["pairs_skipped"]["distinction"] == {"frontier too large": 5}
    lm = WorldLM(tiny_city)
    lm.n_ctx = 9  # an LM that reads at most 9 positions: <bos> + prefix + depth-1 suffix tokens
    r = myhill_nerode(tiny_city, lm, depth=3, pairs=20, metrics=("distinction",))
    df = r.per_pair
    too_long = df.prefix1.str.split().str.len().combine(df.prefix2.str.split().str.len(), max) + 3 > 9
    assert (df.status[too_long] == "context too long").all() and too_long.any()
    assert (df.status[~too_long] == "ok").all() and (~too_long).any()
    assert r.summary()["pairs_skipped"]["distinction"] == {"context too long": int(too_long.sum())}


def test_failed_prefix_sampling_is_counted(dfa_world):
    class Flaky(DFAWorld):
        def sample_prefix(self, state, rng):
            if state == "3":
                raise WorldError("no prefix for state 3 today")
            return super().sample_prefix(state, rng)

    world = Flaky(WORLD)
    s = myhill_nerode(world, WorldLM(world), depth=2, pairs="all").summary()
    # state 3 is in 1 compression unit and in 6 of the 12 ordered distinction pairs
    assert s["pairs_skipped"] == {
        "compression": {"prefix sampling failed": 1},
        "distinction": {"prefix sampling failed": 6},
    }
    assert s["pairs_used"] == 3 + 6 and s["distinction_precision"] == 1.0


def test_state_helpers(tiny_city):
    world = parse_world("connect4:n=1")
    assert len(reachable_states(world)) == 128
    with pytest.raises(WorldError, match="more than 100 reachable states"):
        reachable_states(world, max_states=100)
    for q in sample_states(world, 5, np.random.default_rng(0)):  # random-walk states, never the start
        assert sum(q) >= 1
    assert all(q[0] == "at" for q in sample_states(tiny_city, 5, np.random.default_rng(0)))


def test_result_saves_table_and_summary(tmp_path, dfa_world, dfa_model):
    r = myhill_nerode(dfa_world, dfa_model, depth=2, pairs=6, seed=2)
    again = myhill_nerode(dfa_world, dfa_model, depth=2, pairs=6, seed=2)
    assert r.per_pair.equals(again.per_pair)  # seeded
    r.save(tmp_path)
    assert json.loads((tmp_path / "myhill_nerode.json").read_text())["pairs_used"] == r.summary()["pairs_used"]
    assert (tmp_path / "myhill_nerode.csv").read_text().count("\n") == len(r.per_pair) + 1


def test_options_object_equals_the_keywords(dfa_world, dfa_model):
    """``myhill_nerode(w, lm, MyhillNerodeOptions(...))`` is the keyword call; a keyword overrides
    the object's field; an unknown keyword is a TypeError naming it and the settings."""
    from interp.metrics import MyhillNerodeOptions

    kw = dict(depth=2, pairs=6, seed=2, estimator="sampled", samples=4)
    by_keywords = myhill_nerode(dfa_world, dfa_model, **kw)
    by_object = myhill_nerode(dfa_world, dfa_model, MyhillNerodeOptions(**kw))
    overridden = myhill_nerode(dfa_world, dfa_model, MyhillNerodeOptions(**{**kw, "seed": 9}), seed=2)
    assert by_object.per_pair.equals(by_keywords.per_pair) and overridden.per_pair.equals(by_keywords.per_pair)
    assert by_object.settings == by_keywords.settings
    with pytest.raises(
        TypeError, match=r"myhill_nerode\(\): unknown MyhillNerodeOptions setting 'depht'; allowed: depth"
    ):
        myhill_nerode(dfa_world, dfa_model, depht=2)
    with pytest.raises(ValueError, match="estimator must be 'exact' or 'sampled'"):
        MyhillNerodeOptions(estimator="exakt")


# ---- the CLI contract -------------------------------------------------------------------------------------


def test_cli_metrics_json_contract(dfa_files):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "interp.cli",
            "metrics",
            "--world",
            f"dfa:{dfa_files[0]}",
            "--model",
            "oracle",
            "--pairs",
            "all",
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("compression_precision", "distinction_precision", "distinction_recall"):
        assert s[key] == 1.0 and s[f"{key}_se"] == 0.0
    assert s["pairs_used"] == 16 and s["pairs_skipped_total"] == 0 and "pairs_skipped" in s
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "interp.cli",
            "metrics",
            "--world",
            f"dfa:{dfa_files[0]}",
            "--model",
            "oracle",
            "--top-k",
            "2",
            "--epsilon",
            "0.1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert bad.returncode == 2 and "not allowed with" in bad.stderr
