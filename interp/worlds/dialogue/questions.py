"""Template questions and their gold answers (PragWorld §3's quantity / universal / existential
templates, plus a location template and two-clause questions joined by and / exclusive or).

The gold answer is computed from the facts alone (:mod:`interp.worlds.dialogue.state`); the DFA
uses the same functions clause by clause while it reads a probe, so the answer it forces after
``?`` is :func:`answer` of the facts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from interp.worlds.dialogue import state as S
from interp.worlds.dialogue.grammar import Clause, Lexicon, Question


def clause_kind(lex: Lexicon, quant: str) -> tuple[str, int | None]:
    """``"two"`` → (quantity, 2); ``"all"`` → universal; ``"some"`` → existential; ``"any"`` → location."""
    if quant in lex.numbers:
        return S.QUANTITY, lex.count(quant)
    kinds = {"all": S.UNIVERSAL, "some": S.EXISTENTIAL, "any": S.LOCATION}
    if quant not in kinds:
        raise ValueError(f"not a quantity or quantifier word: {quant!r}")
    return kinds[quant], None


def clause_truth(lex: Lexicon, facts: S.Facts, clause: Clause) -> bool:
    """Whether one clause of a question holds in ``facts``."""
    kind, n = clause_kind(lex, clause.quant)
    return S.clause_value(facts, kind, n, lex.objects.index(clause.obj), lex.locations.index(clause.loc))


def answer(lex: Lexicon, facts: S.Facts, question: Question) -> bool:
    """The gold answer (True = yes) of ``question`` given ``facts``."""
    values = [clause_truth(lex, facts, c) for c in question.clauses]
    return S.combine(values[0], question.connective, values[1] if len(values) > 1 else None)


def question_type(lex: Lexicon, question: Question) -> str:
    """The first clause's type, or ``connective`` for two-clause questions."""
    if question.connective is not None:
        return "connective"
    return clause_kind(lex, question.clauses[0].quant)[0]


def random_clause(lex: Lexicon, rng: np.random.Generator) -> Clause:
    """A clause of a uniformly drawn type, with uniform entities (and a uniform number word)."""
    kind = S.QUESTION_TYPES[int(rng.integers(len(S.QUESTION_TYPES)))]
    if kind == S.QUANTITY:
        quant = lex.numbers[int(rng.integers(len(lex.numbers)))]
    else:
        quant = {S.UNIVERSAL: "all", S.EXISTENTIAL: "some", S.LOCATION: "any"}[kind]
    return Clause(
        quant, lex.objects[int(rng.integers(len(lex.objects)))], lex.locations[int(rng.integers(len(lex.locations)))]
    )


def random_question(lex: Lexicon, rng: np.random.Generator, p_two: float = 0.25) -> Question:
    """One clause, or (with probability ``p_two``) two joined by a uniform connective."""
    if rng.random() < p_two:
        return Question((random_clause(lex, rng), random_clause(lex, rng)), ("and", "or")[int(rng.integers(2))])
    return Question((random_clause(lex, rng),))


class QuestionTable:
    """Every single-clause question of a lexicon, and (cached per fact state) which are true.

    Sampling balanced questions needs the truth of many clauses for one fact state; a table
    computed once per state (:func:`~interp.worlds.dialogue.state.clause_values`) does it without
    drawing and rejecting.
    """

    def __init__(self, lex: Lexicon):
        self.clauses: list[Clause] = []
        keys, types = [], []
        for quant in (*lex.numbers, "all", "some", "any"):
            kind, n = clause_kind(lex, quant)
            for o, obj in enumerate(lex.objects):
                for l, loc in enumerate(lex.locations):
                    self.clauses.append(Clause(quant, obj, loc))
                    keys.append((kind, n, o, l))
                    types.append(kind)
        self.keys = tuple(keys)
        self.by_type = {k: [i for i, t in enumerate(types) if t == k] for k in S.QUESTION_TYPES}
        self.truth = lru_cache(maxsize=20_000)(self._truth)

    def _truth(self, facts: S.Facts) -> tuple[bool, ...]:
        return S.clause_values(facts, self.keys)


def sample_question(
    table: QuestionTable, facts: S.Facts, rng: np.random.Generator, *, p_two: float = 0.25
) -> tuple[Question, bool]:
    """A random question whose answer is yes or no with probability 1/2 *within each type*, and
    its answer.

    Balance matters, and per type: most quantity questions are "no" and most "any" questions
    "yes", and a model trained on unbalanced questions reaches a good plain accuracy from the
    question's type alone (a first model here answered every existential and quantity question
    "no" and most location questions "yes"). So a clause type is drawn among the types that can be
    both true and false given the facts, then the wanted truth, then a clause of that type with it;
    two clauses (probability ``p_two``) draw the connective, the answer, the clause truths that give
    it (uniform over the ways), and each clause the same way. When nothing has been placed, every
    clause is false and the answer is no.
    """
    truth = table.truth(facts)
    types = [t for t in S.QUESTION_TYPES if len({truth[i] for i in table.by_type[t]}) == 2]
    if not types:  # nothing placed: all false
        kind = S.QUESTION_TYPES[int(rng.integers(len(S.QUESTION_TYPES)))]
        idx = table.by_type[kind]
        i = idx[int(rng.integers(len(idx)))]
        return Question((table.clauses[i],)), truth[i]

    want = bool(rng.random() < 0.5)
    if rng.random() < p_two:
        conn = ("and", "or")[int(rng.integers(2))]
        ways = [(a, b) for a in (True, False) for b in (True, False) if S.combine(a, conn, b) == want]
        v1, v2 = ways[int(rng.integers(len(ways)))]
        return Question((_clause(table, truth, types, v1, rng), _clause(table, truth, types, v2, rng)), conn), want
    return Question((_clause(table, truth, types, want, rng),)), want


def _clause(
    table: QuestionTable, truth: tuple[bool, ...], types: list[str], value: bool, rng: np.random.Generator
) -> Clause:
    """A type uniform among ``types``, then a clause of it with truth ``value``, uniformly."""
    kind = types[int(rng.integers(len(types)))]
    idx = [i for i in table.by_type[kind] if truth[i] == value]
    return table.clauses[idx[int(rng.integers(len(idx)))]]
