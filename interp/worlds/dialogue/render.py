"""Natural English for location-tracking events: template families, word lists, the closing cloze.

A *family* is one surface style: speaker turns ("Ann: I put the key in the drawer.") or narrative
("Ann put the key in the drawer."), with two or three phrasings per event kind (an event's
``style`` picks one), its small talk, its closing cloze ("So right now the key is in the") and its
yes/no question ("Is the key in the drawer?"). Families and word lists come in two disjoint
splits, ``train`` and ``heldout`` (:data:`FAMILIES`, :data:`WORDS`), so a model can be tuned on
one surface and vocabulary and tested on another (Kim & Schuster 2023 word their demonstrations
unlike their tests for the same reason). Every place takes "in the …" so one cloze fits them all.

:func:`render_context` writes a conversation one sentence a line; :func:`place_mentions` lists the
places a text names, in order (what the recency heuristics read).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from interp.worlds.dialogue.tracking import Event

#: a phrasing: (frame, verb, negated verb); the frame's ``{V}`` takes one of the two
Phrase = tuple[str, str, str]
#: the two splits of families and words
SPLITS = ("train", "heldout")
#: how a shuttle's count is said
TIMES_WORDS = {1: "once", 2: "twice", 3: "three times", 4: "four times"}


@dataclass(frozen=True)
class Family:
    """One surface style (module docstring). ``phrasings``: event kind → phrasings, with the
    fields {A} agent(s), {V} verb, {O} object(s), {P} place, {S} source place, {R} recipient, {N}
    times, {Q} quantifier, {H} "I was" / "she was" (the holder), {T} a small-talk line;
    ``closings`` end right before the answer place; ``questions`` have {O} and {P}."""

    name: str
    split: str
    dialogue: bool
    phrasings: dict[str, tuple[Phrase, ...]]
    small_talk: tuple[str, ...]
    closings: tuple[str, ...]
    questions: tuple[str, ...]


_CHAT_TRAIN = (
    "Did you see the game last night?",
    "It is so hot today.",
    "I really need a coffee.",
    "Sounds good to me.",
    "Let's hurry, we are late.",
)
_CHAT_HELDOUT = (
    "My sister is visiting this weekend.",
    "Honestly, I am exhausted.",
    "Did anyone feed the cat?",
    "Okay, got it.",
    "We should order pizza tonight.",
)

#: the template families (``train``: chat, story; ``heldout``: transcript, diary)
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "chat",
            "train",
            True,
            {
                "put": (
                    ("{A} {V} {O} in the {P}.", "put", "did not put"),
                    ("{A} {V} {O} in the {P}.", "left", "did not leave"),
                ),
                "move": (
                    ("{A} {V} {O} to the {P}.", "moved", "did not move"),
                    ("Then {A} {V} {O} over to the {P}.", "moved", "did not move"),
                ),
                "take": (("{A} {V} {O}.", "took", "did not take"), ("{A} {V} {O} with me.", "took", "did not take")),
                "give": (
                    ("{A} {V} {O} to {R}.", "handed", "did not hand"),
                    ("{A} {V} {O} to {R}.", "gave", "did not give"),
                ),
                "drop": (("{A} {V} everything {H} holding in the {P}.", "put", "did not put"),),
                "move_all": (("{A} {V} {Q} of the things in the {S} to the {P}.", "moved", "did not move"),),
                "shuttle": (
                    ("{A} {V} {O} {N} between the {S} and the {P}, starting in the {S}.", "moved", "did not move"),
                ),
                "mention": (
                    ("The {P} really needs cleaning.", "", ""),
                    ("Have you seen the {P}? It is a mess.", "", ""),
                ),
                "absurd": (("{O} sang a song in the {P}.", "", ""), ("{O} ate my lunch in the {P}.", "", "")),
                "chat": (("{T}", "", ""),),
            },
            _CHAT_TRAIN,
            ("So right now the {O} is in the", "So the {O} is now in the"),
            ("Is the {O} in the {P}?",),
        ),
        Family(
            "story",
            "train",
            False,
            {
                "put": (
                    ("{A} {V} {O} in the {P}.", "put", "did not put"),
                    ("Earlier, {A} {V} {O} in the {P}.", "put", "did not put"),
                ),
                "move": (
                    ("{A} {V} {O} to the {P}.", "moved", "did not move"),
                    ("After that, {A} {V} {O} to the {P}.", "moved", "did not move"),
                ),
                "take": (("{A} {V} {O}.", "took", "did not take"), ("{A} {V} {O} along.", "took", "did not take")),
                "give": (
                    ("{A} {V} {O} to {R}.", "handed", "did not hand"),
                    ("{A} {V} {O} to {R}.", "gave", "did not give"),
                ),
                "drop": (("{A} {V} everything {H} holding in the {P}.", "put", "did not put"),),
                "move_all": (("{A} {V} {Q} of the things in the {S} to the {P}.", "moved", "did not move"),),
                "shuttle": (
                    ("{A} {V} {O} {N} between the {S} and the {P}, starting in the {S}.", "moved", "did not move"),
                ),
                "mention": (
                    ("{A} said the {P} needed cleaning.", "", ""),
                    ("{A} looked at the {P} for a while.", "", ""),
                ),
                "absurd": (("{O} sang a song in the {P}.", "", ""), ("{O} ate a sandwich in the {P}.", "", "")),
                "chat": (('{A} said: "{T}"', "", ""),),
            },
            _CHAT_TRAIN,
            ("Now the {O} is in the", "At the end, the {O} is in the"),
            ("Is the {O} in the {P}?",),
        ),
        Family(
            "transcript",
            "heldout",
            True,
            {
                "put": (
                    ("Okay, {A} {V} {O} in the {P}.", "placed", "did not place"),
                    ("Just so you know, {A} {V} {O} in the {P}.", "stored", "did not store"),
                ),
                "move": (
                    ("Okay, {A} {V} {O} into the {P}.", "shifted", "did not shift"),
                    ("By the way, {A} {V} {O} into the {P}.", "carried", "did not carry"),
                ),
                "take": (
                    ("{A} {V} {O} for a moment.", "grabbed", "did not grab"),
                    ("{A} {V} {O}.", "picked up", "did not pick up"),
                ),
                "give": (
                    ("{A} {V} {O} to {R}.", "passed", "did not pass"),
                    ("Here, {A} {V} {O} over to {R}.", "passed", "did not pass"),
                ),
                "drop": (("{A} {V} whatever {H} carrying into the {P}.", "dropped", "did not drop"),),
                "move_all": (("{A} {V} {Q} of the stuff in the {S} into the {P}.", "shifted", "did not shift"),),
                "shuttle": (
                    (
                        "{A} {V} {O} {N} between the {S} and the {P}, beginning in the {S}.",
                        "switched",
                        "did not switch",
                    ),
                ),
                "mention": (("Ugh, the {P} is so dusty.", "", ""), ("Remind me to fix the {P} later.", "", "")),
                "absurd": (
                    ("{O} danced a waltz in the {P}.", "", ""),
                    ("{O} read a novel in the {P}.", "", ""),
                ),
                "chat": (("{T}", "", ""),),
            },
            _CHAT_HELDOUT,
            ("At this point, the {O} can be found in the", "Which means the {O} is currently in the"),
            ("Is the {O} in the {P} at this point?",),
        ),
        Family(
            "diary",
            "heldout",
            False,
            {
                "put": (
                    ("In the morning, {A} {V} {O} in the {P}.", "placed", "did not place"),
                    ("Later on, {A} {V} {O} in the {P}.", "stored", "did not store"),
                ),
                "move": (
                    ("Around noon, {A} {V} {O} into the {P}.", "shifted", "did not shift"),
                    ("In the afternoon, {A} {V} {O} into the {P}.", "carried", "did not carry"),
                ),
                "take": (
                    ("Then {A} {V} {O}.", "grabbed", "did not grab"),
                    ("At some point, {A} {V} {O}.", "picked up", "did not pick up"),
                ),
                "give": (
                    ("Later, {A} {V} {O} to {R}.", "passed", "did not pass"),
                    ("After lunch, {A} {V} {O} to {R}.", "passed", "did not pass"),
                ),
                "drop": (("In the evening, {A} {V} whatever {H} carrying into the {P}.", "dropped", "did not drop"),),
                "move_all": (
                    ("That day {A} {V} {Q} of the stuff in the {S} into the {P}.", "shifted", "did not shift"),
                ),
                "shuttle": (
                    (
                        "Bored, {A} {V} {O} {N} between the {S} and the {P}, beginning in the {S}.",
                        "switched",
                        "did not switch",
                    ),
                ),
                "mention": (
                    ("{A} complained that the {P} was dusty.", "", ""),
                    ("{A} wanted to repaint the {P}.", "", ""),
                ),
                "absurd": (
                    ("{O} danced a waltz in the {P}.", "", ""),
                    ("{O} read a novel in the {P}.", "", ""),
                ),
                "chat": (('{A} wrote: "{T}"', "", ""),),
            },
            _CHAT_HELDOUT,
            ("By now the {O} is in the", "As of tonight, the {O} is in the"),
            ("Is the {O} in the {P} by now?",),
        ),
    )
}


@dataclass(frozen=True)
class Words:
    """A split's word lists: ``people`` (name → "she" / "he"), ``objects``, ``places`` (each
    takes "in the …"; the answers, so they must be single tokens — see
    :func:`interp.worlds.dialogue.natural.usable_words`)."""

    people: dict[str, str]
    objects: tuple[str, ...]
    places: tuple[str, ...]


#: the word lists of each split (disjoint between splits)
WORDS: dict[str, Words] = {
    "train": Words(
        {"Ann": "she", "Bob": "he", "Cara": "she", "Dan": "he", "Eve": "she", "Tom": "he", "Lucy": "she", "Sam": "he"},
        ("key", "pen", "ball", "cup", "book", "phone", "coin", "ring", "hat", "spoon"),
        ("drawer", "box", "basket", "bag", "fridge", "closet", "car", "sink", "oven", "jar", "bucket", "cupboard"),
    ),
    "heldout": Words(
        {"Mia": "she", "Leo": "he", "Zoe": "she", "Max": "he", "Ivy": "she", "Ray": "he", "Nina": "she", "Joe": "he"},
        ("wallet", "knife", "bottle", "sock", "shoe", "lamp", "brush", "plate", "toy", "glove"),
        ("cabinet", "trunk", "garage", "kitchen", "shed", "tent", "van", "barn", "office", "pot", "bin", "crate"),
    ),
}


def family_names(split: str) -> tuple[str, ...]:
    """The families of a split, in a fixed order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return tuple(n for n, f in FAMILIES.items() if f.split == split)


