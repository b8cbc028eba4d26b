"""Connect4World: cumulative Connect-4 (state = column heights)."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from conftest import assert_legal_agrees_with_step

from interp.worlds import IllegalTokenError, WorldError, parse_world, world_from_spec
from interp.worlds.connect4 import Connect4World


@pytest.fixture
def world() -> Connect4World:
    return Connect4World(n=3)


def test_tokens_and_state_is_heights(world: Connect4World) -> None:
    assert world.tokens == ("0", "1", "2", "3", "4", "5", "6")
    assert world.start() == (0,) * 7
    q = world.run(["0", "0", "3"])
    assert q == (2, 0, 0, 1, 0, 0, 0) and world.state_label(q) == q
    assert world.accepts(q)


def test_full_column_is_illegal(world: Connect4World) -> None:
    q = world.run(["2"] * 3)
    assert "2" not in world.legal(q) and len(world.legal(q)) == 6
    with pytest.raises(IllegalTokenError):
        world.step(q, "2")
    assert not world.is_legal_sequence(["2"] * 4)
    with pytest.raises(IllegalTokenError):
        world.step(q, "7")
    full = world.run([str(c) for c in range(7) for _ in range(3)])
    assert world.legal(full) == ()


def test_bad_states(world: Connect4World) -> None:
    for bad in [(0,) * 6, (4, 0, 0, 0, 0, 0, 0), (-1, 0, 0, 0, 0, 0, 0), (0.5,) * 7, "0000000", 5]:
        with pytest.raises(WorldError):
            world.legal(bad)
    with pytest.raises((WorldError, TypeError)):  # TypeError under the runtime type checker
        world.legal([0] * 8)


def test_generate_legal_and_lengths(world: Connect4World) -> None:
    games = world.generate(100, np.random.default_rng(0))
    assert all(world.is_legal_sequence(g) for g in games)
    lengths = [len(g) for g in games]
    assert min(lengths) >= 1 and max(lengths) <= 21 and len(set(lengths)) > 5


def test_legal_agrees_with_step(world: Connect4World) -> None:
    states = {q for g in world.generate(20, np.random.default_rng(1)) for q in world.states_along(g)}
    assert_legal_agrees_with_step(world, states)


def test_sample_prefix_reaches_state_uniformly(world: Connect4World) -> None:
    rng = np.random.default_rng(2)
    for g in world.generate(20, rng):
        q = world.run(g)
        assert world.run(world.sample_prefix(q, rng)) == q
    # heights (2, 1, 0, ...): the 3 interleavings 001, 010, 100 are equally likely
    counts = Counter(tuple(world.sample_prefix((2, 1, 0, 0, 0, 0, 0), rng)) for _ in range(3000))
    assert len(counts) == 3 and all(850 < c < 1150 for c in counts.values())


def test_seeds(world: Connect4World) -> None:
    def draw(seed: int) -> tuple:
        rng = np.random.default_rng(seed)
        return world.generate(10, rng), world.sample_prefix((3, 2, 1, 0, 0, 0, 1), rng)

    assert draw(4) == draw(4)
    assert draw(4) != draw(5)


def test_spec_round_trip_and_args(world: Connect4World) -> None:
    spec = json.loads(json.dumps(world.spec()))
    clone = world_from_spec(spec)
    assert isinstance(clone, Connect4World) and clone.spec() == world.spec()
    assert clone.generate(10, np.random.default_rng(3)) == world.generate(10, np.random.default_rng(3))
    default = parse_world("connect4")
    assert isinstance(default, Connect4World) and (default.n, default.min_len, default.max_len) == (6, 1, 42)
    small = parse_world("connect4:n=4,max_len=10")
    assert isinstance(small, Connect4World) and (small.n, small.max_len) == (4, 10)
    assert "connect4" in small.describe()


@pytest.mark.parametrize("arg", ["n=0", "m=3", "n=x", "n", "n=2,max_len=15", "min_len=5,max_len=3", "n=2,n=3"])
def test_bad_args(arg: str) -> None:
    with pytest.raises(WorldError):
        parse_world(f"connect4:{arg}")


def test_bad_spec() -> None:
    with pytest.raises(WorldError, match="unknown keys"):
        world_from_spec({"kind": "connect4", "columns": 8})
