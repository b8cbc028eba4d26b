"""The layer sweep of a task file: a PragWorld CSV (yes/no questions, :class:`interp.tasks.YesNoTask`)
or contrast examples (JSONL, e.g. IOI; :class:`interp.tasks.ContrastTask`), the code behind
``interp sweep --data FILE.csv|FILE.jsonl`` (:func:`interp.jobs.sweep.run_sweep` dispatches here).

One metric per row (``--metric``): for a yes/no task ``p-gold`` (default,
:data:`~interp.jobs.run_records.PRAGWORLD_METRIC`), ``logit-diff`` (gold − other) or ``accuracy``; for a contrast task ``logit-diff`` (correct − foil,
default) or ``p-gold`` (P(correct) over the pair). Every yes/no sweep writes each row's ``gold`` and
its verdicts gain the per-gold-class effects and the prior-shift flag
(:mod:`interp.analysis.verdicts.prior_shift`); a ``logit-diff`` MLP sweep adds each layer's direct effect
beside its total (:mod:`interp.analysis.verdicts.direct_effects`, ``direct_total.png``); ``folds`` confirms the
verdicts on held-out groups (:mod:`interp.analysis.verdicts.confirmation`); ``ablation`` picks the removal
kinds (:mod:`interp.analysis.engines.removals`, :mod:`interp.analysis.verdicts.agreement`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from interp.analysis.config.sweep_job import SweepJob
from interp.analysis.engines.pragworld_sweep import reference_activation_patching, reference_patch_pairs
from interp.analysis.engines.processes import accelerator, is_main, sharded
from interp.analysis.engines.sweep_options import check_layers
from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.engines.unitstore import file_sha256
from interp.analysis.verdicts.agreement import compare_removals, discovery_reference, run_removals
from interp.analysis.verdicts.confirmation import confirm_verdicts
from interp.analysis.verdicts.layers import LayerVerdicts
from interp.analysis.verdicts.prior_shift import add_prior_shift
from interp.jobs.run_records import (
    PRAGWORLD_METRIC,
    YESNO_THRESHOLDS,
    PatchingRun,
    SweepRun,
    cell_verdicts,
)
from interp.jobs.sweep_units import plan_batch, prepare_patching, prepare_sweep
from interp.models.parallel import rank_and_size


def _run_pair_patching(
    bridge: Any,
    task: Any,
    info: dict[str, Any],
    model: Path,
    data: Any,
    out: Any,
    method: str,
    batch_size: int | None,
    log: Any,
    acc: Any,
    rule: dict[str, Any],
    seed: int,
    *,
    units: Any = None,
) -> PatchingRun:
    """``--kind activation-patching`` on a PragWorld file: the reference's pairs of equal token length
    (:func:`~interp.analysis.engines.pragworld_sweep.reference_activation_patching`), written
    as the world checkpoints' patching run is (``patching_<map>.csv`` / ``_mean.csv`` / ``.json``,
    ``patching_<map>.png``, ``run.json``); on a contrast task every example against its corrupted
    prompt (:func:`~interp.analysis.engines.contrast_sweep.contrast_activation_patching`)."""
    from interp.tasks import YesNoTask

    how = "attribution" if method == "attribution" else "exact"
    if isinstance(task, YesNoTask):
        maps, got = reference_activation_patching(bridge, task, method=how, batch_size=batch_size, units=units)
        skipped, what, pair_text = got["skipped"], "altered → original", "pairs"
        info.update(clean="altered prompt", corrupted="original prompt")
    else:
        from interp.analysis.engines.contrast_sweep import contrast_activation_patching

        maps, got = contrast_activation_patching(bridge, task, method=how, batch_size=batch_size, units=units)
        skipped = {}
        what, pair_text = ("clean → corrupted", "examples")
        info.update(clean="prompt", corrupted="corrupted prompt")
    info.update(
        n_pairs=got["n_pairs"],
        skipped=skipped,
        n_failed=sum(skipped.values()),
        pair_rows=got["rows"],
        lengths=got["lengths"],
        labels=maps["resid_pre"].meta["labels"],
        n_examples=got["n_pairs"],
        method=how,
        position_axis=maps["resid_pre"].meta["position_axis"],
        processes=rank_and_size(acc)[1],
    )
    if units is not None:
        info["units"] = units.summary()
    if any(skipped.values()):
        print(f"note: patched {got['n_pairs']} pairs; skipped {skipped}", file=log)
    kind_dir = "pragworld" if isinstance(task, YesNoTask) else "contrast"
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_activation-patching_{kind_dir}"
    return _write_patching(
        maps, info, out_dir, acc, rule, seed, f"{what}, {got['n_pairs']} {pair_text}, {Path(data or 'task').name}"
    )


def _write_patching(
    maps: dict[str, Any], info: dict[str, Any], out_dir: Path, acc: Any, rule: dict[str, Any], seed: int, title: str
) -> PatchingRun:
    """Write the maps of a task's activation patching (heatmaps with cell verdicts, ``run.json``)."""
    from interp.results import write_json
    from interp.viz.layers import draw_patching_heatmap

    if not is_main(acc):
        return PatchingRun(maps, out_dir, [], info, cell_verdicts(maps, rule, seed, None))
    figures = []
    cells = cell_verdicts(maps, rule, seed, out_dir)
    for comp, m in maps.items():
        m.save(out_dir, f"patching_{comp}")
        axis = "offset from the last token" if comp == "resid_pre" else "head"
        figures.append(
            draw_patching_heatmap(
                m,
                out_dir / f"patching_{comp}.png",
                cells=cells[comp],
                title=(f"patching {comp} ({title}): share of the gap restored, by layer × {axis}"),
            )
        )
    run = PatchingRun(maps, out_dir, figures, info, cells)
    write_json(out_dir / "run.json", run.summary())
    return run


