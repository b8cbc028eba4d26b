"""Navigation evaluations on the streets world (Vafa et al. 2024, §3.1–3.3, Table 2, App. B).

Three tests of what a route-planning model can *do*, all on top of the LM protocol
(:mod:`interp.models.lm`) and the navigation DFA (:class:`~interp.worlds.streets.StreetsWorld`):

1. **Greedy routes** (§3.1, "capabilities"). Prompt ``origin destination``, then repeatedly take the
   argmax token over the *full* vocabulary until ``end`` or the world's ``max_directions`` cap
   (rows of a batch finish independently; a finished row is no longer extended). A route is
   *valid* if every token is legal in the world and it ends with ``end``, which the world allows
   only at the destination. A valid route is *shortest* if its length (sum of street lengths)
   equals the Dijkstra distance on ``length`` (within a tolerance). The paper's models give
   96–99 % valid routes; 97 % of the shortest-paths model's routes are shortest.

2. **Detours** (§3.3, Table 2). While decoding, with probability ``p`` the model's token is
   replaced by another legal turn: ``random`` (uniform among the other legal turns),
   ``adversarial`` (the legal turn the model ranks lowest) or ``second`` (the second most likely
   legal turn; in the authors' code, not the table). A replacement must keep the destination
   reachable within what is left of the cap (``StreetsWorld.can_reach_within``); when no other
   turn qualifies, no detour happens at that step and the step is counted as *blocked*. As in the
   reference code, only a direction token is replaced, only at a legal state away from the
   destination (a model that says ``end`` there, or is already lost, is left alone). A true world
   model re-plans from wherever it is put, so its routes stay valid at any ``p``; the paper's
   shortest-path transformers collapse (0.99 → 0.08 at ``p = 0.1``), the random-walk one does not.

3. **Map reconstruction** (App. B). Start from the true map and explain each model-generated
   traversal ``o d d1 .. dk end``: follow streets while the directions fit; where a step has no
   street in its direction, add a new edge in that direction to the nearby node whose
   continuation explains most of the rest (see :func:`reconstruct_map`). Few added edges mean
   the model's routes are consistent with the real map; the paper's models need many, and the
   curved red streets of its Fig. 3 are the implausible ones.

Every test returns a result object with a tidy per-unit DataFrame, a ``summary()`` dict (means
with standard errors over independent routes), ``__str__`` and ``save(folder)``.
"""

from __future__ import annotations

import logging
import math
from collections import deque
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
from interp.results import Estimate, mean_se, write_json
from interp.worlds.base import IllegalTokenError, World, WorldError
from interp.worlds.streets.graph import DIRECTIONS, END, StreetGraph
from interp.worlds.streets.world import StreetsWorld

#: detour kinds of Table 2 (``second`` is in the authors' code, not the table)
DETOUR_KINDS: tuple[str, ...] = ("random", "adversarial", "second")
#: detour probabilities of Table 2
DEFAULT_DETOUR_PROBS: tuple[float, ...] = (0.0, 0.01, 0.1, 0.5, 0.75)
#: half a mile in metres: App. B's bound on how far an added street may reach
HALF_MILE_M = 804.672

_DIRECTION_SET = frozenset(DIRECTIONS)
log = logging.getLogger(__name__)


def _streets_world(world: World) -> StreetsWorld:
    if not isinstance(world, StreetsWorld):
        raise WorldError(f"navigation evaluations need a streets world, got {world.kind!r}")
    return world


# ---- (origin, destination) pairs ---------------------------------------------------------------

def sample_pairs(world: World, n: int, rng: np.random.Generator,
                 max_tries: int | None = None) -> list[tuple[str, str]]:
    """``n`` uniform (origin, destination) pairs, distinct nodes, destination reachable within
    ``max_directions`` streets (so a valid route exists). Pairs may repeat."""
    w = _streets_world(world)
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
        log.info("sample_pairs: %d draw(s) rejected (destination not reachable within %d streets)",
                 rejected, w.max_directions)
    if len(out) < n:
        raise WorldError(f"only {len(out)} of {n} reachable (origin, destination) pairs in "
                         f"{tries} draws (max_directions={w.max_directions})")
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

