"""Linear probes of "where is the object now" on a real model's residual stream, by layer (issue 39).

The dialogue items (:func:`interp.worlds.dialogue.natural.dialogue_examples`) end in a cloze ("So
right now the key is in the") whose gold is the place the world says the object is in. A probe reads
the residual stream at that last prompt token, at the embeddings, after every block and after the
final LayerNorm (:func:`interp.metrics.probes.residual_hook_name`), and predicts a *label* of the
conversation held in each example's ``meta``:

- ``gold_place``: the object's current place (the question a world model answers);
- ``initial``: where the object was first put (Kim & Schuster 2023's "repeat the initial state"
  control: a probe that decodes this as well as the current place has found the first mention, not
  the tracked state);
- ``recent``: the most recently mentioned place (the shortcut of
  :mod:`interp.metrics.dialogue_heuristics`).

The rows are split by *group* (an original and its alterations share their conversation), so no
conversation is on both sides; the fit and its clustered standard errors are
:func:`interp.metrics.probes.probe_activations`' (multinomial logistic regression, L-BFGS, one
probe per layer; the same code as Vafa et al.'s current-state probes, §2.2). Beyond the papers:
PragWorld has no probes; this is the entity-tracking literature's check (Li et al. 2021, Kim &
Schuster 2023) on interp's items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from interp.analysis.engines.scoring import to_model_device
from interp.hooks.capture import capturing
from interp.hooks.hooked import hooked
from interp.metrics.probes import ProbeData, ProbeResult, check_layers, probe_activations, residual_hook_name
from interp.models.positions import position_ids
from interp.tasks.tokens import pad_id_of
from interp.worlds.encoding import pad_right

#: the labels a probe can be asked to decode (keys of each example's ``meta``; ``recent`` is derived)
LABELS = ("gold_place", "initial", "recent")


def last_token_residuals(
    model: Any, prompts_ids: Sequence[Sequence[int]], layers: Sequence[int], *, pad_id: int, batch_size: int = 8
) -> Float[Tensor, "layer row d_model"]:
    """The residual stream at the last token of each prompt, at each of ``layers`` (probe layer
    indices: -1 the embeddings, ``n_layers`` after the final LayerNorm), float32 on the CPU. One
    hooked forward per batch of right-padded rows, position ids counted over the real tokens."""
    bridge = getattr(model, "bridge", model)
    n_layers = int(bridge.cfg.n_layers)
    names = [residual_hook_name(x, n_layers) for x in layers]
    missing = [n for n in names if n not in bridge.hook_dict]
    if missing:
        raise ValueError(f"the model has no hook point {missing[0]!r}; cannot read its residual stream")
    out = torch.empty(len(layers), len(prompts_ids), int(bridge.cfg.d_model), dtype=torch.float32)
    for start in range(0, len(prompts_ids), batch_size):
        chunk = prompts_ids[start : start + batch_size]
        ids, mask, lengths = pad_right(chunk, pad_id)
        ids, mask = to_model_device(bridge, ids), to_model_device(bridge, mask)
        last = (lengths - 1).to(ids.device)
        store: dict[str, Tensor] = {}
        with hooked(bridge, capturing(store, names, clone=False)), torch.no_grad():
            bridge(ids, attention_mask=mask, position_ids=position_ids(mask))
        rows = torch.arange(len(chunk), device=ids.device)
        for li, name in enumerate(names):
            out[li, start : start + len(chunk)] = store[name][rows, last].float().cpu()
    return out


def example_label(example: Any, label: str) -> str:
    """The ``label`` of one dialogue example (see :data:`LABELS`); ``recent`` is the last place
    mentioned in the conversation (``meta["mentions"]``)."""
    if label not in LABELS:
        raise ValueError(f"unknown probe label {label!r}; known: {', '.join(LABELS)}")
    meta = getattr(example, "meta", None) or {}
    if label == "recent":
        mentions = meta.get("mentions") or []
        if not mentions:
            raise ValueError(f"example of group {example.group!r} records no mentioned places (meta['mentions'])")
        return str(mentions[-1])
    if label not in meta:
        raise ValueError(f"example of group {example.group!r} has no meta[{label!r}]: not a dialogue item")
    return str(meta[label])


def dialogue_probes(
    model: Any,
    examples: Sequence[Any],
    *,
    labels: Sequence[str] = LABELS,
    layers: Sequence[int] | None = None,
    test_share: float = 0.5,
    seed: int = 0,
    batch_size: int = 8,
) -> dict[str, ProbeResult]:
    """Fit a probe per layer for each of ``labels`` on the last-token residual stream of
    ``examples`` (dialogue items; an :class:`interp.Model`'s tokenizer encodes their prompts),
    trained on a ``1 − test_share`` share of the groups and scored on the rest (split by ``seed``).
    One forward pass serves every label. Returns ``{label: ProbeResult}``; each result's frame
    has the held-out accuracy by layer with its clustered standard error and the majority
    baseline."""
    if not 0 < test_share < 1:
        raise ValueError(f"test_share must be in (0, 1), got {test_share}")
    if not examples:
        raise ValueError("no examples to probe")
    wanted = {name: [example_label(e, name) for e in examples] for name in labels}  # unknown labels fail first
    tokenizer = model.tokenizer
    bridge = getattr(model, "bridge", model)
    n_layers = int(bridge.cfg.n_layers)
    layers = check_layers(layers, n_layers)
    groups = list(dict.fromkeys(e.group for e in examples))
    if len(groups) < 2:
        raise ValueError(f"probes need at least 2 groups to hold some out, got {len(groups)}")
    rng = np.random.default_rng(seed)
    n_test = min(len(groups) - 1, max(1, round(test_share * len(groups))))
    test_groups = set(rng.permutation(np.array(groups, dtype=object))[:n_test].tolist())
    is_test = np.array([e.group in test_groups for e in examples])
    ids = [tokenizer(e.prompt)["input_ids"] for e in examples]
    feats = last_token_residuals(model, ids, layers, pad_id=pad_id_of(tokenizer), batch_size=batch_size)
    group_index = {g: i for i, g in enumerate(groups)}
    seq = np.array([group_index[e.group] for e in examples])

    def part(mask: np.ndarray, values: list[str]) -> ProbeData:
        idx = np.flatnonzero(mask)
        # groups renumbered 0..k-1 within the part: the clustered standard error's units
        _, local = np.unique(seq[idx], return_inverse=True)
        return ProbeData(
            layers=tuple(layers),
            features=feats[:, torch.from_numpy(idx)],
            labels=[values[i] for i in idx],
            sequence=local.astype(np.int64),
            position=np.zeros(len(idx), dtype=np.int64),
            n_sequences=int(local.max()) + 1,
            skipped=0,
            n_layers=n_layers,
        )

    results = {}
    for name, values in wanted.items():
        result = probe_activations(part(~is_test, values), part(is_test, values))
        result.settings.update(label=name, train_groups=len(groups) - n_test, test_groups=n_test, split_seed=seed)
        results[name] = result
    return results


__all__ = ["LABELS", "dialogue_probes", "example_label", "last_token_residuals"]
