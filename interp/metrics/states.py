"""Which states (and state pairs) a world-model metric evaluates.

The Myhill–Nerode metrics (Vafa et al. 2024, §2.4) average over states "sampled uniformly at
random" (compression) and over pairs of distinct states (distinction). How to sample states is the
world's business when it knows (the streets world draws uniform ``(intersection, destination)``
pairs with intersection ≠ destination, as the reference code does, through ``sample_state(rng)``); for any other world we use the states
its own traversals visit: draw a sequence with ``world.generate`` and stop it at a uniformly random
non-empty prefix. Sampling is lazy — one state at a time — so no world (4,579² Manhattan states)
is ever enumerated.

``pairs="all"`` instead needs the finite reachable state set: :func:`reachable_states` walks it
breadth-first from the start, with a cap and a clear error when the world is larger.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import numpy as np

from interp.worlds.base import IllegalTokenError, State, World, WorldError


def sample_state(world: World, rng: np.random.Generator) -> State:
    """One random state: the world's ``sample_state(rng)`` if it has one, else a random-walk state.

    Random-walk states: a sequence from ``world.generate(1, rng)``, read up to a uniform length in
    ``1..len`` (the start state only from an empty sequence, since only the empty prefix usually
    reaches it and the compression metric needs two different prefixes).
    """
    own = getattr(world, "sample_state", None)
    if callable(own):
        return own(rng)
    seqs = world.generate(1, rng)
    if not seqs:
        raise WorldError(f"{world.kind}: generate() returned no sequence to sample a state from")
    seq = seqs[0]
    cut = int(rng.integers(1, len(seq) + 1)) if seq else 0
    return world.run(seq[:cut])


def sample_states(world: World, n: int, rng: np.random.Generator) -> list[State]:
    """``n`` states drawn independently by :func:`sample_state` (with replacement)."""
    return [sample_state(world, rng) for _ in range(n)]


def sample_state_pair(world: World, rng: np.random.Generator, max_tries: int = 100) -> tuple[State, State]:
    """Two *different* states, each drawn by :func:`sample_state` (redrawn while equal)."""
    for _ in range(max_tries):
        q1, q2 = sample_state(world, rng), sample_state(world, rng)
        if q1 != q2:
            return q1, q2
    raise WorldError(
        f"{world.kind}: drew the same state twice in {max_tries} tries; the world seems to have a single sampled state"
    )


def reachable_states(world: World, max_states: int = 1000) -> list[State]:
    """Every state reachable from the start, in breadth-first order (legal/step from q0).

    Raises :class:`WorldError` as soon as more than ``max_states`` states are found: enumerating
    all states (and all ordered pairs of them) is only meant for small worlds.
    """
    start = world.start()
    seen = {start}
    order = [start]
    todo = deque([start])
    while todo:
        q = todo.popleft()
        for tok in world.legal(q):
            try:
                nxt = world.step(q, tok)
            except IllegalTokenError as e:  # legal() and step() disagree: a broken world
                raise WorldError(f"{world.kind}: legal() lists {tok!r} in {q!r} but step() refuses it") from e
            if nxt not in seen:
                if len(seen) >= max_states:
                    raise WorldError(
                        f"{world.kind}: more than {max_states} reachable states; pairs='all' needs a "
                        f"small world (sample instead, e.g. --pairs 1000, or raise max_states)"
                    )
                seen.add(nxt)
                order.append(nxt)
                todo.append(nxt)
    return order


def all_ordered_pairs(states: list[State]) -> Iterator[tuple[State, State]]:
    """Every ordered pair of distinct states (q1, q2), q1-major, lazily."""
    for q1 in states:
        for q2 in states:
            if q1 != q2:
                yield q1, q2
