"""Natural-English location-tracking conversations with exact gold, as contrast examples.

Each *group* is an original conversation (2–3 people, 3 objects, 4 places: puts, moves, a
take / hand-over / drop chain, a shuttle, a move of "all of the things" somewhere, a joined
subject, mentions of places and small talk; half of them end with a distractor naming another
place, :data:`TAIL`) followed by one alteration per PragWorld category
it admits (:mod:`~interp.worlds.dialogue.tracking_alter`) and a paraphrase. Every gold comes
from the world's simulation (:mod:`~interp.worlds.dialogue.tracking`), so flip / invariant is exact.

Two forms of the same groups (:func:`dialogue_examples`):

- ``cloze``: the conversation, then "So right now the key is in the" → `` drawer``. The foil of
  an original (and of an invariant alteration) is the object's *previous* place — where it was
  before its last move, the answer of a reader who missed that move, like IOI's repeated subject;
  an object never moved has the last other place mentioned. The foil of a flip is the original's
  gold (the answer of a reader who missed the alteration). Only alterations whose gold is a
  place are drawn.
- ``yesno``: PragWorld's label prompt (:func:`interp.datasets.pragworld.label_prompt`) with the
  question "Is the key in the drawer?" → `` yes`` / `` no``; originals ask about the gold place
  and the foil place in turn (balanced yes / no); an alteration keeps the question unless it
  targets it. A fact the conversation leaves open ("either … or", "some") is a No, as PragWorld
  scores "cannot answer"; those alterations are drawn here too.

Answers are single tokens of the model's tokenizer: the places are filtered to those that are
one token with a leading space (:func:`usable_words`; too few is an error naming the tokenizer)
and every example's correct and foil are checked (:func:`require_single_token`). Same tokenizer,
settings and seed → the same examples (``numpy``'s PCG64, seeded with the seed and the split, so
a train and a heldout file of one seed do not share conversation structures either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from interp.datasets.contrast import ContrastExample, ContrastExamples
from interp.datasets.ioi import n_tokens, single_token_words, tokenizer_name
from interp.worlds.dialogue import render, tracking
from interp.worlds.dialogue.alterations import CATEGORIES, CONTEXT, INVARIANT
from interp.worlds.dialogue.conversation import Conversation
from interp.worlds.dialogue.tracking import Event
from interp.worlds.dialogue.tracking_alter import PARAPHRASE, draw, paraphrase

#: the two forms of an item (module docstring)
FORMS = ("cloze", "yesno")
#: the category of a group's unaltered row
ORIGINAL = "Original"
#: places a conversation draws (the answers and foils come from them)
N_PLACES = 4
#: objects a conversation draws
N_OBJECTS = 3
#: the yes/no form's answer tokens
ANSWERS = (" yes", " no")
#: the chance that a block of events is about the object that will be asked about (else any object)
FOCUS = 0.6
#: the chance that a conversation ends with a distractor after its last event: another object moved,
#: or a place mentioned, to a place other than the asked object's — so "the most recently mentioned
#: place" is the answer only about half the time (without it, that shortcut answered 94 % of the
#: items: the asked object's last move was usually the last place said)
TAIL = 0.5


class DialogueError(ValueError):
    """The generator cannot make what was asked (a word that is not one token, too few words)."""


@dataclass(frozen=True)
class DialogueConfig:
    """What :func:`dialogue_examples` makes: ``groups`` originals (each followed by its
    alterations and paraphrase), ``seed``, ``split`` (``train`` | ``heldout``: the template
    families and word lists), ``form`` (``cloze`` | ``yesno``), the alteration ``categories``
    (default all seven) and whether to add the ``paraphrase``."""

    groups: int
    seed: int = 0
    split: str = "train"
    form: str = "cloze"
    categories: tuple[str, ...] = CATEGORIES
    paraphrase: bool = True

    def __post_init__(self) -> None:
        if self.groups < 1:
            raise DialogueError(f"groups must be ≥ 1, got {self.groups}")
        if self.split not in render.SPLITS:
            raise DialogueError(f"split must be one of {render.SPLITS}, got {self.split!r}")
        if self.form not in FORMS:
            raise DialogueError(f"form must be one of {FORMS}, got {self.form!r}")
        unknown = [c for c in self.categories if c not in CATEGORIES]
        if unknown:
            raise DialogueError(f"unknown alteration(s) {unknown}; known: {', '.join(CATEGORIES)}")


@dataclass
class DialogueExamples:
    """The examples (:class:`~interp.datasets.contrast.ContrastExamples`) and what was left out:
    ``missing`` counts, per category, the groups that admitted no alteration of it;
    ``inadmissible``, the candidate edits dropped because their gold has no answer token."""

    examples: ContrastExamples
    missing: dict[str, int] = field(default_factory=dict)
    inadmissible: dict[str, int] = field(default_factory=dict)


def require_single_token(tokenizer: Any, text: str, what: str) -> None:
    """A :class:`DialogueError` naming ``text`` and the tokenizer unless ``text`` is one token."""
    k = n_tokens(tokenizer, text)
    if k != 1:
        pieces = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])
        raise DialogueError(
            f"{what} {text!r} is not one token of the tokenizer {tokenizer_name(tokenizer)!r}: it is {k} tokens "
            f"{pieces}; a contrast example scores one next token, so use words that are single tokens"
        )


def usable_words(tokenizer: Any, split: str, need: int = N_PLACES + 2) -> render.Words:
    """The split's word lists with the places cut to single tokens (with a leading space) of
    ``tokenizer``; fewer than ``need`` is a :class:`DialogueError` naming the tokenizer."""
    words = render.WORDS[split]
    places = single_token_words(tokenizer, words.places)
    if len(places) < need:
        raise DialogueError(
            f"the tokenizer {tokenizer_name(tokenizer)!r} has only {len(places)} of the {len(words.places)} "
            f"{split} places that are one token with a leading space ({places}); the dialogue items need at "
            f"least {need} (answers and foils are places)"
        )
    return render.Words(words.people, words.objects, tuple(places))


def _pick(rng: np.random.Generator, pool: Sequence[str], k: int) -> list[str]:
    return [pool[i] for i in rng.choice(len(pool), size=k, replace=False)]


def _steps(rng: np.random.Generator, people: list[str], objects: list[str], places: list[str]) -> list[Event]:
    """The events of one draw: set-up puts, then the shuffled blocks (module docstring)."""

    def who() -> str:
        return people[int(rng.integers(len(people)))]

    def style() -> int:
        return int(rng.integers(4))

    def where(obj: str, state) -> str:
        now = state.get(obj, frozenset())
        return next(iter(now)) if len(now) == 1 and tracking.is_place(next(iter(now))) else places[0]

    home = [places[int(rng.integers(len(places)))] for _ in objects]
    events = [Event("put", (who(),), (o,), place=p, style=style()) for o, p in zip(objects, home)]
    if home[0] == home[1] and rng.random() < 0.7:  # one joined put: a connective to change
        events = [Event("put", (who(),), tuple(objects[:2]), place=home[0], style=style()), events[2]]
    optional = [b for b in ("move", "move", "mention", "mention", "chat", "chat", "negated") if rng.random() < 0.6]
    blocks = ["shuttle", "move_all", "chain", "joint", *optional]
    rng.shuffle(blocks)
    for b in blocks:
        state = tracking.simulate(events)
        o = objects[0] if rng.random() < FOCUS else objects[int(rng.integers(len(objects)))]
        a, others = who(), list(places)
        if b == "shuttle":
            src = where(o, state)
            dst = [p for p in places if p != src][int(rng.integers(len(places) - 1))]
            events.append(
                Event("shuttle", (a,), (o,), place=dst, source=src, times=int(rng.integers(1, 5)), style=style())
            )
        elif b == "move_all":
            src = where(o, state)
            dst = [p for p in places if p != src][int(rng.integers(len(places) - 1))]
            events.append(Event("move_all", (a,), place=dst, source=src, style=style()))
        elif b == "chain":
            events.append(Event("take", (a,), (o,), style=style()))
            holder = a
            if len(people) > 1 and rng.random() < 0.7:
                holder = [p for p in people if p != a][int(rng.integers(len(people) - 1))]
                events.append(Event("give", (a,), (o,), recipient=holder, style=style()))
            kind = "drop" if rng.random() < 0.5 else "put"
            dst = others[int(rng.integers(len(others)))]
            events.append(Event(kind, (holder,), (o,) if kind == "put" else (), place=dst, style=style()))
        elif b in ("move", "negated"):
            dst = others[int(rng.integers(len(others)))]
            events.append(Event("move", (a,), (o,), place=dst, negated=b == "negated", style=style()))
        elif b == "joint":  # two agents or two objects: a connective to change
            dst = others[int(rng.integers(len(others)))]
            if rng.random() < 0.5:
                pair = (a, [p for p in people if p != a][int(rng.integers(len(people) - 1))])
                events.append(Event("move", pair, (o,), place=dst, style=style()))
            else:
                things = (o, [x for x in objects if x != o][int(rng.integers(len(objects) - 1))])
                events.append(Event("move", (a,), things, place=dst, style=style()))
        elif b == "mention":
            events.append(Event("mention", (a,), place=others[int(rng.integers(len(others)))], style=style()))
        elif b == "chat":
            events.append(Event("chat", (a,), style=style()))
    return events


def _distractor(
    rng: np.random.Generator, people: list[str], objects: list[str], places: list[str], obj: str, gold: str | None
) -> Event:
    """A last event that names a place other than ``obj``'s (``gold``) without touching ``obj``:
    another object moved there, or the place mentioned (:data:`TAIL`)."""
    who = people[int(rng.integers(len(people)))]
    elsewhere = [p for p in places if p != gold]
    dst = elsewhere[int(rng.integers(len(elsewhere)))]
    others = [o for o in objects if o != obj]
    if rng.random() < 0.5:
        other = others[int(rng.integers(len(others)))]
        return Event("move", (who,), (other,), place=dst, style=int(rng.integers(4)))
    return Event("mention", (who,), place=dst, style=int(rng.integers(4)))


def sample_conversation(
    rng: np.random.Generator, words: render.Words, family: str, max_tries: int = 200
) -> Conversation:
    """One original conversation in ``family`` with words from ``words``: an object asked about
    whose final place is known and which moved at least once (redrawn up to ``max_tries``)."""
    names = list(words.people)
    for _ in range(max_tries):
        people = _pick(rng, names, int(rng.integers(2, 4)))
        objects = _pick(rng, words.objects, N_OBJECTS)
        places = _pick(rng, words.places, N_PLACES)
        events = tuple(_steps(rng, people, objects, places))
        askable = [
            o for o in objects if tracking.place_of(events, o) is not None and tracking.previous_place(events, o)
        ]
        if askable:
            obj = objects[0] if objects[0] in askable else askable[int(rng.integers(len(askable)))]
            if rng.random() < TAIL:
                events += (_distractor(rng, people, objects, places, obj, tracking.place_of(events, obj)),)
            return Conversation(
                events,
                tuple((p, words.people[p]) for p in people),
                tuple(objects),
                tuple(places),
                obj,
                ask_place=tracking.place_of(events, obj) or places[0],
                family=family,
                style=int(rng.integers(4)),
            )
    raise DialogueError(f"no conversation with a known, moved object in {max_tries} draws")


def cloze_foil(conv: Conversation) -> str:
    """The foil of an original cloze item (module docstring): the object's previous place, else
    the last other place mentioned, else another place of the cast."""
    gold = conv.gold_place()
    prev = tracking.previous_place(conv.events, conv.obj)
    if prev is not None and prev != gold:
        return prev
    for p in reversed(conv.mentions()):
        if p != gold:
            return p
    return next(p for p in conv.places if p != gold)


def _event_dict(e: Event) -> dict[str, Any]:
    defaults = Event("chat", ("x",))
    out: dict[str, Any] = {"kind": e.kind}
    for name in (
        "agents",
        "objects",
        "place",
        "source",
        "recipient",
        "agent_join",
        "object_join",
        "quantifier",
        "times",
        "negated",
    ):
        v = getattr(e, name)
        if v != getattr(defaults, name):
            out[name] = list(v) if isinstance(v, tuple) else v
    return out


def _example(
    tokenizer: Any, conv: Conversation, group: str, category: str, form: str, correct: str, foil: str, extra: dict
) -> ContrastExample:
    from interp.datasets.pragworld import label_prompt

    for text, what in ((correct, "the correct answer"), (foil, "the foil")):
        require_single_token(tokenizer, text, what)
    prompt = conv.cloze_prompt() if form == "cloze" else label_prompt(conv.context(), conv.question())
    meta = {
        "category": category,
        "form": form,
        "family": conv.family,
        "object": conv.obj,
        "gold_place": conv.gold_place(),
        "initial": tracking.first_place(conv.events, conv.obj),
        "mentions": conv.mentions(),
        "events": [_event_dict(e) for e in conv.events],
        **extra,
    }
    if form == "yesno":
        meta.update(question=conv.question(), ask_place=conv.ask_place, context=conv.context())
    return ContrastExample(prompt=prompt, correct=correct, foil=foil, group=group, template=category, meta=meta)


def dialogue_examples(tokenizer: Any, config: DialogueConfig) -> DialogueExamples:
    """The groups of ``config`` (module docstring) as contrast examples for ``tokenizer``: group
    ``<split>:<k>``, template = the category (``Original``, the seven, ``Paraphrase``), meta =
    category, effect, target, family, split, object, gold place, initial place, the places
    mentioned in order, the events (for replay) and, in the yes/no form, the question."""
    words = usable_words(tokenizer, config.split)
    if config.form == "yesno":
        for a in ANSWERS:
            require_single_token(tokenizer, a, "the answer")
    families = render.family_names(config.split)
    # the split enters the seed: train and heldout files of one seed share no conversation structure
    rng = np.random.default_rng([config.seed, render.SPLITS.index(config.split)])
    out: list[ContrastExample] = []
    missing = {c: 0 for c in config.categories}
    inadmissible = {c: 0 for c in config.categories}
    for k in range(config.groups):
        conv = sample_conversation(rng, words, families[k % len(families)])
        group = f"{config.split}:{k}"
        foil_place = cloze_foil(conv)
        if config.form == "yesno":
            conv = conv.with_(ask_place=conv.gold_place() if k % 2 == 0 else foil_place)
        gold_of = (lambda c: c.gold_place()) if config.form == "cloze" else (lambda c: c.gold_yes())
        admissible = (lambda g: g is not None) if config.form == "cloze" else (lambda g: True)
        base = {"split": config.split, "group_index": k}

        def answer(gold, original_gold, foil_place=foil_place) -> tuple[str, str]:
            if config.form == "yesno":
                return (ANSWERS[0], ANSWERS[1]) if gold else (ANSWERS[1], ANSWERS[0])
            foil = original_gold if gold != original_gold else foil_place
            return " " + gold, " " + foil

        gold0 = gold_of(conv)
        c, f = answer(gold0, gold0)
        out.append(
            _example(tokenizer, conv, group, ORIGINAL, config.form, c, f, {**base, "effect": None, "target": None})
        )
        for cat in config.categories:
            d = draw(conv, cat, rng, gold_of, admissible)
            if d is None:
                missing[cat] += 1
                continue
            inadmissible[cat] += d.left_out
            c, f = answer(d.gold, gold0)
            extra = {**base, "effect": d.effect, "target": d.edit.target}
            out.append(_example(tokenizer, d.edit.conversation, group, cat, config.form, c, f, extra))
        if config.paraphrase:
            c, f = answer(gold0, gold0)
            extra = {**base, "effect": INVARIANT, "target": CONTEXT}
            out.append(_example(tokenizer, paraphrase(conv, rng), group, PARAPHRASE, config.form, c, f, extra))
    return DialogueExamples(ContrastExamples(out), missing, inadmissible)


def pragworld_rows(examples: Sequence[ContrastExample]) -> pd.DataFrame:
    """Yes/no examples as rows of :func:`interp.datasets.pragworld.write_pragworld_csv` (the
    manual split's layout; paraphrases, which PragWorld has no category for, are left out)."""
    from interp.worlds.dialogue.export import CATEGORY_KEYS

    rows = []
    for e in examples:
        m = e.meta
        if m.get("form") != "yesno":
            raise DialogueError(f"pragworld_rows needs yes/no examples (form yesno), got form {m.get('form')!r}")
        if m["category"] == PARAPHRASE:
            continue
        altered = m["category"] != ORIGINAL
        rows.append(
            {
                "group": int(m["group_index"]),
                "context": m["context"],
                "question": m["question"],
                "gold": int(e.correct == ANSWERS[0]),
                "altered": altered,
                "target": m["target"].lower() if altered else "none",
                "category": CATEGORY_KEYS[m["category"]] if altered else None,
                "effect": m["effect"].lower() if altered else None,
            }
        )
    return pd.DataFrame(rows)


__all__ = [
    "ANSWERS",
    "FOCUS",
    "FORMS",
    "N_OBJECTS",
    "N_PLACES",
    "ORIGINAL",
    "TAIL",
    "DialogueConfig",
    "DialogueError",
    "DialogueExamples",
    "cloze_foil",
    "dialogue_examples",
    "pragworld_rows",
    "require_single_token",
    "sample_conversation",
    "usable_words",
]


def flip_pairs(tokenizer: Any, examples: Sequence[ContrastExample]) -> list[ContrastExample]:
    """Patching pairs from cloze ``examples``: each flipped alteration as the *corrupted* run of its
    group's original (clean: the original's prompt; correct: the original's gold; foil: the
    alteration's gold), kept only when the two prompts have the same token length for
    ``tokenizer`` (activation patching aligns positions). Order: the examples'."""
    orig = {e.group: e for e in examples if e.meta.get("category") == "Original"}
    pairs = []
    for e in examples:
        o = orig.get(e.group)
        if e.meta.get("effect") != "Flip" or o is None:
            continue
        if n_tokens(tokenizer, e.prompt) == n_tokens(tokenizer, o.prompt):
            pairs.append(
                ContrastExample(
                    prompt=o.prompt,
                    corrupted=e.prompt,
                    correct=o.correct,
                    foil=e.correct,
                    group=e.group,
                    template=e.template,
                )  # fmt: skip
            )
    return pairs
