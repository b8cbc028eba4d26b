"""The LM view: what every world-model metric asks of a model.

A metric needs two things from a language model (Vafa et al. 2024, §2.2 and App. E):

1. next-token log-probabilities after a batch of token prefixes, and
2. cheap *extension*: after reading prefixes, read one more token per row, where several new rows
   may share a parent row — exactly what expanding a suffix tree breadth-first needs.

Both go through a :class:`Cursor`: ``lm.start(prefixes)`` reads the prefixes (``<bos>`` is
prepended by the LM), and ``lm.extend(cursor, parents, tokens)`` returns a new cursor whose row
``i`` is row ``parents[i]`` of the old one followed by ``tokens[i]``. A cursor is consumed by
``extend`` (a model's KV cache is re-indexed in place), so trees are expanded level by level.

Implementations
- :class:`BridgeLM`: a TransformerBridge (any checkpoint). Extension runs only the new tokens
  through the network using the Hugging Face KV cache, and hooks registered on the bridge (any
  intervention) are active in every forward.
- :class:`WorldLM`: the world oracle — uniform over the legal tokens of the state the prefix
  reaches: the true world model, every metric's upper reference.
- :class:`UniformLM`: every world token equally likely, whatever the prefix.
- :class:`DFALM`: uniform over the tokens *another* DFA allows from the state the prefix reaches
  there (a model with a known, deliberately wrong world model).

A row whose prefix has no defined state (illegal in the world the LM follows) or whose state has
no continuation gets log-probability −inf on every token: it accepts nothing.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.worlds.base import IllegalTokenError, State, Vocab, World, WorldError


@dataclass
class Cursor:
    """A batch of prefixes an LM has read; ``logprobs[i]`` is the next-token distribution of row i."""

    logprobs: Float[Tensor, "batch vocab"]
    state: Any = field(repr=False)
    consumed: bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return self.logprobs.shape[0]


class LM(ABC):
    """Next-token log-probabilities with cheap prefix extension (see module docstring)."""

    vocab: Vocab
    #: tokens run through a network so far (0 for LMs without one): the metric benchmarks' unit
    forward_tokens: int = 0

    @abstractmethod
    def start(self, prefixes: Sequence[Sequence[str]]) -> Cursor:
        """Read ``prefixes`` (world tokens, no ``<bos>``)."""

    @abstractmethod
    def _extend(self, cursor: Cursor, parents: Tensor, token_ids: Tensor) -> Cursor: ...

    def extend(self, cursor: Cursor, parents: Sequence[int] | Tensor, tokens: Sequence[str] | Tensor) -> Cursor:
        """Row i of the result = row ``parents[i]`` of ``cursor`` + ``tokens[i]``."""
        if cursor.consumed:
            raise RuntimeError("this cursor was already extended; extend the cursor it returned")
        parents = torch.as_tensor(parents, dtype=torch.long)
        if isinstance(tokens, Tensor):
            token_ids = tokens.to(torch.long)
        else:
            token_ids = torch.tensor([self.vocab.id(t) for t in tokens], dtype=torch.long)
        if parents.shape != token_ids.shape or parents.dim() != 1:
            raise ValueError(f"parents {tuple(parents.shape)} and tokens {tuple(token_ids.shape)} must be equal 1-D")
        if len(parents) and (int(parents.min()) < 0 or int(parents.max()) >= len(cursor)):
            raise IndexError(f"parent index out of range for a cursor of {len(cursor)} rows")
        cursor.consumed = True
        return self._extend(cursor, parents, token_ids)

    def logprobs(self, prefixes: Sequence[Sequence[str]]) -> Float[Tensor, "batch vocab"]:
        """Next-token log-probabilities after each prefix."""
        return self.start(prefixes).logprobs

    def describe(self) -> str:
        return type(self).__name__


# ---- DFA-backed LMs -----------------------------------------------------------------------------

_DEAD = object()  # the state of a prefix with an undefined transition


class _StateLM(LM):
    """An LM whose distribution is a function of a state that each token updates."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._rows: dict[Any, Tensor] = {}

    @abstractmethod
    def _initial(self) -> Any: ...

    @abstractmethod
    def _step(self, state: Any, token: str) -> Any: ...

    @abstractmethod
    def _allowed(self, state: Any) -> Sequence[str]: ...

    def _advance(self, state: Any, token: str) -> Any:
        if state is _DEAD:
            return _DEAD
        try:
            return self._step(state, token)
        except IllegalTokenError:
            return _DEAD

    #: states whose row is remembered; beyond it the state map restarts (bounded memory on huge
    #: worlds: Manhattan has 4,579² states, each row 4,591 floats)
    max_cached_states = 200_000

    def _row(self, state: Any) -> Tensor:
        key = id(_DEAD) if state is _DEAD else state
        row = self._rows.get(key)
        if row is None:
            allowed = () if state is _DEAD else tuple(self._allowed(state))
            by_allowed = self.__dict__.setdefault("_rows_by_allowed", {})
            row = by_allowed.get(allowed)
            if row is None:  # one tensor per distinct legal set, shared by all its states
                row = torch.full((len(self.vocab),), -torch.inf)
                if allowed:
                    row[[self.vocab.id(t) for t in allowed]] = -torch.log(torch.tensor(float(len(allowed))))
                by_allowed[allowed] = row
            if len(self._rows) >= self.max_cached_states:
                self._rows.clear()
            self._rows[key] = row
        return row

    def _cursor(self, states: list[Any]) -> Cursor:
        rows = [self._row(q) for q in states]
        lp = torch.stack(rows) if rows else torch.empty(0, len(self.vocab))
        return Cursor(lp, states)

    def start(self, prefixes: Sequence[Sequence[str]]) -> Cursor:
        states = []
        for p in prefixes:
            q = self._initial()
            for t in p:
                q = self._advance(q, t)
            states.append(q)
        return self._cursor(states)

    def _extend(self, cursor: Cursor, parents: Tensor, token_ids: Tensor) -> Cursor:
        toks = self.vocab.decode(token_ids.tolist())
        return self._cursor([self._advance(cursor.state[p], t) for p, t in zip(parents.tolist(), toks)])


