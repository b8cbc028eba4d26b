"""The dialogue world (PragWorld-style conversations with exact answers): the DFA contract, gold
answers against an independent brute-force reader, the seven alterations (minimal edits, exact
flip/invariant labels), the Myhill–Nerode twins of the alteration labels, seeds, the benchmark CSV
round trip through the PragWorld loader, and QA scoring with an oracle model."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import REPO, assert_legal_agrees_with_step

from interp.worlds import IllegalTokenError, WorldError, parse_world, world_from_spec
from interp.worlds.dialogue import DialogueWorld, Item
from interp.worlds.dialogue import alterations as A
from interp.worlds.dialogue.grammar import Clause, Question, parse
from interp.worlds.dialogue.sampling import sample_item
from interp.worlds.dialogue.state import all_facts

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


# ---- an independent reader: items as individuals, one location each --------------------------------


class Brute:
    """Reads conversation text the slow, obvious way: every placed item is an individual with a
    location; quantifiers are checked over the individuals. Shares no code with the world."""

    def __init__(self, cap: int):
        self.cap = cap
        self.items: dict[str, list[str]] = {}

    def say(self, words: list[str]) -> None:
        """One utterance without its speaker; raises AssertionError if it is impossible."""
        if words[0] in ("are", "the"):  # a question asked in the dialogue, an absurd detail
            return
        k = next(i for i, w in enumerate(words) if w in ("put", "moved", "did"))
        verb = words[k:]
        if verb[0] == "did":
            return
        if verb[0] == "put":
            n, obj, loc = NUMBERS[verb[1]], verb[2], verb[4]
            have = self.items.setdefault(obj, [])
            assert len(have) + n <= self.cap, "put past the cap"
            have += [loc] * n
        else:
            obj, loc = verb[2], verb[4]
            have = self.items.get(obj, [])
            assert have, "moved all of nothing"
            self.items[obj] = [loc] * len(have)

    def clause(self, quant: str, obj: str, loc: str) -> bool:
        its = self.items.get(obj, [])
        here = [x for x in its if x == loc]
        if quant == "all":
            return bool(its) and all(x == loc for x in its)
        if quant == "some":
            return any(x == loc for x in its) and any(x != loc for x in its)
        if quant == "any":
            return bool(here)
        return len(here) == NUMBERS[quant]

    def ask(self, words: list[str]) -> bool:
        """``are … ?`` → the answer."""
        assert words[0] == "are" and words[-1] == "?"
        body = words[1:-1]
        first = self.clause(body[0], body[1], body[3])
        if len(body) == 4:
            return first
        second = self.clause(body[5], body[6], body[8])
        return (first and second) if body[4] == "and" else (first != second)


def brute_read(tokens: list[str], cap: int) -> tuple[Brute, list[tuple[bool, str]]]:
    """Read a token sequence; return the reader and (brute answer, answer in the text) per probe."""
    b, checks, i = Brute(cap), [], 0
    heads = {"P1:", "P2:", "Q:"}
    while i < len(tokens):
        j = i + 1
        while j < len(tokens) and tokens[j] not in heads:
            j += 1
        head, words = tokens[i], tokens[i + 1 : j]
        if head == "Q:":
            checks.append((b.ask(words[:-1]), words[-1]))
        else:
            b.say(words)
        i = j
    return b, checks


def brute_gold(item: Item, cap: int) -> bool:
    b, _ = brute_read(item.context_tokens(), cap)
    return b.ask(list(item.question.tokens()))


# ---- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world() -> DialogueWorld:
    return DialogueWorld()


@pytest.fixture(scope="module")
def small() -> DialogueWorld:
    return DialogueWorld(agents=2, objects=2, locations=2, max_count=2, max_utts=5)


@pytest.fixture(scope="module")
def sequences(world):
    return world.generate(300, np.random.default_rng(0))


def all_questions(world: DialogueWorld, two: bool = False) -> list[Question]:
    lex = world.lexicon
    clauses = [
        Clause(q, o, loc) for q in (*lex.numbers, "all", "some", "any") for o in lex.objects for loc in lex.locations
    ]
    out = [Question((c,)) for c in clauses]
    if two:
        out += [
            Question((a, b), conn) for a, b in itertools.product(clauses[::5], clauses[::7]) for conn in ("and", "or")
        ]
    return out


def forced_answer(world: DialogueWorld, prefix_state, question: Question) -> bool:
    """The answer the DFA forces after ``Q: question`` from ``prefix_state``."""
    q = world.run(["Q:", *question.tokens()], prefix_state)
    (ans,) = world.legal(q)
    return ans == "yes"


# ---- the DFA -------------------------------------------------------------------------------------------


def test_generated_sequences_are_legal_and_fit(world, sequences):
    assert all(world.is_legal_sequence(s) for s in sequences)
    assert max(map(len, sequences)) <= world.max_length < 128
    assert all(s[-1] in ("yes", "no") for s in sequences)
    answers = [t for s in sequences for i, t in enumerate(s) if i and s[i - 1] == "?" and t in ("yes", "no")]
    assert 0.35 < np.mean([a == "yes" for a in answers]) < 0.65  # balanced probes
    utts = [sum(t in ("P1:", "P2:") for t in s) for s in sequences]
    assert min(utts) == world.min_utts and max(utts) == world.max_utts


def test_legal_agrees_with_step(world, sequences):
    states = {q for s in sequences[:40] for q in world.states_along(s)}
    assert len(states) > 500
    assert_legal_agrees_with_step(world, states)


def test_only_the_gold_answer_is_legal_after_a_probe(world, sequences):
    n = 0
    for s in sequences[:100]:
        for i, q in enumerate(world.states_along(s)[:-1]):
            if q[0] == "ans":
                assert world.legal(q) == (s[i],)
                other = "no" if s[i] == "yes" else "yes"
                with pytest.raises(IllegalTokenError):
                    world.step(q, other)
                n += 1
    assert n > 100


def test_gold_answers_agree_with_a_brute_force_reader(world, sequences):
    checked = 0
    for s in sequences:
        _, checks = brute_read(s, world.max_count)
        for brute, written in checks:
            assert ("yes" if brute else "no") == written, " ".join(s)
            checked += 1
    rng = np.random.default_rng(1)
    for _ in range(150):  # every question type and both connectives, not only the drawn ones
        item = sample_item(world, rng)
        q = world.run([*item.context_tokens()])
        for question in all_questions(world)[::4] + [item.question]:
            assert forced_answer(world, q, question) == brute_gold(Item(item.context, question), world.max_count)
            checked += 1
    assert checked > 2500


def test_semantics_by_hand():
    w = DialogueWorld()

    def gold(context: str, question: str) -> bool:
        return w.gold(Item(tuple(parse(context.split())), parse(["Q:", *question.split(), "yes"])[0].question))

    ctx = "P1: ann put two sheep in barn P2: bob and eve put one sheep in pond"
    assert gold(ctx, "are two sheep in barn ?") and not gold(ctx, "are three sheep in barn ?")
    assert gold(ctx, "are some sheep in barn ?")  # two of three: some, and not all
    assert not gold(ctx, "are all sheep in barn ?")
    assert gold(ctx + " P1: eve moved all sheep to field", "are all sheep in field ?")
    assert not gold(ctx + " P1: eve moved all sheep to field", "are some sheep in field ?")  # some ⇒ not all
    assert not gold(ctx + " P1: eve did not move all sheep to field", "are any sheep in field ?")
    assert gold(ctx + " P2: the sheep sang in field", "are two sheep in barn ?")  # absurd: ignored
    assert gold(ctx, "are two sheep in barn and one sheep in pond ?")
    assert not gold(ctx, "are two sheep in barn or one sheep in pond ?")  # exclusive or
    assert gold(ctx, "are two sheep in barn or two sheep in pond ?")
    assert not gold("", "are all fish in pond ?")  # no fish: not all
    q = w.run("P1: ann put three fish in pond".split())
    assert "fish" not in w.legal(w.run("P2: bob put one".split(), q))  # the cap
    assert "moved" not in w.legal(w.run(["P1:", "ann"]))  # nothing to move
    assert "ann" not in w.legal(w.run(["P1:", "ann", "and"]))  # two different agents


def test_bad_states_and_options():
    w = DialogueWorld(objects=2, locations=2)
    for bad in [
        ("turn",),
        ("turn", ((0, 0),)),
        ("nope", ((0, 0), (0, 0))),
        ("turn", ((4, 0), (0, 0))),
        ("subj", ((0, 0), (0, 0))),
        5,
        "turn",
        ("ans", ((0, 0), (0, 0)), "maybe"),
    ]:
        with pytest.raises(WorldError):
            w.legal(bad)
    for arg in ["objects=9", "agents=1", "colour=2", "min_utts=5,max_utts=2", "probes=0"]:
        with pytest.raises(WorldError):
            parse_world(f"dialogue:{arg}")


def test_spec_round_trip_and_registry(world):
    w = parse_world("dialogue:objects=2,locations=4,max_count=2,max_utts=5,probes=2")
    assert world_from_spec(json.loads(json.dumps(w.spec()))).spec() == w.spec()
    assert w.tokens == world_from_spec(w.spec()).tokens and "shed" in w.tokens and "deer" not in w.tokens
    assert parse_world("dialogue").spec() == world.spec()
    assert all(" " not in t for t in world.tokens) and len(set(world.tokens)) == len(world.tokens)


def test_parse_is_the_inverse_of_tokens(sequences):
    for s in sequences[:100]:
        assert [t for u in parse(s) for t in u.tokens()] == s
    with pytest.raises(WorldError, match="position 2"):
        parse(["P1:", "ann", "sang"])


# ---- sampling, seeds, prefixes ---------------------------------------------------------------------------


def test_seeds_reproduce(world):
    from interp.worlds.dialogue.export import benchmark_rows

    def draw(seed):
        rng = np.random.default_rng(seed)
        return world.generate(20, rng), world.sample_prefix(world.run(world.generate(1, rng)[0][:30]), rng)

    assert draw(3) == draw(3) and draw(3) != draw(4)
    a, b = benchmark_rows(world, 3, seed=7), benchmark_rows(world, 3, seed=7)
    assert a.equals(b) and not a.equals(benchmark_rows(world, 3, seed=8))


def test_sample_prefix_reaches_every_kind_of_state(world, sequences):
    rng = np.random.default_rng(2)
    tags, distinct = set(), 0
    for s in sequences[:60]:
        for cut in sorted(rng.choice(len(s) + 1, size=4, replace=False)):
            q = world.run(s[:cut])
            p1, p2 = world.sample_prefix(q, rng), world.sample_prefix(q, rng)
            assert world.run(p1) == q and world.run(p2) == q
            distinct += p1 != p2
            tags.add(q[0])
    assert {"turn", "spk", "subj", "q", "ans"} <= tags and distinct > 200


# ---- the Myhill–Nerode twins of the alteration labels ---------------------------------------------


def test_same_facts_admit_the_same_answers(world):
    """Compression's twin of invariant alterations: two different conversations reaching one state
    answer every question alike (checked by the brute-force reader too)."""
    rng = np.random.default_rng(3)
    questions = all_questions(world, two=True)
    for s in world.generate(25, rng):
        q = world.run(world.split_key(s))
        p1, p2 = world.sample_prefix(q, rng), world.sample_prefix(q, rng)
        assert p1 != p2 or len(p1) == 0
        for question in questions:
            a1, a2 = forced_answer(world, world.run(p1), question), forced_answer(world, world.run(p2), question)
            assert a1 == a2 == brute_read(p1 + ["Q:", *question.tokens(), "yes"], world.max_count)[1][-1][0]


def test_different_facts_are_told_apart(small):
    """Distinction's twin of flip alterations: any two different fact states (all pairs of a small
    world) answer some single-clause question differently."""
    facts = list(all_facts(2, 2, small.max_count))
    questions = all_questions(small)
    rng = np.random.default_rng(4)
    states = {f: small.run(small.sample_prefix(("turn", f), rng)) for f in facts}
    answers = {f: tuple(forced_answer(small, states[f], q) for q in questions) for f in facts}
    assert len(facts) == 36 and len(set(answers.values())) == len(facts)


def test_oracle_scores_one_on_myhill_nerode(small):
    from interp.metrics.myhill_nerode import myhill_nerode
    from interp.models.lm import WorldLM

    s = myhill_nerode(small, WorldLM(small), depth=5, pairs=6, seed=0).summary()
    assert (s["compression_precision"], s["distinction_precision"], s["distinction_recall"]) == (1.0, 1.0, 1.0)
    assert s["distinction_pairs_used"] > 0 and s["recall_state_pairs"] > 0


# ---- alterations -----------------------------------------------------------------------------------------


def _diff(a: Item, b: Item) -> tuple[list[int], list[int], bool]:
    """(indices of changed utterances in a, in b, question changed) — aligned by an insertion."""
    ca, cb = a.context, b.context
    if len(cb) == len(ca) + 1:
        k = next((i for i in range(len(ca)) if ca[i] != cb[i]), len(ca))
        assert ca[k:] == cb[k + 1 :]
        return [], [k], a.question != b.question
    assert len(ca) == len(cb)
    changed = [i for i in range(len(ca)) if ca[i] != cb[i]]
    return changed, changed, a.question != b.question


def _token_diff(x: tuple[str, ...], y: tuple[str, ...]) -> list[tuple[str, str]]:
    assert len(x) == len(y)
    return [(s, t) for s, t in zip(x, y) if s != t]


@pytest.fixture(scope="module")
def altered(world):
    rng = np.random.default_rng(5)
    out = []
    for _ in range(40):
        item = sample_item(world, rng)
        out += [(item, a) for a in A.alter_all(world, item, rng)]
    return out


def test_every_category_occurs_with_both_targets_and_labels(altered):
    seen = {(a.category, a.target, a.effect) for _, a in altered}
    assert {c for c, _, _ in seen} == set(A.CATEGORIES)
    for category in (A.NEGATION, A.SUBSTITUTION, A.SWAP, A.QUANTIFIER, A.CONNECTIVE):
        assert {e for c, _, e in seen if c == category} == {"Flip", "Invariant"}, category
    for category in (A.SUBSTITUTION, A.QUANTIFIER, A.CONNECTIVE):
        assert {t for c, t, _ in seen if c == category} == {"Context", "Question"}, category
    assert {e for c, _, e in seen if c == A.INCONSISTENT} == {"Invariant"}


def test_alterations_are_minimal_edits(world, altered):
    lex = world.lexicon
    for item, a in altered:
        before, after, q_changed = _diff(item, a.item)
        assert q_changed == (a.target == "Question")
        if a.target == "Question":
            assert not before and not after
            d = _token_diff(item.question.tokens(), a.item.question.tokens())
        elif a.category == A.INCONSISTENT:
            assert after and not before and a.item.context[after[0]].tokens()[1] == "the"
            continue
        elif a.category == A.SWAP:
            assert len(before) == 2
            d = [p for i in before for p in _token_diff(item.context[i].tokens(), a.item.context[i].tokens())]
        else:
            assert len(before) == 1
            u, v = item.context[before[0]].tokens(), a.item.context[before[0]].tokens()
            if a.category == A.NEGATION:
                assert sorted(set(u) ^ set(v)) == sorted({"did", "not", "put", "move", "moved"} & (set(u) ^ set(v)))
                assert abs(len(u) - len(v)) == 2
                continue
            d = _token_diff(u, v)
        if a.category == A.SWAP:
            assert len(d) == 2 and d[0] == d[1][::-1]
            continue
        assert len(d) == 1, (a.category, d)
        ((old, new),) = d
        kind = {
            A.SUBSTITUTION: set(lex.agents) | set(lex.objects) | set(lex.locations),
            A.QUANTITY: set(lex.numbers),
            A.QUANTIFIER: {"all", "some"},
            A.CONNECTIVE: {"and", "or"},
        }
        assert {old, new} <= kind[a.category]
        if a.category == A.SUBSTITUTION:
            assert any({old, new} <= set(p) for p in (lex.agents, lex.objects, lex.locations))


def test_labels_are_exact(world, altered):
    """Effect = (gold changed?), with both golds recomputed by the brute-force reader."""
    for item, a in altered:
        g0, g1 = brute_gold(item, world.max_count), brute_gold(a.item, world.max_count)
        assert (a.original_gold, a.gold) == (g0, g1)
        assert a.effect == ("Flip" if g0 != g1 else "Invariant")


def test_candidates_are_legal_and_deterministic(world):
    item = sample_item(world, np.random.default_rng(6), n_utts=6)
    for c in A.CATEGORIES:
        options = A.candidates(world, item, c)
        assert options == A.candidates(world, item, c)
        for edit, gold in options:
            assert world.is_legal_sequence(edit.item.prompt_tokens()) and gold == world.gold(edit.item)
    assert (
        A.alter(world, Item((), Question((Clause("any", "fish", "pond"),))), A.CONNECTIVE, np.random.default_rng(0))
        is None
    )  # nothing to change


# ---- export: the PragWorld layout, read back by the benchmark's loader --------------------------


def test_benchmark_csv_round_trip(world, tmp_path):
    from interp.datasets.pragworld import load_pragworld
    from interp.worlds.dialogue.export import benchmark_rows, item_from_text, item_sequences, write_benchmark

    path = write_benchmark(world, tmp_path / "b.csv", n_groups=12, seed=1)
    header = path.read_text().splitlines()[0]
    assert header == (
        "Local Context,Question,Answer,Perturbation?,Perturbation Target,Perturbation Category,Perturbation Effect"
    )
    data = load_pragworld(path)
    rows, mine = data.rows, benchmark_rows(world, 12, seed=1)
    assert len(rows) == len(mine) and data.n_groups == 12 and not data.dropped
    assert rows["group"].tolist() == mine["group"].tolist()
    for col in ("gold", "altered", "target", "category", "effect"):
        assert rows[col].fillna("-").tolist() == mine[col].fillna("-").tolist(), col
    assert (rows["n_utterances"] == [len(c.splitlines()) for c in mine["context"]]).all()
    for r in rows.itertuples():
        item = item_from_text(r.context, r.question)
        assert world.gold(item) == bool(r.gold) == brute_gold(item, world.max_count)
    assert all(world.is_legal_sequence(s) for s in item_sequences(world, rows))


# ---- QA scoring with an oracle model -----------------------------------------------------------------


class OracleHF(torch.nn.Module):
    """A 'Hugging Face' causal LM whose logits are 0 on the world's legal tokens, −30 elsewhere."""

    def __init__(self, world):
        super().__init__()
        self.world = world

    def forward(self, input_ids, attention_mask=None):
        vocab = self.world.vocab
        out = torch.full((*input_ids.shape, len(vocab)), -30.0)
        for b, row in enumerate(input_ids.tolist()):
            q = self.world.start()
            for pos, tid in enumerate(row):
                if pos > 0:
                    if tid == vocab.pad_id:
                        break
                    q = self.world.step(q, vocab.tokens[tid])
                for t in self.world.legal(q):
                    out[b, pos, vocab.id(t)] = 0.0
        return SimpleNamespace(logits=out)


def test_qa_scoring_with_an_oracle(world, sequences, tmp_path):
    from interp.metrics.dialogue_qa import evaluate_benchmark, probe_accuracy
    from interp.worlds.dialogue.export import write_benchmark

    oracle = OracleHF(world)
    acc = probe_accuracy(oracle, world, sequences[:40], batch_size=16)
    assert acc["accuracy"] == acc["yes"] == acc["no"] == 1.0 and acc["probes"] >= 40
    score, p = evaluate_benchmark(oracle, world, write_benchmark(world, tmp_path / "b.csv", 6, seed=2))
    assert score.summary()["robust"] == score.summary()["total"] == 100.0 and ((p < 0.01) | (p > 0.99)).all()


def test_cli_lists_and_draws_the_world(tmp_path):
    env_py = [sys.executable, "-m", "interp.cli"]
    out = subprocess.run([*env_py, "worlds"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "dialogue" in out
    subprocess.run(
        [*env_py, "data", "--world", "dialogue:max_utts=4", "--n", "50", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    from interp.worlds.io import read_sequences

    w = parse_world("dialogue:max_utts=4")
    assert len(read_sequences(tmp_path / "train.txt", w)) + len(read_sequences(tmp_path / "test.txt", w)) == 50
