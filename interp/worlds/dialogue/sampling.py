"""Drawing conversations: forwards (``generate``, benchmark items) and backwards from given facts
(``sample_prefix``, which the Myhill–Nerode metrics use to get two prefixes of one state).

The utterance mixture of a forward draw: a statement (a ``put`` most often; also negated puts,
``moved all``, negated moves, and 1 in 5 subjects are two agents joined by and/or), a question
asked in the dialogue, or an absurd detail; the first utterance is always a ``put``. Every draw
is legal by construction (puts only where the object has room, ``moved all`` only for objects that
are somewhere), and speakers alternate.
"""

from __future__ import annotations

import numpy as np

from interp.worlds.dialogue import state as S
from interp.worlds.dialogue.grammar import (
    SPEAKERS,
    Absurd,
    Ask,
    Item,
    Move,
    Probe,
    Put,
    Subject,
    Utterance,
)
from interp.worlds.dialogue.questions import random_question, sample_question

#: kind → weight of a forward draw
UTTERANCE_MIX = {"put": 0.55, "not_put": 0.10, "move": 0.10, "not_move": 0.05, "ask": 0.12, "absurd": 0.08}
#: a conversation opens with a placement, so no probe meets an empty world (where every answer
#: is "no", which would tie question types to answers)
FIRST_MIX = {"put": 1.0}
P_TWO_AGENTS = 0.2


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def random_subject(world, rng: np.random.Generator) -> Subject:
    """A random subject: one agent, or two joined by ``and`` / ``or``."""
    agents = world.lexicon.agents
    if rng.random() < P_TWO_AGENTS:
        i, j = rng.choice(len(agents), size=2, replace=False)
        return Subject((agents[int(i)], agents[int(j)]), _pick(rng, ("and", "or")))
    return Subject((_pick(rng, agents),))


def sample_utterance(
    world, facts: S.Facts, speaker: str, rng: np.random.Generator, mix: dict[str, float] | None = None
) -> Utterance:
    """One utterance legal after ``facts``, its kind drawn from ``mix`` (default :data:`UTTERANCE_MIX`)."""
    lex, cap = world.lexicon, world.max_count
    totals = [sum(r) for r in facts]
    kinds, weights = zip(*(mix or UTTERANCE_MIX).items())
    p = np.asarray(weights) / sum(weights)
    while True:
        kind = kinds[int(rng.choice(len(kinds), p=p))]
        o = int(rng.integers(len(lex.objects)))
        loc = _pick(rng, lex.locations)
        if kind == "put":
            room = [i for i, t in enumerate(totals) if t < cap]
            if not room:
                continue
            o = _pick(rng, room)
            n = int(rng.integers(1, cap - totals[o] + 1))
            return Put(speaker, random_subject(world, rng), False, lex.numbers[n - 1], lex.objects[o], loc)
        if kind == "not_put":
            return Put(speaker, random_subject(world, rng), True, _pick(rng, lex.numbers), lex.objects[o], loc)
        if kind == "move":
            present = [i for i, t in enumerate(totals) if t >= 1]
            if not present:
                continue
            return Move(speaker, random_subject(world, rng), False, lex.objects[_pick(rng, present)], loc)
        if kind == "not_move":
            return Move(speaker, random_subject(world, rng), True, lex.objects[o], loc)
        if kind == "ask":
            return Ask(speaker, random_question(lex, rng))
        return Absurd(speaker, lex.objects[o], loc)


def sample_conversation(world, n_utts: int, rng: np.random.Generator) -> tuple[list[Utterance], S.Facts]:
    """``n_utts`` utterances drawn forwards (speakers alternate, P1 first) and the facts they reach."""
    state = world.start()
    out: list[Utterance] = []
    for i in range(n_utts):
        u = sample_utterance(world, state[1], SPEAKERS[i % 2], rng, FIRST_MIX if i == 0 else None)
        state = world.run(u.tokens(), state)
        out.append(u)
    return out, state[1]


def sample_item(world, rng: np.random.Generator, n_utts: int | None = None) -> Item:
    """A benchmark item: a conversation and a balanced question about where it ends."""
    if n_utts is None:
        n_utts = int(rng.integers(world.min_utts, world.max_utts + 1))
    context, facts = sample_conversation(world, n_utts, rng)
    return Item(tuple(context), sample_question(world.questions, facts, rng)[0])


