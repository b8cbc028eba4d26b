"""Myhill–Nerode boundaries of many prefix pairs at once: the exact and the sampled estimator.

Definitions (Vafa et al. 2024, Def. 2.4–2.6). For prefixes ``s1, s2`` reaching states ``q1, q2``:

- true boundary ``MNB^W(q1, q2)``: the non-empty suffixes ``x = a1..aj`` (``j <= depth``) with
  ``x ∈ L^W(q1) \\ L^W(q2)`` whose every non-empty proper prefix lies in the interior
  ``L^W(q1) ∩ L^W(q2)``. Membership uses ``world.accepts``, so the definition holds for any DFA;
  in a prefix-closed world it reduces to "the last token is legal on the q1-path, not on the
  q2-path". (The empty suffix is never a boundary element: a model's language always contains it.)
- model boundary ``MNB^m(s1, s2)``: the same with the model's languages ``L^m(s)`` (a sequence is
  accepted when every token passes the acceptance rule, :mod:`interp.metrics.acceptance`).
  ``L^m`` is prefix-closed, so ``x = y·a`` is in it iff ``y ∈ L^m(s1) ∩ L^m(s2)``, ``a`` passes
  after ``s1·y`` and fails after ``s2·y``. It is taken over the model's full vocabulary.
- boundary precision ``|MNB^m ∩ (L^W(q1) \\ L^W(q2))| / |MNB^m|`` (1 for an empty model boundary)
  and recall ``|MNB^W ∩ (L^m(s1) \\ L^m(s2))| / |MNB^W|`` (undefined for an empty true boundary).

**Exact estimator.** Both boundaries are enumerated to ``depth`` by expanding, breadth first, the
union of the two interiors: the model interior (every ``y`` with all tokens accepted after both
prefixes) and the true interior. A tree node ``y`` needs the model's next-token distribution after
``s1·y`` (when ``y ∈ L^m(s1)``) and after ``s2·y`` (when ``y ∈ L^m(s1) ∩ L^m(s2)``); nothing
below a node the model already rejects after ``s1`` can be recalled, so such true-interior nodes
are enumerated in the world alone. All rows of all pairs of a group are one LM cursor per level
(``lm.extend`` with parent indices), so a level is a few large forwards, and the result carries no
Monte-Carlo noise. A compression pair is decided by its first model-boundary element (its score is
then 0), so its enumeration stops there.

**Sampled estimator** (the paper's procedure, App. E, as the reference code runs it):
``samples`` continuations are drawn after ``s1`` at temperature 1 from the model's distribution
restricted to accepted tokens, each until the world's end token (``world.end_token``, streets:
``end``) or the length cap (``max_length`` tokens of ``<bos>`` + prefix + continuation, at most the
model's context; the reference calls ``generate(max_length=128, eos_token_id=end,
epsilon_cutoff=ε)``); each is checked token by token after ``s2`` and cut at the first token
rejected there. Nothing after ``end`` is drawn or scored (the reference sets the probabilities
after ``end`` to 1). The distinct cut-offs are the sampled model boundary (precision as above; for
a compression pair the score is 1 iff no continuation is cut). ``continuations="depth"`` instead
stops every continuation after ``depth`` tokens (this package's earlier rule): it answers how much
of the sampled compression/precision comes from long continuations — on the under-trained demo
model the same 150 prefix pairs gave sampled compression 0.43 cut at 5 tokens and 0.11 run to
``end``. Recall uses the true boundary, enumerated exhaustively to ``depth`` as in the reference,
with the model rows along it. The continuations of all pairs of a group are sampled as one batch;
each pair draws from its own generator seeded by ``(seed, pair index)``, so results do not depend
on batching.

Both estimators stop at the end token: a suffix ending in ``end`` is never extended (the world
accepts nothing after it and the model's output there is untrained, so scoring it would count
every token the model happens to accept after ``end`` as a wrong boundary element).

Exact vs sampled. They agree on recall (same true boundary, same model rows). For precision they
measure different things: the exact estimator counts every element of ``MNB^m`` once (Def. 2.6),
while sampling finds boundary elements in proportion to the model's probability of reaching them,
so a model with a tail of barely-accepted tokens (just above ε) has many improbable, mostly wrong
boundary elements that the exact precision counts and the sampled one rarely sees. Sampled
compression is an upper bound on the exact one (every cut-off is in ``MNB^m``). The exact cost
is two LM rows per model-interior suffix shorter than ``depth`` (``|MNB^m|`` cannot be counted
without both next-token distributions of every such suffix; a near-uniform model accepts
everything: such pairs hit the frontier bound); the sampled cost is two rows per drawn
continuation token (``samples`` continuations, each up to ``end`` or the cap) plus the true
interior. On distinction pairs of models that
give more than ε to many wrong continuations the first is the larger.

Frontier bound: a pair whose tree would hold more than ``max_nodes`` nodes at one level is skipped
with the reason ``frontier too large`` (never truncated). A group's level is one LM call
(``lm.extend`` of the previous level's cursor), which the LM splits into forwards of its own
``batch_size``; groups are sized so that a level holds about ``max_rows`` rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from interp.config import merge_options
from interp.metrics.acceptance import AcceptanceRule
from interp.models.lm import LM, Cursor
from interp.worlds.base import IllegalTokenError, State, World, WorldError

#: the world state of a sequence with an undefined transition
DEAD: Any = type("Dead", (), {"__repr__": lambda self: "DEAD"})()
#: log-prob elements (rows × vocab) one tree level of a group may hold, bounding memory for big
#: vocabularies; and at most this many rows (groups are sized to it, one wide pair may exceed it)
ROW_ELEMENT_BUDGET = 1 << 24
MAX_LEVEL_ROWS = 16384

#: how far the sampled estimator draws a continuation: to the end token (or the length cap), or
#: ``depth`` tokens
CONTINUATIONS = ("to_end", "depth")

# skip reasons (keys of the summary's pairs_skipped)
FRONTIER = "frontier too large"
CONTEXT = "context too long"


@dataclass(frozen=True)
class PairJob:
    """One prefix pair: ``prefix1`` reaches ``state1``, ``prefix2`` reaches ``state2``.

    ``recall``: enumerate the true boundary too (distinction pairs); compression pairs have an
    empty true boundary by definition and skip it.
    """

    prefix1: tuple[str, ...]
    prefix2: tuple[str, ...]
    state1: State
    state2: State
    recall: bool = True


@dataclass
class PairOutcome:
    """Boundary counts of one prefix pair (or why it was skipped)."""

    model_boundary: int = 0
    model_boundary_true: int = 0
    true_boundary: int | None = None
    true_boundary_recalled: int | None = None
    #: tree nodes evaluated (exact: model ∪ true interior; sampled: true interior)
    nodes: int = 0
    #: sampled estimator: continuations drawn, cut (before de-duplication), stalled (the model
    #: accepted no token after s1 before the continuation ended), ended at the end token, stopped
    #: by the length cap (or, with ``continuations="depth"``, after ``depth`` tokens)
    continuations: int = 0
    cutoffs: int = 0
    stalled: int = 0
    ended: int = 0
    capped: int = 0
    #: False when the enumeration stopped early: a compression pair is decided (score 0) by its
    #: first model-boundary element, so ``model_boundary`` is then a lower bound
    complete: bool = True
    skipped: str | None = None
    detail: str = ""
    #: with ``keep_boundaries``: suffix → in L^W(q1)\\L^W(q2) (model) / recalled (true)
    model_set: dict[tuple[str, ...], bool] | None = field(default=None, repr=False)
    true_set: dict[tuple[str, ...], bool] | None = field(default=None, repr=False)

    @property
    def precision(self) -> float:
        if self.skipped:
            return math.nan
        return 1.0 if self.model_boundary == 0 else self.model_boundary_true / self.model_boundary

    @property
    def recall(self) -> float:
        if self.skipped or not self.true_boundary:
            return math.nan
        return self.true_boundary_recalled / self.true_boundary  # type: ignore[operator]


@dataclass
class EngineStats:
    """Work counters of the suffix-tree engine: LM calls, the rows they read, groups."""

    #: LM calls (``start`` / ``extend``: one per tree level of a group; the LM splits each into
    #: network forwards of its own size) and the rows they read
    forwards: int = 0
    rows: int = 0
    groups: int = 0


# ---- LM rows of one tree level ------------------------------------------------------------------


class _Level:
    """The LM rows of one tree level: one cursor (the LM splits it into forwards as it needs)."""

    def __init__(self, cursor: Cursor | None):
        self.cursor = cursor
        self.logprobs = cursor.logprobs if cursor is not None else None

    def __len__(self) -> int:
        return 0 if self.cursor is None else len(self.cursor)


def _start(lm: LM, prefixes: Sequence[Sequence[str]], stats: EngineStats) -> _Level:
    stats.forwards += 1
    stats.rows += len(prefixes)
    return _Level(lm.start(prefixes))


def _advance(lm: LM, level: _Level, parents: np.ndarray, tokens: np.ndarray, stats: EngineStats) -> _Level:
    """Rows ``parents[i]`` + ``tokens[i]``, in this order."""
    if len(parents) == 0:
        return _Level(None)
    stats.forwards += 1
    stats.rows += len(parents)
    if level.cursor is None:
        raise RuntimeError("Myhill-Nerode boundary: rows below a level without rows")
    return _Level(lm.extend(level.cursor, torch.as_tensor(parents), torch.as_tensor(tokens)))


# ---- the engine ---------------------------------------------------------------------------------


@dataclass
class _Node:
    """A suffix ``path`` (token ids) of one pair's tree; rows are -1 when not evaluated."""

    job: int
    path: tuple[int, ...]
    w1: Any
    w2: Any
    m1: bool  # path ∈ L^m(s1)
    m12: bool  # path ∈ L^m(s1) ∩ L^m(s2)
    ti: bool  # path in the true interior (expanded for recall)
    r1: int = -1
    r2: int = -1


