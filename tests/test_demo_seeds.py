"""``experiments/demo_seeds.py``'s loop finder (:func:`interp.jobs.competence.trailing_loops`), against routes worked by hand on the default city."""

from __future__ import annotations

import pandas as pd

from interp.jobs.competence import MIN_LOOP, trailing_loops
from interp.worlds import parse_world


def _loop_and_way_in(world):
    """Streets ``a --go--> b --back--> a`` and ``x --into--> a`` with ``x`` neither ``a`` nor ``b``."""
    edges = world.graph.edges  # (from, direction, to)
    for a, go, b in edges:
        back = next((d for u, d, v in edges if (u, v) == (b, a)), None)
        way_in = next(((u, d) for u, d, v in edges if v == a and u not in (a, b)), None)
        if back is not None and way_in is not None:
            return a, b, go, back, *way_in
    raise AssertionError("no two-way street with a third way in, in the default city")


def test_trailing_loops_finds_a_back_and_forth_end_and_where_it_starts():
    world = parse_world("streets")
    a, b, go, back, *_ = _loop_and_way_in(world)
    far = next(n for n in world.graph.nodes if n not in (a, b))
    n = MIN_LOOP + 2
    routes = pd.DataFrame(
        {
            "origin": [a, a, a],
            # through the destination (a), elsewhere (far), and one turn too short to count
            "destination": [a, far, a],
            "tokens": [
                " ".join([go, back] * (n // 2)),
                " ".join([go, back] * (n // 2) + ["end"]),
                " ".join([go, back] * ((MIN_LOOP - 1) // 2) + [go][: (MIN_LOOP - 1) % 2]),
            ],
        }
    )
    got = trailing_loops(routes, world)
    assert got.loop.tolist() == [True, True, False]
    assert got.loop_from.tolist() == [0, 0, -1]  # the loop is the whole route; `end` is not a turn
    assert got.through_destination.tolist() == [True, False, False]


def test_trailing_loops_starts_a_loop_after_the_turns_that_lead_into_it():
    world = parse_world("streets")
    a, b, go, back, x, into = _loop_and_way_in(world)
    routes = pd.DataFrame({"origin": [x], "destination": [a], "tokens": [" ".join([into] + [go, back] * MIN_LOOP)]})
    got = trailing_loops(routes, world)
    assert got.loop.tolist() == [True] and got.loop_from.tolist() == [1] and got.through_destination.tolist() == [True]
