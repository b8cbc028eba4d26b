"""Padded id tensors → shifted training batches, and deterministic, resumable batch orders
(encoding sequences into ids: :func:`interp.worlds.encoding.encode_sequences`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor


@dataclass(frozen=True)
class Batch:
    """A training batch. ``targets`` holds -100 where the loss must not count (padding)."""

    inputs: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]

    @property
    def mask(self) -> Tensor:
        """True at positions whose next token is scored (non-padding)."""
        return self.targets != -100

    @property
    def n_tokens(self) -> int:
        return int(self.mask.sum())


def make_batch(ids: Int[Tensor, "batch pos"], pad_id: int) -> Batch:
    """Shift for next-token prediction and trim trailing all-padding columns."""
    lengths = (ids != pad_id).sum(dim=1)
    width = int(lengths.max())
    ids = ids[:, :width]
    targets = ids[:, 1:].clone()
    targets[targets == pad_id] = -100
    return Batch(inputs=ids[:, :-1], targets=targets)


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> Tensor:
    """Row indices of the batch at ``step``: epochs are seeded permutations, so any step's batch
    is a pure function of (seed, step) — a resumed run sees exactly the batches it would have seen.
    Batches never straddle epochs; the last partial batch of an epoch is dropped (at most
    ``batch_size - 1`` rows per epoch, a different set each epoch)."""
    per_epoch = max(1, n // batch_size)
    epoch, k = divmod(step, per_epoch)
    perm = _epoch_permutation(n, seed, epoch)
    size = min(batch_size, n)
    return perm[k * size : (k + 1) * size]


def _epoch_permutation(n: int, seed: int, epoch: int) -> Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)


class LengthBucketedBatches:
    """Batches of similar-length rows, so little compute is spent on padding.

    Like :func:`batch_indices` each epoch is a seeded permutation; it is cut into windows of
    ``window`` batches, each window is sorted by length and cut into batches, and the epoch's
    batches are shuffled (seeded). Every row is seen once per epoch, as without bucketing; only the
    grouping changes (the idea of Hugging Face's ``group_by_length``). A pure function of
    (seed, step), so resumption stays exact.
    """

    def __init__(self, lengths: Tensor, batch_size: int, seed: int, window: int = 50):
        self.lengths, self.batch_size, self.seed, self.window = lengths, batch_size, seed, window
        self._epoch = -1
        self._batches: list[Tensor] = []

    def __call__(self, step: int) -> Tensor:
        n = len(self.lengths)
        size = min(self.batch_size, n)
        per_epoch = max(1, n // size)
        epoch, k = divmod(step, per_epoch)
        if epoch != self._epoch:
            perm = _epoch_permutation(n, self.seed, epoch)[: per_epoch * size]
            batches = []
            for w in range(0, len(perm), self.window * size):
                chunk = perm[w : w + self.window * size]
                chunk = chunk[torch.sort(self.lengths[chunk], stable=True).indices]
                batches.extend(chunk.split(size))
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch + 7_919)
            order = torch.randperm(len(batches), generator=g)
            self._epoch, self._batches = epoch, [batches[i] for i in order]
        return self._batches[k]


def iterate_batches(ids: Tensor, batch_size: int, pad_id: int) -> Iterator[Batch]:
    """All rows in order, in batches (for evaluation)."""
    for i in range(0, len(ids), batch_size):
        yield make_batch(ids[i : i + batch_size], pad_id)
