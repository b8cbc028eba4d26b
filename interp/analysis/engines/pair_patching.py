"""Activation patching of many (clean, corrupted) prompt pairs: in groups of equal token length,
chunk by chunk, each chunk's maps written as they finish when a unit folder is given.

TransformerLens's patching (and AtP's estimate) runs a batch without an attention mask, so the
two prompts of a pair, and the pairs of one forward, must share a length: the pairs are grouped by
length, and each group cut into chunks of ``batch_size``. One chunk is one *unit*: its maps (one
per component) are computed together and, with ``units`` (:class:`~interp.analysis.engines.unitstore.MapUnits`),
written to the run's ``units/`` folder the moment they finish and read back on a rerun — so an
interrupted patching run resumes from its last finished chunk. The callers merge the parts into
one map per component (PragWorld pairs: :func:`~interp.analysis.engines.pragworld_sweep.pair_activation_patching`;
contrast examples: :func:`~interp.analysis.engines.contrast_sweep.contrast_activation_patching`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

#: one part of a merged map: (the chunk's map, the pair numbers of its examples, their token length)
Part = tuple[Any, list[int], int]


def length_chunks(lengths: Sequence[int], batch_size: int | None) -> list[tuple[int, int, list[int]]]:
    """``(length, start, pair numbers)`` of every chunk: pairs grouped by token length (shortest
    first), each group cut into runs of ``batch_size`` (None: the largest group's size)."""
    groups: dict[int, list[int]] = {}
    for k, n in enumerate(lengths):
        groups.setdefault(int(n), []).append(k)
    size = batch_size or max(len(g) for g in groups.values())
    return [(n, a, groups[n][a : a + size]) for n in sorted(groups) for a in range(0, len(groups[n]), size)]


def patch_by_length(
    bridge: Any,
    clean: Sequence[Sequence[int]],
    corrupted: Sequence[Sequence[int]],
    metric_of: Callable[[list[int]], Any],
    components: tuple[str, ...] = ("resid_pre", "heads"),
    *,
    method: str = "exact",
    batch_size: int | None = None,
    units: Any = None,
) -> dict[str, list[Part]]:
    """Patch pair ``k`` (``clean[k]`` into ``corrupted[k]``, equal lengths) for every component,
    chunk by chunk (module docstring): component → its parts. ``metric_of(pair numbers)``: the
    metric of a chunk (:mod:`interp.analysis.engines.scoring`); ``method``: ``exact``
    (:func:`~interp.analysis.engines.activation_patching.activation_patching`) or ``attribution``
    (:func:`~interp.analysis.engines.attribution.activation_attribution`); ``units``: a
    :class:`~interp.analysis.engines.unitstore.MapUnits` (its recorded chunk size wins over ``batch_size``,
    so a rerun cuts the same chunks)."""
    from interp.analysis.engines.activation_patching import activation_patching
    from interp.analysis.engines.attribution import activation_attribution

    if method not in ("exact", "attribution"):
        raise ValueError(f"method must be 'exact' or 'attribution', got {method!r}")
    bad = [k for k, (a, b) in enumerate(zip(clean, corrupted)) if len(a) != len(b)]
    if bad:
        raise ValueError(f"pair {bad[0]}: clean and corrupted prompts differ in token length ({len(bad)} such pairs)")
    if units is not None and units.chunk_rows:
        batch_size = units.chunk_rows
    chunks = length_chunks([len(x) for x in clean], batch_size)
    if units is not None:
        units.begin(len(chunks), len(clean))
    parts: dict[str, list[Part]] = {c: [] for c in components}
    try:
        for length, start, chunk in chunks:
            c_ids = torch.tensor([list(clean[k]) for k in chunk])
            x_ids = torch.tensor([list(corrupted[k]) for k in chunk])
            fn = metric_of(chunk)

            def compute(c_ids: Any = c_ids, x_ids: Any = x_ids, fn: Any = fn) -> dict[str, Any]:
                if method == "attribution":
                    return activation_attribution(bridge, c_ids, x_ids, fn, components)
                return {c: activation_patching(bridge, c_ids, x_ids, fn, c) for c in components}

            got = (
                compute() if units is None else units(f"len{length:05d}-at{start:05d}", components, compute, len(chunk))
            )
            for c in components:
                parts[c].append((got[c], chunk, length))
    except KeyboardInterrupt:
        if units is not None:
            units.interrupted()
        raise
    finally:
        if units is not None:
            units.close()
    return parts


__all__ = ["Part", "length_chunks", "patch_by_length"]
