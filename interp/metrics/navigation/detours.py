"""Detours (Vafa et al. 2024, §3.3, Table 2): greedy routes whose turns are replaced, with
probability ``p`` per step, by another legal turn that keeps the destination reachable.

Test 2 of :mod:`interp.metrics.navigation` (see its docstring for the detour rule). The decoding
itself, detour draws included, is :func:`~interp.metrics.navigation.routes.decode_routes`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from interp.metrics.navigation.routes import (
    DETOUR_KINDS,
    RouteResult,
    ShortestLengths,
    check_pairs,
    decode_rows,
    route_result,
    streets_world,
)
from interp.models.lm import LM
from interp.results import save_result
from interp.worlds.base import World

#: detour probabilities of Table 2
DEFAULT_DETOUR_PROBS: tuple[float, ...] = (0.0, 0.01, 0.1, 0.5, 0.75)


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
                cells.append(f"{r['valid'].iloc[0]:.3f} ± {r['se'].iloc[0]:.3f}".rjust(16) if len(r) else " " * 16)
            lines.append(f"{k:<12}" + "".join(cells))
        n = int(self.table["n"].max()) if len(self.table) else 0
        lines.append(f"fraction of valid routes (± s.e.), {n} routes per cell, seed {self.seed}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format_table()

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "detours": self.table.to_dict("records")}

    @property
    def frame(self) -> pd.DataFrame:
        """One row per detour trial (``table``)."""
        return self.table

    def save(self, folder: str | Path, stem: str = "detours") -> Path:
        return save_result(folder, stem, self.summary(), **{"": self.table})


def detour_test(
    lm: LM,
    world: World,
    pairs: Sequence[tuple[str, str]],
    kinds: Sequence[str] = DETOUR_KINDS,
    probs: Sequence[float] = DEFAULT_DETOUR_PROBS,
    seed: int = 0,
    batch_size: int = 256,
    progress: bool = False,
) -> DetourResult:
    """Greedy routes with detours for every (kind, p) (Table 2); seeded per (kind, p)."""
    from tqdm.auto import tqdm

    w = streets_world(world)
    for k in kinds:
        if k not in DETOUR_KINDS:
            raise ValueError(f"unknown detour kind {k!r}; known: {', '.join(DETOUR_KINDS)}")
    for p in probs:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"detour probability must be in [0, 1], got {p}")
    check_pairs(w, pairs)
    shortest = ShortestLengths(w.graph)
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
            rows, cap = decode_rows(
                lm,
                w,
                pairs,
                sample=False,
                temperature=1.0,
                detour=k if p > 0 else None,
                p=p,
                rng=rng,
                batch_size=batch_size,
                events=events,
            )
            res = route_result(w, rows, cap, "greedy", k if p > 0 else None, p, events, 1e-6, shortest)
            if p == 0.0:
                plain = res
        runs[(k, p)] = res
        pr = res.per_route
        recs.append(
            {
                "kind": k,
                "p": p,
                "valid": res.valid.mean,
                "se": res.valid.se,
                "n": res.valid.n,
                "detours": int(pr["detours"].sum()),
                "blocked": int(pr["blocked"].sum()),
                "routes_detoured": int((pr["detours"] > 0).sum()),
                "shortest": res.shortest.mean,
            }
        )
    return DetourResult(
        pd.DataFrame(
            recs, columns=["kind", "p", "valid", "se", "n", "detours", "blocked", "routes_detoured", "shortest"]
        ),
        runs,
        seed,
    )


__all__ = ["DEFAULT_DETOUR_PROBS", "DETOUR_KINDS", "DetourResult", "detour_test"]
