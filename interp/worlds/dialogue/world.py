"""The dialogue world as a DFA over word tokens: a PragWorld-style conversation with a true state.

Language: conversations between ``P1:`` and ``P2:`` about agents placing and moving objects
(grammar in :mod:`~interp.worlds.dialogue.grammar`), interleaved with probes ``Q: are … ? yes|no``.
The state is ``(tag, facts, …)``: the facts the conversation has established so far
(:mod:`~interp.worlds.dialogue.state`) and where in an utterance the reader is, with just what the
rest of the utterance needs (the number and object of a pending ``put``, whether it was negated,
the truth of a probe's first clause, …). Agents and connectives between agents are never stored:
they do not change what may follow.

What this buys:

- After ``?`` of a probe the only legal token is the gold answer; a model's QA accuracy is its
  preference for that token over the other at that position, and the next-token test, probes and
  the Myhill–Nerode metrics (Vafa et al. 2024) apply unchanged.
- Two conversations that reach the same facts are Myhill–Nerode equivalent — every question has
  the same answer after both (*compression*; the formal twin of PragWorld's invariant
  alterations) — and conversations with different facts are told apart by some probe (*distinction*;
  the twin of flip alterations). Facts that differ in an object's total are also told apart by the
  cap: ``put three sheep`` is legal after one and not after the other.
- Every state accepts (prefix-closed, like the other worlds); the state set is finite: with the
  defaults, 8,000 fact states times a few hundred grammatical positions.

``generate`` draws conversations of ``min_utts..max_utts`` utterances with up to ``probes`` probes:
one at the end and the others after random utterances, so each sequence supervises the answers
at several conversation lengths (a curriculum inside every sequence). Probe answers are balanced
within each question type (:func:`~interp.worlds.dialogue.questions.sample_question`), so the
words of a question never give its answer away.

CLI: ``dialogue`` or ``dialogue:agents=3,objects=3,locations=3,max_count=3,min_utts=1,max_utts=8,probes=3``.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from interp.worlds._options import check_int, check_length_range, check_spec_keys, parse_int_options
from interp.worlds.base import IllegalTokenError, State, World, WorldError
from interp.worlds.dialogue import state as S
from interp.worlds.dialogue.grammar import (
    ANSWERS,
    CONNECTIVES,
    PROBE,
    SPEAKERS,
    Item,
    Lexicon,
    Question,
)
from interp.worlds.dialogue.questions import QuestionTable, answer, clause_kind

_OPTIONS = ("agents", "objects", "locations", "max_count", "min_utts", "max_utts", "probes")
#: a dialogue state as this module builds it: (tag, facts, *what the utterance read so far)
DState = tuple[Any, ...]
_TURN = "turn"


class DialogueWorld(World):
    """Conversations about objects at locations, with exact yes/no answers (see module docstring)."""

    kind = "dialogue"

    def __init__(
        self,
        agents: int = 3,
        objects: int = 3,
        locations: int = 3,
        max_count: int = 3,
        min_utts: int = 1,
        max_utts: int = 8,
        probes: int = 3,
    ):
        self.lexicon = Lexicon.of_size(
            check_int(agents, "agents", self.kind, 2),
            check_int(objects, "objects", self.kind, 1),
            check_int(locations, "locations", self.kind, 1),
            check_int(max_count, "max_count", self.kind, 1),
        )
        self.max_count = max_count
        self.min_utts, self.max_utts = check_length_range(min_utts, max_utts, self.kind)
        self.probes = check_int(probes, "probes", self.kind, 1)
        lex = self.lexicon
        self._tokens = lex.tokens
        self._order = {t: i for i, t in enumerate(self._tokens)}
        self._agent = {a: i for i, a in enumerate(lex.agents)}
        self._obj = {o: i for i, o in enumerate(lex.objects)}
        self._loc = {loc: i for i, loc in enumerate(lex.locations)}
        self._num = {w: i + 1 for i, w in enumerate(lex.numbers)}
        self._quant = frozenset((*lex.numbers, "all", "some", "any"))
        self._successors = lru_cache(maxsize=400_000)(self._successors_uncached)
        #: every single-clause question, with a per-facts truth table (balanced sampling)
        self.questions = QuestionTable(lex)

    # ---- constructors --------------------------------------------------------------------------

    @classmethod
    def from_arg(cls, arg: str) -> "DialogueWorld":
        """``dialogue`` or ``dialogue:objects=2,locations=2,max_utts=6`` (integer options)."""
        return cls(**parse_int_options(arg, _OPTIONS, cls.kind))

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> "DialogueWorld":
        check_spec_keys(dict(spec), _OPTIONS, cls.kind)
        return cls(**{k: spec[k] for k in _OPTIONS if k in spec})

    def spec(self) -> dict[str, Any]:
        lex = self.lexicon
        return {
            "kind": self.kind,
            "agents": len(lex.agents),
            "objects": len(lex.objects),
            "locations": len(lex.locations),
            "max_count": self.max_count,
            "min_utts": self.min_utts,
            "max_utts": self.max_utts,
            "probes": self.probes,
        }

    def describe(self) -> str:
        lex = self.lexicon
        # each object's items (0..max_count) spread over the locations: C(max_count + L, L) ways
        n_facts = math.comb(self.max_count + len(lex.locations), len(lex.locations)) ** len(lex.objects)
        return (
            f"dialogue: {len(lex.agents)} agents, {len(lex.objects)} objects, {len(lex.locations)} "
            f"locations, at most {self.max_count} of each object ({n_facts:,} fact states), "
            f"{self.min_utts}..{self.max_utts} utterances, <= {self.probes} probes, "
            f"{len(self._tokens)} tokens"
        )

    @property
    def max_length(self) -> int:
        """The longest sequence :meth:`generate` can draw (tokens, without ``<bos>``)."""
        return self.max_utts * 11 + self.probes * 13

    # ---- the DFA -------------------------------------------------------------------------------

    @property
    def tokens(self) -> tuple[str, ...]:
        return self._tokens

    def start(self) -> State:
        lex = self.lexicon
        return (_TURN, S.empty_facts(len(lex.objects), len(lex.locations)))

    def legal(self, state: State) -> tuple[str, ...]:
        return tuple(self._successors(state))

    def run(self, tokens: Sequence[str], state: State | None = None) -> State:
        """As :meth:`World.run`, reading the cached transition table directly (this world's
        sequences are long, and the base method calls :meth:`step` per token)."""
        q = self.start() if state is None else state
        for i, t in enumerate(tokens):
            nxt = self._successors(q).get(t)
            if nxt is None:
                raise IllegalTokenError(q, t, where=str(i))
            q = nxt
        return q

    def states_along(self, tokens: Sequence[str]) -> list[State]:
        q = self.start()
        out = [q]
        for i, t in enumerate(tokens):
            nxt = self._successors(q).get(t)
            if nxt is None:
                raise IllegalTokenError(q, t, where=str(i))
            q = nxt
            out.append(q)
        return out

    def step(self, state: State, token: str) -> State:
        nxt = self._successors(state).get(token)
        if nxt is None:
            raise IllegalTokenError(state, token)
        return nxt

    def facts(self, state: State) -> S.Facts:
        """The facts component of a state."""
        self._successors(state)  # validates
        return self._check(state)[1]

    def state_label(self, state: State) -> S.Facts:
        """The probe target: the facts (what the conversation has established)."""
        return self.facts(state)

    def _check(self, state: State) -> tuple[str, S.Facts, DState]:
        """(tag, facts, the rest) of a dialogue state; a :class:`WorldError` for anything else."""
        lex = self.lexicon
        if not (
            isinstance(state, tuple)
            and len(state) >= 2
            and isinstance(state[0], str)
            and isinstance(state[1], tuple)
            and len(state[1]) == len(lex.objects)
            and all(
                isinstance(r, tuple)
                and len(r) == len(lex.locations)
                and all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in r)
                and sum(r) <= self.max_count
                for r in state[1]
            )
        ):
            raise WorldError(f"dialogue: not a state: {state!r:.120}")
        return state[0], state[1], state[2:]

    def _successors_uncached(self, state: State) -> dict[str, DState]:
        """``{token: δ(state, token)}`` in vocabulary order (the whole transition function)."""
        tag, F, rest = self._check(state)
        lex = self.lexicon
        out: dict[str, DState] = {}
        try:
            if tag == _TURN and not rest:
                out = {s: ("spk", F) for s in SPEAKERS}
                out[PROBE] = ("q", F, True, 0, "are", None, None, None, None)
            elif tag == "spk" and not rest:
                out = {a: ("subj", F, i) for i, a in enumerate(lex.agents)}
                out["are"] = ("q", F, False, 0, "quant", None, None, None, None)
                out["the"] = ("the", F)
            elif tag == "subj":
                (a,) = rest
                out = {c: ("subj2", F, a) for c in CONNECTIVES}
                out.update(self._verbs(F))
            elif tag == "subj2":
                (a,) = rest
                out = {b: ("verb", F) for i, b in enumerate(lex.agents) if i != a}
            elif tag == "verb" and not rest:
                out = self._verbs(F)
            elif tag == "did" and not rest:
                out = {"not": ("not", F)}
            elif tag == "not" and not rest:
                out = {"put": ("put", F, True), "move": ("moved", F, True)}
            elif tag == "put":
                (neg,) = rest
                out = {
                    w: ("num", F, neg, n)
                    for w, n in self._num.items()
                    if neg or any(S.has_room(F, o, n, self.max_count) for o in range(len(F)))
                }
            elif tag == "num":
                neg, n = rest
                out = {
                    o: ("pobj", F, neg, n, i)
                    for o, i in self._obj.items()
                    if neg or S.has_room(F, i, n, self.max_count)
                }
            elif tag == "pobj":
                out = {"in": ("pin", F, *rest)}
            elif tag == "pin":
                neg, n, o = rest
                out = {loc: (_TURN, F if neg else S.put(F, o, j, n)) for loc, j in self._loc.items()}
            elif tag == "moved":
                (neg,) = rest
                out = {"all": ("mall", F, neg)}
            elif tag == "mall":
                (neg,) = rest
                out = {o: ("mobj", F, neg, i) for o, i in self._obj.items() if neg or S.total(F, i) >= 1}
            elif tag == "mobj":
                out = {"to": ("mto", F, *rest)}
            elif tag == "mto":
                neg, o = rest
                out = {loc: (_TURN, F if neg else S.move_all(F, o, j)) for loc, j in self._loc.items()}
            elif tag == "the" and not rest:
                out = {o: ("sobj", F) for o in lex.objects}
            elif tag == "sobj" and not rest:
                out = {"sang": ("sang", F)}
            elif tag == "sang" and not rest:
                out = {"in": ("sin", F)}
            elif tag == "sin" and not rest:
                out = {loc: (_TURN, F) for loc in lex.locations}
            elif tag == "q":
                out = self._question_step(F, *rest)
            elif tag == "ans":
                (gold,) = rest
                if gold not in ANSWERS:
                    raise ValueError
                out = {gold: (_TURN, F)}
            else:
                raise ValueError
        except (ValueError, TypeError, IndexError, KeyError):
            raise WorldError(f"dialogue: not a state: {state!r:.120}") from None
        return {t: out[t] for t in sorted(out, key=self._order.__getitem__)}

    def _verbs(self, F: S.Facts) -> dict[str, DState]:
        out: dict[str, DState] = {}
        if any(S.has_room(F, o, 1, self.max_count) for o in range(len(F))):
            out["put"] = ("put", F, False)
        out["did"] = ("did", F)
        if any(S.total(F, o) >= 1 for o in range(len(F))):
            out["moved"] = ("moved", F, False)
        return out

    def _question_step(
        self, F: S.Facts, probe: bool, k: int, stage: str, quant: Any, o: Any, value: Any, conn: Any
    ) -> dict[str, DState]:
        """Reading ``are Q O in L [and|or Q O in L] ?``; a probe tracks the truth of what it read.

        ``value`` is the first clause's truth after it (then the combined truth after the second);
        a question asked in the dialogue tracks nothing, so all of them share their states.
        """
        # (no nested functions here: the test suite's runtime type checker re-decorates them per call)
        out: dict[str, DState]
        if stage == "are" and k == 0:
            return {"are": ("q", F, probe, 0, "quant", None, None, value, conn)}
        if stage == "quant":
            return {w: ("q", F, probe, k, "obj", w if probe else None, None, value, conn) for w in self._quant}
        if stage == "obj":
            return {
                ob: ("q", F, probe, k, "in", quant, i if probe else None, value, conn) for ob, i in self._obj.items()
            }
        if stage == "in":
            return {"in": ("q", F, probe, k, "loc", quant, o, value, conn)}
        if stage == "loc":
            if not probe:
                return {loc: ("q", F, probe, k, "end", None, None, None, None) for loc in self._loc}
            kind, n = clause_kind(self.lexicon, quant)
            out = {}
            for loc, j in self._loc.items():
                v = S.clause_value(F, kind, n, o, j)
                out[loc] = ("q", F, probe, k, "end", None, None, v if k == 0 else S.combine(value, conn, v), None)
            return out
        if stage == "end":
            end: DState = ("ans", F, ANSWERS[0] if value else ANSWERS[1]) if probe else (_TURN, F)
            out = {"?": end}
            if k == 0:
                out.update(
                    {c: ("q", F, probe, 1, "quant", None, None, value, c if probe else None) for c in CONNECTIVES}
                )
            return out
        raise ValueError

    # ---- answers -----------------------------------------------------------------------------

    def gold(self, item: Item) -> bool:
        """The gold answer of a benchmark item, read off the DFA (raises if the item is illegal)."""
        tag, _, rest = self._check(self.run(item.prompt_tokens()))
        if tag != "ans":
            raise WorldError(f"dialogue: the prompt does not end with a question: {item.question!r}")
        return rest[0] == ANSWERS[0]

    def answer_of(self, state: State, question: Question) -> bool:
        """The gold answer of ``question`` asked in ``state`` (computed from the facts)."""
        return answer(self.lexicon, self.facts(state), question)

    # ---- sampling (delegated to sampling.py) -------------------------------------------------

    def generate(self, n: int, rng: np.random.Generator) -> list[list[str]]:
        """``n`` conversations with probes (see the module docstring)."""
        from interp.worlds.dialogue.sampling import sample_sequence

        return [sample_sequence(self, rng) for _ in range(n)]

    def sample_prefix(self, state: State, rng: np.random.Generator) -> list[str]:
        """A random conversation reaching ``state``'s facts, then a random partial utterance.

        The conversation is built backwards from the facts (each object's counts split into puts,
        sometimes gathered by a ``moved all``, interleaved across objects, with negated statements,
        dialogue questions, absurd details and probes mixed in), so two draws for one state
        usually differ — what the compression metric needs.
        """
        from interp.worlds.dialogue.sampling import conversation_reaching

        tag, F, _ = self._check(state)
        self._successors(state)
        tokens = conversation_reaching(self, F, rng)
        if tag == _TURN:
            return tokens
        return tokens + self._walk_to(state, rng)

    def _walk_to(self, target: State, rng: np.random.Generator) -> list[str]:
        """A uniformly guided random path from ``("turn", facts)`` to ``target`` within one utterance."""
        _, F, _ = self._check(target)
        start: DState = (_TURN, F)
        edges: dict[DState, list[tuple[str, DState]]] = {}
        todo, seen = deque([start]), {start}
        while todo:
            s = todo.popleft()
            edges[s] = []
            for tok, nxt in self._successors(s).items():
                if nxt[0] == _TURN:
                    continue
                edges[s].append((tok, nxt))
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if target not in seen:
            raise WorldError(f"dialogue: state {target!r:.120} cannot be reached")
        reach = {target}
        changed = True
        while changed:
            changed = False
            for s, out in edges.items():
                if s not in reach and any(n in reach for _, n in out):
                    reach.add(s)
                    changed = True
        path, s = [], start
        while s != target:
            options = [(t, n) for t, n in edges[s] if n in reach]
            t, s = options[int(rng.integers(len(options)))]
            path.append(t)
        return path

    def split_key(self, sequence: Sequence[str]) -> Any:
        """The conversation without its probes: one conversation never straddles the split."""
        out, skipping = [], False
        for t in sequence:
            if t == PROBE:
                skipping = True
            elif t in SPEAKERS:
                skipping = False
            if not skipping:
                out.append(t)
        return tuple(out)