def sample_sequence(world, rng: np.random.Generator) -> list[str]:
    """A training sequence: a conversation with up to ``world.probes`` probes, the last at the end."""
    n_utts = int(rng.integers(world.min_utts, world.max_utts + 1))
    n_mid = int(rng.integers(0, world.probes))
    after = set(rng.choice(np.arange(1, n_utts + 1), size=min(n_mid, n_utts), replace=False).tolist())
    state = world.start()
    tokens: list[str] = []
    for i in range(n_utts):
        u = sample_utterance(world, state[1], SPEAKERS[i % 2], rng, FIRST_MIX if i == 0 else None)
        tokens += u.tokens()
        state = world.run(u.tokens(), state)
        if i + 1 in after and i + 1 < n_utts:
            tokens += _probe(world, state, rng).tokens()
    tokens += _probe(world, state, rng).tokens()
    return tokens


def _probe(world, state, rng: np.random.Generator) -> Probe:
    question, value = sample_question(world.questions, state[1], rng)
    return Probe(question, "yes" if value else "no")


# ---- backwards: a conversation that reaches given facts ---------------------------------------------


def _composition(c: int, rng: np.random.Generator, p_cut: float = 0.3) -> list[int]:
    """``c`` split into positive parts in order (each of the c-1 gaps cut with probability p_cut)."""
    parts, cur = [], 1
    for _ in range(c - 1):
        if rng.random() < p_cut:
            parts.append(cur)
            cur = 1
        else:
            cur += 1
    return parts + [cur] if c > 0 else []


def _object_plan(facts: S.Facts, o: int, rng: np.random.Generator, p_move: float = 0.25) -> list[tuple]:
    """Actions (``("put", o, l, n)`` / ``("move", o, l)``) that leave object ``o`` as in ``facts``.

    Sometimes some of the items at one location ``l*`` are first put anywhere and then gathered by
    ``moved all o to l*``; the rest are put directly. Totals only grow, so the cap is never crossed.
    """
    row = list(facts[o])
    plan: list[tuple] = []
    present = [l for l, c in enumerate(row) if c > 0]
    if present and rng.random() < p_move:
        star = int(_pick(rng, present))
        j = int(rng.integers(1, row[star] + 1))
        before = [("put", o, int(rng.integers(len(row))), n) for n in _composition(j, rng)]
        plan += before + [("move", o, star)]
        row[star] -= j
    after = [("put", o, l, n) for l, c in enumerate(row) for n in _composition(c, rng)]
    order = rng.permutation(len(after))
    return plan + [after[i] for i in order]


def conversation_reaching(world, facts: S.Facts, rng: np.random.Generator, max_noise: int = 2) -> list[str]:
    """Tokens of a random conversation (utterances and probes) whose facts are exactly ``facts``."""
    lex = world.lexicon
    plans = [_object_plan(facts, o, rng) for o in range(len(lex.objects))]
    merged: list[tuple] = []
    while any(plans):
        sizes = np.array([len(p) for p in plans], dtype=float)
        k = int(rng.choice(len(plans), p=sizes / sizes.sum()))
        merged.append(plans[k].pop(0))
    for _ in range(int(rng.integers(0, max_noise + 1))):
        merged.insert(int(rng.integers(len(merged) + 1)), ("noise",))
    state = world.start()
    tokens: list[str] = []
    for i, action in enumerate(merged):
        speaker = SPEAKERS[i % 2]
        if action[0] == "put":
            _, o, l, n = action
            u: Utterance | Probe = Put(
                speaker, random_subject(world, rng), False, lex.numbers[n - 1], lex.objects[o], lex.locations[l]
            )
        elif action[0] == "move":
            _, o, l = action
            u = Move(speaker, random_subject(world, rng), False, lex.objects[o], lex.locations[l])
        else:
            u = _noise(world, state, speaker, rng)
        tokens += u.tokens()
        state = world.run(u.tokens(), state)
    if state[1] != facts:  # a bug, not bad luck
        raise AssertionError(f"conversation_reaching reached {state[1]} instead of {facts}")
    return tokens


def _noise(world, state, speaker: str, rng: np.random.Generator):
    """An utterance that changes nothing: negated statement, dialogue question, absurd detail, probe."""
    lex = world.lexicon
    kind = int(rng.integers(4))
    o, loc = _pick(rng, lex.objects), _pick(rng, lex.locations)
    if kind == 0:
        if rng.random() < 0.5:
            return Put(speaker, random_subject(world, rng), True, _pick(rng, lex.numbers), o, loc)
        return Move(speaker, random_subject(world, rng), True, o, loc)
    if kind == 1:
        return Ask(speaker, random_question(lex, rng))
    if kind == 2:
        return Absurd(speaker, o, loc)
    return _probe(world, state, rng)
