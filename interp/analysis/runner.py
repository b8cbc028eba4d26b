"""Run a layer sweep on a world checkpoint end to end: the code behind ``interp sweep`` and
``experiments/layer_sweep.py``.

:func:`run_sweep` loads a checkpoint, reads its held-out sequences (``<checkpoint>/../data/test.txt``
unless told otherwise; fresh sequences from the world when there is no such file), runs one kind
of sweep with a per-example next-token loss (lower = better), computes the layer verdicts and
writes everything to a folder (default ``<checkpoint>/../sweep_<kind>/``):

- ``mlp-zero`` — :func:`~interp.analysis.sweeps.mlp_zero_sweep` over the sequences, metric
  :func:`~interp.analysis.scoring.token_loss` (mean next-token loss over the non-padding targets).
- ``direct-effect`` — :func:`~interp.analysis.patching.direct_effect_patching` on pairs built by
  :func:`state_change_pairs`: a held-out prefix and the same prefix with one token replaced by
  another legal token that leads to a different state (for streets: one direction by another
  direction), both legal. The metric is the original's next-token loss on the tokens after the
  edit (:func:`continuation_loss`), so the effect of layer ℓ is how much the altered run's
  residual entering ℓ (at every aligned position) changes the model's loss on the original route.

``method="attribution"`` estimates every site from one gradient run instead
(:mod:`interp.analysis.attribution`) and writes the same files and verdicts from the estimates;
with ``verify_top=K`` the K sites of largest |attribution| are then measured exactly (the reuse
sweep, the pair-by-pair patching, or one patched forward per cell), written to ``verify.csv`` and
``run.json`` beside the estimates (:func:`verify_layers`, :func:`verify_cells`).

Written: ``sweep.csv`` / ``sweep_layers.csv`` / ``sweep.json`` (:meth:`SweepResult.save`),
``verdicts.json`` (:meth:`LayerVerdicts.save`), ``layers.png``
(:func:`interp.viz.layers.draw_layer_effects`) and ``run.json`` (the settings and summary).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.analysis.scoring import Batch, Metric, token_loss
from interp.analysis.sweeps import METHODS, SweepResult
from interp.analysis.verdicts import LayerVerdicts
from interp.models.parallel import rank_and_size

KINDS = ("mlp-zero", "direct-effect", "activation-patching")
#: ``--method``: the exact sweeps' methods (:data:`~interp.analysis.sweeps.METHODS`) and ``attribution``
#: (:mod:`interp.analysis.attribution`: first-order estimates from one gradient run)
RUN_METHODS = (*METHODS, "attribution")


def parse_layers(text: str | None) -> list[int] | None:
    """``"0,1,3"`` → ``[0, 1, 3]``; None or empty → None (all layers)."""
    if text is None or not text.strip():
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--layers must be comma-separated layer indices, got {text!r}") from None


def check_layers(layers: Sequence[int] | None, n_layers: int) -> list[int]:
    """All layers when None; else the given ones, each in ``0..n_layers-1`` (ValueError otherwise)."""
    if layers is None:
        return list(range(n_layers))
    out = [int(x) for x in layers]
    bad = [x for x in out if not 0 <= x < n_layers]
    if not out:
        raise ValueError("--layers: no layer given")
    if bad:
        raise ValueError(f"--layers: layer {bad[0]} is out of range; this model has {n_layers} layers "
                         f"(valid: 0..{n_layers - 1})")
    return out


def continuation_loss(starts: Sequence[int] | Tensor) -> Metric:
    """Metric (lower = better): mean next-token loss of each row over the targets at token
    positions ``> starts[example]`` (positions in the row's ids, ``<bos>`` at 0); rows are unpadded."""
    start_t = torch.as_tensor(starts, dtype=torch.long)

    def metric(logits: Float[Tensor, "batch pos vocab"], batch: Batch) -> Float[Tensor, " batch"]:
        lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        tgt = batch.tokens[:, 1:].to(lp.device)
        nll = -lp.gather(-1, tgt[..., None])[..., 0]  # nll[:, j] scores the token at position j + 1
        pos = torch.arange(1, logits.shape[1], device=lp.device)[None]
        keep = (pos > start_t[batch.index].to(lp.device)[:, None]).float()
        if batch.attention_mask is not None:
            m = batch.attention_mask.to(lp.device).bool()
            keep = keep * (m[:, 1:] & m[:, :-1]).float()
        return (nll * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)

    metric.__name__ = "continuation_loss"
    return metric


@dataclass
class EditPairs:
    """Pairs of token sequences differing by one state-changing edit. ``edit_at``: the edited
    token's index in the sequence (without ``<bos>``); ``failed``: sequences with no such edit."""

    originals: list[list[str]]
    altered: list[list[str]]
    edit_at: list[int]
    failed: int


def _legal_prefix(world: Any, tokens: Sequence[str]) -> int:
    """Length of the longest prefix of ``tokens`` whose transitions are all defined."""
    q = world.start()
    for i, t in enumerate(tokens):
        if t not in world.legal(q):
            return i
        q = world.step(q, t)
    return len(tokens)


def _one_edit(world: Any, seq: list[str], positions: Sequence[int], rng: np.random.Generator,
              whole: bool) -> tuple[list[str], list[str], int] | None:
    """One state-changing single-token edit of ``seq`` at one of ``positions`` (seeded order), or
    None. The altered sequence must stay legal through the whole of ``seq`` when ``whole``, else
    for at least one token after the edit (both are then cut to that legal prefix)."""
    from interp.worlds.streets.graph import DIRECTIONS

    streets = getattr(world, "kind", None) == "streets"
    states = world.states_along(seq)
    positions = [i for i in positions if not streets or seq[i] in DIRECTIONS]
    for i in rng.permutation(positions) if positions else []:
        i = int(i)
        q = states[i]
        options = [t for t in world.legal(q) if t != seq[i] and (not streets or t in DIRECTIONS)]
        for t in rng.permutation(options) if options else []:
            t = str(t)
            if world.step(q, t) == states[i + 1]:
                continue
            alt = seq[:i] + [t] + seq[i + 1:]
            k = _legal_prefix(world, alt)
            if (whole and k == len(seq)) or (not whole and k >= i + 2):
                return seq[:k], alt[:k], i
    return None


def state_change_pairs(world: Any, sequences: Sequence[Sequence[str]], seed: int = 0) -> EditPairs:
    """For each sequence, one (original, altered) pair of prefixes that differ by one token.

    At a random position ``i`` (for streets: a direction token) the token is replaced by another
    legal token there (streets: another direction) that leads to a different state; the prefix
    runs on while the altered sequence stays legal, and must keep at least one token after the
    edit. Both prefixes are legal (every transition defined). Positions and replacements are
    tried in a seeded random order; a sequence where nothing works counts as ``failed``.
    """
    rng = np.random.default_rng(seed)
    originals, altered, edit_at, failed = [], [], [], 0
    for seq in sequences:
        seq = list(seq)
        found = _one_edit(world, seq, range(len(seq) - 1), rng, whole=False)
        if found is None:
            failed += 1
            continue
        originals.append(found[0])
        altered.append(found[1])
        edit_at.append(found[2])
    return EditPairs(originals, altered, edit_at, failed)


def aligned_edit_pairs(world: Any, sequences: Sequence[Sequence[str]], length: int, edit_at: int,
                       seed: int = 0) -> EditPairs:
    """Pairs for a layer × position heatmap: the first ``length`` tokens of each sequence that long,
    with the token at ``edit_at`` replaced by another legal token leading to a different state,
    the altered prefix legal to the end. Every pair has the same length and edit position, so
    positions line up across examples. Shorter sequences and those with no such edit count as
    ``failed``."""
    if not 0 <= edit_at < length - 1:
        raise ValueError(f"--edit-at must be in 0..{length - 2} (a token after the edit is needed), got {edit_at}")
    rng = np.random.default_rng(seed)
    originals, altered, failed = [], [], 0
    for seq in sequences:
        found = _one_edit(world, list(seq[:length]), [edit_at], rng, whole=True) if len(seq) >= length else None
        if found is None:
            failed += 1
            continue
        originals.append(found[0])
        altered.append(found[1])
    return EditPairs(originals, altered, [edit_at] * len(originals), failed)


def accelerator() -> Any | None:
    """An ``accelerate.Accelerator`` when this process was started by a launcher with more than one
    process (``accelerate launch``, ``torchrun``: ``WORLD_SIZE`` > 1), else None (one process)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from interp.models.parallel import make_accelerator

    return make_accelerator()


def is_main(acc: Any | None) -> bool:
    return acc is None or bool(acc.is_main_process)


def sharded(run: Any, n: int, acc: Any | None) -> SweepResult:
    """Run a sweep on this process's share of ``n`` examples and gather every process's rows.

    ``run(part)`` gets a ``slice`` of the examples and returns a :class:`SweepResult` over them;
    its ``example`` numbers are shifted to global ones and the rows of all processes are gathered
    (:func:`interp.models.parallel.gather_frame`) and put in the one-process order (layer, then
    example). Every example's value is computed exactly as in one process: per-example metrics
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
    frame = gather_frame(frame, acc).sort_values(["layer", "example"], kind="stable").reset_index(drop=True)
    meta = {**local.meta, "n_examples": n, "processes": size}
    return SweepResult(frame, meta)


def verify_layers(estimate: SweepResult, k: int, exact: Any, n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """``--verify-top K`` for a layer sweep: the ``k`` layers of largest |mean attribution|, each
    measured exactly by ``exact(layers) -> SweepResult`` (same examples). Per layer: ``rank``,
    ``attribution`` and ``exact`` mean effects, ``same_sign``, the ``verdict`` from the estimates
    and ``exact_verdict`` from the exact run (same bootstrap)."""
    from interp.analysis.attribution import rank_sites
    from interp.analysis.verdicts import layer_verdicts

    top = rank_sites(estimate, k)
    measured = exact([int(x) for x in top["layer"]])
    ev = layer_verdicts(measured, n_boot=n_boot, seed=seed).frame.set_index("layer")
    av = layer_verdicts(estimate, n_boot=n_boot, seed=seed).frame.set_index("layer")
    mean = measured.frame.groupby("layer")["effect"].mean()
    return [{"rank": int(r.rank), "layer": int(r.layer), "attribution": float(r.attribution),
             "exact": float(mean[int(r.layer)]), "same_sign": bool(np.sign(r.attribution) == np.sign(mean[int(r.layer)])),
             "verdict": str(av.loc[int(r.layer), "verdict"]), "exact_verdict": str(ev.loc[int(r.layer), "verdict"])}
            for r in top.itertuples(index=False)]


def verify_cells(bridge: Any, estimate: Any, k: int, clean: Tensor, corrupted: Tensor, metric: Metric
                 ) -> list[dict[str, Any]]:
    """``--verify-top K`` for an activation-patching map: the ``k`` cells of largest |mean
    attribution|, each patched exactly (:func:`~interp.analysis.attribution.exact_cells`)."""
    from interp.analysis.attribution import exact_cells, rank_sites

    axis = estimate.axis
    top = rank_sites(estimate, k)
    cells = [(int(r.layer), int(getattr(r, axis))) for r in top.itertuples(index=False)]
    exact = exact_cells(bridge, clean, corrupted, metric, estimate.meta["component"], cells).mean(dim=1)
    return [{"rank": int(r.rank), "layer": c[0], axis: c[1], "attribution": float(r.attribution),
             "exact": float(e), "same_sign": bool(np.sign(r.attribution) == np.sign(float(e)))}
            for r, c, e in zip(top.itertuples(index=False), cells, exact.tolist())]


def verify_text(rows: list[dict[str, Any]]) -> str:
    """The ``verify.csv`` rows as an aligned text table."""
    if not rows:
        return ""
    cols = [c for c in rows[0] if c != "rank"]
    lines = ["verified exactly (top |attribution|):", "rank  " + "  ".join(f"{c:>13}" for c in cols)]
    for r in rows:
        cells = [f"{r[c]:>+13.4f}" if isinstance(r[c], float) else f"{str(r[c]):>13}" for c in cols]
        lines.append(f"{r['rank']:>4}  " + "  ".join(cells))
    return "\n".join(lines)


def _write_verify(out_dir: Path, rows: list[dict[str, Any]], name: str = "verify.csv") -> None:
    """``verify.csv`` and its scatter (``attribution_scatter.png``; ``verify_X.csv`` → ``attribution_scatter_X.png``)."""
    import pandas as pd

    from interp.viz.attribution import draw_attribution_scatter

    out_dir.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    table.to_csv(out_dir / name, index=False)
    stem = Path(name).stem.replace("verify", "attribution_scatter", 1)
    draw_attribution_scatter(table, out_dir / f"{stem}.png", title=f"top {len(rows)} sites by |attribution|, "
                                                                    "measured exactly")


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
        lines = [f"{'layer':>5}  {'mean effect':>12}  {'interval':>24}  {'verdict':<8}  raw verdict"]
        for r in rows:
            ci = f"[{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}]"
            lines.append(f"{r['layer']:>5}  {r['effect']:>+12.4f}  {ci:>24}  {r['verdict']:<8}  {r['raw_verdict']}")
        if self.info.get("verify"):
            lines.append(verify_text(self.info["verify"]))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        return {**self.info, "out": str(self.out), "layers": self.layer_rows()}


@dataclass
class PatchingRun:
    """What an ``activation-patching`` run did: one :class:`PatchingMap` per component (residual
    stream by layer × position, attention heads by layer × head), the heatmaps, the settings."""

    maps: dict[str, Any]
    out: Path
    figures: list[Path]
    info: dict[str, Any] = field(default_factory=dict)

    def table(self, max_positions: int = 24) -> str:
        """The residual-stream heatmap as text: share of the mean gap restored, layers × positions
        (beyond ``max_positions`` columns, those of largest |share| in any layer, in order; the
        full grid is in ``patching_resid_pre_mean.csv``)."""
        grid = self.maps["resid_pre"].restored()
        labels = self.info.get("labels") or [str(c) for c in grid.columns]
        lines = []
        if grid.shape[1] > max_positions:
            keep = np.sort(np.argsort(-grid.abs().max(axis=0).fillna(0).to_numpy(), kind="stable")[:max_positions])
            lines.append(f"(the {max_positions} of {grid.shape[1]} positions with the largest |share|; all in "
                         "patching_resid_pre_mean.csv)")
            grid = grid.iloc[:, keep]
            labels = [labels[j] for j in keep] if len(labels) > keep.max() else [str(c) for c in grid.columns]
            lines.append("  pos  " + " ".join(f"{str(c)[:6]:>6}" for c in grid.columns))
        lines.append("layer  " + " ".join(f"{str(t)[:6]:>6}" for t in labels))
        for layer, row in grid.iterrows():
            lines.append(f"{layer:>5}  " + " ".join(f"{v:>6.2f}" for v in row.to_numpy()))
        for comp, rows in (self.info.get("verify") or {}).items():
            lines.append(f"{comp}: " + verify_text(rows))
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        out = {**self.info, "out": str(self.out)}
        for comp, m in self.maps.items():
            out[comp] = {"clean_mean": m.meta["clean_mean"], "corrupted_mean": m.meta["corrupted_mean"],
                         "restored": m.restored().round(4).to_numpy().tolist()}
        return out


def _run_patching(bridge: Any, world: Any, sequences: list, info: dict[str, Any], out_dir: Path, length: int,
                  edit_at: int, seed: int, log: Any, method: str = "reuse", verify_top: int | None = None
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
        raise ValueError(f"none of {len(sequences)} sequences gave a legal state-changing edit at token {edit_at} "
                         f"of a {length}-token prefix; try another --edit-at or --length")
    if pairs.failed:
        print(f"note: {pairs.failed} of {len(sequences)} sequences gave no pair (shorter than {length} tokens, "
              f"or no legal state-changing edit at token {edit_at})", file=log)
    vocab = world.vocab
    clean = torch.tensor([vocab.encode(s) for s in pairs.originals])
    corrupted = torch.tensor([vocab.encode(s) for s in pairs.altered])
    legal = torch.zeros(len(pairs.originals), len(vocab), dtype=torch.bool)
    for i, seq in enumerate(pairs.originals):
        legal[i, [vocab.id(t) for t in world.legal(world.states_along(seq)[-1])]] = True
    labels = ["<bos>"] + [f"{j}" + ("*" if j == edit_at else "") for j in range(length)]
    info.update(n_sequences=len(sequences), n_pairs=len(pairs.originals), n_failed=pairs.failed, length=length,
                edit_at=edit_at, labels=labels,
                metric="legal_mass: probability on the tokens legal after the clean prefix, at its last position")
    maps, figures = {}, []
    metric = legal_mass(legal)
    if method == "attribution":
        from interp.analysis.attribution import activation_attribution

        estimated = activation_attribution(bridge, clean, corrupted, metric, ("resid_pre", "heads"), labels=labels)
        if verify_top:
            info["verify"] = {c: verify_cells(bridge, m, verify_top, clean, corrupted, metric)
                              for c, m in estimated.items()}
            for c, rows in info["verify"].items():
                _write_verify(out_dir, rows, f"verify_{c}.csv")
    for comp in ("resid_pre", "heads"):
        if method == "attribution":
            m = estimated[comp]
        else:
            m = activation_patching(bridge, clean, corrupted, metric, comp, labels=labels)
        m.save(out_dir, f"patching_{comp}")
        maps[comp] = m
        what = "position" if comp == "resid_pre" else "head"
        figures.append(draw_patching_heatmap(m, out_dir / f"patching_{comp}.png", title=(
            f"patching {comp} (clean → edited at token {edit_at}*): share of the gap restored, by layer × {what}")))
    run = PatchingRun(maps, out_dir, figures, info)
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
) -> SweepRun | PatchingRun:
    """Load the checkpoint ``model``, run the sweep ``kind`` on its held-out data, write the results.

    ``data`` ending in ``.csv`` is a PragWorld file: the sweep runs on its yes/no questions instead
    (:func:`interp.analysis.pragworld_sweep.run_pragworld_sweep`, ``grouping`` as in the loader;
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
    """
    from interp.analysis.patching import PatchPair, direct_effect_patching
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds.encoding import encode_sequences
    from interp.viz.layers import draw_layer_effects
    from interp.worlds.io import read_sequences

    log = log or sys.stderr
    if kind not in KINDS:
        raise ValueError(f"--kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if data is not None and Path(data).suffix.lower() == ".csv":  # a PragWorld file: yes/no questions
        from interp.analysis.pragworld_sweep import run_pragworld_sweep

        if verify_top:
            raise ValueError("--verify-top runs on world checkpoints; on a PragWorld file run the exact sweep "
                             "(--method reuse) beside the attribution one")

        return run_pragworld_sweep(model, data, kind=kind, grouping=grouping, method=method, layers=layers, out=out,
                                   seed=seed, batch_size=batch_size, n=n, n_boot=n_boot, log=log, placement=placement,
                                   prepend_bos=prepend_bos, chat_template=chat_template)
    if prepend_bos is not None or chat_template:
        raise ValueError("--prepend-bos / --chat-template apply to a PragWorld CSV (--data FILE.csv); a world "
                         "checkpoint's sequences are its own word-level ids with <bos> first")
    if method not in RUN_METHODS:
        raise ValueError(f"--method must be one of {', '.join(RUN_METHODS)}, got {method!r}")
    if verify_top is not None and (method != "attribution" or verify_top < 1):
        raise ValueError(f"--verify-top needs --method attribution and K ≥ 1, got K={verify_top} with "
                         f"--method {method}")
    if n is not None and n < 1:
        raise ValueError(f"--n must be ≥ 1, got {n}")
    model = Path(model)
    acc = accelerator()
    ckpt = load_checkpoint(model, world=world, device=str(acc.device) if acc is not None else None,
                           placement=None if acc is not None else placement)
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
    info: dict[str, Any] = {"model": str(model), "world": world.describe(), "kind": kind, "data": source,
                            "method": method, "seed": seed}
    out_dir = Path(out) if out else model.resolve().parent / f"sweep_{kind}"
    if kind == "activation-patching":
        if method != "attribution":
            info.pop("method")
        return _run_patching(bridge, world, sequences, info, out_dir, length, edit_at, seed, log, method, verify_top)

    from interp.analysis.attribution import direct_effect_attribution, mlp_zero_attribution

    if kind == "mlp-zero":
        ids = encode_sequences(sequences, world.vocab, n_ctx)
        mask = (ids != world.vocab.pad_id).long()

        def mlp_sweep(part: slice, method: str = method, layers: list[int] = lays) -> SweepResult:
            if method == "attribution":
                return mlp_zero_attribution(bridge, ids[part], token_loss, mask[part], layers,
                                            batch_size=batch_size, higher_is_better=False)
            return mlp_zero_sweep(bridge, ids[part], token_loss, mask[part], layers, batch_size=batch_size,
                                  method=method, higher_is_better=False)

        sweep = sharded(mlp_sweep, len(sequences), acc)
        exact = lambda top: sharded(lambda part: mlp_sweep(part, "reuse", top), len(sequences), acc)  # noqa: E731
        info.update(n_examples=len(sequences), metric="token_loss")
    else:
        pairs = state_change_pairs(world, sequences, seed)
        info.update(n_sequences=len(sequences), n_pairs=len(pairs.originals), n_failed=pairs.failed,
                    metric="continuation_loss (original tokens after the edit)")
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

        def de_sweep(part: slice, method: str = method, layers: list[int] = lays) -> SweepResult:
            fn = direct_effect_attribution if method == "attribution" else direct_effect_patching
            return fn(bridge, patch_pairs[part], continuation_loss([i + 1 for i in pairs.edit_at[part]]), layers,
                      higher_is_better=False)

        sweep = sharded(de_sweep, len(patch_pairs), acc)
        exact = lambda top: sharded(lambda part: de_sweep(part, "loop", top), len(patch_pairs), acc)  # noqa: E731
        info["method"] = "attribution" if method == "attribution" else "loop"  # exact patching runs pair by pair

    if verify_top:
        info["verify"] = verify_layers(sweep, verify_top, exact, n_boot=n_boot, seed=seed)

    info["processes"] = rank_and_size(acc)[1]
    if not is_main(acc):  # every process holds the gathered sweep; only the first one writes
        return SweepRun(sweep, layer_verdicts(sweep, n_boot=n_boot, seed=seed), out_dir, out_dir / "layers.png", info)
    verdicts = layer_verdicts(sweep, n_boot=n_boot, seed=seed)
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


__all__ = ["KINDS", "RUN_METHODS", "EditPairs", "verify_cells", "verify_layers", "PatchingRun", "aligned_edit_pairs", "SweepRun", "check_layers", "continuation_loss",
           "parse_layers", "run_sweep", "state_change_pairs"]