class WorldLM(_StateLM):
    """The true world model: uniform over ``world.legal(q)`` for the state ``q`` a prefix reaches."""

    def __init__(self, world: World):
        super().__init__(world.vocab)
        self.world = world

    def _initial(self) -> State:
        return self.world.start()

    def _step(self, state: State, token: str) -> State:
        return self.world.step(state, token)

    def _allowed(self, state: State) -> Sequence[str]:
        return self.world.legal(state)

    def describe(self) -> str:
        return "oracle (true world model)"


class UniformLM(_StateLM):
    """Every world token equally likely after every prefix (the paper's Connect-4 strawman)."""

    def __init__(self, world: World):
        super().__init__(world.vocab)
        self._tokens = world.tokens

    def _initial(self) -> Any:
        return ()

    def _step(self, state: Any, token: str) -> Any:
        return ()

    def _allowed(self, state: Any) -> Sequence[str]:
        return self._tokens

    def describe(self) -> str:
        return "uniform"


class DFALM(WorldLM):
    """Uniform over what another DFA allows; its alphabet must be the world's (same vocabulary)."""

    def __init__(self, dfa: World, world: World):
        if dfa.vocab.tokens != world.vocab.tokens:
            extra = sorted(set(dfa.tokens) ^ set(world.tokens))
            raise WorldError(
                f"the DFA model's vocabulary does not match the world's "
                f"({len(dfa.tokens)} vs {len(world.tokens)} tokens; differing: {extra[:10]}"
                f"{'' if extra else '; same tokens in another order'})")
        super().__init__(dfa)

    def describe(self) -> str:
        return f"DFA model ({self.world.describe()})"


# ---- TransformerBridge --------------------------------------------------------------------------

@contextlib.contextmanager
def _kv_cache_shim(bridge):
    """Let the bridge's attention see the HF KV cache.

    transformers ≥ 5 passes the cache to attention modules as ``cache=``; TransformerLens 4.3's
    attention bridge looks for ``past_key_values=`` / ``layer_past=`` only, so without this shim
    the cache stays empty and cached steps silently attend to themselves alone (checked in the
    tests against full forwards). The pre-hooks live only inside this block.
    """
    def pre_hook(module, args, kwargs):
        if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
            return args, {**kwargs, "past_key_values": kwargs["cache"]}
        return None

    handles = [blk.attn.register_forward_pre_hook(pre_hook, with_kwargs=True) for blk in bridge.blocks]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@dataclass
