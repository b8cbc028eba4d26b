"""The layer-analysis job: a sweep on a checkpoint end to end, the code behind ``interp sweep``, the
main job's layer stage and ``experiments/layer_sweep.py``. It loads, reads, runs, writes files and
draws figures, so it sits above analysis (whose engines it runs) and viz (whose figures it draws):
those rooms never call back up.

:func:`run_sweep` loads a checkpoint, reads its held-out sequences (``<checkpoint>/../data/test.txt``
unless told otherwise; fresh sequences from the world when there is no such file), runs one kind
of sweep with a per-example next-token loss (lower = better), computes the layer verdicts and
writes everything to a folder (default ``<checkpoint>/../sweep_<kind>/``):

- ``mlp-zero`` — :func:`~interp.analysis.engines.sweeps.mlp_zero_sweep` over the sequences, metric
  :func:`~interp.analysis.engines.scoring.token_loss` (mean next-token loss over the non-padding targets).
- ``direct-effect`` — :func:`~interp.analysis.engines.direct_patching.direct_effect_patching` on pairs built by
  :func:`~interp.analysis.engines.edit_pairs.state_change_pairs`: a held-out prefix and the same prefix with one token replaced by
  another legal token that leads to a different state (for streets: one direction by another
  direction), both legal. The metric is the original's next-token loss on the tokens after the
  edit (:func:`~interp.analysis.engines.edit_pairs.continuation_loss`), so the effect of layer ℓ is how much the altered run's
  residual entering ℓ (at every aligned position) changes the model's loss on the original route.

``method="attribution"`` estimates every site from one gradient run instead
(:mod:`interp.analysis.engines.attribution`) and writes the same files and verdicts from the estimates;
with ``verify_top=K`` the K sites of largest |attribution| are then measured exactly (the reuse
sweep, the pair-by-pair patching, or one patched forward per cell), written to ``verify.csv`` and
``run.json`` beside the estimates (:func:`~interp.analysis.verdicts.verify_attribution.verify_layers`,
:func:`~interp.analysis.verdicts.verify_attribution.verify_cells`).

Written: ``sweep.csv`` / ``sweep_layers.csv`` / ``sweep.json`` (:meth:`SweepResult.save`),
``verdicts.json`` (:meth:`LayerVerdicts.save`), ``layers.png``
(:func:`interp.viz.layers.draw_layer_effects`) and ``run.json`` (the settings and summary).

On a PragWorld CSV (``data=FILE.csv``) the same kinds run on its yes/no questions
(:func:`~interp.jobs.task_sweep.run_pragworld_sweep`; the pairs and maps:
:mod:`interp.analysis.engines.pragworld_sweep`); on a contrast file (``data=FILE.jsonl``, e.g. IOI) on its
prompts with the logit difference correct − foil (:func:`~interp.jobs.task_sweep.run_contrast_sweep`;
the patching: :mod:`interp.analysis.engines.contrast_sweep`); both in :mod:`interp.jobs.task_sweep`. Which one a
file is: :func:`interp.datasets.contrast.data_file_kind`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp.analysis.config.sweep_job import SweepJob
from interp.analysis.engines.edit_pairs import aligned_edit_pairs, continuation_loss, state_change_pairs
from interp.analysis.engines.processes import accelerator, is_main, sharded
from interp.analysis.engines.scoring import token_loss
from interp.analysis.engines.sweep_options import check_layers
from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.engines.unitstore import file_sha256
from interp.analysis.verdicts.agreement import compare_removals, discovery_reference, run_removals
from interp.analysis.verdicts.confirmation import confirm_verdicts
from interp.analysis.verdicts.layers import LayerVerdicts
from interp.analysis.verdicts.verify_attribution import verify_cells, verify_layers
from interp.jobs.run_records import (
    PRAGWORLD_KINDS,
    PRAGWORLD_METRIC,
    RULE_KEYS,
    YESNO_THRESHOLDS,
    PatchingRun,
    SweepRun,
    cell_verdicts,
    check_folds,
    rule_line,
    verdict_rule,
    verdict_words,
)
from interp.jobs.sweep_units import plan_batch, prepare_sweep
from interp.jobs.task_sweep import run_contrast_sweep, run_pragworld_sweep
from interp.models.parallel import rank_and_size


@dataclass
class _WorldRun:
    """A sweep of a world checkpoint under way: the job, the loaded model and its sequences, where
    it writes, and ``info`` (the notes ``run.json`` gathers as the steps run)."""

    job: SweepJob
    model: Path
    bridge: Any
    world: Any
    sequences: list
    source: str
    data_path: Path
    info: dict[str, Any]
    out_dir: Path
    lays: list[int]
    acc: Any
    log: Any
    control: Any


def _write_verify(out_dir: Path, rows: list[dict[str, Any]], name: str = "verify.csv") -> None:
    """``verify.csv`` and its scatter (``attribution_scatter.png``; ``verify_X.csv`` → ``attribution_scatter_X.png``)."""
    import pandas as pd

    from interp.viz.attribution import draw_attribution_scatter

    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(out_dir / name, index=False)
    stem = Path(name).stem.replace("verify", "attribution_scatter", 1)
    draw_attribution_scatter(
        table, out_dir / f"{stem}.png", title=f"top {len(rows)} sites by |attribution|, measured exactly"
    )


def _run_patching(ctx: _WorldRun) -> PatchingRun:
    """Residual-stream (layer × position) and head (layer × head) activation patching on aligned
    one-token edits, scored by the clean state's legal-token mass at the last position
    (``method="attribution"``: both maps estimated from one gradient run, ``verify_top`` cells of
    each measured exactly)."""
    from interp.analysis.engines.activation_patching import activation_patching, legal_mass
    from interp.results import write_json
    from interp.viz.layers import draw_patching_heatmap

    bridge, world, sequences, info, out_dir, log = ctx.bridge, ctx.world, ctx.sequences, ctx.info, ctx.out_dir, ctx.log
    job = ctx.job
    length, edit_at, seed, method, verify_top = job.length, job.edit_at, job.seed, job.method, job.verify_top
    if method != "attribution":
        info.pop("method")
    if length + 1 > int(bridge.cfg.n_ctx):
        raise ValueError(f"--length {length} (+ <bos>) exceeds the model context n_ctx={bridge.cfg.n_ctx}")
    pairs = aligned_edit_pairs(world, sequences, length, edit_at, seed)
    if not pairs.originals:
        raise ValueError(
            f"none of {len(sequences)} sequences gave a legal state-changing edit at token {edit_at} "
            f"of a {length}-token prefix; try another --edit-at or --length"
        )
    if pairs.failed:
        print(
            f"note: {pairs.failed} of {len(sequences)} sequences gave no pair (shorter than {length} tokens, "
            f"or no legal state-changing edit at token {edit_at})",
            file=log,
        )
    vocab = world.vocab
    clean = torch.tensor([vocab.encode(s) for s in pairs.originals])
    corrupted = torch.tensor([vocab.encode(s) for s in pairs.altered])
    legal = torch.zeros(len(pairs.originals), len(vocab), dtype=torch.bool)
    for i, seq in enumerate(pairs.originals):
        legal[i, [vocab.id(t) for t in world.legal(world.states_along(seq)[-1])]] = True
    labels = ["<bos>"] + [f"{j}" + ("*" if j == edit_at else "") for j in range(length)]
    info.update(
        n_sequences=len(sequences),
        n_pairs=len(pairs.originals),
        n_failed=pairs.failed,
        length=length,
        edit_at=edit_at,
        labels=labels,
        metric="legal_mass: probability on the tokens legal after the clean prefix, at its last position",
    )
    maps, figures = {}, []
    metric = legal_mass(legal)
    if method == "attribution":
        from interp.analysis.engines.attribution import activation_attribution

        estimated = activation_attribution(bridge, clean, corrupted, metric, ("resid_pre", "heads"), labels=labels)
        if verify_top:
            info["verify"] = {
                c: verify_cells(bridge, m, verify_top, clean, corrupted, metric) for c, m in estimated.items()
            }
            for c, rows in info["verify"].items():
                _write_verify(out_dir, rows, f"verify_{c}.csv")
    for comp in ("resid_pre", "heads"):
        if method == "attribution":
            m = estimated[comp]
        else:
            m = activation_patching(bridge, clean, corrupted, metric, comp, labels=labels)
        m.save(out_dir, f"patching_{comp}")
        maps[comp] = m
    cells = cell_verdicts(maps, job.rule_kwargs, seed, out_dir)
    for comp, m in maps.items():
        what = "position" if comp == "resid_pre" else "head"
        figures.append(
            draw_patching_heatmap(
                m,
                out_dir / f"patching_{comp}.png",
                cells=cells[comp],
                title=(
                    f"patching {comp} (clean → edited at token {edit_at}*): share of the gap restored, by layer × {what}"
                ),
            )
        )
    run = PatchingRun(maps, out_dir, figures, info, cells)
    write_json(out_dir / "run.json", run.summary())
    return run


def run_sweep(
    model: str | Path,
    job: SweepJob | None = None,
    *,
    data: str | Path | None = None,
    world: Any | None = None,
    out: str | Path | None = None,
    placement: Any = None,
    log: Any = None,
    control: Any = None,
    **settings: Any,
) -> SweepRun | PatchingRun:
    """Load the checkpoint ``model``, run the sweep ``job`` on its held-out data, write the results.

    ``job``: a :class:`~interp.analysis.config.sweep_job.SweepJob` (default: every default), changed by
    ``settings`` — its fields by name, the verdict rule's (``n_boot``, ``confidence``,
    ``per_layer``, ``min_effect``, ``resample``) and ``ablation`` (= ``removals``); an unknown
    keyword is a TypeError naming the allowed ones. Every setting is checked before any model
    loads; ``run.json`` records the job (``job``: :meth:`SweepJob.from_run` reads it back).

    ``data`` ending in ``.csv`` is a PragWorld file: the sweep runs on its yes/no questions instead
    (:func:`~interp.jobs.task_sweep.run_pragworld_sweep`); ``.jsonl`` contrast examples
    (:func:`~interp.jobs.task_sweep.run_contrast_sweep`); else a sequence file (default
    ``<checkpoint>/../data/test.txt``, else fresh sequences drawn with the job's ``seed``).
    ``world``: override the checkpoint's world. ``out``: the folder (default
    ``<checkpoint>/../sweep_<kind>/``). ``placement``: where the model runs
    (:class:`interp.models.device.Placement`: a device, dtype or device map; default CPU; under a
    launcher each process's own device). ``log``: a file for notes (default stderr).

    The settings (their flags' help: ``interp sweep --help``): ``n`` sequences at most (None:
    all); ``layers`` (default all, each must exist); ``method="attribution"``: AtP estimates
    (:mod:`interp.analysis.engines.attribution`) in place of the exact sweep, same outputs, ``verify_top``
    K sites then measured exactly (``verify.csv``, ``run.json["verify"]``); ``length`` /
    ``edit_at``: the prefix and edited token of ``activation-patching`` (:func:`aligned_edit_pairs`);
    the verdicts (:func:`~interp.analysis.verdicts.layers.layer_verdicts`; patching maps:
    :func:`~interp.analysis.verdicts.layers.map_verdicts`) by ``rule``
    (:class:`~interp.analysis.config.sweep_config.VerdictRule`), confirmed on ``folds`` held-out groups
    (:func:`~interp.analysis.verdicts.confirmation.confirm_verdicts`); ``removals`` (``mlp-zero`` only):
    ``zero`` (default), ``mean``, ``resample``, ``scale`` or several (:mod:`interp.analysis.engines.removals`),
    ``scales`` the factors of ``scale``, ``draws`` the resample draws; several add
    ``verdicts_<removal>.json``, ``agreement.csv`` / ``.md`` and with ``scale`` ``dose_response.csv``
    / ``.png`` (:mod:`interp.analysis.verdicts.agreement`); ``verdicts.json`` is the first removal's.

    Long runs: ``batch_size`` None sizes the batch from a memory budget
    (:mod:`interp.analysis.engines.budget`; ``run.json["batch"]``); the MLP sweep writes each finished unit
    (a removal × a chunk of rows) to ``out/units/`` and a rerun into the same ``out`` resumes from
    them, refusing units of another config or model (:mod:`interp.analysis.engines.unitstore`).
    ``control``: a :class:`~interp.analysis.engines.unitstore.LongRun` (``max_memory``, ``overwrite``,
    ``progress``).
    """
    from interp.datasets.contrast import data_file_kind

    job = SweepJob.of(job, **settings)  # every setting checked, before any model loads
    log = log or sys.stderr
    data_kind = data_file_kind(data) if data is not None else "sequences"
    if data_kind != "sequences":  # a PragWorld file (yes/no questions) or contrast examples
        if job.verify_top:
            raise ValueError(
                f"--verify-top runs on world checkpoints; on a {data_kind} file run the exact sweep "
                "(--method reuse) beside the attribution one"
            )
        task_sweep: Any = run_pragworld_sweep if data_kind == "pragworld" else run_contrast_sweep
        assert data is not None  # a task file was named
        return task_sweep(model, data, job, out=out, placement=placement, log=log, control=control)
    _check_world_job(job)
    ctx = _load_world_run(Path(model), job, data, world, out, placement, log, control)
    if job.kind == "activation-patching":
        return _run_patching(ctx)
    if job.kind == "mlp-zero":
        sweeps, exact = _world_mlp_sweep(ctx)
        sweep = next(iter(sweeps.values()))
    else:
        sweeps = {}
        sweep, exact = _world_direct_effect(ctx)
    return _judge_and_write(ctx, sweep, sweeps, exact)


def _check_world_job(job: SweepJob) -> None:
    """What a world checkpoint's sweep refuses that a task file's takes."""
    if job.metric is not None:
        raise ValueError(
            f"--metric {job.metric} applies to yes/no and contrast sweeps (a PragWorld CSV, a contrast "
            "JSONL); a world checkpoint's sweep scores the next-token loss"
        )
    if job.prepend_bos is not None or job.chat_template:
        raise ValueError(
            "--prepend-bos / --chat-template apply to a PragWorld CSV or a contrast file (--data "
            "FILE.csv / FILE.jsonl); a world checkpoint's sequences are its own word-level ids with "
            "<bos> first"
        )


def _load_world_run(
    model: Path,
    job: SweepJob,
    data: str | Path | None,
    world: Any,
    out: str | Path | None,
    placement: Any,
    log: Any,
    control: Any,
) -> _WorldRun:
    """Load the checkpoint and its held-out sequences (``data``, else ``data/test.txt`` beside the
    run, else ``n`` fresh ones from its world)."""
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds.io import read_sequences

    acc = accelerator()
    ckpt = load_checkpoint(
        model,
        world=world,
        device=str(acc.device) if acc is not None else None,
        placement=None if acc is not None else placement,
    )
    bridge, world = ckpt.bridge, ckpt.world
    bridge.eval()
    lays = check_layers(job.layers, int(bridge.cfg.n_layers))
    data_path = Path(data) if data else run_data_dir(model) / "test.txt"
    if data_path.exists():
        sequences = read_sequences(data_path, world)
        source = str(data_path)
    elif data:
        raise FileNotFoundError(f"--data {data_path} does not exist")
    else:
        sequences = world.generate(job.n or 200, np.random.default_rng(job.seed))
        source = f"{len(sequences)} fresh sequences (seed {job.seed}; may overlap the training data)"
        print(f"note: no held-out file at {data_path}; sweeping on {source}", file=log)
    if job.n is not None:
        sequences = sequences[: job.n]
    if not sequences:
        raise ValueError(f"no sequences in {source}")
    info: dict[str, Any] = {
        "model": str(model),
        "world": world.describe(),
        "kind": job.kind,
        "data": source,
        "method": job.method,
        "seed": job.seed,
        "job": job.to_dict(),
    }
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{job.kind}"
    return _WorldRun(job, model, bridge, world, sequences, source, data_path, info, out_dir, lays, acc, log, control)


def _world_mlp_sweep(ctx: _WorldRun) -> tuple[dict[str, SweepResult], Any]:
    """``mlp-zero`` on the sequences: each removal of each layer's MLP, scored by the per-example
    next-token loss, run in resumable units; also the exact sweep of chosen layers (``verify_top``)."""
    from interp.analysis.engines.attribution import mlp_zero_attribution
    from interp.analysis.engines.sweeps import mlp_removal_sweep
    from interp.worlds.encoding import encode_sequences

    job, bridge, lays, info = ctx.job, ctx.bridge, ctx.lays, ctx.info
    removals = job.removal_set()
    ids = encode_sequences(ctx.sequences, ctx.world.vocab, int(bridge.cfg.n_ctx))
    mask = (ids != ctx.world.vocab.pad_id).long()
    own = np.arange(len(ctx.sequences))  # each held-out sequence its own group
    reference = discovery_reference(own, job.folds, job.seed)
    lengths = mask.sum(1).numpy()
    plan = plan_batch(
        bridge,
        lengths,
        swept=len(lays),
        method=job.method,
        kind=job.kind,
        batch_size=job.batch_size,
        control=ctx.control,
        log=ctx.log,
    )
    batch_size, info["batch"] = plan.batch_size, plan.to_dict()
    held_out = ctx.data_path.exists()
    units = prepare_sweep(
        bridge,
        ctx.out_dir,
        {
            "job": "sweep mlp-zero on world sequences",
            "data": ctx.source if held_out else None,
            "data_sha256": file_sha256(ctx.data_path) if held_out else None,
            "n_rows": len(ctx.sequences),
            "method": job.method,
            "layers": lays,
            "folds": job.folds,
            "seed": job.seed,
            "removals": [r.to_dict() for r in removals],
        },
        model=ctx.model,
        sort_key=lengths,
        layers=lays,
        names=[r.name for r in removals],
        plan=plan,
        control=ctx.control,
        log=ctx.log,
    )

    def mlp_sweep(
        part: Any, method: str = job.method, layers: list[int] = lays, removal: Any = removals[0]
    ) -> SweepResult:
        if method == "attribution":
            return mlp_zero_attribution(
                bridge,
                ids[part],
                token_loss,
                mask[part],
                layers,
                groups=own[part],
                batch_size=batch_size,
                higher_is_better=False,
            )
        return mlp_removal_sweep(
            bridge,
            ids,
            token_loss,
            mask,
            layers,
            ablation=removal,
            reference=reference,
            rows=own[part],
            groups=own,
            batch_size=batch_size,
            method=method,
            higher_is_better=False,
        )

    n = len(ctx.sequences)
    sweeps = run_removals(lambda r, part: mlp_sweep(part, removal=r), n, ctx.acc, removals, units)
    info["units"] = units.summary()
    info.update(n_examples=n, metric="token_loss")
    return sweeps, lambda top: sharded(lambda part: mlp_sweep(part, "reuse", top), n, ctx.acc)


def _world_direct_effect(ctx: _WorldRun) -> tuple[SweepResult, Any]:
    """``direct-effect`` on the sequences: each sequence and its state-changing one-token edit
    (:func:`state_change_pairs`), the edit's residual patched in at each layer, scored by the
    original's loss on the tokens after the edit; also the exact patching of chosen layers."""
    from interp.analysis.engines.attribution import direct_effect_attribution
    from interp.analysis.engines.direct_patching import PatchPair, direct_effect_patching

    job, world, sequences, info = ctx.job, ctx.world, ctx.sequences, ctx.info
    n_ctx = int(ctx.bridge.cfg.n_ctx)
    pairs = state_change_pairs(world, sequences, job.seed)
    info.update(
        n_sequences=len(sequences),
        n_pairs=len(pairs.originals),
        n_failed=pairs.failed,
        metric="continuation_loss (original tokens after the edit)",
    )
    if not pairs.originals:
        raise ValueError(f"could not build any state-changing pair from {len(sequences)} sequences")
    if pairs.failed:
        print(f"note: {pairs.failed} of {len(sequences)} sequences gave no state-changing pair", file=ctx.log)
    enc = [(world.vocab.encode(o), world.vocab.encode(a)) for o, a in zip(pairs.originals, pairs.altered)]
    too_long = [i for i, (o, _) in enumerate(enc) if len(o) > n_ctx]
    if too_long:
        raise ValueError(f"pair {too_long[0]} has more tokens than the model context n_ctx={n_ctx}")
    # the edited token sits at index edit_at + 1 of the ids (<bos> first); score the tokens after it
    patch_pairs = [PatchPair(o, a) for o, a in enc]
    own = np.arange(len(patch_pairs))  # one pair per held-out sequence: each its own group

    def de_sweep(part: slice, method: str = job.method, layers: list[int] = ctx.lays) -> SweepResult:
        fn = direct_effect_attribution if method == "attribution" else direct_effect_patching
        return fn(
            ctx.bridge,
            patch_pairs[part],
            continuation_loss([i + 1 for i in pairs.edit_at[part]]),
            layers,
            groups=own[part],
            higher_is_better=False,
        )

    sweep = sharded(de_sweep, len(patch_pairs), ctx.acc)
    info["method"] = "attribution" if job.method == "attribution" else "loop"  # exact patching runs pair by pair
    return sweep, lambda top: sharded(lambda part: de_sweep(part, "loop", top), len(patch_pairs), ctx.acc)


def _judge_and_write(ctx: _WorldRun, sweep: SweepResult, sweeps: dict[str, SweepResult], exact: Any) -> SweepRun:
    """The verdicts (each removal's, their agreement; the verified top sites), then the files:
    ``sweep.*``, ``verdicts.json``, ``layers.png``, ``run.json`` (the first process only)."""
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.results import write_json
    from interp.viz.layers import draw_layer_effects
    from interp.viz.removals import write_removals

    job, info, out_dir, rule = ctx.job, ctx.info, ctx.out_dir, ctx.job.rule_kwargs
    sweep.meta["groups"] = "each held-out sequence (or its one edit pair) its own group"
    if job.verify_top:
        info["verify"] = verify_layers(sweep, job.verify_top, exact, seed=job.seed, **rule)
    info["processes"] = rank_and_size(ctx.acc)[1]

    def judge(s: SweepResult) -> LayerVerdicts:
        v = layer_verdicts(s, seed=job.seed, **rule)
        if job.folds:
            confirm_verdicts(v, s, job.folds, seed=job.seed, **rule)
        return v

    verdicts = judge(sweep)
    comparison = compare_removals(sweeps, judge) if len(sweeps) > 1 else None
    info.update(
        ablation=[r.name for r in job.removal_set()], agreement=comparison and comparison.frame.to_dict("records")
    )
    if not is_main(ctx.acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info)
    sweep.save(out_dir)
    verdicts.save(out_dir)
    if info.get("verify"):
        _write_verify(out_dir, info["verify"])
    title = f"{job.kind} on {ctx.model.name} ({sweep.meta.get('n_examples')} examples)"
    figure = draw_layer_effects(verdicts, out_dir / "layers.png", title=title)
    if comparison is not None:
        write_removals(comparison, out_dir, title=f"dose-response, {title}")
    result = SweepRun(sweep, verdicts, out_dir, figure, info)
    write_json(out_dir / "run.json", result.summary())
    return result


__all__ = [
    "PRAGWORLD_KINDS",
    "PRAGWORLD_METRIC",
    "RULE_KEYS",
    "YESNO_THRESHOLDS",
    "PatchingRun",
    "SweepJob",
    "SweepRun",
    "check_folds",
    "rule_line",
    "run_contrast_sweep",
    "run_pragworld_sweep",
    "run_sweep",
    "verdict_rule",
    "verdict_words",
]
