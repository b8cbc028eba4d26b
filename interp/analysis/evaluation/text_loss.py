"""What fine-tuning costs elsewhere: a model's next-token loss on held-out text.

:func:`text_loss` is the mean cross-entropy (nats per predicted token) of a model on texts it was
not trained on, each text encoded by the model's own tokenizer (its BOS as it adds one), read in
right-padded batches with position ids counted over the real tokens; the interval resamples whole
texts. :func:`pragworld_conversations` gives such texts without a network: the human-written
conversations of PragWorld's manual split (its originals' contexts), which no dialogue-world
template or fine-tuning split contains.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from interp.analysis.engines.scoring import to_model_device
from interp.models.positions import position_ids
from interp.tasks.tokens import pad_id_of
from interp.worlds.encoding import pad_right


def text_loss(
    model: Any,
    texts: Sequence[str],
    *,
    batch_size: int = 8,
    max_tokens: int = 512,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Mean next-token loss of ``model`` (an :class:`interp.Model`) over ``texts``, every predicted
    token weighted alike. Texts longer than ``max_tokens`` are cut (counted in ``truncated``).
    Returns ``loss``, ``ci_low`` / ``ci_high`` (percentile bootstrap over texts, token-weighted),
    ``n_texts``, ``n_tokens`` (predicted tokens) and ``truncated``."""
    if not texts:
        raise ValueError("no texts to score")
    tokenizer = model.tokenizer
    bridge = getattr(model, "bridge", model)
    encoded = [list(tokenizer(t)["input_ids"]) for t in texts]
    truncated = sum(len(x) > max_tokens for x in encoded)
    encoded = [x[:max_tokens] for x in encoded]
    short = [i for i, x in enumerate(encoded) if len(x) < 2]
    if short:
        raise ValueError(f"text {short[0]} has fewer than 2 tokens: nothing to predict")
    sums, counts = np.zeros(len(encoded)), np.array([len(x) - 1 for x in encoded], dtype=float)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))  # similar lengths share a batch
    pad = pad_id_of(tokenizer)
    was_training = bridge.training
    bridge.eval()
    try:
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            ids, mask, _ = pad_right([encoded[i] for i in rows], pad)
            ids, mask = to_model_device(bridge, ids), to_model_device(bridge, mask)
            with torch.no_grad():
                logits = bridge(ids, attention_mask=mask, position_ids=position_ids(mask))
            targets = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
            per_token = F.cross_entropy(
                logits[:, :-1].float().transpose(1, 2), targets, ignore_index=-100, reduction="none"
            )
            sums[rows] = per_token.sum(dim=1).cpu().double().numpy()
    finally:
        bridge.train(was_training)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(sums), size=(n_boot, len(sums)))
    boot = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = (1 - confidence) / 2 * 100
    return {
        "loss": float(sums.sum() / counts.sum()),
        "ci_low": float(np.percentile(boot, tail)),
        "ci_high": float(np.percentile(boot, 100 - tail)),
        "n_texts": len(sums),
        "n_tokens": int(counts.sum()),
        "truncated": truncated,
    }


def pragworld_conversations(path: str | os.PathLike, n: int | None = None) -> list[str]:
    """The distinct conversations (``Local Context``) of a PragWorld file's original rows, in file
    order; ``n``: the first n."""
    from interp.datasets.pragworld.data import load_pragworld

    rows = load_pragworld(path).rows
    texts = list(dict.fromkeys(rows.loc[~rows["altered"].astype(bool), "context"]))
    return texts[:n] if n is not None else texts


__all__ = ["pragworld_conversations", "text_loss"]