def run_pragworld_sweep(
    model: str | Path,
    data: str | Path,
    job: SweepJob | None = None,
    *,
    out: str | Path | None = None,
    placement: Any = None,
    log: Any = None,
    control: Any = None,
    **settings: Any,
) -> SweepRun | PatchingRun:
    """Load the model (any checkpoint folder with a tokenizer), the PragWorld file, run the sweep,
    write ``sweep.csv`` / ``verdicts.json`` (with ``by_category``) / ``layers.png`` / ``run.json``
    to ``out`` (default ``<model>/../sweep_<kind>_pragworld/``); ``activation-patching`` returns a
    :class:`PatchingRun` and writes ``patching_resid_pre`` / ``patching_heads``
    (``.csv``, ``_mean.csv``, ``.json``, ``.png``) and ``run.json``. ``n``: the first n rows only;
    ``prepend_bos`` / ``chat_template``: :class:`interp.tasks.Tokenization`; ``placement``: where the
    model runs (:class:`interp.models.device.Placement`; default CPU; a launcher's process device).
    Verdicts as in :func:`~interp.jobs.sweep.run_sweep`; the resampling unit is the PragWorld group
    (an original and its alterations; a patched pair: its original's group). ``metric``: ``p-gold``
    (default, :data:`~interp.jobs.run_records.PRAGWORLD_METRIC`), ``logit-diff`` or ``accuracy``
    (:meth:`interp.tasks.YesNoTask.metric`); the frame carries each row's ``gold``, the verdicts the
    per-class effects and prior-shift flag, with ``logit-diff`` on ``mlp-zero`` the direct effect;
    ``folds``: confirmation on held-out groups; ``ablation`` / ``scales`` / ``draws``: the removal
    kinds (module docstring). ``batch_size`` None: chosen from the memory budget
    (:mod:`interp.analysis.engines.budget`); ``control``: a :class:`~interp.analysis.engines.unitstore.LongRun`
    (``max_memory``, ``overwrite``, ``progress``) — the MLP sweep writes its finished units to
    ``out/units/`` and a rerun into the same ``out`` resumes from them
    (:mod:`interp.analysis.engines.unitstore`)."""
    from interp.datasets.pragworld import load_pragworld
    from interp.tasks import YesNoTask

    job = _task_job(job, settings)
    pw = load_pragworld(data, grouping=job.grouping)  # a bad file fails before the model loads
    rows = pw.rows if job.n is None else pw.rows.iloc[: job.n]
    if rows.empty:
        raise ValueError(f"no data rows in {data}")

    def build(model: Path) -> Any:
        return YesNoTask.pragworld(
            model, rows, prompt="label", prepend_bos=job.prepend_bos, chat_template=job.chat_template
        )

    return run_task_sweep(
        model, data, build, {"grouping": job.grouping}, job, out=out, placement=placement, log=log, control=control
    )


