"""How a sweep's rows are cut into forwards: chunks of examples of similar length, the padding a
chunk does not need dropped, and the layer and category lists every engine checks the same way.
One copy for every engine of :mod:`interp.analysis.engines` (loop, reuse, prefix, stacked,
attribution, path removal)."""

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


__all__ = ["check_categories", "row_chunks", "swept_layer_list", "trim_padding"]