def choose_tokens(logprobs: Float[Tensor, "batch vocab"], sample: bool = False,
                  temperature: float = 1.0,
                  rng: np.random.Generator | None = None) -> Int[Tensor, " batch"]:
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


def _detour(world: StreetsWorld, row: _Row, token: str, logprobs: Tensor, kind: str,
            rng: np.random.Generator, events: list[dict[str, Any]], route: int, max_dirs: int) -> str:
    """Apply one detour draw that came up (see module docstring); returns the token to emit."""
    state = row.state
    if state is None or state[0] != "at" or state[1] == state[2] or token not in _DIRECTION_SET:
        return token  # lost already, at the destination, or not a turn: nothing to replace
    node, dest = state[1], state[2]
    budget = max_dirs - (len(row.tokens) + 1)  # directions left after this one
    graph, vocab = world.graph, world.vocab
    options = [t for t in world.legal(state) if t != END and t != token
               and world.can_reach_within(graph.neighbor(node, t), dest, budget)]
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
    after = graph.neighbor(node, turn)
    events.append({"route": route, "step": len(row.tokens), "node": node, "destination": dest,
                   "model_token": token, "turn": turn, "budget": budget,
                   "distance_after": world.shortest_distance_steps(after, dest)})
    return turn


def _decode(lm: LM, world: StreetsWorld, pairs: Sequence[tuple[str, str]], *, sample: bool,
            temperature: float, detour: str | None, p: float, rng: np.random.Generator,
            batch_size: int, events: list[dict[str, Any]]) -> tuple[list[_Row], int]:
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
        chunk = pairs[lo:lo + batch_size]
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
                if coins is not None and coins[r] < p:
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


class _ShortestLengths:
    """Dijkstra distances on ``length`` from each origin (cached)."""

    def __init__(self, graph: StreetGraph):
        import networkx as nx

        self._nx, self._g, self._cache = nx, graph.to_networkx(), {}

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
            "strategy": self.strategy, "detour": self.detour, "p": self.p,
            "routes": self.valid.n, "step_cap": self.step_cap,
            "valid": self.valid.mean, "valid_se": self.valid.se,
            "shortest": self.shortest.mean, "shortest_se": self.shortest.se,
            "shortest_given_valid": self.shortest_given_valid.mean,
            "shortest_given_valid_se": self.shortest_given_valid.se,
            "detours": int(self.per_route["detours"].sum()),
            "blocked": int(self.per_route["blocked"].sum()),
            "failures": self.failures(),
        }

    def __str__(self) -> str:
        what = self.strategy + (f", {self.detour} detours p={self.p:g}" if self.detour else "")
        s = (f"routes ({what}): valid {self.valid}; shortest {self.shortest.mean:.3f} ± "
             f"{self.shortest.se:.3f} of all, {self.shortest_given_valid.mean:.3f} ± "
             f"{self.shortest_given_valid.se:.3f} of valid")
        fails = self.failures()
        if fails:
            s += "; invalid: " + ", ".join(f"{k} {v}" for k, v in fails.items())
        return s

    def save(self, folder: str | Path, stem: str = "routes") -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.per_route.to_csv(folder / f"{stem}.csv", index=False)
        write_json(folder / f"{stem}.json", self.summary())


