"""The pieces a layer sweep runs with (:mod:`interp.jobs.sweep` puts them together for ``interp sweep``):

- ``--layers`` parsing and checking (:func:`parse_layers`, :func:`check_layers`);
- the edit pairs of world sequences: :func:`state_change_pairs` (one token replaced by another
  legal token that leads to a different state, for direct-effect patching) and
  :func:`aligned_edit_pairs` (equal-length prefixes edited at one token, for activation patching),
  the same pairs as a contrast task (:func:`route_contrast`),
  and the metric that scores the tokens after the edit (:func:`continuation_loss`);
- examples sharded over processes and gathered back in the one-process order (:func:`sharded`,
  under :func:`accelerator`);
- checking attribution estimates against exact measurements (:func:`verify_layers`,
  :func:`verify_cells`, :func:`verify_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.analysis.scoring import Batch, Metric
from interp.analysis.sweeps import METHODS, OWN_GROUP, SweepResult
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
        raise ValueError(
            f"--layers: layer {bad[0]} is out of range; this model has {n_layers} layers (valid: 0..{n_layers - 1})"
        )
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


def _one_edit(
    world: Any, seq: list[str], positions: Sequence[int], rng: np.random.Generator, whole: bool
) -> tuple[list[str], list[str], int] | None:
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
            alt = seq[:i] + [t] + seq[i + 1 :]
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


def aligned_edit_pairs(
    world: Any, sequences: Sequence[Sequence[str]], length: int, edit_at: int, seed: int = 0
) -> EditPairs:
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


def route_contrast(
    world: Any, sequences: Sequence[Sequence[str]], length: int = 8, edit_at: int = 3, seed: int = 0
) -> tuple[list[Any], int]:
    """World sequences as a contrast task (:doc:`/concepts/contrast-tasks`) that ``interp.sweep``
    and ``interp.patch`` take: the prompt is a ``<bos>``-prefixed prefix of :func:`aligned_edit_pairs`
    (``length`` tokens), the corrupted prompt its edit at ``edit_at``; ``correct`` is a next token
    legal after the prompt but not after the corrupted prompt, ``foil`` one legal after the
    corrupted prompt but not after the prompt (the first of each, in the world's order), so the
    logit difference correct − foil is positive when the model tracks the true state and the edit
    flips it. Returns ``(examples, skipped)``: ``skipped`` counts the sequences too short or with no
    state-changing edit, and the pairs whose two states allow the same next tokens."""
    from interp.datasets.contrast import ContrastExample
    from interp.worlds.base import BOS

    pairs = aligned_edit_pairs(world, sequences, length, edit_at, seed=seed)
    examples: list[Any] = []
    skipped = pairs.failed
    for clean, alt in zip(pairs.originals, pairs.altered):
        after_clean = world.legal(world.states_along(clean)[-1])
        after_alt = world.legal(world.states_along(alt)[-1])
        correct = [t for t in after_clean if t not in after_alt]
        foil = [t for t in after_alt if t not in after_clean]
        if not correct or not foil:
            skipped += 1
            continue
        examples.append(
            ContrastExample(
                prompt=" ".join([BOS, *clean]),
                correct=f" {correct[0]}",
                foil=f" {foil[0]}",
                corrupted=" ".join([BOS, *alt]),
                group=len(examples),
            )
        )
    return examples, skipped


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


def verify_layers(
    estimate: SweepResult, k: int, exact: Any, n_boot: int = 2000, seed: int = 0, **rule: Any
) -> list[dict[str, Any]]:
    """``--verify-top K`` for a layer sweep: the ``k`` layers of largest |mean attribution|, each
    measured exactly by ``exact(layers) -> SweepResult`` (same examples). Per layer: ``rank``,
    ``attribution`` and ``exact`` mean effects, ``same_sign``, the ``verdict`` from the estimates
    and ``exact_verdict`` from the exact run (same bootstrap; ``rule``: the verdict settings of
    :func:`~interp.analysis.verdicts.layer_verdicts`, e.g. ``min_effect``). The exact run's
    family is the K verified layers, the estimate's every layer."""
    from interp.analysis.attribution import rank_sites
    from interp.analysis.verdicts import layer_verdicts

    top = rank_sites(estimate, k)
    measured = exact([int(x) for x in top["layer"]])
    ev = layer_verdicts(measured, n_boot=n_boot, seed=seed, **rule).frame.set_index("layer")
    av = layer_verdicts(estimate, n_boot=n_boot, seed=seed, **rule).frame.set_index("layer")
    mean = measured.frame.groupby("layer")["effect"].mean()
    return [
        {
            "rank": int(r.rank),
            "layer": int(r.layer),
            "attribution": float(r.attribution),
            "exact": float(mean[int(r.layer)]),
            "same_sign": bool(np.sign(r.attribution) == np.sign(mean[int(r.layer)])),
            "verdict": str(av.loc[int(r.layer), "verdict"]),
            "exact_verdict": str(ev.loc[int(r.layer), "verdict"]),
        }
        for r in top.itertuples(index=False)
    ]


def verify_cells(
    bridge: Any, estimate: Any, k: int, clean: Tensor, corrupted: Tensor, metric: Metric
) -> list[dict[str, Any]]:
    """``--verify-top K`` for an activation-patching map: the ``k`` cells of largest |mean
    attribution|, each patched exactly (:func:`~interp.analysis.attribution.exact_cells`)."""
    from interp.analysis.attribution import exact_cells, rank_sites

    axis = estimate.axis
    top = rank_sites(estimate, k)
    cells = [(int(r.layer), int(getattr(r, axis))) for r in top.itertuples(index=False)]
    exact = exact_cells(bridge, clean, corrupted, metric, estimate.meta["component"], cells).mean(dim=1)
    return [
        {
            "rank": int(r.rank),
            "layer": c[0],
            axis: c[1],
            "attribution": float(r.attribution),
            "exact": float(e),
            "same_sign": bool(np.sign(r.attribution) == np.sign(float(e))),
        }
        for r, c, e in zip(top.itertuples(index=False), cells, exact.tolist())
    ]


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


__all__ = [
    "KINDS",
    "RUN_METHODS",
    "EditPairs",
    "accelerator",
    "aligned_edit_pairs",
    "check_layers",
    "continuation_loss",
    "is_main",
    "parse_layers",
    "route_contrast",
    "sharded",
    "state_change_pairs",
    "verify_cells",
    "verify_layers",
    "verify_text",
]
