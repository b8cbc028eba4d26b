"""How a sweep's rows are cut into forwards: which strategy reads them (:func:`choose_method`:
shared prefixes once, or row by row), chunks of examples of similar length, the padding a chunk
does not need dropped, and the layer and category lists every engine checks the same way. One copy
for every engine of :mod:`interp.analysis.engines` (loop, reuse, prefix, stacked, attribution, path
removal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor


def row_chunks(n: int, size: int | None, mask: Tensor | None = None) -> list[np.ndarray]:
    """Example indices of each forward: ``size`` at a time (all when None), grouped by length when
    there is padding (rows sorted by their number of real tokens), so each chunk can drop the
    padding columns it does not need (:func:`trim_padding`)."""
    size = n if not size else max(1, int(size))
    order = np.arange(n) if mask is None else np.argsort(mask.sum(1).numpy(), kind="stable")
    return [np.sort(order[i : i + size]) for i in range(0, n, size)]


def trim_padding(ids: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
    """Drop the trailing columns that are padding in every row of a chunk. Leading columns stay, so
    a metric's column indices keep their meaning for right-padded rows; left-padded rows are kept
    whole."""
    if mask is None:
        return ids, None
    real = mask.bool().any(0).nonzero().flatten()
    if len(real) == 0:
        raise ValueError("a chunk of examples has no real (non-padding) token")
    end = int(real[-1]) + 1
    return ids[:, :end], mask[:, :end]


def swept_layer_list(bridge: Any, layers: Sequence[int] | None) -> list[int]:
    """The layers a sweep runs: ``layers`` checked against the model's depth (all when None)."""
    n = int(bridge.cfg.n_layers)
    out = list(range(n)) if layers is None else [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n]
    if bad or not out:
        raise ValueError(f"layers must be a non-empty subset of 0..{n - 1}, got {layers!r}")
    return out


def check_categories(categories: Sequence[Any] | None, n: int) -> list[Any] | None:
    """``categories`` as a list of one label per example (``n`` of them), or None when none are given."""
    if categories is None:
        return None
    cats = list(categories)
    if len(cats) != n:
        raise ValueError(f"{len(cats)} categories for {n} examples")
    return cats


#: ``method="auto"`` reads rows as token tries (``prefix``) when a trie holds at most this share of
#: their tokens (a threshold chosen, not fitted: docs/benchmarks/prefix-sharing.md measured prefix
#: 1.97x faster than unshared reuse on 8 PragWorld groups, whose rows share long preambles)
PREFIX_MAX_SHARE = 0.7


def unique_token_share(rows: Sequence[Sequence[int]]) -> float:
    """The share of the rows' tokens a token trie holds: 1.0 when no two rows share a first token,
    small when many rows share long prefixes (what a prefix-shared sweep reads at best, over what a
    row-by-row sweep reads; the packs of :func:`interp.models.packing.plan` read a little more, as
    a pack is bounded in length)."""
    root: dict[int, dict] = {}
    total = nodes = 0
    for row in rows:
        node = root
        for token in row:
            child = node.get(int(token))
            if child is None:
                child = node[int(token)] = {}
                nodes += 1
            node = child
        total += len(row)
    return nodes / total if total else 1.0


def choose_method(
    rows: Sequence[Sequence[int]], removals: Sequence[str], *, kind: str = "mlp-zero", reads_last: bool = True
) -> tuple[str, str]:
    """The exact strategy for ``method="auto"``: ``prefix`` when the sweep can pack rows (an MLP
    sweep, every removal prefix-safe — zero, scale, mean — and a metric that reads the last
    position) and a trie of the rows holds at most :data:`PREFIX_MAX_SHARE` of their tokens;
    ``reuse`` otherwise. Returns ``(method, why)``; both give the same effects (to float rounding)."""
    from interp.analysis.engines.prefix import PREFIX_SAFE

    if kind != "mlp-zero":
        return "reuse", f"auto: reuse (kind {kind} does not pack rows)"
    unsafe = [r for r in removals if r not in PREFIX_SAFE]
    if unsafe:
        return "reuse", f"auto: reuse ({unsafe[0]} removal does not run over packed rows)"
    if not reads_last:
        return "reuse", "auto: reuse (the metric reads positions other than the last)"
    share = unique_token_share(rows)
    if share <= PREFIX_MAX_SHARE:
        return "prefix", f"auto: prefix (a token trie holds {share:.0%} of the rows' tokens)"
    return (
        "reuse",
        f"auto: reuse (a token trie holds {share:.0%} of the rows' tokens; prefix needs ≤ {PREFIX_MAX_SHARE:.0%})",
    )


__all__ = [
    "PREFIX_MAX_SHARE",
    "check_categories",
    "choose_method",
    "row_chunks",
    "swept_layer_list",
    "trim_padding",
    "unique_token_share",
]
