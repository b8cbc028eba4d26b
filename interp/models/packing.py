"""Rows that share a token prefix, read once: tree-packed forwards scored at each row's last token.

A causal transformer's activations at a position depend only on the tokens up to it, so rows that
start alike compute the same thing over their common prefix. :func:`pack_rows` sorts the rows by
their token ids and lays each *pack* (a set of rows read in one batch row of a forward) out as a
token trie: a row adds only the tokens after its longest common prefix with the row before it in
sorted order (that prefix is a path already in the trie), so every distinct prefix is one packed
position. Each packed position attends to its own ancestors only (a 4-D mask) with its depth as
position id, so its keys, values, hidden states and logits are the ones the row alone computes —
a tree-attention forward, the layout :class:`interp.models.lm.BridgeLM` uses for its cached bins.
One forward over a pack reads every row of it; a shared prefix of a whole group, and a shared
prefix of two rows inside it, are read once. Rows that share nothing are packed side by side with
a block-diagonal mask (no padding), or kept apart (see the cost rule below); a group of one is its
row.

**Which rows share a pack.** In sorted order a row joins the current pack when that is cheaper in
FLOPs than reading it alone: it adds ``new`` tokens (``len − common prefix``) through the weights
but grows the pack's attention quadratically. ``2 × weights`` FLOPs per token and ``4 × d_model ×
n_layers`` per (query, key) pair of attention (a dense masked attention computes every pair of the
pack) are compared, and ``pack_tokens`` caps a pack. :class:`PackPlan` counts the tokens a plain
right-padded batch would read, the unique ones, and the padding of the packed batches.

**Batches.** Packs are sorted by length and cut into batches of at most ``batch_tokens`` padded
positions (length buckets); padding positions attend to themselves only and are never read. The
logits are computed only at the scored positions (``logits_to_keep`` of the Hugging Face forward,
the union of the batch's scored positions), which also skips the unembedding of every other token.

**What this is exact for**: metrics read at each row's last token, under hooks that act on every
position alike (none, or an MLP output zeroed / scaled / replaced by a fixed mean at every
position). A hook tied to positions or rows (``"last"`` from an attention mask, a tuple of
positions, a patch or resample from a source run, which pairs run rows with source rows) sees
packs, not rows: run those unpacked. Sliding-window attention (Gemma-2, Mistral with a window) is
exact only while a row fits in the window (the one mask cannot carry a per-layer window);
:func:`check_packable` refuses longer rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor


@dataclass
class Pack:
    """One batch row of a packed forward: ``tokens`` / ``positions`` (depth in the trie) of the
    ``n`` packed positions, ``parent`` of each (−1 at a root), and for each of its ``rows`` (example
    numbers) the packed index of its last token (``scored``)."""

    rows: list[int]
    tokens: list[int]
    positions: list[int]
    parent: list[int]
    scored: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    def ancestors(self) -> Bool[Tensor, "n n"]:
        """``mask[q, k]``: may packed position ``q`` attend to ``k`` (``k`` on ``q``'s path to the root,
        itself included)."""
        n = len(self.tokens)
        mask = torch.zeros((n, n), dtype=torch.bool)
        for q, p in enumerate(self.parent):  # a parent is always packed before its child
            if p >= 0:
                mask[q] = mask[p]
            mask[q, q] = True
        return mask


@dataclass
class PackedBatch:
    """The tensors of one packed forward: ``tokens`` / ``positions`` ``[packs, width]``, ``mask``
    ``[packs, 1, width, width]``; ``keep``: the packed columns whose logits are computed; each row
    of ``rows`` is read at pack ``pack[i]``, column ``keep[col[i]]``."""

    tokens: Int[Tensor, "packs width"]
    positions: Int[Tensor, "packs width"]
    mask: Bool[Tensor, "packs 1 width width"]
    keep: Int[Tensor, " k"]
    rows: Int[Tensor, " r"]
    pack: Int[Tensor, " r"]
    col: Int[Tensor, " r"]
    padding: int


@dataclass
class PackPlan:
    """Packs of a set of rows and the batches they are read in, with the counts a bench reports:
    ``row_tokens`` (the rows' tokens: what reading each row alone costs), ``unique_tokens`` (packed
    positions: every distinct prefix once), ``padding`` (padded positions of the packed batches),
    ``plain_padding`` (what right-padded batches of the same ``batch_tokens`` in input order would
    pad)."""

    packs: list[Pack]
    batches: list[PackedBatch]
    row_tokens: int
    unique_tokens: int
    padding: int
    plain_padding: int
    meta: dict[str, Any] = field(default_factory=dict)

    def stats(self) -> dict[str, Any]:
        """The counts as a JSON-ready dict."""
        return {
            "rows": sum(len(p.rows) for p in self.packs),
            "packs": len(self.packs),
            "batches": len(self.batches),
            "row_tokens": self.row_tokens,
            "unique_tokens": self.unique_tokens,
            "shared_share": round(1 - self.unique_tokens / max(1, self.row_tokens), 4),
            "padding": self.padding,
            "plain_padding": self.plain_padding,
            **self.meta,
        }


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _pair_cost(n: int, new: int, per_token: float, per_pair: float) -> float:
    """FLOPs added by ``new`` tokens joining a pack of ``n`` (weights, then attention pairs)."""
    return new * per_token + per_pair * ((n + new) ** 2 - n**2)


def model_costs(model: Any) -> tuple[float, float]:
    """``(per_token, per_pair)`` FLOPs of a forward: ``2 × parameters`` outside the embedding and
    ``4 × d_model × n_layers`` per attended (query, key) pair; from a bridge's ``cfg`` or an HF
    model's ``config``."""
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)
    d = int(getattr(cfg, "d_model", 0) or getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0))
    layers = int(getattr(cfg, "n_layers", 0) or getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0))
    params = sum(p.numel() for p in model.parameters())
    vocab = int(getattr(cfg, "d_vocab", 0) or getattr(cfg, "vocab_size", 0))
    if not d or not layers:
        raise ValueError(f"cannot read d_model and n_layers from {type(model).__name__}'s config")
    return 2.0 * max(params - vocab * d, d), 4.0 * d * layers