def run_contrast_sweep(
    model: str | Path,
    data: str | Path,
    job: SweepJob | None = None,
    *,
    out: str | Path | None = None,
    placement: Any = None,
    log: Any = None,
    control: Any = None,
    **settings: Any,
) -> SweepRun | PatchingRun:
    """:func:`run_pragworld_sweep` on contrast examples (JSONL, e.g. ``interp data ioi``) asked through
    :class:`interp.tasks.ContrastTask`: metric the logit difference correct − foil (right when > 0),
    groups and templates (``by_category.csv``) of the examples; the patching kinds patch the prompt
    into its corrupted prompt (:mod:`interp.analysis.engines.contrast_sweep`); default out
    ``<model>/../sweep_<kind>_contrast/``. ``metric``: ``logit-diff`` (default) or ``p-gold``
    (P(correct) in the two-way softmax); ``folds``, ``ablation``: as for PragWorld."""
    from interp.datasets.contrast import load_contrast
    from interp.tasks import ContrastTask

    job = _task_job(job, settings)
    examples = load_contrast(data)  # a bad file fails before the model loads

    # built (tokenized) once, here: a bad token or length fails before the model loads
    task = ContrastTask.build(
        Path(model), examples, prepend_bos=job.prepend_bos, chat_template=job.chat_template, n=job.n
    )
    return run_task_sweep(model, data, lambda _: task, {}, job, out=out, placement=placement, log=log, control=control)


