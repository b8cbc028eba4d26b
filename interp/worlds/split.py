"""Seeded train/test splits that keep every ``world.split_key`` group on one side, and samples of a
world drawn to a token budget."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from interp.worlds.base import World


def _unit_hash(key: object, seed: int) -> float:
    digest = hashlib.blake2b(repr((seed, key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def split_sequences(
    world: World, sequences: Sequence[list[str]], test_fraction: float, seed: int
) -> tuple[list[list[str]], list[list[str]]]:
    """Split into (train, test): a key goes to test iff its seeded hash is below ``test_fraction``.

    Deterministic for a seed and independent of the order or number of sequences, so no key (for
    streets: no origin–destination pair) appears on both sides.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    train: list[list[str]] = []
    test: list[list[str]] = []
    for s in sequences:
        (test if _unit_hash(world.split_key(s), seed) < test_fraction else train).append(s)
    return train, test


def sample_token_budget(world: World, tokens: int, seed: int) -> list[list[str]]:
    """Sequences of ``world``'s own traversal (``world.generate``, 500 at a time, seeded) until their
    tokens, each counted with its ``<bos>``, reach ``tokens``: the last sequence is the one that
    crosses the budget (Vafa et al. train every traversal on the same token budget)."""
    rng = np.random.default_rng(seed)
    out: list[list[str]] = []
    total = 0
    while total < tokens:
        for s in world.generate(500, rng):
            out.append(s)
            total += len(s) + 1
            if total >= tokens:
                break
    return out