def pack_rows(
    seqs: Sequence[Sequence[int]], *, per_token: float = 1.0, per_pair: float = 0.0, pack_tokens: int = 2048
) -> list[Pack]:
    """Packs of ``seqs`` (each row's token ids, non-empty), rows sorted by their ids; a row joins the
    current pack when that costs fewer FLOPs than reading it alone and the pack stays within
    ``pack_tokens`` positions (module docstring). ``per_pair = 0`` packs while the cap allows."""
    if any(len(s) == 0 for s in seqs):
        raise ValueError(f"row {next(i for i, s in enumerate(seqs) if len(s) == 0)} has no tokens")
    order = sorted(range(len(seqs)), key=lambda i: list(seqs[i]))
    packs: list[Pack] = []
    path: list[int] = []  # packed index of each token of the previous row of the current pack
    prev: Sequence[int] = ()
    for i in order:
        s = list(seqs[i])
        cur = packs[-1] if packs else None
        common = _common(prev, s) if cur is not None else 0
        new = len(s) - common
        if cur is not None and (
            len(cur) + new > pack_tokens
            or _pair_cost(len(cur), new, per_token, per_pair) >= _pair_cost(0, len(s), per_token, per_pair)
        ):
            cur, common, new = None, 0, len(s)
        if cur is None:
            cur = Pack([], [], [], [], [])
            packs.append(cur)
            path = []
        path = path[:common]
        for d in range(common, len(s)):
            cur.parent.append(path[-1] if path else -1)
            path.append(len(cur.tokens))
            cur.tokens.append(int(s[d]))
            cur.positions.append(d)
        cur.rows.append(i)
        cur.scored.append(path[-1])
        prev = s
    return packs


def batch_packs(packs: Sequence[Pack], batch_tokens: int, pad_id: int) -> list[PackedBatch]:
    """Packs sorted by length and cut into batches of at most ``batch_tokens`` padded positions
    (at least one pack each); see :class:`PackedBatch`."""
    order = sorted(range(len(packs)), key=lambda k: len(packs[k]))
    groups: list[list[int]] = []
    for k in order:
        if groups and len(packs[k]) * (len(groups[-1]) + 1) <= batch_tokens:
            groups[-1].append(k)
        else:
            groups.append([k])
    return [_tensors([packs[k] for k in g], pad_id) for g in groups]


def _tensors(packs: list[Pack], pad_id: int) -> PackedBatch:
    width = max(len(p) for p in packs)
    b = len(packs)
    tokens = torch.full((b, width), pad_id, dtype=torch.long)
    positions = torch.zeros((b, width), dtype=torch.long)
    mask = torch.eye(width, dtype=torch.bool).repeat(b, 1, 1)  # a padding position reads itself only
    rows, pack, cols = [], [], []
    for j, p in enumerate(packs):
        n = len(p)
        tokens[j, :n] = torch.tensor(p.tokens)
        positions[j, :n] = torch.tensor(p.positions)
        mask[j, :n, :n] = p.ancestors()
        rows += p.rows
        pack += [j] * len(p.rows)
        cols += p.scored
    keep, col = np.unique(np.array(cols), return_inverse=True)
    return PackedBatch(
        tokens,
        positions,
        mask[:, None],
        torch.as_tensor(keep),
        torch.tensor(rows),
        torch.tensor(pack),
        torch.as_tensor(col.reshape(-1)),
        b * width - sum(len(p) for p in packs),
    )


