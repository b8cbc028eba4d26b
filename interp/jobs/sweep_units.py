"""What every long sweep job does before its work: size the batch from the memory budget
(:mod:`interp.analysis.engines.budget`) and open the folder of finished units (:mod:`interp.analysis.engines.unitstore`).

:func:`prepare_sweep` is called by :func:`~interp.jobs.task_sweep.run_task_sweep` (PragWorld and
contrast files) and :func:`~interp.jobs.sweep.run_sweep` (world checkpoints) once the model and
the rows are loaded; it prints the chosen batch and, on a rerun, how many units it skips, and
records both in ``run.json`` (``batch``, ``units``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from interp.analysis.engines.budget import BatchPlan, choose_batch, human
from interp.analysis.engines.fingerprint import model_fingerprint
from interp.analysis.engines.unitstore import ROW_BYTES, LongRun, MapUnits, UnitRunner, UnitStore, weights_hash

#: batches in one unit of a prefix sweep: rows share their prefixes only inside a unit (each unit is
#: packed and batched on its own), so a unit of one batch cuts groups apart at every batch and
#: runs under-filled batches (docs/benchmarks/prefix-sharing.md measures the difference)
PREFIX_UNIT_BATCHES = 8


def plan_batch(
    bridge: Any,
    lengths: Sequence[int] | np.ndarray,
    *,
    swept: int,
    method: str,
    kind: str,
    batch_size: int | None,
    control: LongRun | None,
    log: Any,
) -> BatchPlan:
    """The batch of a sweep on rows of these token ``lengths`` (:func:`~interp.analysis.engines.budget.choose_batch`),
    printed to ``log``."""
    lengths = np.asarray(lengths)
    plan = choose_batch(
        bridge,
        width=int(lengths.max()) if len(lengths) else 1,
        n_rows=len(lengths),
        swept=swept,
        method=method,
        kind=kind,
        max_memory=None if control is None else control.max_memory,
        batch_size=batch_size,
    )
    print(plan.line(), file=log)
    return plan


def prepare_sweep(
    bridge: Any,
    out_dir: Path,
    config: dict[str, Any],
    *,
    model: str | Path,
    sort_key: Sequence[int] | np.ndarray,
    layers: Sequence[int],
    names: Sequence[str],
    plan: BatchPlan,
    control: LongRun | None,
    log: Any,
) -> UnitRunner:
    """The :class:`~interp.analysis.engines.unitstore.UnitRunner` of a layer sweep (``names``: its removals,
    or ``["direct"]`` for direct-effect patching) writing its units to
    ``out_dir/units`` (the manifest checked against ``config`` and the model; refused on a
    difference unless ``control.overwrite``), with the job's progress bar; a unit is one batch of
    rows, or :data:`PREFIX_UNIT_BATCHES` batches for ``config["method"] == "prefix"``; ``control.resume``
    False: no units. ``sort_key``: one number per row; the rows are cut into units in its order (their
    token counts: units pad little; a prefix sweep's rank of each row in token order: rows sharing a
    prefix land in one unit — the caller records which in ``config``, so a folder cut another way is
    refused). Prints what a resumed run skips. ``control`` None (a library caller that did not
    ask): units of the same config are resumed, units of another config or model replaced without
    refusal (such callers rewrite their folders), no progress bar."""
    control = control or LongRun(overwrite=True, progress=False)
    names = list(names)
    if "zero" in names:  # scale α = 0 after zero reuses the zero sweep (run_removals): no units of its own
        names = [x for i, x in enumerate(names) if not (x == "scale0" and "zero" in names[:i])]
    need = len(sort_key) * len(layers) * len(names) * ROW_BYTES * 2 + 1_000_000
    unit_rows = plan.batch_size * (PREFIX_UNIT_BATCHES if config.get("method") == "prefix" else 1)
    store = _open_store(bridge, out_dir, config, model, unit_rows, control, need) if control.resume else None
    runner = UnitRunner(
        store,
        sort_key,
        len(layers),
        names,
        progress=control.show_progress(),
        memory=f"batch {plan.batch_size}, est. {human(plan.estimate)}",
        log=log,
    )
    line = runner.line()
    if line:
        print(line, file=log)
    return runner


def _open_store(
    bridge: Any, out_dir: Path, config: dict[str, Any], model: str | Path, unit_rows: int, control: LongRun, need: int
) -> UnitStore:
    """``out_dir/units`` checked against ``config`` and the model (architecture and weights)."""
    fp = model_fingerprint(bridge, model)
    return UnitStore(
        out_dir / "units",
        config,
        {"config_hash": fp["config_hash"], "weights": weights_hash(bridge), "path": fp["path"]},
        unit_rows=unit_rows,
        overwrite=control.overwrite,
        need_bytes=need,
    )


def prepare_patching(
    bridge: Any,
    out_dir: Path,
    config: dict[str, Any],
    *,
    model: str | Path,
    n_pairs: int,
    width: int,
    plan: BatchPlan,
    control: LongRun | None,
    log: Any,
) -> MapUnits:
    """The :class:`~interp.analysis.engines.unitstore.MapUnits` of a patching run on ``n_pairs`` pairs of at
    most ``width`` tokens, writing each finished chunk to ``out_dir/units`` (as :func:`prepare_sweep`;
    the chunk is ``plan.batch_size`` pairs, or the first run's on a rerun)."""
    control = control or LongRun(overwrite=True, progress=False)
    cells = int(bridge.cfg.n_layers) * (width + int(bridge.cfg.n_heads))
    need = n_pairs * cells * ROW_BYTES * 2 + 1_000_000
    store = _open_store(bridge, out_dir, config, model, plan.batch_size, control, need) if control.resume else None
    units = MapUnits(
        store, progress=control.show_progress(), memory=f"batch {plan.batch_size}, est. {human(plan.estimate)}", log=log
    )
    if store is not None and store.count():
        print(f"resuming: {store.count()} finished chunk maps in {store.folder} are read back", file=log)
    return units


__all__ = ["PREFIX_UNIT_BATCHES", "plan_batch", "prepare_patching", "prepare_sweep"]
