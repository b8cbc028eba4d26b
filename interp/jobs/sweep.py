"""The layer-analysis job: a sweep on a checkpoint end to end, the code behind ``interp sweep``, the
main job's layer stage and ``experiments/layer_sweep.py``. It loads, reads, runs, writes files and
draws figures, so it sits above analysis (whose engines it runs) and viz (whose figures it draws):
those rooms never call back up.

:func:`run_sweep` loads a checkpoint, reads its held-out sequences (``<checkpoint>/../data/test.txt``
unless told otherwise; fresh sequences from the world when there is no such file), runs one kind
of sweep with a per-example next-token loss (lower = better), computes the layer verdicts and
writes everything to a folder (default ``<checkpoint>/../sweep_<kind>/``):

- ``mlp-zero`` — :func:`~interp.analysis.sweeps.mlp_zero_sweep` over the sequences, metric
  :func:`~interp.analysis.scoring.token_loss` (mean next-token loss over the non-padding targets).
- ``direct-effect`` — :func:`~interp.analysis.patching.direct_effect_patching` on pairs built by
  :func:`~interp.analysis.edit_pairs.state_change_pairs`: a held-out prefix and the same prefix with one token replaced by
  another legal token that leads to a different state (for streets: one direction by another
  direction), both legal. The metric is the original's next-token loss on the tokens after the
  edit (:func:`~interp.analysis.edit_pairs.continuation_loss`), so the effect of layer ℓ is how much the altered run's
  residual entering ℓ (at every aligned position) changes the model's loss on the original route.

``method="attribution"`` estimates every site from one gradient run instead
(:mod:`interp.analysis.attribution`) and writes the same files and verdicts from the estimates;
with ``verify_top=K`` the K sites of largest |attribution| are then measured exactly (the reuse
sweep, the pair-by-pair patching, or one patched forward per cell), written to ``verify.csv`` and
``run.json`` beside the estimates (:func:`~interp.analysis.verify_attribution.verify_layers`,
:func:`~interp.analysis.verify_attribution.verify_cells`).

Written: ``sweep.csv`` / ``sweep_layers.csv`` / ``sweep.json`` (:meth:`SweepResult.save`),
``verdicts.json`` (:meth:`LayerVerdicts.save`), ``layers.png``
(:func:`interp.viz.layers.draw_layer_effects`) and ``run.json`` (the settings and summary).

On a PragWorld CSV (``data=FILE.csv``) the same kinds run on its yes/no questions
(:func:`~interp.jobs.task_sweep.run_pragworld_sweep`; the pairs and maps:
:mod:`interp.analysis.pragworld_sweep`); on a contrast file (``data=FILE.jsonl``, e.g. IOI) on its
prompts with the logit difference correct − foil (:func:`~interp.jobs.task_sweep.run_contrast_sweep`;
the patching: :mod:`interp.analysis.contrast_sweep`); both in :mod:`interp.jobs.task_sweep`. Which one a
file is: :func:`interp.datasets.contrast.data_file_kind`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp.analysis.agreement import check_removals, compare_removals, discovery_reference, run_removals
from interp.analysis.confirmation import confirm_verdicts
from interp.analysis.edit_pairs import aligned_edit_pairs, continuation_loss, state_change_pairs
from interp.analysis.processes import accelerator, is_main, sharded
from interp.analysis.scoring import token_loss
from interp.analysis.sweep_options import KINDS, RUN_METHODS, check_layers
from interp.analysis.sweeps import SweepResult
from interp.analysis.unitstore import file_sha256
from interp.analysis.verdicts import LayerVerdicts
from interp.analysis.verify_attribution import verify_cells, verify_layers
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


def _run_patching(
    bridge: Any,
    world: Any,
    sequences: list,
    info: dict[str, Any],
    out_dir: Path,
    length: int,
    edit_at: int,
    seed: int,
    log: Any,
    method: str = "reuse",
    verify_top: int | None = None,
    *,
    rule: dict[str, Any],
) -> PatchingRun:
    """Residual-stream (layer × position) and head (layer × head) activation patching on aligned
    one-token edits, scored by the clean state's legal-token mass at the last position
    (``method="attribution"``: both maps estimated from one gradient run, ``verify_top`` cells of
    each measured exactly)."""
    from interp.analysis.activation_patching import activation_patching, legal_mass
    from interp.results import write_json
    from interp.viz.layers import draw_patching_heatmap

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
        from interp.analysis.attribution import activation_attribution

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
    cells = cell_verdicts(maps, rule, seed, out_dir)
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
    *,
    kind: str = "mlp-zero",
    world: Any | None = None,
    data: str | Path | None = None,
    n: int | None = 200,
    method: str = "reuse",
    layers: Sequence[int] | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    batch_size: int | None = None,
    n_boot: int = 2000,
    length: int = 12,
    edit_at: int = 4,
    grouping: str = "clean",
    verify_top: int | None = None,
    prepend_bos: bool | None = None,
    chat_template: bool | None = False,
    log: Any = None,
    placement: Any = None,
    confidence: float = 0.95,
    per_layer: bool = False,
    min_effect: float | None = None,
    resample: str = "groups",
    metric: str | None = None,
    folds: int | None = None,
    ablation: str | Sequence[str] = "zero",
    scales: str | Sequence[float] | None = None,
    draws: int = 3,
    control: Any = None,
) -> SweepRun | PatchingRun:
    """Load the checkpoint ``model``, run the sweep ``kind`` on its held-out data, write the results.

    ``data`` ending in ``.csv`` is a PragWorld file: the sweep runs on its yes/no questions instead
    (:func:`~interp.jobs.task_sweep.run_pragworld_sweep`, ``grouping`` as in the loader;
    ``prepend_bos`` / ``chat_template``: how its prompts are tokenized, :class:`interp.tasks.Tokenization`
    — default the model's own tokenizer's BOS rule, no chat template; world checkpoints refuse them).

    ``n``: at most this many sequences (None: all); ``layers``: default all, each must exist;
    ``seed``: for fresh sequences (no data file), the edit positions of ``direct-effect`` and the
    bootstrap. ``length`` / ``edit_at``: the prefix length and edited token of
    ``activation-patching`` (see :func:`aligned_edit_pairs`). ``placement``: where the model runs
    (:class:`interp.models.device.Placement`: a device, dtype or device map; default CPU; under a
    launcher each process's own device). ``log``: a file for notes (default
    stderr). ``method="attribution"``: AtP estimates (:mod:`interp.analysis.attribution`) in place of
    the exact sweep, same outputs; ``verify_top``: then measure the K sites of largest
    |attribution| exactly (``verify.csv``, ``run.json["verify"]``).

    The verdicts (:func:`~interp.analysis.verdicts.layer_verdicts`; on activation-patching maps
    :func:`~interp.analysis.verdicts.map_verdicts`): ``confidence`` of intervals simultaneous over
    the layers (``per_layer``: marginal ones), ``min_effect`` the margin in the metric's units
    (None: the metric's default), ``resample`` ``groups`` (a world sequence and its edit pair are
    each their own group; PragWorld rows: their group) or ``rows``; ``n_boot`` replicates.
    ``metric``: a yes/no sweep's metric (``p-gold``, ``logit-diff``, ``accuracy``; default
    :data:`~interp.jobs.run_records.PRAGWORLD_METRIC`) or a contrast sweep's (``logit-diff``,
    default, or ``p-gold``: P(correct)); ``folds``: confirm the verdicts on held-out groups
    (:func:`~interp.analysis.confirmation.confirm_verdicts`; 2 = a discovery and a confirmation half).
    ``ablation`` (``mlp-zero`` only): the removal kinds, ``zero`` (default), ``mean``, ``resample``,
    ``scale`` or several (``"zero,mean"``; :mod:`interp.analysis.removals`), ``scales`` the factors
    of ``scale``, ``draws`` the resample draws; several removals add ``verdicts_<removal>.json``,
    ``agreement.csv`` / ``.md`` and with ``scale`` ``dose_response.csv`` / ``.png``
    (:mod:`interp.analysis.agreement`); ``verdicts.json`` is the first removal's.

    Long runs: ``batch_size`` None sizes the batch from a memory budget
    (:mod:`interp.analysis.budget`; ``run.json["batch"]``); the MLP sweep writes each finished unit
    (a removal × a chunk of rows) to ``out/units/`` and a rerun into the same ``out`` resumes from
    them, refusing units of another config or model (:mod:`interp.analysis.unitstore`).
    ``control``: a :class:`~interp.analysis.unitstore.LongRun` (``max_memory``, ``overwrite``,
    ``progress``).
    """
    from interp.analysis.patching import PatchPair, direct_effect_patching
    from interp.analysis.sweeps import mlp_removal_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.viz.layers import draw_layer_effects
    from interp.viz.removals import write_removals
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    log = log or sys.stderr
    rule = verdict_rule(n_boot, confidence, per_layer, min_effect, resample)
    if kind not in KINDS:
        raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    from interp.datasets.contrast import data_file_kind

    removals = check_removals(kind, method, ablation, scales, draws, seed)
    data_kind = data_file_kind(data) if data is not None else "sequences"
    if data_kind != "sequences":  # a PragWorld file (yes/no questions) or contrast examples
        if verify_top:
            raise ValueError(
                f"--verify-top runs on world checkpoints; on a {data_kind} file run the exact sweep "
                "(--method reuse) beside the attribution one"
            )
        job: Any = run_pragworld_sweep if data_kind == "pragworld" else run_contrast_sweep
        extra: dict[str, Any] = {"grouping": grouping} if data_kind == "pragworld" else {}
        assert data is not None  # a task file was named
        return job(
            model,
            data,
            kind=kind,
            method=method,
            layers=layers,
            out=out,
            seed=seed,
            batch_size=batch_size,
            n=n,
            log=log,
            placement=placement,
            prepend_bos=prepend_bos,
            chat_template=chat_template,
            **extra,
            metric=metric,
            folds=folds,
            ablation=ablation,
            scales=scales,
            draws=draws,
            control=control,
            **rule,
        )
    if metric is not None:
        raise ValueError(
            f"--metric {metric} applies to yes/no and contrast sweeps (a PragWorld CSV, a contrast "
            "JSONL); a world checkpoint's sweep scores the next-token loss"
        )
    check_folds(folds)
    if folds and kind == "activation-patching":
        raise ValueError(
            "--confirm / --folds confirm layer verdicts (mlp-zero, direct-effect); activation-patching "
            "maps have cell verdicts"
        )
    if prepend_bos is not None or chat_template:
        raise ValueError(
            "--prepend-bos / --chat-template apply to a PragWorld CSV or a contrast file (--data "
            "FILE.csv / FILE.jsonl); a world checkpoint's sequences are its own word-level ids with "
            "<bos> first"
        )
    if method not in RUN_METHODS:
        raise ValueError(f"--method must be one of {', '.join(RUN_METHODS)}, got {method!r}")
    if verify_top is not None and (method != "attribution" or verify_top < 1):
        raise ValueError(
            f"--verify-top needs --method attribution and K ≥ 1, got K={verify_top} with --method {method}"
        )
    if n is not None and n < 1:
        raise ValueError(f"--n must be ≥ 1, got {n}")
    model = Path(model)
    acc = accelerator()
    ckpt = load_checkpoint(
        model,
        world=world,
        device=str(acc.device) if acc is not None else None,
        placement=None if acc is not None else placement,
    )
    bridge, world = ckpt.bridge, ckpt.world
    bridge.eval()
    lays = check_layers(layers, int(bridge.cfg.n_layers))
    data_path = Path(data) if data else run_data_dir(model) / "test.txt"
    if data_path.exists():
        sequences = read_sequences(data_path, world)
        source = str(data_path)
    elif data:
        raise FileNotFoundError(f"--data {data_path} does not exist")
    else:
        sequences = world.generate(n or 200, np.random.default_rng(seed))
        source = f"{len(sequences)} fresh sequences (seed {seed}; may overlap the training data)"
        print(f"note: no held-out file at {data_path}; sweeping on {source}", file=log)
    if n is not None:
        sequences = sequences[:n]
    if not sequences:
        raise ValueError(f"no sequences in {source}")
    n_ctx = int(bridge.cfg.n_ctx)
    info: dict[str, Any] = {
        "model": str(model),
        "world": world.describe(),
        "kind": kind,
        "data": source,
        "method": method,
        "seed": seed,
    }
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{kind}"
    if kind == "activation-patching":
        if method != "attribution":
            info.pop("method")
        return _run_patching(
            bridge, world, sequences, info, out_dir, length, edit_at, seed, log, method, verify_top, rule=rule
        )

    from interp.analysis.attribution import direct_effect_attribution, mlp_zero_attribution

    sweeps: dict[str, SweepResult] = {}
    if kind == "mlp-zero":
        ids = encode_sequences(sequences, world.vocab, n_ctx)
        mask = (ids != world.vocab.pad_id).long()

        own = np.arange(len(sequences))  # each held-out sequence its own group

        reference = discovery_reference(own, folds, seed)
        lengths = mask.sum(1).numpy()
        plan = plan_batch(
            bridge, lengths, swept=len(lays), method=method, kind=kind, batch_size=batch_size, control=control, log=log
        )
        batch_size, info["batch"] = plan.batch_size, plan.to_dict()
        units = prepare_sweep(
            bridge,
            out_dir,
            {
                "job": "sweep mlp-zero on world sequences",
                "data": source if data_path.exists() else None,
                "data_sha256": file_sha256(data_path) if data_path.exists() else None,
                "n_rows": len(sequences),
                "method": method,
                "layers": lays,
                "folds": folds,
                "seed": seed,
                "removals": [r.to_dict() for r in removals],
            },
            model=model,
            sort_key=lengths,
            layers=lays,
            names=[r.name for r in removals],
            plan=plan,
            control=control,
            log=log,
        )

        def mlp_sweep(
            part: Any, method: str = method, layers: list[int] = lays, removal: Any = removals[0]
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

        sweeps = run_removals(lambda r, part: mlp_sweep(part, removal=r), len(sequences), acc, removals, units)
        info["units"] = units.summary()
        sweep = next(iter(sweeps.values()))
        exact = lambda top: sharded(lambda part: mlp_sweep(part, "reuse", top), len(sequences), acc)  # noqa: E731
        info.update(n_examples=len(sequences), metric="token_loss")
    else:
        pairs = state_change_pairs(world, sequences, seed)
        info.update(
            n_sequences=len(sequences),
            n_pairs=len(pairs.originals),
            n_failed=pairs.failed,
            metric="continuation_loss (original tokens after the edit)",
        )
        if not pairs.originals:
            raise ValueError(f"could not build any state-changing pair from {len(sequences)} sequences")
        if pairs.failed:
            print(f"note: {pairs.failed} of {len(sequences)} sequences gave no state-changing pair", file=log)
        enc = [(world.vocab.encode(o), world.vocab.encode(a)) for o, a in zip(pairs.originals, pairs.altered)]
        too_long = [i for i, (o, _) in enumerate(enc) if len(o) > n_ctx]
        if too_long:
            raise ValueError(f"pair {too_long[0]} has more tokens than the model context n_ctx={n_ctx}")
        # the edited token sits at index edit_at + 1 of the ids (<bos> first); score the tokens after it
        patch_pairs = [PatchPair(o, a) for o, a in enc]

        own = np.arange(len(patch_pairs))  # one pair per held-out sequence: each its own group

        def de_sweep(part: slice, method: str = method, layers: list[int] = lays) -> SweepResult:
            fn = direct_effect_attribution if method == "attribution" else direct_effect_patching
            return fn(
                bridge,
                patch_pairs[part],
                continuation_loss([i + 1 for i in pairs.edit_at[part]]),
                layers,
                groups=own[part],
                higher_is_better=False,
            )

        sweep = sharded(de_sweep, len(patch_pairs), acc)
        exact = lambda top: sharded(lambda part: de_sweep(part, "loop", top), len(patch_pairs), acc)  # noqa: E731
        info["method"] = "attribution" if method == "attribution" else "loop"  # exact patching runs pair by pair

    sweep.meta["groups"] = "each held-out sequence (or its one edit pair) its own group"
    if verify_top:
        info["verify"] = verify_layers(sweep, verify_top, exact, seed=seed, **rule)

    info["processes"] = rank_and_size(acc)[1]

    def judge(s: SweepResult) -> LayerVerdicts:
        v = layer_verdicts(s, seed=seed, **rule)
        if folds:
            confirm_verdicts(v, s, folds, seed=seed, **rule)
        return v

    verdicts = judge(sweep)
    comparison = compare_removals(sweeps, judge) if len(sweeps) > 1 else None
    info.update(ablation=[r.name for r in removals], agreement=comparison and comparison.frame.to_dict("records"))
    if not is_main(acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info)
    sweep.save(out_dir)
    verdicts.save(out_dir)
    if info.get("verify"):
        _write_verify(out_dir, info["verify"])
    title = f"{kind} on {model.name} ({sweep.meta.get('n_examples')} examples)"
    figure = draw_layer_effects(verdicts, out_dir / "layers.png", title=title)
    if comparison is not None:
        write_removals(comparison, out_dir, title=f"dose-response, {title}")
    result = SweepRun(sweep, verdicts, out_dir, figure, info)
    from interp.results import write_json

    write_json(out_dir / "run.json", result.summary())
    return result


__all__ = [
    "PRAGWORLD_KINDS",
    "PRAGWORLD_METRIC",
    "RULE_KEYS",
    "YESNO_THRESHOLDS",
    "PatchingRun",
    "SweepRun",
    "check_folds",
    "rule_line",
    "run_contrast_sweep",
    "run_pragworld_sweep",
    "run_sweep",
    "verdict_rule",
    "verdict_words",
]