def _route_result(world: StreetsWorld, rows: list[_Row], step_cap: int, strategy: str,
                  detour: str | None, p: float, events: list[dict[str, Any]],
                  rtol: float, shortest: _ShortestLengths | None = None) -> RouteResult:
    shortest = shortest or _ShortestLengths(world.graph)
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
                node = graph.neighbor(node, t)
            best = shortest(row.origin, row.destination)
            is_short = math.isclose(length, best, rel_tol=rtol, abs_tol=1e-9)
        recs.append({
            "route": i, "origin": row.origin, "destination": row.destination,
            "tokens": " ".join(row.tokens), "directions": len(dirs), "valid": valid,
            "failure": failure, "first_illegal": -1 if row.first_illegal is None else row.first_illegal,
            "length": length, "shortest_length": best, "shortest": is_short,
            "detours": row.detours, "blocked": row.blocked,
        })
    df = pd.DataFrame(recs, columns=["route", "origin", "destination", "tokens", "directions", "valid",
                                     "failure", "first_illegal", "length", "shortest_length",
                                     "shortest", "detours", "blocked"])
    ev = pd.DataFrame(events, columns=["route", "step", "node", "destination", "model_token", "turn",
                                       "budget", "distance_after"])
    return RouteResult(
        routes=[[r.origin, r.destination, *r.tokens] for r in rows], per_route=df,
        valid=mean_se(df["valid"].to_numpy(float)), shortest=mean_se(df["shortest"].to_numpy(float)),
        shortest_given_valid=mean_se(df.loc[df["valid"], "shortest"].to_numpy(float)),
        step_cap=step_cap, strategy=strategy, detour=detour, p=p, detour_events=ev)


