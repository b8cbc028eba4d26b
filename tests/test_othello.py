"""OthelloWorld: rules (flips, implicit passes), generation and prefix search."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import assert_legal_agrees_with_step

from interp.worlds import IllegalTokenError, WorldError, parse_world, world_from_spec
from interp.worlds.othello import BLACK, GAME_OVER, SQUARE_NAMES, WHITE, OthelloWorld

IDX = {name: i for i, name in enumerate(SQUARE_NAMES)}


@pytest.fixture(scope="module")
def world() -> OthelloWorld:
    return OthelloWorld()


@pytest.fixture(scope="module")
def games(world: OthelloWorld) -> list[list[str]]:
    return world.generate(30, np.random.default_rng(0))


def board_with(black: list[str], white: list[str]) -> tuple[int, ...]:
    board = [0] * 64
    for name in black:
        board[IDX[name]] = BLACK
    for name in white:
        board[IDX[name]] = WHITE
    return tuple(board)


def test_tokens_and_opening(world: OthelloWorld) -> None:
    assert len(world.tokens) == 60 and world.tokens[0] == "a1" and world.tokens[-1] == "h8"
    assert not {"d4", "e4", "d5", "e5"} & set(world.tokens)
    board, side = world.start()
    assert board == board_with(["e4", "d5"], ["d4", "e5"]) and side == BLACK
    assert set(world.legal(world.start())) == {"d3", "c4", "f5", "e6"}
    assert world.legal(world.start()) == ("d3", "c4", "f5", "e6")  # vocabulary order


def test_known_sequence_flips(world: OthelloWorld) -> None:
    board, side = world.run(["f5"])  # black f5 flanks e5 with d5
    assert board == board_with(["e4", "d5", "e5", "f5"], ["d4"]) and side == WHITE
    board, side = world.run(["f5", "d6"])  # white d6 flanks d5 with d4
    assert board == board_with(["e4", "e5", "f5"], ["d4", "d5", "d6"]) and side == BLACK
    assert world.state_label((board, side)) == board


def test_illegal_moves(world: OthelloWorld) -> None:
    q = world.start()
    for tok in ["a1", "e3", "d4", "zz"]:  # no flip, no flip, centre (not a token), unknown
        with pytest.raises(IllegalTokenError):
            world.step(q, tok)
    with pytest.raises(IllegalTokenError):
        world.step(world.run(["f5"]), "f5")  # occupied


def test_forced_pass_and_game_over(world: OthelloWorld) -> None:
    # Black: a1, h8. White: b1, g8. Black c1 captures b1; then white has no move but black does
    # (f8), so white passes automatically; black f8 leaves white without disks: game over.
    q = (board_with(["a1", "h8"], ["b1", "g8"]), BLACK)
    assert world.legal(q) == ("c1", "f8")
    after = world.step(q, "c1")
    assert after == (board_with(["a1", "b1", "c1", "h8"], ["g8"]), BLACK)
    assert world.legal((after[0], WHITE)) == ()
    end = world.step(after, "f8")
    assert end == (board_with(["a1", "b1", "c1", "f8", "g8", "h8"], []), GAME_OVER)
    assert world.legal(end) == () and world.accepts(end)


def test_passes_in_random_games(world: OthelloWorld, games: list[list[str]]) -> None:
    passes = 0
    for g in games:
        states = world.states_along(g)
        for (_, side), (board, nxt) in zip(states, states[1:]):
            if nxt == side:  # the opponent passed: it really has no move
                passes += 1
                assert world.legal((board, 3 - side)) == ()
        assert world.legal(states[-1]) == () and states[-1][1] == GAME_OVER
    assert passes > 0


def test_generate_legal_and_complete(world: OthelloWorld, games: list[list[str]]) -> None:
    assert all(world.is_legal_sequence(g) for g in games)
    assert all(len(g) <= 60 for g in games) and max(len(g) for g in games) == 60
    assert len(world.generate(100, np.random.default_rng(1))) == 100  # fast path smoke test


def test_legal_agrees_with_step(world: OthelloWorld, games: list[list[str]]) -> None:
    for g in games[:3]:
        assert_legal_agrees_with_step(world, world.states_along(g)[::4])


def test_sample_prefix_reaches_state(world: OthelloWorld, games: list[list[str]]) -> None:
    rng = np.random.default_rng(2)
    for g in games[:10]:
        for depth in (0, 1, 6, 12):
            q = world.run(g[:depth])
            assert world.run(world.sample_prefix(q, rng)) == q
    distinct = [len({tuple(world.sample_prefix(world.run(g[:12]), rng)) for _ in range(10)}) for g in games[:5]]
    assert max(distinct) > 1  # some states have several orders, and the search finds them


def test_resample_prefix_on_full_games(world: OthelloWorld, games: list[list[str]]) -> None:
    rng = np.random.default_rng(3)
    outs = [world.resample_prefix(g, rng) for g in games[:10]]
    assert all(world.run(o) == world.run(g) for o, g in zip(outs, games))
    assert any(o != g for o, g in zip(outs, games))


def test_prefix_search_errors(world: OthelloWorld, games: list[list[str]]) -> None:
    rng = np.random.default_rng(4)
    with pytest.raises(WorldError, match="max_nodes=1 "):
        OthelloWorld(max_nodes=1).sample_prefix(world.run(games[0][:20]), rng)
    board, _ = world.start()
    with pytest.raises(WorldError, match="unreachable"):
        world.sample_prefix((board, WHITE), rng)  # the opening with white to move
    with pytest.raises(WorldError, match="centre"):
        world.sample_prefix((board_with(["a1"], ["b1"]), BLACK), rng)


def test_bad_states(world: OthelloWorld) -> None:
    board, _ = world.start()
    for bad in [(board[:10], BLACK), (board, 3), ((5,) * 64, BLACK), "x"]:
        with pytest.raises(WorldError):
            world.legal(bad)
    assert world.legal((list(board), BLACK)) == world.legal(world.start())  # a board read back from JSON


def test_seeds(world: OthelloWorld) -> None:
    def draw(seed: int) -> tuple:
        rng = np.random.default_rng(seed)
        games = world.generate(5, rng)
        return games, world.sample_prefix(world.run(games[0][:10]), rng)

    assert draw(5) == draw(5)
    assert draw(5) != draw(6)


def test_spec_round_trip_and_render(world: OthelloWorld) -> None:
    clone = world_from_spec(json.loads(json.dumps(world.spec())))
    assert isinstance(clone, OthelloWorld) and clone.spec() == world.spec()
    assert clone.generate(5, np.random.default_rng(7)) == world.generate(5, np.random.default_rng(7))
    small = parse_world("othello:max_nodes=100")
    assert isinstance(small, OthelloWorld) and small.max_nodes == 100
    with pytest.raises(WorldError):
        parse_world("othello:depth=3")
    text = world.render(world.run(["f5"]))
    assert "a b c d e f g h" in text and "white (O) to move" in text
    assert text.splitlines()[5] == "5 . . . X X X . ."