def _join(words: Sequence[str], join: str) -> str:
    if len(words) == 1:
        return words[0]
    return f"{words[0]} and {words[1]}" if join == "and" else f"either {words[0]} or {words[1]}"


def _agent(e: Event, family: Family) -> str:
    if not family.dialogue:
        return _join(e.agents, e.agent_join)
    if len(e.agents) == 1:
        return "I"
    return f"{e.agents[1]} and I" if e.agent_join == "and" else f"either {e.agents[1]} or I"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def render_event(e: Event, family: Family, pronouns: dict[str, str]) -> str:
    """One event as one sentence of ``family`` (without the speaker tag)."""
    options = family.phrasings[e.kind]
    frame, verb, negated = options[e.style % len(options)]
    objects = [f"the {o}" for o in e.objects]
    holder = "I was" if family.dialogue else f"{pronouns.get(e.agents[0], 'they')} was"
    text = frame.format(
        A=_agent(e, family),
        V=negated if e.negated else verb,
        O=_join(objects, e.object_join) if objects else "",
        P=e.place or "",
        S=e.source or "",
        R=e.recipient or "",
        N=TIMES_WORDS.get(e.times, str(e.times)),
        Q=e.quantifier,
        H=holder,
        T=family.small_talk[e.style % len(family.small_talk)],
    )
    return _cap(text)


