"""Where things are: a location-tracking world of events, simulated to an exact answer.

The natural-language dialogue items (:mod:`interp.worlds.dialogue.natural`) are rendered from a
list of :class:`Event` about people, objects and places. This module says what those events *mean*;
it knows no English. The state is, for every object, the set of places (or people's hands, written
``@Ann``) it may be at — a *knowledge* state, because exclusive "or" and "some" leave a fact open,
as they do in PragWorld. Everything is deterministic: a gold answer is read off the state.

Events (``negated``: "did not …" — a negated event changes nothing), with one English rendering
and the effect on where objects may be:

- ``put`` "Ann put the key in the drawer", ``move`` "Ann moved the key to the drawer": each
  object → {place};
- ``take`` "Ann took the key": → {@Ann}; ``give`` "Ann handed the key to Bob": → {@Bob};
- ``drop`` "Ann put everything she was holding in the box": whatever may be in @Ann → {box};
- ``move_all`` "Ann moved all / some of the things in the drawer to the box": ``all`` — what is
  in the drawer → {box}; ``some`` — each thing there *may* have moved → {drawer, box};
- ``shuttle`` "Ann moved the key three times between the drawer and the box, starting in the
  drawer": after an odd count the second place, after an even one the first;
- ``mention`` "The garage needs cleaning", ``absurd`` "The key sang a song in the drawer"
  (PragWorld's inconsistent data: a detail against common sense), ``chat`` (small talk): nothing.

Two objects joined by ``and`` both move; by ``or`` (exclusive, as PragWorld reads it) exactly one
does, unknown which, so each *may* have moved: {where it was, place}. Two agents joined by ``and`` /
``or`` (who put it) change nothing about where it is. "Some" implies "not all" in PragWorld; for a
single object's place the implicature adds nothing when two or more things were there (each may
have moved or not), so the world reads "some" per object as "may have moved".

:func:`simulate` replays events; :func:`place_of` is the cloze gold (the one place an object is
known to be at, else None: unknown or in someone's hands); :func:`is_at` the yes/no gold ("cannot
be concluded" is No, as PragWorld scores "cannot answer").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

#: event kinds that change where things are (the rest only add words)
STATE_KINDS = ("put", "move", "take", "give", "drop", "move_all", "shuttle")
#: event kinds that change nothing: a mentioned place, an absurd detail, small talk
INERT_KINDS = ("mention", "absurd", "chat")
#: every event kind
KINDS = STATE_KINDS + INERT_KINDS
#: how two agents or two objects join ("or" is exclusive)
JOINS = ("and", "or")
#: a move_all's quantifier
QUANTIFIERS = ("all", "some")
#: the shuttle counts the renderer can say ("once", "twice", "three times", "four times")
TIMES = (1, 2, 3, 4)

#: where something may be: a place word, or ``@person`` for a person's hands
State = dict[str, frozenset[str]]


def hands(person: str) -> str:
    """The location "in ``person``'s hands"."""
    return "@" + person


def is_place(location: str) -> bool:
    """Whether a location is a place (not someone's hands)."""
    return not location.startswith("@")


@dataclass(frozen=True)
class Event:
    """One sentence's meaning (module docstring). ``agents``: one or two people (``agent_join``
    between two; the first is the speaker in a dialogue, and who says a detail or small talk); ``objects``: none, one or two (``object_join`` between two); ``place``: the
    destination (put, move, drop, move_all, shuttle's second place, mention, absurd); ``source``:
    move_all's place of origin, shuttle's first place; ``recipient``: give's; ``quantifier``:
    move_all's; ``times``: shuttle's; ``negated``: "did not"; ``style``: which of a template
    family's phrasings renders it (surface only: the simulation never reads it; an alteration
    keeps it, so altered text differs from the original only where the meaning does)."""

    kind: str
    agents: tuple[str, ...] = ()
    objects: tuple[str, ...] = ()
    place: str | None = None
    source: str | None = None
    recipient: str | None = None
    agent_join: str = "and"
    object_join: str = "and"
    quantifier: str = "all"
    times: int = 1
    negated: bool = False
    style: int = 0

    def __post_init__(self) -> None:
        problem = event_problem(self)
        if problem:
            raise ValueError(f"bad event {self}: {problem}")

    @property
    def changes_state(self) -> bool:
        """Whether the event can move anything (a state kind, not negated)."""
        return self.kind in STATE_KINDS and not self.negated

    def places(self) -> tuple[str, ...]:
        """The places the event names, in the order the renderer says them."""
        if self.kind in ("move_all", "shuttle"):
            return tuple(p for p in (self.source, self.place) if p)
        return (self.place,) if self.place else ()

    def with_(self, **changes) -> Event:
        """A copy with fields changed (validated)."""
        return replace(self, **changes)


def event_problem(e: Event) -> str | None:
    """What makes an event ill-formed (None: nothing)."""
    need = {
        "put": ("agents", "objects", "place"),
        "move": ("agents", "objects", "place"),
        "take": ("agents", "objects"),
        "give": ("agents", "objects", "recipient"),
        "drop": ("agents", "place"),
        "move_all": ("agents", "source", "place"),
        "shuttle": ("agents", "objects", "source", "place"),
        "mention": ("agents", "place"),
        "absurd": ("agents", "objects", "place"),
        "chat": ("agents",),
    }
    if e.kind not in need:
        return f"kind must be one of {KINDS}"
    missing = [f for f in need[e.kind] if not getattr(e, f)]
    if missing:
        return f"a {e.kind} needs {', '.join(missing)}"
    if not 0 < len(e.agents) <= 2 or len(e.objects) > 2:
        return "one or two agents and at most two objects"
    if len(e.agents) == 2 and e.kind not in ("put", "move", "move_all"):
        return "two agents only for put, move, move_all"
    if len(e.objects) == 2 and e.kind not in ("put", "move"):
        return "two objects only for put, move"
    if e.agent_join not in JOINS or e.object_join not in JOINS or e.quantifier not in QUANTIFIERS:
        return f"joins are {JOINS}, quantifiers {QUANTIFIERS}"
    if e.kind == "shuttle" and (e.times not in TIMES or e.source == e.place):
        return f"a shuttle needs two different places and times in {TIMES}"
    if e.kind == "move_all" and e.source == e.place:
        return "move_all needs two different places"
    if e.kind == "give" and e.recipient in e.agents:
        return "give to someone else"
    return None


def _step(state: State, e: Event) -> State:
    if not e.changes_state:
        return state
    out = dict(state)
    place = str(e.place)  # every state kind names a destination (checked by event_problem)
    if e.kind in ("put", "move"):
        for o in e.objects:
            surely = len(e.objects) == 1 or e.object_join == "and"
            out[o] = frozenset({place}) if surely else state.get(o, frozenset()) | {place}
    elif e.kind in ("take", "give"):
        holder = hands(e.agents[0] if e.kind == "take" else str(e.recipient))
        for o in e.objects:
            out[o] = frozenset({holder})
    elif e.kind in ("drop", "move_all"):
        origin = hands(e.agents[0]) if e.kind == "drop" else str(e.source)
        for o, where in state.items():
            if origin not in where:
                continue
            if where == {origin} and (e.kind == "drop" or e.quantifier == "all"):
                out[o] = frozenset({place})
            elif e.kind == "move_all" and e.quantifier == "some":
                out[o] = where | {place}
            else:  # it may be there: it is there and moves, or it is elsewhere and stays
                out[o] = (where - {origin}) | {place}
    elif e.kind == "shuttle":
        out[e.objects[0]] = frozenset({place if e.times % 2 else str(e.source)})
    return out


def simulate(events: Iterable[Event], state: Mapping[str, frozenset[str]] | None = None) -> State:
    """The state after ``events``, from ``state`` (default: nothing is anywhere yet)."""
    s: State = dict(state or {})
    for e in events:
        s = _step(s, e)
    return s


def trajectory(events: Sequence[Event]) -> list[State]:
    """The state after each prefix of ``events``: ``len(events) + 1`` states, the empty one first."""
    states: list[State] = [{}]
    for e in events:
        states.append(_step(states[-1], e))
    return states


def place_of(events: Sequence[Event], obj: str) -> str | None:
    """The cloze gold: the one place ``obj`` is known to be at after ``events``; None when it is
    not known (an "or", a "some") or it is in someone's hands."""
    where = simulate(events).get(obj, frozenset())
    if len(where) == 1:
        (loc,) = where
        return loc if is_place(loc) else None
    return None


def is_at(events: Sequence[Event], obj: str, place: str) -> bool:
    """The yes/no gold of "Is the ``obj`` in the ``place``?": yes only when that is known."""
    return simulate(events).get(obj, frozenset()) == {place}


def previous_place(events: Sequence[Event], obj: str) -> str | None:
    """The last place ``obj`` was known to be at *before* its current one (None if it never was
    elsewhere) — the hard foil of a cloze item, as IOI's repeated subject is."""
    now = place_of(events, obj)
    for state in reversed(trajectory(events)):
        where = state.get(obj, frozenset())
        if len(where) == 1:
            (loc,) = where
            if is_place(loc) and loc != now:
                return loc
    return None


def first_place(events: Sequence[Event], obj: str) -> str | None:
    """Where ``obj`` was first known to be (the initial state of the object), None if never."""
    for state in trajectory(events):
        where = state.get(obj, frozenset())
        if len(where) == 1:
            (loc,) = where
            if is_place(loc):
                return loc
    return None


__all__ = [
    "INERT_KINDS",
    "JOINS",
    "KINDS",
    "QUANTIFIERS",
    "STATE_KINDS",
    "TIMES",
    "Event",
    "State",
    "event_problem",
    "first_place",
    "hands",
    "is_at",
    "is_place",
    "place_of",
    "previous_place",
    "simulate",
    "trajectory",
]
