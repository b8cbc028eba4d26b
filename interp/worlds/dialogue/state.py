"""What a conversation has established: counts of objects at locations, and how utterances change it.

The dialogue world's *facts* are a count ``c[o][l]`` for every object ``o`` at every location
``l``, with at most ``max_count`` items of any one object in all (``Σ_l c[o][l] ≤ max_count``).
They are an immutable tuple of per-object tuples, so a fact state is hashable and small: with 3
objects, 3 locations and ``max_count = 3`` there are 20³ = 8,000 of them.

Semantics (all deterministic — this is what makes every gold answer exact):

- ``put n o in l`` adds ``n`` items: ``c[o][l] += n``; it is only *possible* (legal) when the
  object has room: ``Σ_l c[o][l] + n ≤ max_count``.
- ``moved all o to l`` gathers every item of ``o`` at ``l``; it presupposes at least one item.
- Negated statements (``did not put``, ``did not move``), questions asked inside the dialogue and
  absurd details (``the o sang in l``) change nothing.
- Who did something never enters the facts: "ann and bob put …" and "ann or bob put …" (exactly
  one of them did it) establish the same counts. That is why agent substitutions and subject
  connective changes are invariant alterations, and why conversations that differ only in
  their agents reach the same state (the compression twin).

Question clauses (yes/no; PragWorld §3's templates, plus the location type):

=============  =====================  ===========================================================
type           words                  true when (``c = c[o][l]``, ``t = Σ_l c[o][l]``)
=============  =====================  ===========================================================
quantity       ``are two o in l``     ``c == 2`` (exactly)
universal      ``are all o in l``     ``t ≥ 1 and c == t`` (no items: "all" fails its presupposition → no)
existential    ``are some o in l``    ``1 ≤ c < t`` — "some" implies "not all" (scalar implicature)
location       ``are any o in l``     ``c ≥ 1``
=============  =====================  ===========================================================

Two clauses join with ``and`` (both true) or ``or``, read as *exclusive* (exactly one true), as
in the benchmark. A question whose answer cannot be concluded is a "no" (PragWorld scores "not
sure" and "cannot answer" as No); with exact facts only the empty "all" presupposition needs it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

#: facts[o][l]: how many items of object o are at location l
Facts = tuple[tuple[int, ...], ...]

QUANTITY, UNIVERSAL, EXISTENTIAL, LOCATION = "quantity", "universal", "existential", "location"
QUESTION_TYPES = (QUANTITY, UNIVERSAL, EXISTENTIAL, LOCATION)


def empty_facts(n_objects: int, n_locations: int) -> Facts:
    """The facts before anything is said: no object at any location."""
    return ((0,) * n_locations,) * n_objects


def total(facts: Facts, o: int) -> int:
    """How many items of object ``o`` the conversation has placed anywhere."""
    return sum(facts[o])


def has_room(facts: Facts, o: int, n: int, max_count: int) -> bool:
    """Whether ``n`` more items of ``o`` fit under the cap ``max_count``."""
    return total(facts, o) + n <= max_count


def put(facts: Facts, o: int, l: int, n: int) -> Facts:
    """``c[o][l] += n`` (the caller checks the cap)."""
    row = list(facts[o])
    row[l] += n
    return facts[:o] + (tuple(row),) + facts[o + 1 :]


def move_all(facts: Facts, o: int, l: int) -> Facts:
    """Every item of ``o`` ends up at ``l``."""
    row = [0] * len(facts[o])
    row[l] = total(facts, o)
    return facts[:o] + (tuple(row),) + facts[o + 1 :]


def clause_value(facts: Facts, kind: str, n: int | None, o: int, l: int) -> bool:
    """Truth of one question clause (see the module table); ``n`` only for ``quantity``."""
    return clause_values(facts, ((kind, n, o, l),))[0]


def clause_values(facts: Facts, clauses) -> tuple[bool, ...]:
    """Truth of each ``(kind, n, o, l)`` clause: the semantics of the module table, in one place."""
    out = []
    for kind, n, o, l in clauses:
        c, t = facts[o][l], sum(facts[o])
        if kind == QUANTITY:
            out.append(c == n)
        elif kind == UNIVERSAL:
            out.append(t >= 1 and c == t)
        elif kind == EXISTENTIAL:
            out.append(1 <= c < t)
        elif kind == LOCATION:
            out.append(c >= 1)
        else:
            raise ValueError(f"unknown clause type {kind!r}")
    return tuple(out)


def combine(first: bool, connective: str | None, second: bool | None) -> bool:
    """``and``: both; ``or``: exactly one (exclusive, as PragWorld reads it); none: the first."""
    if connective is None:
        return first
    if connective == "and":
        return first and bool(second)
    if connective == "or":
        return first != bool(second)
    raise ValueError(f"unknown connective {connective!r}")


def all_facts(n_objects: int, n_locations: int, max_count: int) -> Iterator[Facts]:
    """Every fact state (each object's items spread over the locations, at most ``max_count``)."""
    rows = list(_rows(n_locations, max_count))
    return iter(itertools.product(rows, repeat=n_objects))


def _rows(n_locations: int, budget: int) -> Iterator[tuple[int, ...]]:
    if n_locations == 0:
        yield ()
        return
    for first in range(budget + 1):
        for rest in _rows(n_locations - 1, budget - first):
            yield (first, *rest)
