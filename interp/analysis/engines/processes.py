"""A sweep shared by the processes of one launch (``accelerate launch``, ``torchrun``): the
launcher's accelerator (:func:`accelerator`), which process writes files (:func:`is_main`), and a
sweep run on each process's share of the examples, gathered back in the one-process order
(:func:`sharded`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from interp.analysis.engines.sweeps import OWN_GROUP, SweepResult
from interp.models.parallel import rank_and_size


def accelerator() -> Any | None:
    """An ``accelerate.Accelerator`` when this process was started by a launcher with more than one
    process (``accelerate launch``, ``torchrun``: ``WORLD_SIZE`` > 1), else None (one process)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from interp.models.parallel import make_accelerator

    return make_accelerator()


def is_main(acc: Any | None) -> bool:
    """Whether this process writes files: no accelerator, or its main process."""
    return acc is None or bool(acc.is_main_process)


def sharded(run: Callable[[slice], SweepResult], n: int, acc: Any | None) -> SweepResult:
    """Run a sweep on this process's share of ``n`` examples and gather every process's rows.

    ``run(part)`` gets a ``slice`` of the examples and returns a :class:`SweepResult` over them;
    its ``example`` numbers are shifted to global ones and the rows of all processes are gathered
    (:func:`interp.models.parallel.gather_frame`) and put in the one-process order (layer, then
    example; a ``group`` column of the default own groups is shifted with it; given group ids are
    global already). Every example's value is computed exactly as in one process: per-example metrics
    do not depend on which other examples share the forward (up to float summation order)."""
    from interp.models.parallel import gather_frame, shard_bounds

    rank, size = rank_and_size(acc)
    if size == 1:
        return run(slice(0, n))
    start, stop = shard_bounds(n, rank, size)
    if stop == start:
        raise ValueError(f"{n} examples cannot be shared by {size} processes (process {rank} has none)")
    local = run(slice(start, stop))
    frame = local.frame.copy()
    frame["example"] += start
    if local.meta.get("groups") == OWN_GROUP and "group" in frame:  # local example numbers: make them global
        frame["group"] += start
    frame = gather_frame(frame, acc).sort_values(["layer", "example"], kind="stable").reset_index(drop=True)
    meta = {**local.meta, "n_examples": n, "processes": size}
    return SweepResult(frame, meta)


__all__ = ["accelerator", "is_main", "sharded"]