def plain_padding(lengths: Sequence[int], batch_tokens: int) -> int:
    """Padded positions of right-padded batches in input order, each at most ``batch_tokens``
    positions (what an unsorted, unpacked reading pads)."""
    pad, batch = 0, []  # type: int, list[int]
    for n in lengths:
        if batch and max(max(batch), n) * (len(batch) + 1) > batch_tokens:
            pad += max(batch) * len(batch) - sum(batch)
            batch = []
        batch.append(n)
    if batch:
        pad += max(batch) * len(batch) - sum(batch)
    return pad


def plan(
    seqs: Sequence[Sequence[int]],
    model: Any = None,
    *,
    batch_tokens: int = 4096,
    pack_tokens: int | None = None,
    pad_id: int = 0,
) -> PackPlan:
    """Pack ``seqs`` (:func:`pack_rows`, with ``model``'s FLOP costs when given, else packing while
    ``pack_tokens`` allows) and cut the packs into batches (:func:`batch_packs`). ``pack_tokens``
    None: 2048 positions or two of the longest row, whichever is more — so rows of a long context
    (a shared preamble of thousands of tokens) can still share it."""
    if pack_tokens is None:
        pack_tokens = max(2048, 2 * max((len(s) for s in seqs), default=0))
    per_token, per_pair = model_costs(model) if model is not None else (1.0, 0.0)
    packs = pack_rows(seqs, per_token=per_token, per_pair=per_pair, pack_tokens=pack_tokens)
    batches = batch_packs(packs, batch_tokens, pad_id)
    lengths = [len(s) for s in seqs]
    return PackPlan(
        packs,
        batches,
        sum(lengths),
        sum(len(p) for p in packs),
        sum(b.padding for b in batches),
        plain_padding(lengths, batch_tokens),
        {"batch_tokens": batch_tokens, "pack_tokens": pack_tokens},
    )


def check_packable(model: Any, seqs: Sequence[Sequence[int]]) -> None:
    """Raise when a row is longer than the model's sliding attention window (see the module
    docstring) or its context."""
    from interp.models.generate import sliding_window

    longest = max((len(s) for s in seqs), default=0)
    window = sliding_window(model)
    if window is not None and longest > window:
        raise ValueError(
            f"a row has {longest} tokens, more than this model's sliding attention window ({window}); "
            "a packed forward cannot apply the window: score these rows unpacked"
        )


def position_hooks_registered(model: Any) -> bool:
    """Whether a hook is registered on any of a TransformerBridge's hook points (where interventions
    go; the bridge's own capture hooks on the wrapped modules do not count). A plain Hugging Face
    model has none. Callers read rows unpacked while one is: it may be tied to positions."""
    if not (hasattr(model, "hook_dict") and hasattr(model, "cfg")):
        return False
    return any(h._forward_hooks or h._forward_pre_hooks for h in model.hook_dict.values())


def packed_logits(model: Any, batch: PackedBatch, **kwargs: Any) -> Float[Tensor, "r vocab"]:
    """The logits at each row's last token (rows in ``batch.rows`` order) from one packed forward of
    ``model`` (a TransformerBridge, whose registered hooks run on the packed positions, or a Hugging
    Face causal LM); ``kwargs`` go to the forward."""
    from interp.models.device import model_device

    dev = model_device(model)
    args = {
        "attention_mask": batch.mask.to(dev),
        "position_ids": batch.positions.to(dev),
        "use_cache": False,
        "logits_to_keep": batch.keep.to(dev),
        **kwargs,
    }
    with torch.no_grad():
        if hasattr(model, "hook_dict") and hasattr(model, "cfg"):
            out = model(batch.tokens.to(dev), return_type="logits", **args)
        else:
            out = model(input_ids=batch.tokens.to(dev), **args).logits
    if out.shape[1] != len(batch.keep):
        raise ValueError(
            f"the forward returned logits at {out.shape[1]} positions, {len(batch.keep)} were asked "
            f"for (does this model's forward take logits_to_keep?)"
        )
    return out[batch.pack.to(out.device), batch.col.to(out.device)]


__all__ = [
    "Pack",
    "PackPlan",
    "PackedBatch",
    "batch_packs",
    "check_packable",
    "model_costs",
    "pack_rows",
    "packed_logits",
    "plain_padding",
    "plan",
    "position_hooks_registered",
]