#: a child to create: (parent, token id, in L^m(s1), in L^m(s1) ∩ L^m(s2), true interior, w1, w2)
_Child = tuple[_Node, int, bool, bool, bool, Any, Any]


@dataclass
class _Cont:
    """A sampled continuation after s1, checked after s2."""

    job: int
    path: tuple[int, ...]
    r1: int
    r2: int


class _Group:
    """Evaluate the jobs of one group level by level (see the module docstring)."""

    def __init__(
        self,
        world: World,
        lm: LM,
        rule: AcceptanceRule,
        jobs: list[PairJob],
        job_ids: list[int],
        outcomes: list[PairOutcome],
        *,
        depth: int,
        exact: bool,
        samples: int,
        max_nodes: int,
        seed: int,
        keep: bool,
        exhaustive: bool,
        stats: EngineStats,
        cont_lengths: list[int] | None = None,
    ):
        self.world, self.lm, self.rule, self.jobs = world, lm, rule, jobs
        self.job_ids, self.out = job_ids, outcomes
        self.depth, self.exact, self.samples, self.max_nodes = depth, exact, samples, max_nodes
        #: sampled estimator: the most tokens each job's continuations may have
        self.cont_lengths = cont_lengths or [depth] * len(jobs)
        end = getattr(world, "end_token", None)
        self.end_id = lm.vocab.id(end) if end is not None and end in lm.vocab else -1
        self.keep, self.stats = keep, stats
        self.stop_early = exact and not (exhaustive or keep)
        self.tokens = lm.vocab.tokens
        self.rngs = [np.random.default_rng([seed, j]) for j in job_ids] if not exact else []
        self.cutoffs: list[set[tuple[int, ...]]] = [set() for _ in jobs]
        self._arc_cache: dict[Any, dict[int, tuple[Any, bool]]] = {}
        self.peak_rows = 0

    # -- world helpers (transitions cached per group: trees revisit states a lot) --

    def _arcs(self, q: Any) -> dict[int, tuple[Any, bool]]:
        """token id → (δ(q, token), whether it accepts), over the legal tokens of ``q``."""
        arcs = self._arc_cache.get(q)
        if arcs is None:
            world, vocab_id = self.world, self.lm.vocab.id
            arcs = {}
            for tok in world.legal(q):
                try:
                    nxt = world.step(q, tok)
                except IllegalTokenError as e:
                    raise WorldError(f"{world.kind}: legal() lists {tok!r} in {q!r} but step() refuses it") from e
                arcs[vocab_id(tok)] = (nxt, bool(world.accepts(nxt)))
            if len(self._arc_cache) >= 200_000:  # bounded memory on huge worlds
                self._arc_cache.clear()
            self._arc_cache[q] = arcs
        return arcs

    def _step(self, q: Any, tok: int) -> Any:
        if q is DEAD:
            return DEAD
        arc = self._arcs(q).get(tok)
        return DEAD if arc is None else arc[0]

    def _arc_ok(self, q: Any, tok: int) -> bool:
        """Whether ``y·tok`` is in the language, given that ``y`` leads to ``q`` (or DEAD)."""
        if q is DEAD:
            return False
        arc = self._arcs(q).get(tok)
        return arc is not None and arc[1]

    def _in_language(self, q: Any) -> bool:
        return q is not DEAD and self.world.accepts(q)

    def _suffix(self, path: tuple[int, ...]) -> tuple[str, ...]:
        return tuple(self.tokens[t] for t in path)

    def _skip(self, j: int, reason: str, detail: str) -> None:
        o = self.out[j]
        o.skipped, o.detail = reason, detail

    # -- main loop --

    def run(self) -> None:
        jobs, out = self.jobs, self.out
        for j, job in enumerate(jobs):
            o = out[j]
            if job.recall:
                o.true_boundary, o.true_boundary_recalled = 0, 0
            if self.keep:
                o.model_set, o.true_set = {}, ({} if job.recall else None)
        level = _start(self.lm, [p for job in jobs for p in (job.prefix1, job.prefix2)], self.stats)
        self.peak_rows = len(level)
        nodes: list[_Node] = []
        conts: list[_Cont] = []
        for j, job in enumerate(jobs):
            if self.exact or job.recall:
                nodes.append(_Node(j, (), job.state1, job.state2, True, True, job.recall, 2 * j, 2 * j + 1))
            if not self.exact:
                conts.extend(_Cont(j, (), 2 * j, 2 * j + 1) for _ in range(self.samples))
                out[j].continuations = self.samples
        n_vocab = len(self.lm.vocab)
        d = 0
        while nodes or conts:
            logprobs = level.logprobs  # None only on a level without rows
            acc = self.rule.accept(logprobs).numpy() if logprobs is not None else np.zeros((0, n_vocab), dtype=bool)
            last = d + 1 >= self.depth  # the trees stop at depth; continuations run on
            children = self._expand(nodes, acc, last) if nodes else []
            if conts and logprobs is None:
                raise RuntimeError("Myhill-Nerode boundary: continuations to sample but no model rows")
            new_conts = self._sample(conts, logprobs, acc, d) if conts and logprobs is not None else []
            if self.stop_early:
                children = self._drop_decided(children)
            children = self._bound_frontier(children, d + 1)
            children = [c for c in children if out[c[0].job].skipped is None]
            new_conts = [c for c in new_conts if out[c[0].job].skipped is None]
            if not children and not new_conts:
                break
            level, nodes, conts = self._next_level(level, children, new_conts)
            self.peak_rows = max(self.peak_rows, len(level))
            d += 1
        if not self.exact:
            self._score_cutoffs()

    def _expand(self, nodes: list[_Node], acc: np.ndarray, last: bool) -> list[_Child]:
        """Record the boundary elements below ``nodes``; return the children to expand."""
        out, keep, exact = self.out, self.keep, self.exact
        # model boundary and model-interior children of nodes in L^m(s1) ∩ L^m(s2), vectorised
        both_of: dict[int, np.ndarray] = {}
        if exact:
            idx = [i for i, n in enumerate(nodes) if n.m12 and out[n.job].skipped is None]
            if idx:
                acc1 = acc[[nodes[i].r1 for i in idx]]
                acc2 = acc[[nodes[i].r2 for i in idx]]
                for k, col in zip(*np.nonzero(acc1 & ~acc2)):
                    n = nodes[idx[k]]
                    o = out[n.job]
                    good = self._arc_ok(n.w1, int(col)) and not self._arc_ok(n.w2, int(col))
                    o.model_boundary += 1
                    o.model_boundary_true += good
                    if keep:
                        o.model_set[self._suffix(n.path + (int(col),))] = good
                if not last:
                    rows, cols = np.nonzero(acc1 & acc2)  # row-major: rows ascending
                    cuts = np.flatnonzero(np.diff(rows)) + 1
                    for part_rows, part_toks in zip(np.split(rows, cuts), np.split(cols, cuts)):
                        if len(part_rows):
                            both_of[idx[int(part_rows[0])]] = part_toks
        children = []
        for i, n in enumerate(nodes):
            o = out[n.job]
            if o.skipped is not None:
                continue
            o.nodes += 1
            ti_next: dict[int, tuple[Any, Any]] = {}
            if n.ti:
                a1row = acc[n.r1] if n.r1 >= 0 else None
                a2row = acc[n.r2] if n.r2 >= 0 else None
                arcs2 = self._arcs(n.w2)
                for tok, (n1, ok1) in self._arcs(n.w1).items():
                    if not ok1:
                        continue  # y·a ∉ L^W(q1): neither boundary nor interior
                    n2, ok2 = arcs2.get(tok, (DEAD, False))
                    if ok2:
                        ti_next[tok] = (n1, n2)
                        continue
                    hit = bool(a1row is not None and a1row[tok]) and not bool(a2row is not None and a2row[tok])
                    o.true_boundary += 1  # type: ignore[operator]
                    o.true_boundary_recalled += hit  # type: ignore[operator]
                    if keep:
                        o.true_set[self._suffix(n.path + (tok,))] = hit  # type: ignore[index]
            if last:
                continue
            toks = set(ti_next)
            if i in both_of:
                toks.update(int(t) for t in both_of[i])
            toks.discard(self.end_id)  # nothing after the end token is enumerated or scored
            for tok in sorted(toks):
                a1 = n.r1 >= 0 and bool(acc[n.r1, tok])
                a2 = n.r2 >= 0 and bool(acc[n.r2, tok])
                m1, m12 = n.m1 and a1, n.m12 and a1 and a2
                ti = tok in ti_next
                w1, w2 = ti_next[tok] if ti else (self._step(n.w1, tok), self._step(n.w2, tok))
                children.append((n, tok, m1, m12, ti, w1, w2))
        return children

    def _drop_decided(self, children: list) -> list:
        """Compression pairs with a model-boundary element already score 0: expand them no further."""
        kept = []
        for c in children:
            j = c[0].job
            if not self.jobs[j].recall and self.out[j].model_boundary:
                self.out[j].complete = False
            else:
                kept.append(c)
        return kept

    def _bound_frontier(self, children: list, depth: int) -> list:
        counts = np.bincount([c[0].job for c in children], minlength=len(self.jobs))
        for j in np.flatnonzero(counts > self.max_nodes):
            self._skip(int(j), FRONTIER, f"{int(counts[j])} tree nodes at depth {depth} > max_nodes={self.max_nodes}")
        return children

    def _sample(self, conts: list[_Cont], logprobs: torch.Tensor, acc: np.ndarray, d: int) -> list[tuple[_Cont, int]]:
        """Draw token ``d + 1`` of each live continuation after s1; cut it where s2 rejects the
        token; end it at the end token or at its length cap."""
        conts = [c for c in conts if self.out[c.job].skipped is None]
        if not conts:
            return []
        r1 = np.array([c.r1 for c in conts])
        lp = logprobs[torch.as_tensor(r1)].double()
        allowed = torch.as_tensor(acc[r1])
        probs = lp.exp().masked_fill(~allowed, 0.0)
        cum = probs.cumsum(dim=-1)
        total = cum[:, -1].numpy()
        u = np.empty(len(conts))
        by_job: dict[int, list[int]] = {}
        for k, c in enumerate(conts):
            by_job.setdefault(c.job, []).append(k)
        for j, ks in by_job.items():  # each pair's own generator, continuations in a fixed order
            u[ks] = self.rngs[j].random(len(ks))
        picks = torch.searchsorted(cum, torch.as_tensor(u * total)[:, None], right=True)[:, 0].numpy()
        picks = np.minimum(picks, cum.shape[1] - 1)
        alive: list[tuple[_Cont, int]] = []
        for k, c in enumerate(conts):
            o = self.out[c.job]
            if total[k] <= 0.0:
                o.stalled += 1  # the model accepts no token here: nothing more to cut
                continue
            tok = int(picks[k])
            if not acc[c.r1, tok]:  # round-off at the top of the cumulative sum: last allowed token
                tok = int(np.flatnonzero(acc[c.r1])[-1])
            if not acc[c.r2, tok]:
                o.cutoffs += 1
                self.cutoffs[c.job].add(c.path + (tok,))
            elif tok == self.end_id:
                o.ended += 1
            elif d + 1 >= self.cont_lengths[c.job]:
                o.capped += 1
            else:
                alive.append((c, tok))
        return alive

    def _next_level(self, level: _Level, children: list, conts: list) -> tuple[_Level, list[_Node], list[_Cont]]:
        parents: list[int] = []
        toks: list[int] = []
        nodes: list[_Node] = []
        for n, tok, m1, m12, ti, w1, w2 in children:
            node = _Node(n.job, n.path + (tok,), w1, w2, m1, m12, ti)
            if m1:
                node.r1 = len(parents)
                parents.append(n.r1)
                toks.append(tok)
            if m12:
                node.r2 = len(parents)
                parents.append(n.r2)
                toks.append(tok)
            nodes.append(node)
        new_conts: list[_Cont] = []
        for c, tok in conts:
            new_conts.append(_Cont(c.job, c.path + (tok,), len(parents), len(parents) + 1))
            parents += [c.r1, c.r2]
            toks += [tok, tok]
        new_level = _advance(
            self.lm, level, np.asarray(parents, dtype=np.int64), np.asarray(toks, dtype=np.int64), self.stats
        )
        return new_level, nodes, new_conts

    def _score_cutoffs(self) -> None:
        """Sampled estimator: the distinct cut-offs are the model boundary; check each in the world."""
        for j, cuts in enumerate(self.cutoffs):
            o = self.out[j]
            if o.skipped is not None:
                continue
            job = self.jobs[j]
            for path in cuts:
                w1, w2 = job.state1, job.state2
                for tok in path:
                    w1, w2 = self._step(w1, tok), self._step(w2, tok)
                good = self._in_language(w1) and not self._in_language(w2)
                o.model_boundary += 1
                o.model_boundary_true += good
                if self.keep:
                    o.model_set[self._suffix(path)] = good  # type: ignore[index]


