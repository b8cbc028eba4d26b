"""Routes on the streets world (Vafa et al. 2024, §3.1): (origin, destination) pairs, greedy and
sampled decoding, and their scoring (:class:`RouteResult`).

Test 1 of :mod:`interp.metrics.navigation` (see its docstring). The decoding loop here also applies
the detours of test 2 (:mod:`interp.metrics.navigation.detours`) when asked to: the per-row step and
detour helpers are shared by both.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.models.lm import LM
from interp.results import Estimate, mean_se, save_result
from interp.worlds.base import IllegalTokenError, World, WorldError
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph
from interp.worlds.streets.world import StreetsWorld

#: detour kinds of Table 2 (``second`` is in the authors' code, not the table)
DETOUR_KINDS: tuple[str, ...] = ("random", "adversarial", "second")

_DIRECTION_SET = frozenset(DIRECTIONS)
log = logging.getLogger(__name__)


def streets_world(world: World) -> StreetsWorld:
    if not isinstance(world, StreetsWorld):
        raise WorldError(f"navigation evaluations need a streets world, got {world.kind!r}")
    return world


# ---- (origin, destination) pairs ---------------------------------------------------------------


def sample_pairs(world: World, n: int, rng: np.random.Generator, max_tries: int | None = None) -> list[tuple[str, str]]:
    """``n`` uniform (origin, destination) pairs, distinct nodes, destination reachable within
    ``max_directions`` streets (so a valid route exists). Pairs may repeat."""
    w = streets_world(world)
    nodes = w.graph.nodes
    if len(nodes) < 2:
        raise WorldError("need at least two intersections to draw (origin, destination) pairs")
    tries = 20 * n + 1000 if max_tries is None else max_tries
    out: list[tuple[str, str]] = []
    rejected = 0
    for _ in range(tries):
        if len(out) >= n:
            break
        i = int(rng.integers(len(nodes)))
        j = int(rng.integers(len(nodes) - 1))
        j += j >= i
        if w.can_reach_within(nodes[i], nodes[j], w.max_directions):
            out.append((nodes[i], nodes[j]))
        else:
            rejected += 1
    if rejected:
        log.info(
            "sample_pairs: %d draw(s) rejected (destination not reachable within %d streets)",
            rejected,
            w.max_directions,
        )
    if len(out) < n:
        raise WorldError(
            f"only {len(out)} of {n} reachable (origin, destination) pairs in "
            f"{tries} draws (max_directions={w.max_directions})"
        )
    return out


def pairs_from_sequences(sequences: Iterable[Sequence[str]], unique: bool = True) -> list[tuple[str, str]]:
    """The (origin, destination) pairs that start ``sequences`` (e.g. held-out routes), in order;
    with ``unique`` each pair once."""
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for s in sequences:
        if len(s) < 2:
            raise WorldError(f"sequence has no (origin, destination) pair: {list(s)!r}")
        pair = (str(s[0]), str(s[1]))
        if unique and pair in seen:
            continue
        seen.add(pair)
        out.append(pair)
    return out


# ---- decoding ----------------------------------------------------------------------------------


def choose_tokens(
    logprobs: Float[Tensor, "batch vocab"],
    sample: bool = False,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
) -> Int[Tensor, " batch"]:
    """Argmax (greedy) or a temperature sample of each row's next token over the full vocabulary.

    A row with no finite log-probability (an LM that accepts nothing there) gets its argmax,
    token 0 (``<pad>``), which no world accepts. Sampling draws from ``rng`` (seeded runs)."""
    if not sample:
        return logprobs.argmax(dim=-1)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if rng is None:
        raise ValueError("sampling needs an rng")
    lp = logprobs.double() / temperature
    finite = torch.isfinite(lp).any(dim=-1)
    probs = torch.softmax(torch.where(finite[:, None], lp, torch.zeros_like(lp)), dim=-1).numpy()
    cum = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cum[:, -1]
    picks = np.minimum((cum <= u[:, None]).sum(axis=1), probs.shape[1] - 1)
    out = torch.as_tensor(picks, dtype=torch.long)
    return torch.where(finite, out, logprobs.argmax(dim=-1))


@dataclass
class _Row:
    origin: str
    destination: str
    state: Any  # the world state, None once a token was illegal
    tokens: list[str] = field(default_factory=list)
    first_illegal: int | None = None
    detours: int = 0
    blocked: int = 0


def _step_row(world: StreetsWorld, row: _Row, token: str) -> None:
    row.tokens.append(token)
    if row.state is None:
        return
    try:
        row.state = world.step(row.state, token)
    except IllegalTokenError:
        row.state = None
        row.first_illegal = len(row.tokens) - 1


def _detour(
    world: StreetsWorld,
    row: _Row,
    token: str,
    logprobs: Tensor,
    kind: str,
    rng: np.random.Generator,
    events: list[dict[str, Any]],
    route: int,
    max_dirs: int,
) -> str:
    """Apply one detour draw that came up (see the :mod:`interp.metrics.navigation` docstring);
    returns the token to emit."""
    state = row.state
    if state is None or state[0] != "at" or state[1] == state[2]:
        return token  # lost already or at the destination: nothing to replace
    node, dest = state[1], state[2]
    budget = max_dirs - (len(row.tokens) + 1)  # directions left after this one
    graph, vocab = world.graph, world.vocab
    options = [
        t
        for t in world.legal(state)
        if t != END and t != token and world.can_reach_within(graph.street_to(node, t), dest, budget)
    ]
    if not options:
        row.blocked += 1
        return token
    if kind == "random":
        turn = options[int(rng.integers(len(options)))]
    else:
        scores = [float(logprobs[vocab.id(t)]) for t in options]
        pick = int(np.argmin(scores)) if kind == "adversarial" else int(np.argmax(scores))
        turn = options[pick]  # ties: the first in vocabulary order
    row.detours += 1
    after = graph.street_to(node, turn)
    events.append(
        {
            "route": route,
            "step": len(row.tokens),
            "node": node,
            "destination": dest,
            "model_token": token,
            "turn": turn,
            "budget": budget,
            "distance_after": world.shortest_distance_steps(after, dest),
        }
    )
    return turn


def decode_rows(
    lm: LM,
    world: StreetsWorld,
    pairs: Sequence[tuple[str, str]],
    *,
    sample: bool,
    temperature: float,
    detour: str | None,
    p: float,
    rng: np.random.Generator,
    batch_size: int,
    events: list[dict[str, Any]],
) -> tuple[list[_Row], int]:
    """Decode every pair; returns the rows and the per-route step cap used."""
    step_cap = world.max_directions + 1  # up to max_directions turns, then `end`
    n_ctx = int(getattr(lm, "n_ctx", 0) or 0)
    if n_ctx:  # <bos> o d t1 .. t_{cap-1} are fed; the last token is only predicted
        step_cap = min(step_cap, n_ctx - 2)
        if step_cap < 1:
            raise ValueError(f"model context n_ctx={n_ctx} cannot hold a route prompt")
    vocab = world.vocab
    rows: list[_Row] = []
    for lo in range(0, len(pairs), batch_size):
        chunk = pairs[lo : lo + batch_size]
        chunk_rows = [_Row(o, d, ("at", o, d)) for o, d in chunk]
        rows.extend(chunk_rows)
        cursor = lm.start([[o, d] for o, d in chunk])
        active = list(range(len(chunk)))
        for _ in range(step_cap):
            lp = cursor.logprobs
            ids = choose_tokens(lp, sample, temperature, rng if sample else None).tolist()
            coins = rng.random(len(active)) if detour is not None and p > 0 else None
            parents: list[int] = []
            tokens: list[str] = []
            still: list[int] = []
            for r, i in enumerate(active):
                row = chunk_rows[i]
                tok = vocab.tokens[ids[r]]
                if detour is not None and coins is not None and coins[r] < p:
                    tok = _detour(world, row, tok, lp[r], detour, rng, events, lo + i, step_cap - 1)
                _step_row(world, row, tok)
                if tok in _DIRECTION_SET and len(row.tokens) < step_cap:
                    parents.append(r)
                    tokens.append(tok)
                    still.append(i)
            if not still:
                break
            cursor = lm.extend(cursor, parents, tokens)
            active = still
    return rows, step_cap


class ShortestLengths:
    """Dijkstra distances on ``length`` from each origin (cached)."""

    def __init__(self, graph: StreetGraph):
        import networkx as nx

        self._nx, self._g = nx, graph.to_networkx()
        self._cache: dict[str, Any] = {}

    def __call__(self, origin: str, dest: str) -> float:
        d = self._cache.get(origin)
        if d is None:
            d = self._nx.single_source_dijkstra_path_length(self._g, origin, weight="length")
            self._cache[origin] = d
        return float(d.get(dest, math.inf))


def _failure(row: _Row) -> str:
    if row.first_illegal is not None:
        tok = row.tokens[row.first_illegal]
        if tok == END:
            return "end_off_destination"
        return "illegal_turn" if tok in _DIRECTION_SET else "not_a_turn"
    if not row.tokens or row.tokens[-1] != END:
        return "no_end"
    return ""


@dataclass
class RouteResult:
    """Decoded routes and their validity (§3.1); ``routes[i]`` is ``o d t1 .. tk`` as generated.

    ``per_route`` columns: ``route, origin, destination, tokens, directions, valid, failure``
    (``""``, ``illegal_turn``, ``not_a_turn``, ``end_off_destination``, ``no_end``),
    ``first_illegal`` (index into the generated tokens, -1 if none), ``length``,
    ``shortest_length``, ``shortest``, ``detours``, ``blocked``.
    """

    routes: list[list[str]]
    per_route: pd.DataFrame = field(repr=False)
    valid: Estimate
    shortest: Estimate
    shortest_given_valid: Estimate
    step_cap: int
    strategy: str = "greedy"
    detour: str | None = None
    p: float = 0.0
    detour_events: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    @property
    def valid_routes(self) -> list[list[str]]:
        return [r for r, ok in zip(self.routes, self.per_route["valid"]) if ok]

    def failures(self) -> dict[str, int]:
        """Invalid routes by reason."""
        f = self.per_route["failure"]
        return {str(k): int(v) for k, v in f[f != ""].value_counts().sort_index().items()}

    def summary(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "detour": self.detour,
            "p": self.p,
            "routes": self.valid.n,
            "step_cap": self.step_cap,
            "valid": self.valid.mean,
            "valid_se": self.valid.se,
            "shortest": self.shortest.mean,
            "shortest_se": self.shortest.se,
            "shortest_given_valid": self.shortest_given_valid.mean,
            "shortest_given_valid_se": self.shortest_given_valid.se,
            "detours": int(self.per_route["detours"].sum()),
            "blocked": int(self.per_route["blocked"].sum()),
            "failures": self.failures(),
        }

    def __str__(self) -> str:
        what = self.strategy + (f", {self.detour} detours p={self.p:g}" if self.detour else "")
        s = (
            f"routes ({what}): valid {self.valid}; shortest {self.shortest.mean:.3f} ± "
            f"{self.shortest.se:.3f} of all, {self.shortest_given_valid.mean:.3f} ± "
            f"{self.shortest_given_valid.se:.3f} of valid"
        )
        fails = self.failures()
        if fails:
            s += "; invalid: " + ", ".join(f"{k} {v}" for k, v in fails.items())
        return s

    @property
    def frame(self) -> pd.DataFrame:
        """One row per route (``per_route``)."""
        return self.per_route

    def save(self, folder: str | Path, stem: str = "routes") -> Path:
        return save_result(folder, stem, self.summary(), **{"": self.per_route})


def route_result(
    world: StreetsWorld,
    rows: list[_Row],
    step_cap: int,
    strategy: str,
    detour: str | None,
    p: float,
    events: list[dict[str, Any]],
    rtol: float,
    shortest: ShortestLengths | None = None,
) -> RouteResult:
    shortest = shortest or ShortestLengths(world.graph)
    graph = world.graph
    recs = []
    for i, row in enumerate(rows):
        failure = _failure(row)
        valid = failure == ""
        dirs = row.tokens[:-1] if valid else [t for t in row.tokens if t in _DIRECTION_SET]
        length = best = math.nan
        is_short = False
        if valid:
            node, length = row.origin, 0.0
            for t in dirs:
                length += graph.length(node, t)
                node = graph.street_to(node, t)
            best = shortest(row.origin, row.destination)
            is_short = math.isclose(length, best, rel_tol=rtol, abs_tol=1e-9)
        recs.append(
            {
                "route": i,
                "origin": row.origin,
                "destination": row.destination,
                "tokens": " ".join(row.tokens),
                "directions": len(dirs),
                "valid": valid,
                "failure": failure,
                "first_illegal": -1 if row.first_illegal is None else row.first_illegal,
                "length": length,
                "shortest_length": best,
                "shortest": is_short,
                "detours": row.detours,
                "blocked": row.blocked,
            }
        )
    df = pd.DataFrame(
        recs,
        columns=[
            "route",
            "origin",
            "destination",
            "tokens",
            "directions",
            "valid",
            "failure",
            "first_illegal",
            "length",
            "shortest_length",
            "shortest",
            "detours",
            "blocked",
        ],
    )
    ev = pd.DataFrame(
        events, columns=["route", "step", "node", "destination", "model_token", "turn", "budget", "distance_after"]
    )
    return RouteResult(
        routes=[[r.origin, r.destination, *r.tokens] for r in rows],
        per_route=df,
        valid=mean_se(df["valid"].to_numpy(float)),
        shortest=mean_se(df["shortest"].to_numpy(float)),
        shortest_given_valid=mean_se(df.loc[df["valid"], "shortest"].to_numpy(float)),
        step_cap=step_cap,
        strategy=strategy,
        detour=detour,
        p=p,
        detour_events=ev,
    )


def decode_routes(
    lm: LM,
    world: World,
    pairs: Sequence[tuple[str, str]],
    *,
    sample: bool = False,
    temperature: float = 1.0,
    detour: str | None = None,
    p: float = 0.0,
    seed: int = 0,
    batch_size: int = 256,
    rtol: float = 1e-6,
) -> RouteResult:
    """Decode one route per (origin, destination) pair and score it (§3.1).

    Greedy (argmax over the full vocabulary) by default; ``sample=True`` draws at ``temperature``
    (App. B samples at temperature 1 for map reconstruction). With ``detour`` (one of
    :data:`DETOUR_KINDS`) each decoding step of each route is replaced with probability ``p`` as
    described in the :mod:`interp.metrics.navigation` docstring. A row stops at ``end``, at a
    token that cannot continue a route (a node or special token: the route is malformed and
    invalid anyway), or at the cap of ``max_directions`` turns + ``end`` (lowered to fit a
    model's context ``n_ctx``; see ``step_cap``). ``seed`` fixes the detour draws and samples.
    ``rtol``: relative tolerance of "length equals the shortest length".
    """
    w = streets_world(world)
    if detour is not None and detour not in DETOUR_KINDS:
        raise ValueError(f"unknown detour kind {detour!r}; known: {', '.join(DETOUR_KINDS)}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"detour probability must be in [0, 1], got {p}")
    check_pairs(w, pairs)
    events: list[dict[str, Any]] = []
    rows, cap = decode_rows(
        lm,
        w,
        pairs,
        sample=sample,
        temperature=temperature,
        detour=detour,
        p=p,
        rng=np.random.default_rng(seed),
        batch_size=batch_size,
        events=events,
    )
    return route_result(w, rows, cap, "sample" if sample else "greedy", detour, p, events, rtol)


def greedy_routes(lm: LM, world: World, pairs: Sequence[tuple[str, str]], **kw: Any) -> RouteResult:
    """Greedy routes (argmax decoding), the paper's route-planning test; see :func:`decode_routes`."""
    return decode_routes(lm, world, pairs, **kw)


def sample_routes(
    lm: LM, world: World, pairs: Sequence[tuple[str, str]], temperature: float = 1.0, seed: int = 0, **kw: Any
) -> RouteResult:
    """Sampled routes (App. B's traversals for map reconstruction); see :func:`decode_routes`."""
    return decode_routes(lm, world, pairs, sample=True, temperature=temperature, seed=seed, **kw)


def check_pairs(world: StreetsWorld, pairs: Sequence[tuple[str, str]]) -> None:
    if not pairs:
        raise ValueError("no (origin, destination) pairs to decode")
    for o, d in pairs:
        for v in (o, d):
            if v not in world.graph:
                raise WorldError(f"pair ({o!r}, {d!r}): {v!r} is not an intersection of this world")


__all__ = [
    "DETOUR_KINDS",
    "RouteResult",
    "choose_tokens",
    "decode_routes",
    "greedy_routes",
    "pairs_from_sequences",
    "sample_pairs",
    "sample_routes",
]
