"""DFAWorld: loading and validating JSON DFAs, acceptance, generation and prefix sampling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_legal_agrees_with_step
from hypothesis import given, settings
from hypothesis import strategies as st

from interp.worlds import IllegalTokenError, WorldError, parse_world, world_from_spec
from interp.worlds.dfa import DFAFormatError, DFAWorld

# "an even number of a's", b's anywhere; q2 is unreachable, q3 a dead end with no way to accept.
PARITY = {
    "alphabet": ["a", "b", "c"],
    "start": "even",
    "accept": ["even"],
    "transitions": {
        "even": {"a": "odd", "b": "even", "c": "dead"},
        "odd": {"a": "even", "b": "odd"},
        "island": {"a": "even"},
    },
}


def write(tmp_path: Path, content: object, name: str = "dfa.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture
def parity() -> DFAWorld:
    return DFAWorld.from_dict(PARITY)


def visited_states(world: DFAWorld, seqs: list[list[str]]) -> set[str]:
    return {q for s in seqs for q in world.states_along(s)}


# ---- loading ---------------------------------------------------------------------------------


def test_states_and_helpers(parity: DFAWorld) -> None:
    assert parity.states == ("even", "odd", "island", "dead")
    assert parity.reachable_states() == {"even", "odd", "dead"}
    assert parity.live_states() == {"even", "odd", "island"}
    assert parity.tokens == ("a", "b", "c")
    assert parity.legal("even") == ("a", "b", "c")
    assert parity.legal("dead") == ()
    assert not parity.prefix_closed
    assert "4 states" in parity.describe()


def test_from_file_and_parse_world(tmp_path: Path) -> None:
    path = write(tmp_path, PARITY)
    world = parse_world(f"dfa:{path}")
    assert isinstance(world, DFAWorld) and world.source == str(path)
    assert world.to_dict() == PARITY


def test_missing_path_and_file(tmp_path: Path) -> None:
    with pytest.raises(WorldError, match="dfa:PATH"):
        DFAWorld.from_arg("")
    missing = tmp_path / "nope.json"
    with pytest.raises(WorldError, match="nope.json"):
        DFAWorld.from_file(missing)


def with_(**changes: object) -> dict:
    d = json.loads(json.dumps(PARITY))
    for key, value in changes.items():
        if value is None:
            d.pop(key)
        else:
            d[key] = value
    return d


BAD = [
    ("{not json", "(file)"),
    ([1, 2], "(top level)"),
    (with_(alphabet=None), "alphabet"),
    (with_(start=None), "start"),
    (with_(transitions=None), "transitions"),
    (with_(extra=1), "extra"),
    (with_(alphabet="ab"), "alphabet"),
    (with_(alphabet=["a", ""]), "alphabet[1]"),
    (with_(alphabet=["a", "b c"]), "alphabet[1]"),
    (with_(alphabet=["a", "a"]), "alphabet[1]"),
    (with_(alphabet=["<pad>"]), "alphabet[0]"),
    (with_(alphabet=["a", 3]), "alphabet[1]"),
    (with_(start=5), "start"),
    (with_(transitions=[]), "transitions"),
    (with_(transitions={"even": ["a"]}), 'transitions["even"]'),
    (with_(transitions={"even": {"z": "odd"}}), 'transitions["even"]["z"]'),
    (with_(transitions={"even": {"a": 1}}), 'transitions["even"]["a"]'),
    (with_(accept="even"), "accept"),
    (with_(accept=["even", 2]), "accept[1]"),
    (with_(accept=["even", "even"]), "accept[1]"),
    (with_(min_len=0), "min_len"),
    (with_(min_len=5, max_len=2), "min_len"),
    (with_(prefix_steps=-1), "prefix_steps"),
]


@pytest.mark.parametrize(("content", "key"), BAD, ids=[k for _, k in BAD])
def test_validation_names_file_and_key(tmp_path: Path, content: object, key: str) -> None:
    path = write(tmp_path, content, "bad dfa.json")
    with pytest.raises(DFAFormatError) as info:
        DFAWorld.from_file(path)
    assert isinstance(info.value, WorldError)
    assert info.value.source == str(path) and info.value.key == key
    assert str(path) in str(info.value) and key in str(info.value)


# ---- semantics --------------------------------------------------------------------------------


def test_accept_set_semantics(parity: DFAWorld) -> None:
    assert parity.is_legal_sequence(["a", "b", "a"])
    assert not parity.is_legal_sequence(["a", "b"])  # ends in the non-accepting "odd"
    assert not parity.is_legal_sequence(["c"])  # ends in "dead"
    assert not parity.is_legal_sequence(["c", "a"])  # undefined transition
    assert parity.is_legal_sequence([])


def test_default_accept_is_prefix_closed() -> None:
    world = DFAWorld.from_dict(with_(accept=None))
    assert world.prefix_closed and all(world.accepts(q) for q in world.states)
    assert world.is_legal_sequence(["a", "b"]) and world.is_legal_sequence(["c"])


def test_step_errors(parity: DFAWorld) -> None:
    with pytest.raises(IllegalTokenError):
        parity.step("odd", "c")
    with pytest.raises(IllegalTokenError):
        parity.step("even", "zzz")
    with pytest.raises(WorldError, match="unknown state"):
        parity.step("nowhere", "a")
    with pytest.raises((WorldError, TypeError)):  # TypeError under the runtime type checker
        parity.step(["even"], "a")


# ---- generation and prefixes --------------------------------------------------------------------


def test_generate_is_legal_and_reports_rejections(parity: DFAWorld) -> None:
    seqs = parity.generate(200, np.random.default_rng(0))
    assert len(seqs) == 200 and all(parity.is_legal_sequence(s) for s in seqs)
    assert all(parity.min_len <= len(s) <= parity.max_len for s in seqs)
    stats = parity.last_generation
    assert stats is not None and stats.emitted == 200 and stats.rejected > 0  # odd walks redrawn
    assert all("c" not in s for s in seqs)  # steering never enters the dead state


def test_generate_truncates_at_dead_ends_and_counts() -> None:
    chain = DFAWorld.from_dict(
        {"alphabet": ["x"], "start": "0", "transitions": {"0": {"x": "1"}, "1": {"x": "2"}}, "max_len": 6}
    )
    seqs = chain.generate(30, np.random.default_rng(1))
    assert all(s in (["x"], ["x", "x"]) for s in seqs)
    assert chain.last_generation is not None and chain.last_generation.truncated > 0


def test_empty_language_and_impossible_lengths() -> None:
    empty = DFAWorld.from_dict({"alphabet": ["a"], "start": "s", "accept": ["t"], "transitions": {"s": {"a": "s"}}})
    with pytest.raises(WorldError, match="language is empty"):
        empty.generate(1, np.random.default_rng(0))
    odd_only = DFAWorld.from_dict(
        {
            "alphabet": ["a"],
            "start": "s",
            "accept": ["t"],
            "min_len": 2,
            "max_len": 2,
            "transitions": {"s": {"a": "t"}, "t": {"a": "s"}},
        }
    )
    with pytest.raises(WorldError, match="rejected"):
        odd_only.generate(1, np.random.default_rng(0))


def test_legal_agrees_with_step(parity: DFAWorld) -> None:
    states = visited_states(parity, parity.generate(50, np.random.default_rng(2))) | {"dead"}
    assert_legal_agrees_with_step(parity, states)


def test_sample_prefix_reaches_state(parity: DFAWorld) -> None:
    rng = np.random.default_rng(3)
    for q in parity.reachable_states():
        prefixes = {tuple(parity.sample_prefix(q, rng)) for _ in range(30)}
        assert all(parity.run(p) == q for p in prefixes)
        assert len(prefixes) > 1  # diverse, not just the BFS path
    assert parity.shortest_path("odd") == ["a"]


def test_sample_prefix_unreachable_or_unknown(parity: DFAWorld) -> None:
    with pytest.raises(WorldError, match="unreachable"):
        parity.sample_prefix("island", np.random.default_rng(0))
    with pytest.raises(WorldError, match="unknown state"):
        parity.sample_prefix("nowhere", np.random.default_rng(0))


def test_seeds(parity: DFAWorld) -> None:
    def draw(seed: int) -> tuple:
        rng = np.random.default_rng(seed)
        return parity.generate(20, rng), [parity.sample_prefix("odd", rng) for _ in range(5)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_spec_round_trip(parity: DFAWorld) -> None:
    spec = json.loads(json.dumps(parity.spec()))
    assert spec["kind"] == "dfa"
    clone = world_from_spec(spec)
    assert isinstance(clone, DFAWorld) and clone.spec() == parity.spec()
    assert clone.generate(30, np.random.default_rng(5)) == parity.generate(30, np.random.default_rng(5))
    assert all(clone.legal(q) == parity.legal(q) and clone.accepts(q) == parity.accepts(q) for q in parity.states)


# ---- random DFAs --------------------------------------------------------------------------------


@st.composite
def random_dfas(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 6))
    alphabet = ["x", "y", "z"][: draw(st.integers(1, 3))]
    names = [f"s{i}" for i in range(n)]
    transitions = {q: {t: draw(st.sampled_from(names)) for t in alphabet if draw(st.booleans())} for q in names}
    accept = draw(st.one_of(st.none(), st.lists(st.sampled_from(names), min_size=1, unique=True)))
    d = {"alphabet": alphabet, "start": "s0", "transitions": transitions}
    return d if accept is None else {**d, "accept": accept}


@settings(max_examples=40, deadline=None)
@given(random_dfas(), st.integers(0, 2**32 - 1))
def test_random_dfas(d: dict, seed: int) -> None:
    world = DFAWorld.from_dict(d)
    rng = np.random.default_rng(seed)
    if world.start() in world.live_states():
        try:
            seqs = world.generate(5, rng)
        except WorldError as e:  # only the documented give-up (e.g. parity-locked lengths)
            assert "rejected" in str(e)
        else:
            assert all(world.is_legal_sequence(s) for s in seqs)
    for q in world.reachable_states():
        assert world.run(world.sample_prefix(q, rng)) == q
