"""PragWorld's seven minimal alterations (§3), done deterministically on dialogue-world items.

Each alteration is a token-level edit of one utterance of the conversation (the *context*) or of
the question, re-parsed and re-run through the DFA: the altered item's gold answer is recomputed
from the state it reaches, and the label is exact — *Flip* when the gold changed, *Invariant*
when it did not. No hand annotation, and no alteration that leaves the world's language (an edit
whose result is illegal, e.g. a ``put`` past an object's cap, is never proposed).

=========================== ======================================================================
category                    edit (C = context, Q = question)
=========================== ======================================================================
Negation                    C: ``put`` ↔ ``did not put``, ``moved`` ↔ ``did not move``
Variable Substitution       C or Q: one agent / object / location → another of its kind
Quantity Change             C or Q: one number word → another (``two`` → ``three``)
Variable Swap               C: two utterances exchange an entity of one kind (the paper's
                            "I left the watermelons there" ↔ "…oranges…"); Q: the two clauses do
Quantifier Change           Q or a question asked in C: ``all`` ↔ ``some``
Logical Connective Change   Q, a subject in C (``ann and bob`` ↔ ``ann or bob``) or a question in C
Injecting Inconsistent Data C: one absurd detail inserted (``the sheep sang in barn``)
=========================== ======================================================================

Where this goes beyond / differs from the paper: the paper's annotators chose *meaningful*
alterations and wrote free text; here every legal edit of a category is a candidate
(:func:`candidates`) and one is drawn — flip or invariant equally likely where the item admits
both, edits that touch an object the question asks about weighted ×3 (:func:`alter`). Some
categories are invariant by construction in this world — who did something never enters the
state, a question asked inside the dialogue changes nothing, and an absurd detail establishes
nothing — which mirrors the manual split, where 56 of 65 context quantifier changes and 15 of 21 injected details are
invariant. Negation of the question itself (4 rows in the manual split) is not in the grammar.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from interp.worlds.base import WorldError
from interp.worlds.dialogue.grammar import SPEAKERS, Absurd, Item, Probe, Question, parse

NEGATION = "Negation"
SUBSTITUTION = "Variable Substitution"
QUANTITY = "Quantity Change"
SWAP = "Variable Swap"
QUANTIFIER = "Quantifier Change"
CONNECTIVE = "Logical Connective Change"
INCONSISTENT = "Injecting Inconsistent Data"
CATEGORIES = (NEGATION, SUBSTITUTION, QUANTITY, SWAP, QUANTIFIER, CONNECTIVE, INCONSISTENT)

CONTEXT, QUESTION = "Context", "Question"
FLIP, INVARIANT = "Flip", "Invariant"

#: weight of a candidate that touches an object the question asks about (others weigh 1)
RELEVANT_WEIGHT = 3.0


@dataclass(frozen=True)
class Alteration:
    """One altered item with its recomputed gold and exact label."""

    category: str
    target: str
    item: Item
    gold: bool
    original_gold: bool

    @property
    def effect(self) -> str:
        return FLIP if self.gold != self.original_gold else INVARIANT


@dataclass(frozen=True)
class _Edit:
    target: str
    item: Item
    relevant: bool


def _entity_classes(world) -> dict[str, tuple[str, ...]]:
    lex = world.lexicon
    return {"agent": lex.agents, "object": lex.objects, "location": lex.locations}


def _rebuild(item: Item, index: int | None, tokens: list[str]) -> Item | None:
    """``item`` with utterance ``index`` (or the question, ``None``) replaced by ``tokens``."""
    try:
        if index is None:
            parsed = parse(["Q:", *tokens, "yes"])
            return Item(item.context, parsed[0].question)  # type: ignore[union-attr]
        parsed = parse(tokens)
    except (WorldError, IndexError):
        return None
    if len(parsed) != 1 or isinstance(parsed[0], Probe):
        return None
    return Item(item.context[:index] + (parsed[0],) + item.context[index + 1 :], item.question)


def _question_objects(item: Item) -> set[str]:
    return {c.obj for c in item.question.clauses}


def _mentions(tokens, objects: set[str]) -> bool:
    return any(t in objects for t in tokens)


def _slots(item: Item) -> Iterator[tuple[int | None, list[str]]]:
    """Each utterance (by index) and the question (``None``) as a token list."""
    for i, u in enumerate(item.context):
        yield i, list(u.tokens())
    yield None, list(item.question.tokens())


def _single_edits(world, item: Item, category: str) -> Iterator[_Edit]:
    """Edits that rewrite one utterance or the question."""
    lex, asked = world.lexicon, _question_objects(item)
    classes = _entity_classes(world)
    for index, toks in _slots(item):
        target = QUESTION if index is None else CONTEXT
        variants: list[list[str]] = []
        if category == NEGATION and index is not None:
            if "did" in toks:
                k = toks.index("did")
                verb = {"put": "put", "move": "moved"}[toks[k + 2]]
                variants.append(toks[:k] + [verb] + toks[k + 3 :])
            else:
                for k, t in enumerate(toks):
                    if t in ("put", "moved"):
                        verb = {"put": "put", "moved": "move"}[t]
                        variants.append(toks[:k] + ["did", "not", verb] + toks[k + 1 :])
        elif category == SUBSTITUTION:
            for k, t in enumerate(toks):
                for pool in classes.values():
                    if t in pool:
                        variants += [toks[:k] + [other] + toks[k + 1 :] for other in pool if other != t]
        elif category == QUANTITY:
            for k, t in enumerate(toks):
                if t in lex.numbers:
                    variants += [toks[:k] + [w] + toks[k + 1 :] for w in lex.numbers if w != t]
        elif category == QUANTIFIER:
            swap = {"all": "some", "some": "all"}
            for k, t in enumerate(toks):
                if t in swap:
                    variants.append(toks[:k] + [swap[t]] + toks[k + 1 :])
        elif category == CONNECTIVE:
            swap = {"and": "or", "or": "and"}
            for k, t in enumerate(toks):
                if t in swap:
                    variants.append(toks[:k] + [swap[t]] + toks[k + 1 :])
        for v in variants:
            new = _rebuild(item, index, v)
            if new is not None:
                relevant = index is None or _mentions(toks, asked) or _mentions(v, asked)
                yield _Edit(target, new, relevant)


def _swap_edits(world, item: Item) -> Iterator[_Edit]:
    """Two utterances exchange an entity of one kind; or the question's two clauses do."""
    asked = _question_objects(item)
    classes = _entity_classes(world)
    ctx = [list(u.tokens()) for u in item.context]
    for pool in classes.values():
        spots = [(i, k) for i, toks in enumerate(ctx) for k, t in enumerate(toks) if t in pool]
        for a in range(len(spots)):
            for b in range(a + 1, len(spots)):
                (i, k), (j, m) = spots[a], spots[b]
                if i == j or ctx[i][k] == ctx[j][m]:
                    continue
                ti, tj = list(ctx[i]), list(ctx[j])
                ti[k], tj[m] = ctx[j][m], ctx[i][k]
                first = _rebuild(item, i, ti)
                new = None if first is None else _rebuild(first, j, tj)
                if new is not None:
                    yield _Edit(CONTEXT, new, _mentions(ctx[i] + ctx[j], asked))
    q = item.question
    if q.connective is not None:
        c1, c2 = q.clauses
        for field in ("obj", "loc"):
            if getattr(c1, field) != getattr(c2, field):
                swapped1 = replace(c1, **{field: getattr(c2, field)})
                swapped2 = replace(c2, **{field: getattr(c1, field)})
                yield _Edit(QUESTION, Item(item.context, Question((swapped1, swapped2), q.connective)), True)


