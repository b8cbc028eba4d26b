"""Edit pairs of world sequences: a sequence and the same sequence with one token replaced by
another legal token that leads to a different state.

- :func:`state_change_pairs`: one such edit per sequence at a random position, the prefixes
  running on while the altered one stays legal (for direct-effect patching);
- :func:`aligned_edit_pairs`: equal-length prefixes edited at one position, so positions line up
  across examples (for a layer × position activation-patching map);
- :func:`route_contrast`: the aligned pairs as a contrast task (``interp.sweep``, ``interp.patch``);
- :func:`continuation_loss`: the metric that scores the tokens after the edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.analysis.engines.scoring import Batch, Metric


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
    examples: list[ContrastExample] = []
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


__all__ = ["EditPairs", "aligned_edit_pairs", "continuation_loss", "route_contrast", "state_change_pairs"]
