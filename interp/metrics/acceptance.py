"""Acceptance rules: when does a generative model *accept* a token? (Vafa et al. 2024, §2.4, App. E.2)

A language model gives every sequence non-zero probability, so "the model's language" needs a
rule that turns a next-token distribution into a set of accepted tokens. A model accepts a
sequence ``x`` after a prefix ``s`` when every token ``x_i`` is accepted under ``m(· | s, x_<i)``;
the model's language ``L^m(s)`` is therefore prefix-closed. The paper's rules:

- :class:`Epsilon` — ``p > ε`` (ε = 0.01 in every headline result, the only rule in the reference
  code);
- :class:`TopK` — the token is among the ``k`` most likely;
- :class:`TopP` — the token is inside the smallest set of most likely tokens whose mass exceeds
  ``p`` (the nucleus).

Conventions shared by all rules
- A rule maps log-probabilities ``[batch, vocab]`` over the model's *full* vocabulary (``<pad>``,
  ``<bos>``, ``<unk>`` included) to a boolean mask. A model that puts mass above ε on ``<pad>``
  accepts ``<pad>``; no world ever does, so such a token costs the model precision, as it should.
- A token of probability exactly 0 (log-probability −inf) is never accepted, under any rule: a row
  of −inf (a prefix a DFA-backed LM cannot read) accepts nothing.
- Ties are resolved *inclusively* and independently of token order: top-k accepts every token
  with fewer than ``k`` tokens strictly more likely (so all tokens tied at the k-th place are in,
  and the set may exceed ``k``); top-p accepts every token whose strictly-more-likely mass is at
  most ``p`` (whole tie groups enter together). With these rules the true world model (uniform over
  the legal tokens) accepts exactly the legal tokens for every ``k ≥ 1`` and ``p ≤ 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from jaxtyping import Bool, Float
from torch import Tensor


@runtime_checkable
class AcceptanceRule(Protocol):
    """Anything with ``accept(logprobs) -> mask`` and a short ``name`` (e.g. ``epsilon=0.01``)."""

    @property
    def name(self) -> str: ...

    def accept(self, logprobs: Float[Tensor, "batch vocab"]) -> Bool[Tensor, "batch vocab"]: ...


@dataclass(frozen=True)
class Epsilon:
    """Accept a token when its probability exceeds ``eps`` (strictly): the paper's default rule."""

    eps: float = 0.01

    def __post_init__(self) -> None:
        if not (isinstance(self.eps, (int, float)) and 0.0 <= self.eps < 1.0):
            raise ValueError(f"epsilon must be in [0, 1), got {self.eps!r}")

    @property
    def name(self) -> str:
        return f"epsilon={self.eps:g}"

    def accept(self, logprobs: Float[Tensor, "batch vocab"]) -> Bool[Tensor, "batch vocab"]:
        # compare in probability space; p = 0 (log-prob −inf) never passes, even for eps = 0
        p = logprobs.exp()
        return (p > self.eps) & (logprobs > -math.inf)


@dataclass(frozen=True)
class TopK:
    """Accept the ``k`` most likely tokens; ties at the k-th place are all accepted (see module doc)."""

    k: int

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ValueError(f"top-k needs an integer k >= 1, got {self.k!r}")

    @property
    def name(self) -> str:
        return f"top_k={self.k}"

    def accept(self, logprobs: Float[Tensor, "batch vocab"]) -> Bool[Tensor, "batch vocab"]:
        k = min(self.k, logprobs.shape[-1])
        if logprobs.shape[0] == 0 or k == 0:
            return torch.zeros(logprobs.shape, dtype=torch.bool)
        kth = torch.topk(logprobs, k, dim=-1).values[:, -1:]
        return (logprobs >= kth) & (logprobs > -math.inf)


@dataclass(frozen=True)
class TopP:
    """Accept the nucleus: the smallest set of most likely tokens whose mass exceeds ``p``.

    A token is in when the total mass of tokens *strictly* more likely than it is ``<= p``; whole
    tie groups enter together. ``p = 1`` accepts every token of non-zero probability.
    """

    p: float

    def __post_init__(self) -> None:
        if not (isinstance(self.p, (int, float)) and 0.0 < self.p <= 1.0):
            raise ValueError(f"top-p needs 0 < p <= 1, got {self.p!r}")

    @property
    def name(self) -> str:
        return f"top_p={self.p:g}"

    def accept(self, logprobs: Float[Tensor, "batch vocab"]) -> Bool[Tensor, "batch vocab"]:
        if logprobs.shape[0] == 0:
            return torch.zeros(logprobs.shape, dtype=torch.bool)
        lp = logprobs.double()
        sorted_lp, order = torch.sort(lp, dim=-1, descending=True)
        probs = sorted_lp.exp()
        before = torch.cumsum(probs, dim=-1) - probs  # mass of the tokens sorted before each one
        # a tie group takes the "before" mass of its first member: the strictly-more-likely mass
        starts = torch.ones_like(sorted_lp, dtype=torch.bool)
        starts[:, 1:] = sorted_lp[:, 1:] != sorted_lp[:, :-1]
        strictly_more = torch.where(starts, before, torch.zeros_like(before)).cummax(dim=-1).values
        # log-probs arrive in float32: a mass within round-off of p counts as equal to p
        ok_sorted = strictly_more <= self.p + 1e-6
        ok = torch.empty_like(ok_sorted).scatter_(-1, order, ok_sorted)
        return ok & (lp > -math.inf)


def rule_from_args(
    epsilon: float | None = None, top_k: int | None = None, top_p: float | None = None
) -> AcceptanceRule:
    """At most one of the three (the CLI's mutually exclusive flags); default ``Epsilon(0.01)``."""
    given = [(n, v) for n, v in (("epsilon", epsilon), ("top_k", top_k), ("top_p", top_p)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"give at most one acceptance rule, got {', '.join(n for n, _ in given)}")
    if top_k is not None:
        return TopK(top_k)
    if top_p is not None:
        return TopP(top_p)
    return Epsilon(0.01 if epsilon is None else epsilon)