def decode_routes(lm: LM, world: World, pairs: Sequence[tuple[str, str]], *, sample: bool = False,
                  temperature: float = 1.0, detour: str | None = None, p: float = 0.0, seed: int = 0,
                  batch_size: int = 256, rtol: float = 1e-6) -> RouteResult:
    """Decode one route per (origin, destination) pair and score it (§3.1).

    Greedy (argmax over the full vocabulary) by default; ``sample=True`` draws at ``temperature``
    (App. B samples at temperature 1 for map reconstruction). With ``detour`` (one of
    :data:`DETOUR_KINDS`) each decoding step of each route is replaced with probability ``p`` as
    described in the module docstring. A row stops at ``end``, at a token that cannot continue a
    route (a node or special token: the route is malformed and invalid anyway), or at the cap of
    ``max_directions`` turns + ``end`` (lowered to fit a model's context ``n_ctx``; see
    ``step_cap``). ``seed`` fixes the detour draws and samples. ``rtol``: relative tolerance of
    "length equals the shortest length".
    """
    w = _streets_world(world)
    if detour is not None and detour not in DETOUR_KINDS:
        raise ValueError(f"unknown detour kind {detour!r}; known: {', '.join(DETOUR_KINDS)}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"detour probability must be in [0, 1], got {p}")
    _check_pairs(w, pairs)
    events: list[dict[str, Any]] = []
    rows, cap = _decode(lm, w, pairs, sample=sample, temperature=temperature, detour=detour, p=p,
                        rng=np.random.default_rng(seed), batch_size=batch_size, events=events)
    return _route_result(w, rows, cap, "sample" if sample else "greedy", detour, p, events, rtol)


def greedy_routes(lm: LM, world: World, pairs: Sequence[tuple[str, str]], **kw: Any) -> RouteResult:
    """Greedy routes (argmax decoding), the paper's route-planning test; see :func:`decode_routes`."""
    return decode_routes(lm, world, pairs, **kw)


def sample_routes(lm: LM, world: World, pairs: Sequence[tuple[str, str]], temperature: float = 1.0,
                  seed: int = 0, **kw: Any) -> RouteResult:
    """Sampled routes (App. B's traversals for map reconstruction); see :func:`decode_routes`."""
    return decode_routes(lm, world, pairs, sample=True, temperature=temperature, seed=seed, **kw)


def _check_pairs(world: StreetsWorld, pairs: Sequence[tuple[str, str]]) -> None:
    if not pairs:
        raise ValueError("no (origin, destination) pairs to decode")
    for o, d in pairs:
        for v in (o, d):
            if v not in world.graph:
                raise WorldError(f"pair ({o!r}, {d!r}): {v!r} is not an intersection of this world")


# ---- detours (Table 2) -------------------------------------------------------------------------

@dataclass
class DetourResult:
    """Fraction of valid routes under detours (Table 2).

    ``table``: one row per (kind, p): ``kind, p, valid, se, n, detours`` (taken), ``blocked``
    (draws with no other feasible turn), ``routes_detoured`` (routes with at least one detour),
    ``shortest`` (valid and shortest). ``runs[(kind, p)]`` holds each run's :class:`RouteResult`
    (the ``p = 0`` run is plain greedy decoding, shared by every kind).
    """

    table: pd.DataFrame
    runs: dict[tuple[str, float], RouteResult] = field(repr=False)
    seed: int = 0

    def wide(self) -> pd.DataFrame:
        """Valid-route fraction as Table 2: a row per kind, a column per p."""
        return self.table.pivot(index="kind", columns="p", values="valid")

    def format_table(self) -> str:
        probs = sorted(self.table["p"].unique())
        kinds = list(dict.fromkeys(self.table["kind"]))
        head = f"{'detour':<12}" + "".join(f"{'p=' + format(p, 'g'):>16}" for p in probs)
        lines = [head]
        for k in kinds:
            cells = []
            for p in probs:
                r = self.table[(self.table["kind"] == k) & (self.table["p"] == p)]
                cells.append(f"{r['valid'].iloc[0]:.3f} ± {r['se'].iloc[0]:.3f}".rjust(16)
                             if len(r) else " " * 16)
            lines.append(f"{k:<12}" + "".join(cells))
        n = int(self.table["n"].max()) if len(self.table) else 0
        lines.append(f"fraction of valid routes (± s.e.), {n} routes per cell, seed {self.seed}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "detours": self.table.to_dict("records")}

    def save(self, folder: str | Path, stem: str = "detours") -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.table.to_csv(folder / f"{stem}.csv", index=False)
        write_json(folder / f"{stem}.json", self.summary())


def detour_test(lm: LM, world: World, pairs: Sequence[tuple[str, str]],
                kinds: Sequence[str] = DETOUR_KINDS, probs: Sequence[float] = DEFAULT_DETOUR_PROBS,
                seed: int = 0, batch_size: int = 256, progress: bool = False) -> DetourResult:
    """Greedy routes with detours for every (kind, p) (Table 2); seeded per (kind, p)."""
    from tqdm.auto import tqdm

    w = _streets_world(world)
    for k in kinds:
        if k not in DETOUR_KINDS:
            raise ValueError(f"unknown detour kind {k!r}; known: {', '.join(DETOUR_KINDS)}")
    for p in probs:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"detour probability must be in [0, 1], got {p}")
    _check_pairs(w, pairs)
    shortest = _ShortestLengths(w.graph)
    runs: dict[tuple[str, float], RouteResult] = {}
    recs = []
    plain: RouteResult | None = None
    jobs = [(i, k, j, float(p)) for i, k in enumerate(kinds) for j, p in enumerate(probs)]
    for i, k, j, p in tqdm(jobs, disable=not progress, desc="detours"):
        if p == 0.0 and plain is not None:
            res = plain
        else:
            events: list[dict[str, Any]] = []
            rng = np.random.default_rng([seed, i, j])
            rows, cap = _decode(lm, w, pairs, sample=False, temperature=1.0,
                                detour=k if p > 0 else None, p=p, rng=rng,
                                batch_size=batch_size, events=events)
            res = _route_result(w, rows, cap, "greedy", k if p > 0 else None, p, events, 1e-6,
                                shortest)
            if p == 0.0:
                plain = res
        runs[(k, p)] = res
        pr = res.per_route
        recs.append({"kind": k, "p": p, "valid": res.valid.mean, "se": res.valid.se, "n": res.valid.n,
                     "detours": int(pr["detours"].sum()), "blocked": int(pr["blocked"].sum()),
                     "routes_detoured": int((pr["detours"] > 0).sum()),
                     "shortest": res.shortest.mean})
    return DetourResult(pd.DataFrame(recs, columns=["kind", "p", "valid", "se", "n", "detours", "blocked",
                                                    "routes_detoured", "shortest"]), runs, seed)


# ---- map reconstruction (App. B) ---------------------------------------------------------------

@dataclass
class MapReconstruction:
    """The map implied by a model's traversals: the true map plus the edges needed to explain them.

    ``added_edges`` columns: ``node, direction, neighbor`` (a street the model believes in),
    ``distance`` (straight-line, coordinate units; NaN without coordinates), ``hops`` (fewest
    streets between the two in the true map, ignoring one-way signs; -1 if none),
    ``first_sequence`` (index of the sequence that added it), ``uses`` (explained sequences that
    walk it). ``per_sequence`` columns: ``sequence, origin, destination, directions, status``
    (``valid``: explained by the true map alone, ``explained`` with new edges, ``failed``,
    ``skipped``: malformed), ``reason`` (why a sequence failed or was skipped), ``new_edges``.
    """

    graph: StreetGraph = field(repr=False)
    added_edges: pd.DataFrame = field(repr=False)
    per_sequence: pd.DataFrame = field(repr=False)
    max_degree: int = 4
    bound: str = ""
    count_unused: bool = True
    #: true streets walked by explained sequences, as ``(node, direction)``
    used_true: list[tuple[str, str]] = field(default_factory=list, repr=False)

    @property
    def used_true_edges(self) -> int:
        return len(self.used_true)

    def out_degrees(self) -> dict[str, int]:
        """Out-degree of each node in the implied map, as the ``max_degree`` bound counts it."""
        deg = {v: len(self.graph.out_directions(v)) if self.count_unused else 0 for v in self.graph.nodes}
        if not self.count_unused:
            for u, _ in self.used_true:
                deg[u] += 1
        for u in self.added_edges["node"]:
            deg[u] += 1
        return deg

    def _count(self, status: str) -> int:
        return int((self.per_sequence["status"] == status).sum())

    @property
    def sequences(self) -> int:
        """Sequences reconstructed (malformed ones excluded)."""
        return len(self.per_sequence) - self.skipped

    @property
    def failed(self) -> int:
        return self._count("failed")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def valid(self) -> int:
        return self._count("valid")

    @property
    def num_added(self) -> int:
        return len(self.added_edges)

    def edges(self) -> list[tuple[str, str, str]]:
        """The added edges as ``(node, direction, neighbor)``."""
        return [tuple(r) for r in self.added_edges[["node", "direction", "neighbor"]].itertuples(
            index=False, name=None)]

    def reasons(self) -> dict[str, int]:
        r = self.per_sequence["reason"]
        return {str(k): int(v) for k, v in r[r != ""].value_counts().sort_index().items()}

    def reconstructed_graph(self) -> StreetGraph:
        """True map + added edges as a :class:`StreetGraph` (added streets get their straight-line
        length when the map has coordinates, else 1)."""
        g = self.graph
        edges = [*g.edges, *self.edges()]
        lengths = None
        if g.has_explicit_lengths:
            lengths = {(u, d): float(x) for (u, d, _), x in zip(g.edges, g.edge_lengths.tolist())}
            for (u, d, v), dist in zip(self.edges(), self.added_edges["distance"].tolist()):
                lengths[(u, d)] = float(dist) if math.isfinite(dist) and dist > 0 else 1.0
        return StreetGraph(edges, nodes=g.nodes, coords=g.coords, lengths=lengths,
                           name=f"{g.name} + {self.num_added} reconstructed edge(s)")

    def summary(self) -> dict[str, Any]:
        return {"added_edges": self.num_added, "failed": self.failed, "sequences": self.sequences,
                "valid_sequences": self.valid, "skipped_malformed": self.skipped,
                "used_true_edges": self.used_true_edges, "true_edges": self.graph.num_edges,
                "max_degree": self.max_degree, "count_unused": self.count_unused, "bound": self.bound,
                "reasons": self.reasons()}

    def __str__(self) -> str:
        s = (f"map reconstruction: {self.num_added} added edge(s); {self.failed} / {self.sequences} "
             f"sequence(s) failed, {self.valid} valid on the true map ({self.bound}, "
             f"out-degree <= {self.max_degree})")
        if self.skipped:
            s += f"; {self.skipped} malformed sequence(s) skipped"
        return s

    def save(self, folder: str | Path, stem: str = "map") -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.added_edges.to_csv(folder / f"{stem}_added_edges.csv", index=False)
        self.per_sequence.to_csv(folder / f"{stem}_sequences.csv", index=False)
        write_json(folder / f"{stem}.json", self.summary())


_Overlay = tuple[dict[tuple[str, str], str], set[tuple[str, str]]]  # tentative (added, used true)


class _Reconstructor:
    """Mutable state of :func:`reconstruct_map`: the map so far and the candidate search.

    A sequence is explained against the committed map plus a tentative overlay (streets it would
    add, true streets it would use for the first time); the overlay is committed only if the
    whole sequence is explained.
    """

    def __init__(self, graph: StreetGraph, max_degree: int, max_distance: float | None,
                 max_hops: int, count_unused: bool):
        self.graph, self.max_degree, self.max_hops = graph, max_degree, max_hops
        self.count_unused = count_unused
        self.true_out: dict[str, dict[str, str]] = {v: graph.out_edges(v) for v in graph.nodes}
        self.added: dict[tuple[str, str], str] = {}
        self.used_true: set[tuple[str, str]] = set()
        self.deg: dict[str, int] = {v: len(self.true_out[v]) if count_unused else 0 for v in graph.nodes}
        self.first: dict[tuple[str, str], int] = {}
        self.uses: dict[tuple[str, str], int] = {}
        coords = graph.coords
        self.use_distance = coords is not None and max_distance is not None
        self.max_distance = max_distance
        self.xy = None if coords is None else np.array([coords[v] for v in graph.nodes], dtype=float)
        self.undirected: list[list[int]] = [[] for _ in graph.nodes]
        for u, _, v in graph.edges:
            iu, iv = graph.index(u), graph.index(v)
            self.undirected[iu].append(iv)
            self.undirected[iv].append(iu)
        self._cand: dict[str, list[str]] = {}

    # ---- geometry ----------------------------------------------------------------------------

    def hops(self, u: str, limit: int | None = None) -> dict[int, int]:
        """Undirected BFS hop counts from ``u`` in the true map, up to ``limit`` hops."""
        start = self.graph.index(u)
        dist = {start: 0}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            if limit is not None and dist[x] >= limit:
                continue
            for y in self.undirected[x]:
                if y not in dist:
                    dist[y] = dist[x] + 1
                    queue.append(y)
        return dist

    def distance(self, u: str, v: str) -> float:
        if self.xy is None:
            return math.nan
        a, b = self.xy[self.graph.index(u)], self.xy[self.graph.index(v)]
        return float(np.hypot(*(a - b)))

    def candidates(self, u: str) -> list[str]:
        """Nodes a new street from ``u`` may reach, nearest first (ties: node order); not ``u``."""
        c = self._cand.get(u)
        if c is None:
            nodes, iu = self.graph.nodes, self.graph.index(u)
            if self.use_distance:
                d = np.hypot(*(self.xy - self.xy[iu]).T)
                idx = np.nonzero(d <= self.max_distance)[0]
                order = idx[np.lexsort((idx, d[idx]))]
                c = [nodes[i] for i in order.tolist() if i != iu]
            else:
                h = self.hops(u, self.max_hops)
                c = [nodes[i] for i in sorted(h, key=lambda i: (h[i], i)) if i != iu]
            self._cand[u] = c
        return c

    # ---- walking -----------------------------------------------------------------------------

    def degree(self, node: str, ov: _Overlay) -> int:
        """Out-degree of ``node`` in the map so far: counted streets (see ``count_unused``) + added."""
        added, used = ov
        return (self.deg[node] + sum(1 for (u, _) in added if u == node)
                + sum(1 for (u, _) in used if u == node))

    def follow(self, node: str, dirs: Sequence[str], ov: _Overlay) -> tuple[str, int, str]:
        """Walk ``dirs`` from ``node`` while streets exist, recording first uses of true streets in
        ``ov``: (where it stopped, steps taken, ``done`` | ``missing`` (no street that way) |
        ``full`` (a true street that way, but using it would break the degree bound))."""
        added, used = ov
        k = 0
        while k < len(dirs):
            key = (node, dirs[k])
            nxt = self.true_out[node].get(dirs[k])
            if nxt is not None:
                if not (self.count_unused or key in self.used_true or key in used):
                    if self.degree(node, ov) >= self.max_degree:
                        return node, k, "full"
                    used.add(key)
            else:
                nxt = self.added.get(key) or added.get(key)
                if nxt is None:
                    return node, k, "missing"
            node, k = nxt, k + 1
        return node, k, "done"

    def explain(self, origin: str, dest: str, dirs: Sequence[str]) -> tuple[str, str, _Overlay]:
        """Explain one traversal: (status, reason, the tentative overlay it needs)."""
        ov: _Overlay = ({}, set())
        node, k = origin, 0
        while True:
            node, m, why = self.follow(node, dirs[k:], ov)
            k += m
            if why == "done":
                if node != dest:
                    return "failed", "wrong_destination", ov
                return ("valid" if not ov[0] else "explained"), "", ov
            if why == "full" or self.degree(node, ov) >= self.max_degree:
                return "failed", "degree", ov
            rest = dirs[k + 1:]
            best: tuple[bool, int] | None = None
            best_v = None
            for v in self.candidates(node):
                trial: _Overlay = ({**ov[0], (node, dirs[k]): v}, set(ov[1]))
                end, fit, why = self.follow(v, rest, trial)
                if why == "done":
                    if end != dest:
                        continue  # every turn fits but it arrives elsewhere: no fix possible
                    score = (True, fit)
                elif why == "missing" and self.degree(end, trial) < self.max_degree:
                    score = (False, fit)  # stuck where another new street could still go
                else:
                    continue
                if best is None or score > best:
                    best, best_v = score, v
                    if score[0]:
                        break  # the nearest full explanation
            if best_v is None:
                return "failed", "no_candidate", ov
            ov[0][(node, dirs[k])] = best_v
            node, k = best_v, k + 1

    def commit(self, i: int, origin: str, dirs: Sequence[str], ov: _Overlay) -> None:
        added, used = ov
        for key, v in added.items():
            self.added[key] = v
            self.first[key] = i
            self.deg[key[0]] += 1
        for key in used:
            self.used_true.add(key)
            self.deg[key[0]] += 1
        node = origin
        walked: set[tuple[str, str]] = set()
        for t in dirs:
            walked.add((node, t))
            nxt = self.true_out[node].get(t)
            node = nxt if nxt is not None else self.added[(node, t)]
        for key in walked:
            if key in self.added:
                self.uses[key] = self.uses.get(key, 0) + 1
            else:
                self.used_true.add(key)  # already counted when count_unused


def parse_traversal(tokens: Sequence[str], graph: StreetGraph) -> tuple[str, str, list[str]] | str:
    """``o d d1 .. dk end`` → ``(o, d, [d1 .. dk])``, or the reason it is malformed (App. B keeps
    only sequences that end with ``end`` and have intersection tokens in front and turns between)."""
    if len(tokens) < 3:
        return "too_short"
    if tokens[-1] != END:
        return "no_end"
    if tokens[0] not in graph or tokens[1] not in graph:
        return "bad_endpoints"
    dirs = list(tokens[2:-1])
    if any(t not in _DIRECTION_SET for t in dirs):
        return "not_a_turn"
    return str(tokens[0]), str(tokens[1]), dirs


def reconstruct_map(graph: StreetGraph, sequences: Sequence[Sequence[str]], max_degree: int = 4,
                    max_distance: float | None = HALF_MILE_M, max_hops: int = 3,
                    count_unused: bool = True) -> MapReconstruction:
    """Reconstruct the map implied by traversals ``o d d1 .. dk end`` (App. B), greedily, in order.

    Starting from ``graph`` (the true map), each sequence is walked along existing streets. At a
    step with no street in its direction, a new street in that direction is added from the
    current node ``u`` to the candidate ``v`` that best explains the rest: for each candidate the
    remaining directions are followed from ``v`` on the map so far (with the new street); a
    candidate that reaches the destination with every turn explained wins (the nearest one), else
    the one that gets furthest before it is stuck at a node that can still take a new street.
    Candidates: nodes other than ``u`` within ``max_distance`` of it in straight line when the map
    has coordinates (coordinate units: metres for synthetic cities, so the default is App. B's
    half mile), else within ``max_hops`` streets of it in the true map ignoring one-way signs
    (``max_distance=None`` forces hops).

    Constraints, as in App. B: at most one street per direction per node (a street is only added
    where the map has none that way) and out-degree ≤ ``max_degree``. By default
    (``count_unused=True``) every true street counts, so a street is only added at a node with
    fewer than ``max_degree`` streets (true + added) and the true map alone always explains a legal
    traversal. ``count_unused=False`` is the authors' rule: the degree counts the streets of the
    *implied* map only, added streets and the true streets some explained sequence walks; a true
    street is then blocked once its node is full, so on a map with nodes above the bound (the
    diagonal of a synthetic city has 5-street nodes; Manhattan few) even legal traversals can fail.

    A sequence fails when no candidate fits (``no_candidate``), when the node that needs a street
    (or a true street it would use) is full (``degree``), or when every turn fits but it ends off
    its destination (``wrong_destination``); a failed sequence changes nothing (its tentative
    streets are dropped; the authors' code keeps those added before the failure). Malformed
    sequences (no ``end``, a non-turn inside) are skipped and counted. Unlike the authors' code, a
    true street, used or not, is never shadowed by a new street in its direction.
    """
    if max_degree < 1:
        raise ValueError(f"max_degree must be >= 1, got {max_degree}")
    if max_distance is not None and not max_distance > 0:
        raise ValueError(f"max_distance must be > 0 or None, got {max_distance}")
    if max_hops < 1:
        raise ValueError(f"max_hops must be >= 1, got {max_hops}")
    rec = _Reconstructor(graph, max_degree, max_distance, max_hops, count_unused)
    rows = []
    for i, seq in enumerate(sequences):
        parsed = parse_traversal(seq, graph)
        if isinstance(parsed, str):
            rows.append({"sequence": i, "origin": seq[0] if seq else "", "destination": seq[1] if len(seq) > 1 else "",
                         "directions": max(0, len(seq) - 3), "status": "skipped", "reason": parsed,
                         "new_edges": 0})
            continue
        o, d, dirs = parsed
        status, reason, overlay = rec.explain(o, d, dirs)
        if status != "failed":
            rec.commit(i, o, dirs, overlay)
        rows.append({"sequence": i, "origin": o, "destination": d, "directions": len(dirs),
                     "status": status, "reason": reason,
                     "new_edges": len(overlay) if status != "failed" else 0})
    edge_rows = []
    for (u, t), v in rec.added.items():
        h = rec.hops(u).get(graph.index(v), -1)
        edge_rows.append({"node": u, "direction": t, "neighbor": v, "distance": rec.distance(u, v),
                          "hops": h, "first_sequence": rec.first[(u, t)], "uses": rec.uses.get((u, t), 0)})
    bound = (f"straight-line distance <= {max_distance:g}" if rec.use_distance
             else f"true-map hops <= {max_hops}")
    return MapReconstruction(
        graph=graph,
        added_edges=pd.DataFrame(edge_rows, columns=["node", "direction", "neighbor", "distance", "hops",
                                                     "first_sequence", "uses"]),
        per_sequence=pd.DataFrame(rows, columns=["sequence", "origin", "destination", "directions",
                                                 "status", "reason", "new_edges"]),
        max_degree=max_degree, bound=bound, count_unused=count_unused,
        used_true=sorted(rec.used_true, key=lambda e: (graph.index(e[0]), DIRECTIONS.index(e[1]))))


__all__ = [
    "DETOUR_KINDS", "DEFAULT_DETOUR_PROBS", "HALF_MILE_M", "DetourResult", "MapReconstruction",
    "RouteResult", "choose_tokens", "decode_routes", "detour_test", "greedy_routes",
    "pairs_from_sequences", "parse_traversal", "reconstruct_map", "sample_pairs", "sample_routes",
]
