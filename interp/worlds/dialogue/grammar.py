"""The words of the dialogue world and its utterances as small structured values.

Every utterance is one line of a conversation; as tokens it starts with its speaker (``P1:`` or
``P2:``). The grammar (``A`` agent, ``N`` number word, ``O`` object, ``L`` location)::

    statement   SPK A [and|or A'] put N O in L                  c[O][L] += N
                SPK A [and|or A'] did not put N O in L          nothing changes
                SPK A [and|or A'] moved all O to L              every O goes to L
                SPK A [and|or A'] did not move all O to L       nothing changes
    question    SPK are Q O in L [and|or Q O in L] ?            asked in the dialogue: no change
    absurd      SPK the O sang in L                             an inconsistent detail: no change
    probe       Q: are Q O in L [and|or Q O in L] ? yes|no      the answer is forced by the facts

with ``Q`` a number word (quantity), ``all`` (universal), ``some`` (existential) or ``any``
(location). Probes are how the world asks its questions: after ``?`` the only legal token is the
gold answer, so a model's QA accuracy is read off the next-token distribution at that position.
Words are telegraphic (no articles) and the objects are zero-plural nouns (``one sheep``, ``two
fish``), so that every word is one token and no alteration has to fix agreement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from interp.worlds.base import WorldError

AGENT_NAMES = ("ann", "bob", "eve", "dan")
OBJECT_NAMES = ("sheep", "fish", "deer", "moose")
LOCATION_NAMES = ("barn", "pond", "field", "shed")
NUMBER_WORDS = ("one", "two", "three", "four", "five")

SPEAKERS = ("P1:", "P2:")
PROBE = "Q:"
QUANTIFIERS = ("all", "some", "any")
CONNECTIVES = ("and", "or")
ANSWERS = ("yes", "no")
FUNCTION_WORDS = ("put", "did", "not", "move", "moved", "to", "in", "are", "the", "sang", "?")


@dataclass(frozen=True)
class Lexicon:
    """The entity sets of one world and its token list (fixed order: ids are stable)."""

    agents: tuple[str, ...]
    objects: tuple[str, ...]
    locations: tuple[str, ...]
    numbers: tuple[str, ...]

    @classmethod
    def of_size(cls, agents: int, objects: int, locations: int, max_count: int) -> "Lexicon":
        for name, n, pool in (
            ("agents", agents, AGENT_NAMES),
            ("objects", objects, OBJECT_NAMES),
            ("locations", locations, LOCATION_NAMES),
            ("max_count", max_count, NUMBER_WORDS),
        ):
            if not 1 <= n <= len(pool):
                raise WorldError(f"dialogue: {name} must be in 1..{len(pool)}, got {n}")
        if agents < 2:
            raise WorldError("dialogue: agents must be >= 2 (subjects like 'ann and bob')")
        return cls(AGENT_NAMES[:agents], OBJECT_NAMES[:objects], LOCATION_NAMES[:locations], NUMBER_WORDS[:max_count])

    @property
    def tokens(self) -> tuple[str, ...]:
        return (
            *SPEAKERS,
            PROBE,
            *self.agents,
            *self.objects,
            *self.locations,
            *self.numbers,
            *QUANTIFIERS,
            *CONNECTIVES,
            *FUNCTION_WORDS,
            *ANSWERS,
        )

    def count(self, word: str) -> int:
        """``"two"`` → 2."""
        return self.numbers.index(word) + 1


# ---- structured utterances ------------------------------------------------------------------------


@dataclass(frozen=True)
class Clause:
    """``Q O in L``: a quantity word, ``all``, ``some`` or ``any``, then an object and a location."""

    quant: str
    obj: str
    loc: str

    def tokens(self) -> tuple[str, ...]:
        return (self.quant, self.obj, "in", self.loc)


@dataclass(frozen=True)
class Question:
    """``are CLAUSE [and|or CLAUSE] ?``"""

    clauses: tuple[Clause, ...]
    connective: str | None = None

    def __post_init__(self) -> None:
        if len(self.clauses) != (1 if self.connective is None else 2):
            raise WorldError(f"a question has one clause, or two joined by and/or: {self!r}")

    def tokens(self) -> tuple[str, ...]:
        out: list[str] = ["are", *self.clauses[0].tokens()]
        if self.connective is not None:
            out += [self.connective, *self.clauses[1].tokens()]
        return (*out, "?")

    def text(self) -> str:
        return " ".join(self.tokens())


@dataclass(frozen=True)
class Subject:
    """One agent, or two joined by ``and`` / ``or`` (collective; the facts ignore who)."""

    agents: tuple[str, ...]
    connective: str | None = None

    def __post_init__(self) -> None:
        if len(self.agents) != (1 if self.connective is None else 2) or len(set(self.agents)) != len(self.agents):
            raise WorldError(f"a subject is one agent or two different agents joined by and/or: {self!r}")

    def tokens(self) -> tuple[str, ...]:
        if self.connective is None:
            return self.agents
        return (self.agents[0], self.connective, self.agents[1])


@dataclass(frozen=True)
class Put:
    """An utterance: ``SUBJECT [did not] put NUMBER OBJECT in LOCATION``."""

    speaker: str
    subject: Subject
    negated: bool
    number: str
    obj: str
    loc: str

    def tokens(self) -> tuple[str, ...]:
        verb = ("did", "not", "put") if self.negated else ("put",)
        return (self.speaker, *self.subject.tokens(), *verb, self.number, self.obj, "in", self.loc)


@dataclass(frozen=True)
class Move:
    """An utterance: ``SUBJECT [did not] move(d) all OBJECT to LOCATION``."""

    speaker: str
    subject: Subject
    negated: bool
    obj: str
    loc: str

    def tokens(self) -> tuple[str, ...]:
        verb = ("did", "not", "move") if self.negated else ("moved",)
        return (self.speaker, *self.subject.tokens(), *verb, "all", self.obj, "to", self.loc)


@dataclass(frozen=True)
class Ask:
    """A question asked inside the dialogue (no answer is forced; the facts do not change)."""

    speaker: str
    question: Question

    def tokens(self) -> tuple[str, ...]:
        return (self.speaker, *self.question.tokens())


@dataclass(frozen=True)
class Absurd:
    """``the O sang in L``: a detail that violates common sense and establishes nothing."""

    speaker: str
    obj: str
    loc: str

    def tokens(self) -> tuple[str, ...]:
        return (self.speaker, "the", self.obj, "sang", "in", self.loc)


@dataclass(frozen=True)
class Probe:
    """``Q: are … ? yes|no``: a question whose answer the world forces."""

    question: Question
    answer: str

    def tokens(self) -> tuple[str, ...]:
        return (PROBE, *self.question.tokens(), self.answer)


Utterance = Put | Move | Ask | Absurd


def utterance_text(u: Utterance) -> str:
    """One line of a conversation: ``P1: ann put two sheep in barn``."""
    return " ".join(u.tokens())


def with_speaker(u: Utterance, speaker: str) -> Utterance:
    """The same utterance said by ``speaker``."""
    return replace(u, speaker=speaker)


# ---- parsing tokens back into structure -----------------------------------------------------------


def parse(tokens: list[str] | tuple[str, ...]) -> list[Utterance | Probe]:
    """Split a token sequence into utterances and probes (the inverse of ``tokens()``).

    Only the grammar is checked here (not the facts: a ``put`` past the cap parses); raises
    :class:`WorldError` naming the position of the first token that does not fit.
    """
    return _Reader(tuple(tokens)).utterances()


class _Reader:
    """A recursive-descent reader over one token sequence (methods, not closures: the test suite's
    runtime type checker would re-decorate closures on every call)."""

    def __init__(self, tokens: tuple[str, ...]):
        self.tokens, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def need(self, cond: bool, what: str) -> None:
        if not cond:
            got = self.peek()
            raise WorldError(
                f"dialogue: expected {what} at position {self.i}, got {'end of input' if got is None else repr(got)}"
            )

    def take(self) -> str:
        self.need(self.i < len(self.tokens), "a token")
        self.i += 1
        return self.tokens[self.i - 1]

    def word(self, options: tuple[str, ...], what: str) -> str:
        self.need(self.peek() in options, what)
        return self.take()

    def clause(self) -> Clause:
        q, o = self.take(), self.take()
        self.word(("in",), "'in'")
        return Clause(q, o, self.take())

    def question(self) -> Question:
        self.word(("are",), "'are'")
        first = self.clause()
        if self.peek() in CONNECTIVES:
            conn = self.take()
            second = self.clause()
            self.word(("?",), "'?'")
            return Question((first, second), conn)
        self.word(("?",), "'?' or a connective")
        return Question((first,))

    def utterances(self) -> list[Utterance | Probe]:
        out: list[Utterance | Probe] = []
        while self.peek() is not None:
            out.append(self.utterance())
        return out

    def utterance(self) -> Utterance | Probe:
        head = self.take()
        if head == PROBE:
            q = self.question()
            return Probe(q, self.word(ANSWERS, "yes/no"))
        self.need(head in SPEAKERS, "a speaker (P1:/P2:) or Q:")
        if self.peek() == "are":
            return Ask(head, self.question())
        if self.peek() == "the":
            self.take()
            o = self.take()
            self.word(("sang",), "'sang'")
            self.word(("in",), "'in'")
            return Absurd(head, o, self.take())
        a1 = self.take()
        if self.peek() in CONNECTIVES:
            conn = self.take()
            subject = Subject((a1, self.take()), conn)
        else:
            subject = Subject((a1,))
        negated = self.peek() == "did"
        if negated:
            self.take()
            self.word(("not",), "'not'")
            verb = self.word(("put", "move"), "'put' or 'move'")
        else:
            verb = self.word(("put", "moved"), "'put', 'moved' or 'did'")
        if verb == "put":
            number, o = self.take(), self.take()
            self.word(("in",), "'in'")
            return Put(head, subject, negated, number, o, self.take())
        self.word(("all",), "'all'")
        o = self.take()
        self.word(("to",), "'to'")
        return Move(head, subject, negated, o, self.take())


@dataclass(frozen=True)
class Item:
    """A benchmark item: a conversation (no probes) and the question asked after it."""

    context: tuple[Utterance, ...]
    question: Question

    def context_tokens(self) -> list[str]:
        return [t for u in self.context for t in u.tokens()]

    def prompt_tokens(self) -> list[str]:
        """The tokens a model reads before answering: the conversation, ``Q:``, the question."""
        return [*self.context_tokens(), PROBE, *self.question.tokens()]

    def context_text(self) -> str:
        """One utterance per line, as in the benchmark's ``Local Context`` column."""
        return "\n".join(utterance_text(u) for u in self.context)