class _BridgeState:
    cache: Any
    mask: Int[Tensor, "batch pos"]
    next_pos: Int[Tensor, " batch"]


class BridgeLM(LM):
    """A TransformerBridge as an LM, with KV-cached extension.

    Prefixes of unequal length are left-padded with an attention mask and explicit position ids,
    so a batch of rows shares one forward. Whatever hooks are registered on the bridge when
    ``start``/``extend`` run (an intervention's context manager) apply to every token the network
    reads. ``batch_size`` bounds the rows of one forward.
    """

    def __init__(self, bridge, vocab: Vocab, batch_size: int = 512):
        self.bridge, self.vocab, self.batch_size = bridge, vocab, batch_size
        self.forward_tokens = 0
        self.n_ctx = int(getattr(bridge.cfg, "n_ctx", 0) or 0)
        d_vocab = int(getattr(bridge.cfg, "d_vocab", len(vocab)))
        if d_vocab != len(vocab):
            raise WorldError(f"model vocabulary ({d_vocab}) ≠ world vocabulary ({len(vocab)})")

    def describe(self) -> str:
        return f"bridge ({self.bridge.cfg.n_layers} layers)"

    @torch.no_grad()
    def _forward(self, ids: Tensor, mask: Tensor, positions: Tensor, cache: Any | None):
        if self.n_ctx and int(positions.max()) >= self.n_ctx:
            raise ValueError(f"sequence longer than the model context n_ctx={self.n_ctx}")
        self.forward_tokens += int(ids.numel())
        with _kv_cache_shim(self.bridge):
            logits, cache = self.bridge(ids, return_type="logits_and_cache", attention_mask=mask,
                                        position_ids=positions, past_key_values=cache, use_cache=True)
        return torch.log_softmax(logits[:, -1].float(), dim=-1), cache

    def start(self, prefixes: Sequence[Sequence[str]]) -> Cursor:
        if not prefixes:
            raise ValueError("start() needs at least one prefix")
        if len(prefixes) > self.batch_size:
            raise ValueError(f"{len(prefixes)} prefixes exceed batch_size={self.batch_size}; split them")
        rows = [self.vocab.encode(p) for p in prefixes]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), self.vocab.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(r)
            mask[i, width - len(r):] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        lp, cache = self._forward(ids, mask, positions, None)
        return Cursor(lp, _BridgeState(cache, mask, mask.sum(dim=1)))

    def _extend(self, cursor: Cursor, parents: Tensor, token_ids: Tensor) -> Cursor:
        st: _BridgeState = cursor.state
        if len(parents) == 0:
            return Cursor(cursor.logprobs[:0], _BridgeState(None, st.mask[:0], st.next_pos[:0]))
        if len(parents) > self.batch_size:
            raise ValueError(f"{len(parents)} rows exceed batch_size={self.batch_size}")
        cache = st.cache
        cache.batch_select_indices(parents)
        mask = torch.cat([st.mask[parents], torch.ones(len(parents), 1, dtype=torch.long)], dim=1)
        positions = st.next_pos[parents][:, None]
        lp, cache = self._forward(token_ids[:, None], mask, positions, cache)
        return Cursor(lp, _BridgeState(cache, mask, st.next_pos[parents] + 1))


# ---- from a CLI argument ------------------------------------------------------------------------

def lm_from_arg(arg: str, world: World | None = None) -> tuple[LM, World]:
    """``oracle`` | ``uniform`` | ``dfa:PATH`` | a checkpoint folder → (LM, the world it is judged on).

    A checkpoint brings its own world unless ``world`` is given (vocabularies must then match).
    """
    from interp.worlds import parse_world

    if arg in ("oracle", "uniform") or arg.startswith("dfa:"):
        if world is None:
            raise WorldError(f"model {arg!r} needs --world (it carries no world of its own)")
        if arg == "oracle":
            return WorldLM(world), world
        if arg == "uniform":
            return UniformLM(world), world
        return DFALM(parse_world(arg), world), world
    from interp.models.checkpoint import load_checkpoint

    ckpt = load_checkpoint(arg, world=world)
    return BridgeLM(ckpt.bridge, ckpt.world.vocab), ckpt.world
