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
  :func:`~interp.analysis.runner.state_change_pairs`: a held-out prefix and the same prefix with one token replaced by
  another legal token that leads to a different state (for streets: one direction by another
  direction), both legal. The metric is the original's next-token loss on the tokens after the
  edit (:func:`~interp.analysis.runner.continuation_loss`), so the effect of layer ℓ is how much the altered run's
  residual entering ℓ (at every aligned position) changes the model's loss on the original route.

``method="attribution"`` estimates every site from one gradient run instead
(:mod:`interp.analysis.attribution`) and writes the same files and verdicts from the estimates;
with ``verify_top=K`` the K sites of largest |attribution| are then measured exactly (the reuse
sweep, the pair-by-pair patching, or one patched forward per cell), written to ``verify.csv`` and
``run.json`` beside the estimates (:func:`~interp.analysis.runner.verify_layers`,
:func:`~interp.analysis.runner.verify_cells`).

Written: ``sweep.csv`` / ``sweep_layers.csv`` / ``sweep.json`` (:meth:`SweepResult.save`),
``verdicts.json`` (:meth:`LayerVerdicts.save`), ``layers.png``
(:func:`interp.viz.layers.draw_layer_effects`) and ``run.json`` (the settings and summary).

On a PragWorld CSV (``data=FILE.csv``) the same kinds run on its yes/no questions
(:func:`run_pragworld_sweep`; the pairs and maps: :mod:`interp.analysis.pragworld_sweep`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from interp.analysis.pragworld_sweep import pair_activation_patching, reference_pairs
from interp.analysis.runner import (
    KINDS,
    RUN_METHODS,
    accelerator,
    aligned_edit_pairs,
    check_layers,
    continuation_loss,
    is_main,
    sharded,
    state_change_pairs,
    verify_cells,
    verify_layers,
    verify_text,
)
from interp.analysis.scoring import token_loss
from interp.analysis.sweeps import SweepResult
from interp.analysis.verdicts import LayerVerdicts
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


#: what a sweep's summary says about its verdict rule
RULE_KEYS = (
    "rule",
    "min_effect",
    "min_effect_reason",
    "family",
    "per_layer",
    "confidence",
    "resample",
    "groups",
    "n_groups",
    "n_boot",
    "seed",
)


def rule_line(verdicts: LayerVerdicts) -> str:
    """One line saying how the verdicts were reached: the interval, the family, the resampling
    unit and the margin."""
    m = verdicts.meta
    conf = int(round(100 * float(m.get("confidence", 0.95))))
    family = "per layer" if m.get("per_layer") else f"simultaneous over {len(verdicts.frame)} layers"
    unit = f"{m.get('n_groups')} groups ({m.get('groups')})" if m.get("resample") == "groups" else "rows"
    return (
        f"verdicts: {conf} % intervals {family}, resampling {unit}; margin ±{verdicts.min_effect:g} "
        f"({m.get('min_effect_reason')})"
    )


def verdict_rule(
    n_boot: int = 2000,
    confidence: float = 0.95,
    per_layer: bool = False,
    min_effect: float | None = None,
    resample: str = "groups",
) -> dict[str, Any]:
    """The verdict settings of a sweep job (``--n-boot``, ``--confidence``, ``--per-layer``,
    ``--min-effect``, ``--resample``) as keyword arguments of
    :func:`~interp.analysis.verdicts.layer_verdicts`; checked here, before any model loads."""
    from interp.analysis.bands import RESAMPLE

    if not 0 < confidence < 1:
        raise ValueError(f"--confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"--n-boot must be ≥ 1, got {n_boot}")
    if min_effect is not None and not min_effect >= 0:
        raise ValueError(f"--min-effect must be ≥ 0 (in the metric's units), got {min_effect}")
    if resample not in RESAMPLE:
        raise ValueError(f"--resample must be one of {', '.join(RESAMPLE)}, got {resample!r}")
    return {
        "n_boot": int(n_boot),
        "confidence": float(confidence),
        "per_layer": bool(per_layer),
        "min_effect": min_effect,
        "resample": resample,
    }


@dataclass
class SweepRun:
    """What :func:`run_sweep` did: the sweep, its verdicts, where it wrote, and the settings."""

    sweep: SweepResult
    verdicts: LayerVerdicts
    out: Path
    figure: Path
    info: dict[str, Any] = field(default_factory=dict)

    def layer_rows(self) -> list[dict[str, Any]]:
        """Per layer: ``layer``, ``effect`` (mean ablated − clean), ``ci`` (its bootstrap interval),
        ``verdict``, ``raw_verdict``."""
        return self.verdicts.layer_rows()

    def table(self) -> str:
        rows = self.layer_rows()
        lines = [
            rule_line(self.verdicts),
            f"{'layer':>5}  {'mean effect':>12}  {'interval':>24}  {'verdict':<12}  raw verdict",
        ]
        for r in rows:
            ci = f"[{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}]"
            lines.append(f"{r['layer']:>5}  {r['effect']:>+12.4f}  {ci:>24}  {r['verdict']:<12}  {r['raw_verdict']}")
        if self.info.get("verify"):
            lines.append(verify_text(self.info["verify"]))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """The settings, where it wrote, the verdict rule (the ``RULE_KEYS`` of the verdicts' meta)
        and the per-layer rows."""
        rule = {k: self.verdicts.meta.get(k) for k in RULE_KEYS}
        return {**self.info, "out": str(self.out), "verdict_rule": rule, "layers": self.layer_rows()}


@dataclass
class PatchingRun:
    """What an ``activation-patching`` run did: one :class:`PatchingMap` per component (residual
    stream by layer × position, attention heads by layer × head), the heatmaps, the cells whose
    simultaneous interval clears the margin, the settings."""

    maps: dict[str, Any]
    out: Path
    figures: list[Path]
    info: dict[str, Any] = field(default_factory=dict)
    #: per map, the family-wise cell verdicts (:func:`interp.analysis.verdicts.map_verdicts`)
    cells: dict[str, Any] = field(default_factory=dict)

    def table(self, max_positions: int = 24) -> str:
        """The residual-stream heatmap as text: share of the mean gap restored, layers × positions
        (beyond ``max_positions`` columns, those of largest |share| in any layer, in order; the
        full grid is in ``patching_resid_pre_mean.csv``)."""
        grid = self.maps["resid_pre"].restored()
        labels = self.info.get("labels") or [str(c) for c in grid.columns]
        lines = []
        if grid.shape[1] > max_positions:
            keep = np.sort(np.argsort(-grid.abs().max(axis=0).fillna(0).to_numpy(), kind="stable")[:max_positions])
            lines.append(
                f"(the {max_positions} of {grid.shape[1]} positions with the largest |share|; all in "
                "patching_resid_pre_mean.csv)"
            )
            grid = grid.iloc[:, keep]
            labels = [labels[j] for j in keep] if len(labels) > keep.max() else [str(c) for c in grid.columns]
            lines.append("  pos  " + " ".join(f"{str(c)[:6]:>6}" for c in grid.columns))
        lines.append("layer  " + " ".join(f"{str(t)[:6]:>6}" for t in labels))
        for layer, row in grid.iterrows():
            lines.append(f"{layer:>5}  " + " ".join(f"{v:>6.2f}" for v in row.to_numpy()))
        for comp, c in self.cells.items():
            got = c.summary()["outcomes"]
            lines.append(
                f"{comp}: {got['above'] + got['below']} of {c.meta['cells']} cells move the metric by more "
                f"than ±{c.meta['min_effect']:g} ({got['above']} up, {got['below']} down; "
                f"{int(round(100 * c.meta['confidence']))} % {c.meta['family'].split(' (')[0]}), "
                f"{got['negligible']} negligible"
            )
        for comp, rows in (self.info.get("verify") or {}).items():
            lines.append(f"{comp}: " + verify_text(rows))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        out = {**self.info, "out": str(self.out)}
        for comp, m in self.maps.items():
            out[comp] = {
                "clean_mean": m.meta["clean_mean"],
                "corrupted_mean": m.meta["corrupted_mean"],
                "restored": m.restored().round(4).to_numpy().tolist(),
            }
            if comp in self.cells:
                c = self.cells[comp]
                out[comp]["cells"] = {**c.summary(), "above": c.cells("above"), "below": c.cells("below")}
        return out


def _cell_verdicts(maps: dict[str, Any], rule: dict[str, Any], seed: int, out_dir: Path | None) -> dict[str, Any]:
    """Per map, the family-wise cell verdicts (:func:`~interp.analysis.verdicts.map_verdicts`;
    the margin of the map's metric, the sweep's confidence and resampling), saved as
    ``patching_<map>_cells.csv`` / ``.json`` when ``out_dir`` is given."""
    from interp.analysis.verdicts import map_verdicts

    cells = {}
    for comp, m in maps.items():
        cells[comp] = map_verdicts(
            m,
            n_boot=rule["n_boot"],
            confidence=rule["confidence"],
            seed=seed,
            min_effect=rule["min_effect"],
            per_cell=rule["per_layer"],
            resample=rule["resample"],
        )
        if out_dir is not None:
            cells[comp].save(out_dir, f"patching_{comp}_cells")
    return cells


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
    cells = _cell_verdicts(maps, rule, seed, out_dir)
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
) -> SweepRun | PatchingRun:
    """Load the checkpoint ``model``, run the sweep ``kind`` on its held-out data, write the results.

    ``data`` ending in ``.csv`` is a PragWorld file: the sweep runs on its yes/no questions instead
    (:func:`run_pragworld_sweep`, ``grouping`` as in the loader;
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
    """
    from interp.analysis.patching import PatchPair, direct_effect_patching
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.viz.layers import draw_layer_effects
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    log = log or sys.stderr
    rule = verdict_rule(n_boot, confidence, per_layer, min_effect, resample)
    if kind not in KINDS:
        raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if data is not None and Path(data).suffix.lower() == ".csv":  # a PragWorld file: yes/no questions
        if verify_top:
            raise ValueError(
                "--verify-top runs on world checkpoints; on a PragWorld file run the exact sweep "
                "(--method reuse) beside the attribution one"
            )

        return run_pragworld_sweep(
            model,
            data,
            kind=kind,
            grouping=grouping,
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
            **rule,
        )
    if prepend_bos is not None or chat_template:
        raise ValueError(
            "--prepend-bos / --chat-template apply to a PragWorld CSV (--data FILE.csv); a world "
            "checkpoint's sequences are its own word-level ids with <bos> first"
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

    if kind == "mlp-zero":
        ids = encode_sequences(sequences, world.vocab, n_ctx)
        mask = (ids != world.vocab.pad_id).long()

        own = np.arange(len(sequences))  # each held-out sequence its own group

        def mlp_sweep(part: slice, method: str = method, layers: list[int] = lays) -> SweepResult:
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
            return mlp_zero_sweep(
                bridge,
                ids[part],
                token_loss,
                mask[part],
                layers,
                groups=own[part],
                batch_size=batch_size,
                method=method,
                higher_is_better=False,
            )

        sweep = sharded(mlp_sweep, len(sequences), acc)
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
    verdicts = layer_verdicts(sweep, seed=seed, **rule)
    if not is_main(acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info)
    sweep.save(out_dir)
    verdicts.save(out_dir)
    if info.get("verify"):
        _write_verify(out_dir, info["verify"])
    title = f"{kind} on {model.name} ({sweep.meta.get('n_examples')} examples)"
    figure = draw_layer_effects(verdicts, out_dir / "layers.png", title=title)
    result = SweepRun(sweep, verdicts, out_dir, figure, info)
    from interp.results import write_json

    write_json(out_dir / "run.json", result.summary())
    return result


#: the sweep kinds on a PragWorld file (all of :data:`~interp.analysis.runner.KINDS`)
PRAGWORLD_KINDS = ("mlp-zero", "direct-effect", "activation-patching")


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
) -> PatchingRun:
    """``--kind activation-patching`` on a PragWorld file: the reference's pairs
    (:func:`reference_pairs`), of equal token length (:func:`pair_activation_patching`), written
    as the world checkpoints' patching run is (``patching_<map>.csv`` / ``_mean.csv`` / ``.json``,
    ``patching_<map>.png``, ``run.json``)."""
    from interp.results import write_json
    from interp.viz.layers import draw_patching_heatmap

    candidates, skipped = reference_pairs(bridge, task)
    if not candidates:
        raise ValueError(
            f"no (original, alteration) pair where the model answers the alteration correctly and "
            f"changes its answer (skipped: {skipped})"
        )
    unequal = sum(len(task.ids[o]) != len(task.ids[i]) for o, i in candidates)
    if unequal == len(candidates):
        raise ValueError(
            f"none of the {len(candidates)} (original, alteration) pairs the reference patches has "
            f"prompts of equal token length (skipped before: {skipped}); activation patching runs "
            "position by position — --kind direct-effect aligns the positions instead"
        )
    maps, got = pair_activation_patching(
        bridge, task, candidates, method=method if method == "attribution" else "exact", batch_size=batch_size
    )
    skipped.update(got["skipped"])
    info.update(
        n_pairs=got["n_pairs"],
        skipped=skipped,
        n_failed=sum(skipped.values()),
        pair_rows=got["rows"],
        lengths=got["lengths"],
        labels=maps["resid_pre"].meta["labels"],
        n_examples=got["n_pairs"],
        method="attribution" if method == "attribution" else "exact",
        clean="altered prompt",
        corrupted="original prompt",
        position_axis=maps["resid_pre"].meta["position_axis"],
        processes=rank_and_size(acc)[1],
    )
    if any(skipped.values()):
        print(f"note: patched {got['n_pairs']} pairs; skipped {skipped}", file=log)
    out_dir = Path(out) if out else model.resolve().parent / "sweep_activation-patching_pragworld"
    if not is_main(acc):
        return PatchingRun(maps, out_dir, [], info, _cell_verdicts(maps, rule, seed, None))
    figures = []
    cells = _cell_verdicts(maps, rule, seed, out_dir)
    for comp, m in maps.items():
        m.save(out_dir, f"patching_{comp}")
        what = "offset from the last token" if comp == "resid_pre" else "head"
        figures.append(
            draw_patching_heatmap(
                m,
                out_dir / f"patching_{comp}.png",
                cells=cells[comp],
                title=(
                    f"patching {comp} (altered → original, {got['n_pairs']} pairs, {Path(data).name}): share of the gap "
                    f"restored, by layer × {what}"
                ),
            )
        )
    run = PatchingRun(maps, out_dir, figures, info, cells)
    write_json(out_dir / "run.json", run.summary())
    return run


def run_pragworld_sweep(
    model: str | Path,
    data: str | Path,
    *,
    kind: str = "mlp-zero",
    grouping: str = "clean",
    method: str = "reuse",
    layers: list[int] | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    batch_size: int | None = 16,
    n: int | None = None,
    n_boot: int = 2000,
    chat_template: bool | None = False,
    prepend_bos: bool | None = None,
    log: Any = None,
    placement: Any = None,
    confidence: float = 0.95,
    per_layer: bool = False,
    min_effect: float | None = None,
    resample: str = "groups",
) -> SweepRun | PatchingRun:
    """Load the model (any checkpoint folder with a tokenizer), the PragWorld file, run the sweep,
    write ``sweep.csv`` / ``verdicts.json`` (with ``by_category``) / ``layers.png`` / ``run.json``
    to ``out`` (default ``<model>/../sweep_<kind>_pragworld/``); ``activation-patching`` returns a
    :class:`PatchingRun` and writes ``patching_resid_pre`` / ``patching_heads``
    (``.csv``, ``_mean.csv``, ``.json``, ``.png``) and ``run.json``. ``n``: the first n rows only;
    ``prepend_bos`` / ``chat_template``: :class:`interp.tasks.Tokenization`; ``placement``: where the
    model runs (:class:`interp.models.device.Placement`; default CPU; a launcher's process device).
    Verdicts as in :func:`run_sweep`; the resampling unit is the PragWorld group (an original and
    its alterations; a patched pair: its original's group)."""
    from interp.analysis.attribution import direct_effect_attribution, mlp_zero_attribution
    from interp.analysis.patching import PatchPair, direct_effect_patching
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.benchmarks.pragworld import load_pragworld
    from interp.models.checkpoint import load_bridge
    from interp.results import write_json
    from interp.tasks import YesNoTask
    from interp.tasks.yesno import GROUP_UNIT
    from interp.viz.layers import draw_layer_effects

    log = log or sys.stderr
    rule = verdict_rule(n_boot, confidence, per_layer, min_effect, resample)
    if kind not in PRAGWORLD_KINDS:
        raise ValueError(f"on PragWorld data --kind must be one of {', '.join(PRAGWORLD_KINDS)}, got {kind!r}")
    if kind == "activation-patching" and layers is not None:
        raise ValueError(
            "--layers does not apply to --kind activation-patching: transformer_lens.patching "
            "patches every layer (the maps have one row per layer)"
        )
    pw = load_pragworld(data, grouping=grouping)  # a bad file fails before the model loads
    rows = pw.rows if n is None else pw.rows.iloc[:n]
    if rows.empty:
        raise ValueError(f"no data rows in {data}")
    model = Path(model)
    acc = accelerator()
    bridge = load_bridge(
        model, device=str(acc.device) if acc is not None else None, placement=None if acc is not None else placement
    )
    bridge.eval()
    lays = check_layers(layers, int(bridge.cfg.n_layers))
    task = YesNoTask.pragworld(model, rows, prompt="label", prepend_bos=prepend_bos, chat_template=chat_template)
    task.check_fits(int(bridge.cfg.n_ctx))
    ids, mask = task.inputs()
    gold = task.gold
    categories = task.categories
    info: dict[str, Any] = {
        "model": str(model),
        "data": str(data),
        "grouping": grouping,
        "kind": kind,
        "seed": seed,
        "n_rows": len(rows),
        **task.settings(),
    }

    groups = task.groups
    if kind == "mlp-zero":

        def mlp_sweep(part: slice) -> SweepResult:
            if method == "attribution":
                return mlp_zero_attribution(
                    bridge,
                    ids[part],
                    task.metric(gold[part]),
                    mask[part],
                    lays,
                    categories=categories[part],
                    groups=groups[part],
                    batch_size=batch_size,
                    higher_is_better=True,
                )
            return mlp_zero_sweep(
                bridge,
                ids[part],
                task.metric(gold[part]),
                mask[part],
                lays,
                categories=categories[part],
                groups=groups[part],
                batch_size=batch_size,
                method=method,
                higher_is_better=True,
            )

        sweep = sharded(mlp_sweep, len(rows), acc)
        sweep.meta["groups"] = GROUP_UNIT
        info.update(n_examples=len(rows), method=method)
    elif kind == "direct-effect":
        candidates, skipped = reference_pairs(bridge, task)
        info.update(n_pairs=len(candidates), skipped=skipped, n_failed=sum(skipped.values()))
        if any(skipped.values()):
            print(f"note: patched {len(candidates)} pairs; skipped {skipped}", file=log)
        if not candidates:
            raise ValueError(
                f"no (original, alteration) pair where the model answers the alteration correctly and "
                f"changes its answer (skipped: {skipped})"
            )
        pairs = [PatchPair(list(task.ids[o]), list(task.ids[i])) for o, i in candidates]
        pair_gold = [int(gold[i]) for _, i in candidates]
        pair_cats = [categories[i] for _, i in candidates]
        pair_groups = task.pair_groups(candidates)
        de = direct_effect_attribution if method == "attribution" else direct_effect_patching
        sweep = sharded(
            lambda part: de(
                bridge,
                pairs[part],
                task.metric(pair_gold[part]),
                lays,
                categories=pair_cats[part],
                groups=pair_groups[part],
                higher_is_better=True,
            ),
            len(pairs),
            acc,
        )
        sweep.meta["groups"] = "the PragWorld group of the pair's original"
        info.update(n_examples=len(pairs), method="attribution" if method == "attribution" else "loop")
    else:
        return _run_pair_patching(bridge, task, info, model, data, out, method, batch_size, log, acc, rule, seed)

    info["processes"] = rank_and_size(acc)[1]
    verdicts = layer_verdicts(sweep, seed=seed, threshold=0.5, **rule)
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{kind}_pragworld"
    if not is_main(acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, verdicts, out_dir, out_dir / "layers.png", info)
    sweep.save(out_dir)
    verdicts.save(out_dir)
    figure = draw_layer_effects(
        verdicts,
        out_dir / "layers.png",
        title=f"{kind} on {model.name}, PragWorld {Path(data).name} ({len(rows)} rows)",
    )
    if verdicts.by_category is not None:
        verdicts.by_category.to_csv(out_dir / "by_category.csv")
    run = SweepRun(sweep, verdicts, out_dir, figure, info)
    write_json(out_dir / "run.json", run.summary())
    return run


__all__ = [
    "PRAGWORLD_KINDS",
    "PatchingRun",
    "SweepRun",
    "rule_line",
    "run_pragworld_sweep",
    "run_sweep",
    "verdict_rule",
]