def render_context(events: Sequence[Event], family: Family, pronouns: dict[str, str]) -> str:
    """The conversation, one sentence a line; a dialogue family tags each with its speaker
    (``Ann: …``), the event's first agent."""
    lines = []
    for e in events:
        text = render_event(e, family, pronouns)
        lines.append(f"{e.agents[0]}: {text}" if family.dialogue else text)
    return "\n".join(lines)


def closing(family: Family, obj: str, style: int) -> str:
    """The closing cloze for ``obj`` (ends right before the place)."""
    return family.closings[style % len(family.closings)].format(O=obj)


def question(family: Family, obj: str, place: str, style: int) -> str:
    """The yes/no question "Is the ``obj`` in the ``place``?" in ``family``'s words."""
    return family.questions[style % len(family.questions)].format(O=obj, P=place)


def place_mentions(text: str, places: Sequence[str]) -> list[str]:
    """The places ``text`` names, in order of appearance, repeats kept (whole words only)."""
    if not places:
        return []
    pattern = re.compile(r"\b(" + "|".join(re.escape(p) for p in sorted(places, key=len, reverse=True)) + r")\b")
    return pattern.findall(text)


__all__ = [
    "FAMILIES",
    "SPLITS",
    "TIMES_WORDS",
    "WORDS",
    "Family",
    "Phrase",
    "Words",
    "closing",
    "family_names",
    "place_mentions",
    "question",
    "render_context",
    "render_event",
]