def max_rows_for(lm: LM, row_element_budget: int = ROW_ELEMENT_BUDGET) -> int:
    """Rows one tree level of a group may hold: rows × vocab within budget, at most ``MAX_LEVEL_ROWS``."""
    return max(2, min(MAX_LEVEL_ROWS, row_element_budget // max(1, len(lm.vocab))))


@dataclass(frozen=True)
class BoundaryOptions:
    """How the boundaries of a prefix pair are estimated (the module docstring explains each).

    ``depth``: suffixes up to this many tokens (paper: 5). ``estimator``: ``"exact"`` (enumerate
    both boundaries) or ``"sampled"`` (the paper's procedure, ``samples`` continuations per pair;
    paper: 30). ``max_nodes``: a pair whose tree holds more nodes at one level is skipped (counted).
    ``seed``: the sampled continuations (pair ``i`` draws from ``(seed, i)``). ``continuations``,
    ``max_length``: sampled continuations run to the end token or ``max_length`` tokens
    (``"to_end"``) or stop after ``depth`` tokens (``"depth"``)."""

    depth: int = 5
    estimator: str = "exact"
    samples: int = 30
    max_nodes: int = 4096
    seed: int = 0
    continuations: str = "to_end"
    max_length: int = 128

    def __post_init__(self) -> None:
        if self.estimator not in ("exact", "sampled"):
            raise ValueError(f"estimator must be 'exact' or 'sampled', got {self.estimator!r}")
        if self.continuations not in CONTINUATIONS:
            raise ValueError(f"continuations must be one of {CONTINUATIONS}, got {self.continuations!r}")
        if not (isinstance(self.max_length, int) and self.max_length >= 2):
            raise ValueError(f"max_length must be an integer >= 2, got {self.max_length!r}")
        if not (isinstance(self.depth, int) and self.depth >= 1):
            raise ValueError(f"depth must be an integer >= 1, got {self.depth!r}")
        if self.estimator == "sampled" and self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if self.max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {self.max_nodes}")


def evaluate_pairs(
    world: World,
    lm: LM,
    jobs: Sequence[PairJob],
    rule: AcceptanceRule,
    options: BoundaryOptions | None = None,
    *,
    keep_boundaries: bool = False,
    exhaustive: bool = False,
    max_rows: int | None = None,
    on_progress: Callable[[int], None] | None = None,
    stats: EngineStats | None = None,
    **settings: Any,
) -> list[PairOutcome]:
    """Boundary counts of every job (same order), estimated as ``options`` says
    (:class:`BoundaryOptions`; its fields may also be given as keywords: ``depth=3``).

    Jobs are evaluated in groups whose widest tree level holds about ``max_rows`` rows (default
    :func:`max_rows_for`; the group size adapts to the mean widest level per job seen so far; the
    LM splits a level into forwards of its own size), in order of prefix length so that a group's
    rows share one width (less padding in every forward). ``on_progress(n)`` is called after each group with the
    number of jobs it finished. The exact estimator stops expanding a compression job (``recall``
    false) at its first model-boundary element, which decides its score, unless ``exhaustive`` or
    ``keep_boundaries`` is set.

    Sampled estimator: ``continuations="to_end"`` (default, the reference's) draws each
    continuation until the end token or until ``<bos>`` + the longer prefix + the continuation
    fill ``max_length`` tokens (at most the model's ``n_ctx``); ``"depth"`` stops it after
    ``depth`` tokens.
    """
    opts = merge_options(BoundaryOptions, options, settings, "evaluate_pairs")
    depth, estimator, continuations, max_length = opts.depth, opts.estimator, opts.continuations, opts.max_length
    stats = stats if stats is not None else EngineStats()
    rows_cap = max_rows or max_rows_for(lm)
    outcomes = [PairOutcome() for _ in jobs]
    n_ctx = int(getattr(lm, "n_ctx", 0) or 0)
    cap = min(n_ctx, max_length) if n_ctx else max_length
    todo = []
    for i, job in enumerate(jobs):
        longest = max(len(job.prefix1), len(job.prefix2))
        if n_ctx and longest + depth > n_ctx:
            outcomes[i].skipped = CONTEXT
            too_long = f"<bos> + {longest}-token prefix + {depth - 1} suffix tokens exceed the model's n_ctx={n_ctx}"
            outcomes[i].detail = too_long
        else:
            todo.append(i)
    todo.sort(key=lambda i: max(len(jobs[i].prefix1), len(jobs[i].prefix2)))
    if on_progress and len(todo) < len(jobs):
        on_progress(len(jobs) - len(todo))
    peak_rows, peak_jobs = 0, 0  # the widest level of each group so far, and its jobs
    size = 1  # groups grow by doubling, so a first wide tree cannot overflow a huge group
    pos = 0
    while pos < len(todo):
        per_job = max(2.0, peak_rows / peak_jobs) if peak_jobs else 2.0
        size = max(1, min(2 * size, rows_cap // 2, int(rows_cap / (2 * per_job))))
        ids = todo[pos : pos + size]
        pos += len(ids)
        if continuations == "depth":
            lengths = [depth] * len(ids)
        else:  # reading <bos> + prefix + all but the last continuation token fits in ``cap``
            lengths = [max(1, cap - max(len(jobs[i].prefix1), len(jobs[i].prefix2))) for i in ids]
        group = _Group(
            world,
            lm,
            rule,
            [jobs[i] for i in ids],
            ids,
            [outcomes[i] for i in ids],
            depth=depth,
            exact=estimator == "exact",
            samples=opts.samples,
            max_nodes=opts.max_nodes,
            seed=opts.seed,
            keep=keep_boundaries,
            exhaustive=exhaustive,
            stats=stats,
            cont_lengths=lengths,
        )
        group.run()
        stats.groups += 1
        peak_rows += group.peak_rows
        peak_jobs += len(ids)
        if on_progress:
            on_progress(len(ids))
    return outcomes