def _inject_edits(world, item: Item) -> Iterator[_Edit]:
    """One absurd detail inserted anywhere (about any object and location)."""
    lex, asked = world.lexicon, _question_objects(item)
    for pos in range(len(item.context) + 1):
        prev = item.context[pos - 1].speaker if pos > 0 else SPEAKERS[1]
        speaker = SPEAKERS[1] if prev == SPEAKERS[0] else SPEAKERS[0]
        for o in lex.objects:
            for loc in lex.locations:
                u = Absurd(speaker, o, loc)
                yield _Edit(CONTEXT, Item(item.context[:pos] + (u,) + item.context[pos:], item.question), o in asked)


def candidates(world, item: Item, category: str) -> list[tuple[_Edit, bool]]:
    """Every legal alteration of ``category`` with its recomputed gold (deterministic order)."""
    if category == SWAP:
        edits = _swap_edits(world, item)
    elif category == INCONSISTENT:
        edits = _inject_edits(world, item)
    elif category in CATEGORIES:
        edits = _single_edits(world, item, category)
    else:
        raise ValueError(f"unknown alteration {category!r}; known: {', '.join(CATEGORIES)}")
    out, seen = [], set()
    for e in edits:
        if e.item == item or e.item in seen:
            continue
        try:
            gold = world.gold(e.item)
        except WorldError:  # the edit left the language (e.g. a put past the cap)
            continue
        seen.add(e.item)
        out.append((e, gold))
    return out


def alter(
    world, item: Item, category: str, rng: np.random.Generator, original_gold: bool | None = None, balance: bool = True
) -> Alteration | None:
    """One alteration of ``category`` drawn among :func:`candidates`; ``None`` when the item admits
    none (e.g. no connective to change).

    With ``balance``, the label is drawn first (flip or invariant, equally likely) and the edit among
    the candidates with that label when there are any — most edits of a long conversation are
    invariant, and the paper's annotators, too, chose alterations that flip. Among the
    candidates, those touching an object the question asks about weigh ×3.
    """
    options = candidates(world, item, category)
    if not options:
        return None
    if original_gold is None:
        original_gold = world.gold(item)
    if balance:
        want_flip = bool(rng.random() < 0.5)
        chosen = [(e, g) for e, g in options if (g != original_gold) == want_flip]
        options = chosen or options
    w = np.array([RELEVANT_WEIGHT if e.relevant else 1.0 for e, _ in options])
    edit, gold = options[int(rng.choice(len(options), p=w / w.sum()))]
    return Alteration(category, edit.target, edit.item, gold, original_gold)


def alter_all(
    world, item: Item, rng: np.random.Generator, categories: tuple[str, ...] = CATEGORIES, balance: bool = True
) -> list[Alteration]:
    """One alteration per category (those the item admits), in :data:`CATEGORIES` order."""
    gold = world.gold(item)
    out = []
    for c in categories:
        a = alter(world, item, c, rng, gold, balance)
        if a is not None:
            out.append(a)
    return out
