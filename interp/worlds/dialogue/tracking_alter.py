"""PragWorld's seven alterations on the *events* of a natural conversation, re-simulated.

Every alteration edits the meaning (:class:`~interp.worlds.dialogue.tracking.Event` fields), never
the text; the text is rendered again with each event's phrasing kept, so an altered prompt
differs from its original only where the meaning does. The gold is recomputed by the world, so
*flip* (gold changed) or *invariant* is exact. Categories are those of
:mod:`interp.worlds.dialogue.alterations` (the synthetic world's), with this mapping onto §3:

=========================== ===================================================================
category                    edit (C = context, Q = question)
=========================== ===================================================================
Negation                    C: one put / move / take / give of one object ↔ "did not …"
Variable Substitution       C: one person / object / place of one event → another of the cast;
                            Q: the object asked about (and the yes/no question's place)
Quantity Change             C: a shuttle's count ("three times" → "twice"): parity decides
Variable Swap               C: two events exchange a person / object / place, or one event's
                            two places (a shuttle's, a move_all's) or giver and recipient swap
Quantifier Change           C: a move_all's "all" ↔ "some" ("some": each thing may have moved)
Logical Connective Change   C: "A and B" ↔ "either A or B" (exclusive) of two agents or objects
Injecting Inconsistent Data C: one absurd detail inserted ("The key sang a song in the drawer")
=========================== ===================================================================

Plus :data:`PARAPHRASE`: the same events in other phrasings of the same family (invariant by
construction). :func:`candidates` lists every edit of a category (deterministic order);
:func:`draw` picks one, flip or invariant equally likely where both exist (as
:func:`interp.worlds.dialogue.alterations.alter` does), among the edits whose gold is *admissible*
— for a cloze item, a place: an edit that leaves the object in someone's hands or unknown has no
answer token and is not proposed (:func:`draw` says how many it left out).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from interp.worlds.dialogue.alterations import (
    CATEGORIES,
    CONNECTIVE,
    CONTEXT,
    FLIP,
    INCONSISTENT,
    INVARIANT,
    NEGATION,
    QUANTIFIER,
    QUANTITY,
    QUESTION,
    SUBSTITUTION,
    SWAP,
)
from interp.worlds.dialogue.conversation import Conversation
from interp.worlds.dialogue.tracking import TIMES, Event

#: the eighth, invariant-by-construction row of a group: the same events in other phrasings
PARAPHRASE = "Paraphrase"
#: event kinds whose negation has one reading ("did not put the key in the drawer": nothing moved)
NEGATABLE = ("put", "move", "take", "give")
#: a connective change
OTHER_JOIN = {"and": "or", "or": "and"}
#: the entity slots of an event, by kind of entity
SLOTS = {"person": ("agents", "recipient"), "object": ("objects",), "place": ("place", "source")}


@dataclass(frozen=True)
class Edit:
    """One candidate alteration: the altered conversation and what it targets."""

    category: str
    target: str
    conversation: Conversation


def _replace(conv: Conversation, i: int, event: Event) -> Conversation:
    return conv.with_(events=conv.events[:i] + (event,) + conv.events[i + 1 :])


def _changed(e: Event, changes: dict) -> Event | None:
    """``e`` with ``changes``, or None when that makes an ill-formed event (e.g. a give to
    oneself): such an edit is not proposed."""
    try:
        return e.with_(**changes)
    except ValueError:
        return None


def _pool(conv: Conversation, kind: str) -> tuple[str, ...]:
    return {"person": tuple(p for p, _ in conv.people), "object": conv.objects, "place": conv.places}[kind]


def _spots(e: Event, kind: str) -> Iterator[tuple[str, int | None, str]]:
    """(field, index in a tuple field or None, value) of every ``kind`` entity the event names."""
    for f in SLOTS[kind]:
        v = getattr(e, f)
        if isinstance(v, tuple):
            yield from ((f, k, w) for k, w in enumerate(v))
        elif v:
            yield f, None, v


def _set(e: Event, f: str, k: int | None, value: str) -> Event | None:
    if k is None:
        return _changed(e, {f: value})
    old = getattr(e, f)
    return _changed(e, {f: old[:k] + (value,) + old[k + 1 :]})


def _substitutions(conv: Conversation) -> Iterator[Edit]:
    for i, e in enumerate(conv.events):
        for kind in SLOTS:
            for f, k, v in _spots(e, kind):
                for w in _pool(conv, kind):
                    new = _set(e, f, k, w) if w != v else None
                    if new is not None:
                        yield Edit(SUBSTITUTION, CONTEXT, _replace(conv, i, new))
    for o in conv.objects:
        if o != conv.obj:
            yield Edit(SUBSTITUTION, QUESTION, conv.with_(obj=o))


def _swaps(conv: Conversation) -> Iterator[Edit]:
    ev = conv.events
    for kind in SLOTS:
        spots = [(i, f, k, v) for i, e in enumerate(ev) for f, k, v in _spots(e, kind)]
        for a in range(len(spots)):
            for b in range(a + 1, len(spots)):
                (i, f, k, v), (j, g, m, w) = spots[a], spots[b]
                if v == w:
                    continue
                if i == j:  # one event's two slots of a kind: a shuttle's / move_all's places, giver ↔ recipient
                    first = _set(ev[i], f, k, w)
                    new = None if first is None else _set(first, g, m, v)
                    if new is not None:
                        yield Edit(SWAP, CONTEXT, _replace(conv, i, new))
                    continue
                ei, ej = _set(ev[i], f, k, w), _set(ev[j], g, m, v)
                if ei is not None and ej is not None:
                    yield Edit(SWAP, CONTEXT, _replace(_replace(conv, i, ei), j, ej))


def _toggles(conv: Conversation, category: str) -> Iterator[Edit]:
    for i, e in enumerate(conv.events):
        changes: list[dict] = []
        if category == NEGATION and e.kind in NEGATABLE and len(e.objects) == 1:
            changes.append({"negated": not e.negated})
        elif category == QUANTITY and e.kind == "shuttle":
            changes += [{"times": t} for t in TIMES if t != e.times]
        elif category == QUANTIFIER and e.kind == "move_all":
            changes.append({"quantifier": "some" if e.quantifier == "all" else "all"})
        elif category == CONNECTIVE:
            if len(e.agents) == 2:
                changes.append({"agent_join": OTHER_JOIN[e.agent_join]})
            if len(e.objects) == 2 and not e.negated:
                changes.append({"object_join": OTHER_JOIN[e.object_join]})
        news = [_changed(e, c) for c in changes]
        for new in news:
            if new is not None:
                yield Edit(category, CONTEXT, _replace(conv, i, new))


def _injections(conv: Conversation) -> Iterator[Edit]:
    people = [p for p, _ in conv.people]
    for pos in range(len(conv.events) + 1):
        speaker = people[pos % len(people)]
        for o in conv.objects:
            for p in conv.places:
                absurd = Event("absurd", (speaker,), (o,), place=p, style=pos)
                yield Edit(INCONSISTENT, CONTEXT, conv.with_(events=conv.events[:pos] + (absurd,) + conv.events[pos:]))


def candidates(conv: Conversation, category: str) -> list[Edit]:
    """Every edit of ``category`` (module docstring), deterministic order, each altered meaning once."""
    if category == SUBSTITUTION:
        edits: Iterator[Edit] = _substitutions(conv)
    elif category == SWAP:
        edits = _swaps(conv)
    elif category == INCONSISTENT:
        edits = _injections(conv)
    elif category in CATEGORIES:
        edits = _toggles(conv, category)
    else:
        raise ValueError(f"unknown alteration {category!r}; known: {', '.join(CATEGORIES)}")

    def key(c: Conversation) -> tuple:
        return c.events, c.obj, c.ask_place

    out, seen = [], {key(conv)}
    for e in edits:
        k = key(e.conversation)
        if k not in seen:
            seen.add(k)
            out.append(e)
    return out


@dataclass(frozen=True)
class Drawn:
    """One drawn alteration: the edit, its gold (a place, or yes/no) and the original's,
    ``effect`` (Flip / Invariant) and ``left_out``: candidates whose gold was not admissible."""

    edit: Edit
    gold: object
    original_gold: object
    left_out: int

    @property
    def effect(self) -> str:
        """``Flip`` when the gold changed, else ``Invariant``."""
        return FLIP if self.gold != self.original_gold else INVARIANT


def draw(
    conv: Conversation,
    category: str,
    rng: np.random.Generator,
    gold: Callable[[Conversation], object],
    admissible: Callable[[object], bool] = lambda g: True,
) -> Drawn | None:
    """One alteration of ``category`` among :func:`candidates` whose ``gold`` is ``admissible``:
    flip or invariant drawn first (equally likely) where both exist; None when none qualifies."""
    original = gold(conv)
    scored = [(e, gold(e.conversation)) for e in candidates(conv, category)]
    kept = [(e, g) for e, g in scored if admissible(g)]
    if not kept:
        return None
    want_flip = bool(rng.random() < 0.5)
    chosen = [(e, g) for e, g in kept if (g != original) == want_flip] or kept
    edit, g = chosen[int(rng.integers(len(chosen)))]
    return Drawn(edit, g, original, len(scored) - len(kept))


def paraphrase(conv: Conversation, rng: np.random.Generator) -> Conversation:
    """The same events and question in other phrasings of the family: every event's style and
    the closing's redrawn, at least one changed (invariant by construction)."""
    events = list(conv.events)
    for _ in range(20):
        events = [e.with_(style=int(rng.integers(4))) for e in conv.events]
        new = conv.with_(events=tuple(events), style=int(rng.integers(4)))
        if new.cloze_prompt() != conv.cloze_prompt():
            return new
    i = next((k for k, e in enumerate(conv.events) if e.kind in ("put", "move", "take", "give")), 0)
    return _replace(conv, i, conv.events[i].with_(style=conv.events[i].style + 1)).with_(style=conv.style + 1)


__all__ = ["NEGATABLE", "OTHER_JOIN", "PARAPHRASE", "SLOTS", "Drawn", "Edit", "candidates", "draw", "paraphrase"]
