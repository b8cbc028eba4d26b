"""A model's question answering on the dialogue world, scored as PragWorld scores LLMs.

At the answer position (right after a probe's ``?``) the world allows only the gold token; the
model's answer is the two-way softmax over the ``yes`` and ``no`` logits there — the paper's
interpretability protocol (P(yes) / (P(yes) + P(no)), yes when > 0.5). Reused, not rewritten:
:func:`interp.metrics.pragworld_eval.model_logits` / ``p_yes_from_logits`` for the scoring
and :func:`interp.metrics.pragworld.score_pragworld` for the accuracies (robust, yes / no,
original / altered, flip / invariant, per category and length).

- :func:`probe_accuracy`: every probe of held-out training-style sequences (plain accuracy, and
  by question type);
- :func:`evaluate_benchmark`: a benchmark file written by
  :func:`~interp.worlds.dialogue.export.write_benchmark`.

A metric (it runs a model), so it lives in :mod:`interp.metrics`, above the world it reads.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.worlds.dialogue.export import prompt_tokens
from interp.worlds.dialogue.grammar import ANSWERS, PROBE, SPEAKERS, Probe, parse
from interp.worlds.dialogue.questions import question_type
from interp.worlds.encoding import encode_sequences


def _encode(world, prompts: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention mask, lengths) of ``<bos>``-prefixed, right-padded prompts."""
    ids = encode_sequences(prompts, world.vocab)
    mask = (ids != world.vocab.pad_id).long()  # a prompt of world tokens holds no <pad>
    return ids, mask, mask.sum(dim=1)


@torch.no_grad()
def p_yes(model: Any, world, prompts: Sequence[Sequence[str]], batch_size: int = 128) -> np.ndarray:
    """P(yes) / (P(yes) + P(no)) after each prompt (world tokens, no ``<bos>``), in order."""
    from interp.metrics.pragworld_eval import model_logits, p_yes_from_logits

    yes_id, no_id = world.vocab.id(ANSWERS[0]), world.vocab.id(ANSWERS[1])
    out = []
    for s in range(0, len(prompts), batch_size):
        ids, mask, lengths = _encode(world, prompts[s : s + batch_size])
        logits = model_logits(model, ids, mask)
        out.append(p_yes_from_logits(logits, lengths, yes_id, no_id).cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def probe_prompts(sequences: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[int], list[list[str]]]:
    """Every probe of every sequence: (prefix up to its ``?``, gold 1/0, the probe's tokens)."""
    prompts, gold, probes = [], [], []
    for seq in sequences:
        for i, t in enumerate(seq):
            if t == "?" and i + 1 < len(seq) and seq[i + 1] in ANSWERS:
                start = max(j for j in range(i + 1) if seq[j] == PROBE)
                prompts.append(list(seq[: i + 1]))
                gold.append(int(seq[i + 1] == ANSWERS[0]))
                probes.append(list(seq[start : i + 2]))
    return prompts, gold, probes


def _probe_of(tokens: Sequence[str]) -> Probe:
    """The probe a probe prompt's tokens parse to."""
    parsed = parse(list(tokens))
    if len(parsed) != 1 or not isinstance(parsed[0], Probe):
        raise ValueError(f"not one probe: {' '.join(tokens)!r}")
    return parsed[0]


def probe_accuracy(model: Any, world, sequences: Sequence[Sequence[str]], batch_size: int = 128) -> dict[str, Any]:
    """Accuracy (with a standard error) over every probe in ``sequences``, overall and by question
    type, with the yes / no accuracies and the always-no baseline."""
    prompts, gold, probes = probe_prompts(sequences)
    if not prompts:
        raise ValueError("no probes in these sequences")
    p = p_yes(model, world, prompts, batch_size)
    pred = (p > 0.5).astype(int)
    g = np.asarray(gold)
    correct = pred == g
    kinds = [question_type(world.lexicon, _probe_of(pr).question) for pr in probes]
    df = pd.DataFrame({"correct": correct, "gold": g, "type": kinds})

    def acc(mask) -> float:
        return float(df.correct[mask].mean()) if mask.any() else float("nan")

    n = len(df)
    return {
        "probes": n,
        "accuracy": acc(df.gold >= 0),
        "accuracy_se": float(df.correct.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan"),
        "yes": acc(df.gold == 1),
        "no": acc(df.gold == 0),
        "always_no_baseline": float((g == 0).mean()),
        "by_type": {k: acc(df.type == k) for k in sorted(set(kinds))},
    }


def evaluate_benchmark(model: Any, world, path: str | os.PathLike, batch_size: int = 128, seed: int = 0):
    """Load a benchmark CSV with the PragWorld loader, answer every row, score it.

    Returns ``(score, p_yes)``: the :class:`~interp.metrics.pragworld.PragWorldScore` and the
    model's P(yes) per row."""
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.pragworld import score_pragworld

    data = load_pragworld(path)
    prompts = [prompt_tokens(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    p = p_yes(model, world, prompts, batch_size)
    return score_pragworld(data, ["yes" if x > 0.5 else "no" for x in p], seed=seed), p


def seen_context_share(train_seqs: Sequence[Sequence[str]], world: Any, rows: pd.DataFrame) -> float:
    """Share of a benchmark's originals (``rows`` with ``altered`` False, ``context``: the conversation
    as space-separated tokens) whose conversation is an utterance-prefix of a training sequence's
    (``world.split_key``: the conversation without its probes): how much of the benchmark the model
    has seen begin in training. 0 with no original."""
    prefixes = set()
    for s in train_seqs:
        conv = world.split_key(s)
        for i, t in enumerate(conv):
            if t in SPEAKERS:
                prefixes.add(tuple(conv[:i]))
        prefixes.add(tuple(conv))
    originals = rows[~rows["altered"]]
    return float(sum(tuple(c.split()) in prefixes for c in originals["context"]) / max(len(originals), 1))