def _removal_names(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with an old-style ``removals`` (a list of
    :class:`~interp.analysis.engines.removals.Removal`, as :func:`run_task_sweep` once took) as the job's
    ``removals`` / ``scales`` / ``draws``."""
    from interp.analysis.engines.removals import Removal

    given = settings.get("removals")
    if not given or not all(isinstance(r, Removal) for r in given):
        return settings
    scales = [float(r.factor) for r in given if r.kind == "scale"]
    draws = next((int(r.draws) for r in given if r.kind == "resample"), settings.get("draws", 3))
    kinds = list(dict.fromkeys(r.kind for r in given))
    return {**settings, "removals": kinds, "scales": scales or None, "draws": draws}


def _task_job(job: SweepJob | None, settings: dict[str, Any]) -> SweepJob:
    """The job of a task sweep called by its own name: every row unless ``n`` is given."""
    return SweepJob.of(job or SweepJob(n=None), **settings)


def token_ranks(rows: Any) -> np.ndarray:
    """Each row's rank when the rows are sorted by their token ids (lists compare element by
    element): rows that share a prefix get neighbouring ranks."""
    order = sorted(range(len(rows)), key=lambda i: list(rows[i]))
    ranks = np.empty(len(rows), dtype=int)
    ranks[order] = np.arange(len(rows))
    return ranks


def task_sha256(task: Any) -> str:
    """The SHA-256 of a task's token ids and answers: its identity when it comes from no file (a
    task built in Python, :func:`interp.sweep`)."""
    import hashlib
    import json

    answers = [int(x) for x in task.correct_ids] + [int(x) for x in getattr(task, "foil_ids", [])]
    return hashlib.sha256(json.dumps([task.ids, answers]).encode()).hexdigest()


def _task_metric(metric: str | None, yesno: bool) -> str:
    """The ``--metric`` of a task sweep, checked: yes/no ``p-gold`` (default) | ``logit-diff`` |
    ``accuracy``; contrast ``logit-diff`` (default) | ``p-gold``."""
    from interp.tasks.yesno import METRICS

    allowed = tuple(METRICS) if yesno else ("logit-diff", "p-gold")
    metric = metric or (PRAGWORLD_METRIC if yesno else "logit-diff")
    if metric not in allowed:
        raise ValueError(
            f"--metric must be one of {', '.join(allowed)} on a {'PragWorld' if yesno else 'contrast'} "
            f"file, got {metric!r}"
        )
    return metric


@dataclass
class _TaskRun:
    """A task sweep under way: the job, the model and the task, where it writes, the batch plan,
    and ``info`` (the notes ``run.json`` gathers as the steps run)."""

    job: SweepJob
    model: Path
    data: Any
    extra: dict[str, Any]
    bridge: Any
    task: Any
    metric: str
    lays: list[int]
    ids: Any  # the task's inputs (task.inputs()), built once
    mask: Any
    lengths: Any
    info: dict[str, Any]
    out_dir: Path
    plan: Any
    acc: Any
    log: Any
    control: Any

    @property
    def yesno(self) -> bool:
        from interp.tasks import YesNoTask

        return isinstance(self.task, YesNoTask)

    @property
    def suffix(self) -> str:
        return "pragworld" if self.yesno else "contrast"

    def metric_of(self, part: Any, golds: Any = None) -> Any:
        """The per-row metric of rows ``part``: yes/no against gold (``golds``: other golds, a
        pair's); contrast correct − foil."""
        if self.yesno:
            return self.task.metric(self.task.gold[part] if golds is None else golds, self.metric)
        return self.task.metric_of("logit_diff" if self.metric == "logit-diff" else "prob", rows=part)

    def unit_config(self, what: str, **settings: Any) -> dict[str, Any]:
        """The fingerprint of this run's units: what decides their numbers, not when or where."""
        data, task = self.data, self.task
        return {
            "job": f"{what} on {self.suffix} rows",
            "data_sha256": file_sha256(data) if data is not None and Path(data).is_file() else task_sha256(task),
            "n_rows": len(task),
            **{k: v for k, v in self.extra.items() if k != "provenance"},  # the API's provenance holds a date
            "method": self.job.method,
            **settings,
            "tokenization": {k: v for k, v in task.settings().items() if k != "tokenizer"},  # not its path
        }

    def units(self, config: dict[str, Any], sort_key: Any, names: list[str]) -> Any:
        """The resumable units of this run's sweep (:func:`~interp.jobs.sweep_units.prepare_sweep`)."""
        return prepare_sweep(
            self.bridge,
            self.out_dir,
            config,
            model=self.model,
            sort_key=sort_key,
            layers=self.lays,
            names=names,
            plan=self.plan,
            control=self.control,
            log=self.log,
        )


def run_task_sweep(
    model: str | Path,
    data: str | Path | None,
    build: Any,
    extra: dict[str, Any] | None = None,
    job: SweepJob | None = None,
    *,
    bridge: Any = None,
    out: Any = None,
    placement: Any = None,
    log: Any = None,
    control: Any = None,
    **settings: Any,
) -> SweepRun | PatchingRun:
    """The sweep of a task (a YesNoTask or a ContrastTask, ``build(model)``) on a model: load,
    run ``kind``, verdicts, files (:func:`run_pragworld_sweep`). ``bridge``: the model already
    loaded (the Python API's :func:`interp.sweep` passes its own; ``model`` then only names it);
    ``extra``: notes for ``run.json`` (and the units' fingerprint); ``job`` and ``settings`` as in
    :func:`~interp.jobs.sweep.run_sweep` (the old keyword ``removals``, a list of
    :class:`~interp.analysis.engines.removals.Removal`, is still taken)."""
    job = SweepJob.of(job, **_removal_names(settings))
    ctx = _start_task_run(
        Path(model), data, build, extra or {}, job, bridge, out, placement, log or sys.stderr, control
    )
    if job.kind == "activation-patching":
        return _task_patching(ctx)
    started = time.perf_counter()
    sweeps = _task_mlp_sweep(ctx) if job.kind == "mlp-zero" else {}
    sweep = next(iter(sweeps.values())) if sweeps else _task_direct_effect(ctx)
    ctx.info["processes"] = rank_and_size(ctx.acc)[1]
    ctx.info["sweep_seconds"] = round(time.perf_counter() - started, 3)
    return _judge_and_write_task(ctx, sweep, sweeps)


def _start_task_run(
    model: Path,
    data: Any,
    build: Any,
    extra: dict[str, Any],
    job: SweepJob,
    bridge: Any,
    out: Any,
    placement: Any,
    log: Any,
    control: Any,
) -> _TaskRun:
    """Load the model (unless given), build the task, note the settings, plan the batch."""
    from interp.models.checkpoint import load_bridge
    from interp.tasks import YesNoTask
    from interp.tasks.yesno import METRICS

    acc = accelerator()
    if bridge is None:
        bridge = load_bridge(
            model, device=str(acc.device) if acc is not None else None, placement=None if acc is not None else placement
        )
    bridge.eval()
    lays = check_layers(job.layers, int(bridge.cfg.n_layers))
    task = build(model)
    yesno = isinstance(task, YesNoTask)
    metric = _task_metric(job.metric, yesno)
    task.check_fits(int(bridge.cfg.n_ctx))
    info: dict[str, Any] = {
        "model": str(model),
        "data": None if data is None else str(data),
        **extra,
        "kind": job.kind,
        "seed": job.seed,
        "n_rows": len(task),
        **task.settings(),
    }
    if yesno:
        info["metric"] = f"{METRICS[metric][0]}: {METRICS[metric][1]}"
    info["metric_name"] = metric
    if "config" not in info and job.kind != "activation-patching":  # what SweepConfig.from_run reads back
        attention = getattr(placement, "attention", None) or "auto"
        info["config"] = SweepJob.of(job, metric=metric).config(attention).to_dict()
    info["job"] = job.to_dict()  # what SweepJob.from_run reads back
    info["threshold"] = (
        YESNO_THRESHOLDS[metric] if yesno else task.threshold_of("logit_diff" if metric == "logit-diff" else "prob")
    )
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{job.kind}_{'pragworld' if yesno else 'contrast'}"
    ids, mask = task.inputs()
    lengths = mask.sum(1).numpy() if mask is not None else np.full(len(task), ids.shape[1])
    swept = int(bridge.cfg.n_layers) if job.kind == "activation-patching" else len(lays)
    plan = plan_batch(
        bridge,
        lengths,
        swept=swept,
        method=job.method,
        kind=job.kind,
        batch_size=job.batch_size,
        control=control,
        log=log,
    )
    info["batch"] = plan.to_dict()
    return _TaskRun(
        job, model, data, extra, bridge, task, metric, lays, ids, mask, lengths, info, out_dir, plan, acc, log, control
    )


def _task_mlp_sweep(ctx: _TaskRun) -> dict[str, SweepResult]:
    """``mlp-zero`` on the task's rows: each removal of each layer's MLP, in resumable units; with
    ``logit-diff`` each layer's direct effect beside its total (:mod:`interp.analysis.verdicts.direct_effects`)."""
    from interp.analysis.engines.attribution import mlp_zero_attribution
    from interp.analysis.engines.sweeps import mlp_removal_sweep

    job, task, bridge, lays, method, batch_size = (
        ctx.job,
        ctx.task,
        ctx.bridge,
        ctx.lays,
        ctx.job.method,
        ctx.plan.batch_size,
    )
    removals = job.removal_set()
    ids, mask, lengths = ctx.ids, ctx.mask, ctx.lengths
    groups, categories = task.groups, task.categories
    reference = discovery_reference(groups, job.folds, job.seed)
    rows_all = np.arange(len(task))
    units = ctx.units(
        ctx.unit_config(
            f"sweep {job.kind}",
            layers=lays,
            metric=ctx.metric,
            folds=job.folds,
            seed=job.seed if job.folds or any(r.kind == "resample" for r in removals) else None,
            removals=[r.to_dict() for r in removals],
            chunking="token order" if method == "prefix" else "length",
        ),
        # prefix: each row's rank in token order, so the rows sharing a prefix share a unit
        sort_key=token_ranks(task.ids) if method == "prefix" else lengths,
        names=[r.name for r in removals],
    )

    def mlp_sweep(part: Any, removal: Any) -> SweepResult:
        if method == "attribution":
            return mlp_zero_attribution(
                bridge,
                ids[part],
                ctx.metric_of(part),
                mask[part],
                lays,
                categories=list(np.asarray(categories, dtype=object)[part]),
                groups=groups[part],
                batch_size=batch_size,
                higher_is_better=True,
            )
        return mlp_removal_sweep(
            bridge,
            ids,
            ctx.metric_of(slice(None)),
            mask,
            lays,
            ablation=removal,
            reference=reference,
            rows=rows_all[part],
            categories=categories,
            groups=groups,
            batch_size=batch_size,
            method=method,
            higher_is_better=True,
        )

    sweeps = run_removals(lambda r, part: mlp_sweep(part, r), len(task), ctx.acc, removals, units)
    ctx.info["units"] = units.summary()
    for s in sweeps.values():
        s.meta["groups"] = task.group_unit
        if ctx.yesno:
            s.frame["gold"] = task.gold[s.frame["example"].to_numpy(dtype=int)]
    if ctx.metric == "logit-diff":  # the direct effect beside the total (interp.analysis.verdicts.direct_effects)
        from interp.analysis.verdicts.direct_effects import attach_direct, direct_effects

        direct = direct_effects(bridge, ids, task.correct_ids, task.foil_ids, mask, lays, batch_size=batch_size)
        attach_direct(next(iter(sweeps.values())), direct, lays)
    ctx.info.update(n_examples=len(task), method=method)
    return sweeps


def _task_direct_effect(ctx: _TaskRun) -> SweepResult:
    """``direct-effect``: each PragWorld alteration (or contrast prompt) patched into its original
    (corrupted prompt) at each layer's residual, in resumable units."""
    from interp.analysis.engines.attribution import direct_effect_attribution
    from interp.analysis.engines.direct_patching import direct_effect_patching

    task, info, method = ctx.task, ctx.info, ctx.job.method
    if ctx.yesno:
        pairs, pair_gold, pair_cats, pair_groups, skipped = reference_patch_pairs(ctx.bridge, task)
        info.update(n_pairs=len(pairs), skipped=skipped, n_failed=sum(skipped.values()))
        if any(skipped.values()):
            print(f"note: patched {len(pairs)} pairs; skipped {skipped}", file=ctx.log)
        pair_metric = lambda part: ctx.metric_of(part, np.asarray(pair_gold)[part])  # noqa: E731
        sweep_groups = "the PragWorld group of the pair's original"
    else:
        from interp.analysis.engines.contrast_sweep import contrast_pairs

        pairs, pair_metric, pair_cats, pair_groups = contrast_pairs(task), ctx.metric_of, task.categories, task.groups
        info.update(n_pairs=len(pairs), n_failed=0, clean="prompt", corrupted="corrupted prompt")
        sweep_groups = task.group_unit
    de = direct_effect_attribution if method == "attribution" else direct_effect_patching

    def de_part(part: Any) -> SweepResult:  # a slice (sharded) or sorted pair numbers (a unit)
        idx = np.arange(len(pairs))[part]
        return de(
            ctx.bridge,
            [pairs[i] for i in idx],
            pair_metric(idx),
            ctx.lays,
            categories=None if pair_cats is None else [pair_cats[i] for i in idx],
            groups=None if pair_groups is None else np.asarray(pair_groups)[idx],
            higher_is_better=True,
        )

    units = ctx.units(
        ctx.unit_config(f"sweep {ctx.job.kind}", layers=ctx.lays, metric=ctx.metric),
        sort_key=np.zeros(len(pairs), dtype=int),  # units in the pairs' own order
        names=["direct"],
    )
    if rank_and_size(ctx.acc)[1] > 1:  # several processes share the pairs: no units (as run_removals)
        sweep = sharded(de_part, len(pairs), ctx.acc)
    else:
        sweep = units.run("direct", de_part)
        info["units"] = units.summary()
    units.close()
    sweep.meta["groups"] = sweep_groups
    if ctx.yesno:
        sweep.frame["gold"] = np.asarray(pair_gold, dtype=int)[sweep.frame["example"].to_numpy(dtype=int)]
    info.update(n_examples=len(pairs), method="attribution" if method == "attribution" else "loop")
    return sweep


def _task_patching(ctx: _TaskRun) -> PatchingRun:
    """``activation-patching``: the maps, in resumable chunks (:func:`_run_pair_patching`)."""
    chunks = prepare_patching(
        ctx.bridge,
        ctx.out_dir,
        ctx.unit_config("activation patching"),
        model=ctx.model,
        n_pairs=len(ctx.task),
        width=int(ctx.lengths.max()),
        plan=ctx.plan,
        control=ctx.control,
        log=ctx.log,
    )
    job = ctx.job
    return _run_pair_patching(
        ctx.bridge,
        ctx.task,
        ctx.info,
        ctx.model,
        ctx.data,
        ctx.out_dir,
        job.method,
        ctx.plan.batch_size,
        ctx.log,
        ctx.acc,
        job.rule_kwargs,
        job.seed,
        units=chunks,
    )


def _judge_and_write_task(ctx: _TaskRun, sweep: SweepResult, sweeps: dict[str, SweepResult]) -> SweepRun:
    """The verdicts (with the prior-shift flag, the direct effects, the confirmation; each
    removal's and their agreement), then the files (the first process only)."""
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.results import write_json
    from interp.viz.layers import draw_layer_effects

    job, info, out_dir, rule, seed = ctx.job, ctx.info, ctx.out_dir, ctx.job.rule_kwargs, ctx.job.seed
    threshold = info["threshold"]

    def judge(s: SweepResult) -> LayerVerdicts:
        v = layer_verdicts(s, seed=seed, threshold=threshold, **rule)
        if ctx.yesno:
            add_prior_shift(v, s, seed=seed, **rule)
        if "direct" in s.frame.columns:
            from interp.analysis.verdicts.direct_effects import add_direct_effects

            add_direct_effects(v, s, seed=seed, **rule)
        if job.folds:
            confirm_verdicts(v, s, job.folds, seed=seed, threshold=threshold, **rule)
        return v

    verdicts = judge(sweep)
    comparison = compare_removals(sweeps, judge) if len(sweeps) > 1 else None
    info.update(
        ablation=[r.name for r in job.removal_set()], agreement=comparison and comparison.frame.to_dict("records")
    )
    if not is_main(ctx.acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info, sweeps)
    sweep.save(out_dir)
    for name, other in list(sweeps.items())[1:]:  # every further removal's per-example effects
        other.save(out_dir, f"sweep_{name}")
    verdicts.save(out_dir)
    n, model = len(ctx.task), ctx.model
    source = Path(ctx.data).name if ctx.data is not None else f"{n} examples"
    what = f"PragWorld {source}" if ctx.yesno else source
    figure = draw_layer_effects(
        verdicts, out_dir / "layers.png", title=f"{job.kind} on {model.name}, {what} ({n} rows)"
    )
    if verdicts.by_category is not None:
        verdicts.by_category.to_csv(out_dir / "by_category.csv")
    if "direct_effect" in verdicts.frame.columns:
        from interp.viz.layers import draw_direct_total

        draw_direct_total(
            verdicts, out_dir / "direct_total.png", title=f"total vs direct effect on {model.name}, {what}"
        )
    if comparison is not None:
        from interp.viz.removals import write_removals

        write_removals(comparison, out_dir, title=f"dose-response on {model.name}, {what}")
    run = SweepRun(sweep, verdicts, out_dir, figure, info, sweeps)
    write_json(out_dir / "run.json", run.summary())
    return run


__all__ = ["run_contrast_sweep", "run_pragworld_sweep", "run_task_sweep"]
