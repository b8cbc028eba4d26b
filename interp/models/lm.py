"""The LM view: what every world-model metric asks of a model.

A metric needs two things from a language model (Vafa et al. 2024, §2.2 and App. E):

1. next-token log-probabilities after a batch of token prefixes, and
2. cheap *extension*: after reading prefixes, read one more token per row, where several new rows
   may share a parent row — exactly what expanding a suffix tree breadth-first needs.

Both go through a :class:`Cursor`: ``lm.start(prefixes)`` reads the prefixes (``<bos>`` is
prepended by the LM), and ``lm.extend(cursor, parents, tokens)`` returns a new cursor whose row
``i`` is row ``parents[i]`` of the old one followed by ``tokens[i]``. ``extend`` never modifies
its cursor, so a cursor can be extended any number of times (a tree level in several parts).

Implementations
- :class:`BridgeLM`: a TransformerBridge (any checkpoint). Extension runs only the new tokens
  through the network, over cached keys/values packed by tree (the children of one cached
  context are read in one bin, see the class), and hooks registered on the bridge (any
  intervention) are active in every forward.
- :class:`WorldLM`: the world oracle — uniform over the legal tokens of the state the prefix
  reaches: the true world model, every metric's upper reference.
- :class:`IdealLM`: the exact next-token distribution of the process that generated the world's
  data (``world.traversal_process()``; streets: random walks, shortest paths): the Bayes-optimal
  predictor, the ceiling a model trained on that data can reach.
- :class:`UniformLM`: every world token equally likely, whatever the prefix.
- :class:`DFALM`: uniform over the tokens *another* DFA allows from the state the prefix reaches
  there (a model with a known, deliberately wrong world model).

A row whose prefix has no defined state (illegal in the world the LM follows) or whose state has
no continuation gets log-probability −inf on every token: it accepts nothing.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.models.positions import position_ids
from interp.worlds.base import IllegalTokenError, State, Vocab, World, WorldError


def logits_of(
    model: torch.nn.Module, inputs: Int[Tensor, "batch pos"], keep: Int[Tensor, " kept"] | None = None
) -> Float[Tensor, "batch kept vocab"]:
    """Logits of one plain forward: an HF causal LM returns them in ``.logits``, a TransformerBridge
    as the tensor itself (the trainer and the next-token test read them through here). ``keep``:
    only those positions (the forward's ``logits_to_keep``; every position when None)."""
    out = model(inputs) if keep is None else model(inputs, logits_to_keep=keep)
    return out if isinstance(out, Tensor) else out.logits


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward computes logits at chosen positions only (``logits_to_keep``:
    Hugging Face causal LMs of transformers ≥ 4.50 take it; a forward of ``**kwargs`` is not trusted to)."""
    import inspect

    forward = getattr(model, "forward", None)
    try:
        params = inspect.signature(forward).parameters if forward is not None else {}
    except (TypeError, ValueError):
        return False
    return "logits_to_keep" in params


@dataclass
class Cursor:
    """A batch of prefixes an LM has read; ``logprobs[i]`` is the next-token distribution of row i."""

    logprobs: Float[Tensor, "batch vocab"]
    state: Any = field(repr=False)

    def __len__(self) -> int:
        return self.logprobs.shape[0]


class LM(ABC):
    """Next-token log-probabilities with cheap prefix extension (see module docstring)."""

    vocab: Vocab
    #: tokens run through a network so far (0 for LMs without one): the metric benchmarks' unit;
    #: and the network's forwards
    forward_tokens: int = 0
    forward_calls: int = 0

    @abstractmethod
    def start(self, prefixes: Sequence[Sequence[str]]) -> Cursor:
        """Read ``prefixes`` (world tokens, no ``<bos>``)."""

    @abstractmethod
    def _extend(self, cursor: Cursor, parents: Tensor, token_ids: Tensor) -> Cursor: ...

    def extend(self, cursor: Cursor, parents: Sequence[int] | Tensor, tokens: Sequence[str] | Tensor) -> Cursor:
        """Row i of the result = row ``parents[i]`` of ``cursor`` + ``tokens[i]`` (``cursor`` is unchanged)."""
        parents = torch.as_tensor(parents, dtype=torch.long)
        if isinstance(tokens, Tensor):
            token_ids = tokens.to(torch.long)
        else:
            token_ids = torch.tensor([self.vocab.id(t) for t in tokens], dtype=torch.long)
        if parents.shape != token_ids.shape or parents.dim() != 1:
            raise ValueError(f"parents {tuple(parents.shape)} and tokens {tuple(token_ids.shape)} must be equal 1-D")
        if len(parents) and (int(parents.min()) < 0 or int(parents.max()) >= len(cursor)):
            raise IndexError(f"parent index out of range for a cursor of {len(cursor)} rows")
        return self._extend(cursor, parents, token_ids)

    def logprobs(self, prefixes: Sequence[Sequence[str]]) -> Float[Tensor, "batch vocab"]:
        """Next-token log-probabilities after each prefix."""
        return self.start(prefixes).logprobs

    def describe(self) -> str:
        return type(self).__name__


# ---- DFA-backed LMs -----------------------------------------------------------------------------

_DEAD = object()  # the state of a prefix with an undefined transition


class StateLM(LM):
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


class WorldLM(StateLM):
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


class IdealLM(StateLM):
    """The ideal predictor of a world's training data: ``P(next | prefix)`` under the process
    behind ``world.generate`` (``world.traversal_process()``, computed in the world room; see
    :mod:`interp.worlds.streets.process`). Unlike :class:`WorldLM` it is not uniform over the legal
    tokens: a random walk's ``end`` at its destination has the probability the walk-length
    distribution gives it. ``fallbacks`` counts prefixes the process cannot produce (answered by
    the process's fallback rule)."""

    def __init__(self, world: World):
        make = getattr(world, "traversal_process", None)
        if make is None:
            raise WorldError(f"{world.kind}: the world has no traversal process, so no ideal predictor")
        super().__init__(world.vocab)
        self.world = world
        self.process = make()

    @property
    def fallbacks(self) -> int:
        return self.process.fallbacks

    def _initial(self) -> Any:
        return self.process.initial()

    def _step(self, state: Any, token: str) -> Any:
        return self.process.step(state, token)

    def _allowed(self, state: Any) -> Sequence[str]:  # pragma: no cover - _row is overridden
        return tuple(self.process.distribution(state))

    def _row(self, state: Any) -> Tensor:
        key = id(_DEAD) if state is _DEAD else state
        row = self._rows.get(key)
        if row is None:
            row = torch.full((len(self.vocab),), -torch.inf)
            if state is not _DEAD:
                dist = self.process.distribution(state)
                if dist:
                    ids = [self.vocab.id(t) for t in dist]
                    row[ids] = torch.tensor(list(dist.values()), dtype=torch.float64).log().float()
            if len(self._rows) >= self.max_cached_states:
                self._rows.clear()
            self._rows[key] = row
        return row

    def describe(self) -> str:
        return (
            f"ideal predictor ({self.world.traversal.kind})" if hasattr(self.world, "traversal") else "ideal predictor"
        )


class UniformLM(StateLM):
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
                f"{'' if extra else '; same tokens in another order'})"
            )
        super().__init__(dfa)

    def describe(self) -> str:
        return f"DFA model ({self.world.describe()})"


# ---- TransformerBridge --------------------------------------------------------------------------


@contextlib.contextmanager
def kv_cache_shim(bridge):
    """Let the bridge's attention see the KV cache.

    transformers ≥ 5 passes the cache to attention modules as ``cache=``; TransformerLens 4.3's
    attention bridge looks for ``past_key_values=`` / ``layer_past=`` only, so without this shim
    the cache stays empty and cached steps silently attend to themselves alone (checked in the
    tests against full forwards). The pre-hooks live only inside this block. The bridge forwards
    the model's old argument name ``past_key_values``, which still works; the FutureWarning
    transformers 5 prints for it on every cached forward is silenced inside the block only.
    """

    def pre_hook(module, args, kwargs):
        if kwargs.get("cache") is not None and kwargs.get("past_key_values") is None:
            return args, {**kwargs, "past_key_values": kwargs["cache"]}
        return None

    handles = [blk.attn.register_forward_pre_hook(pre_hook, with_kwargs=True) for blk in bridge.blocks]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated", category=FutureWarning)
            yield
    finally:
        for h in handles:
            h.remove()


class PackedCache:
    """The keys/values of one packed forward, preallocated: positions ``[:start]`` hold the cached
    context; ``update`` writes the ``n_new`` new tokens' keys/values at ``[start:start + n_new]``
    (no concatenation) and returns the filled part. Only ``update`` is ever called: the mask is
    4-D and the positions are explicit."""

    def __init__(self, keys: list[Tensor], values: list[Tensor], start: int, n_new: int):
        self.keys, self.values, self.start, self.end = keys, values, start, start + n_new

    def update(self, key_states: Tensor, value_states: Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[:, :, self.start : self.end] = key_states
        v[:, :, self.start : self.end] = value_states
        return k[:, :, : self.end], v[:, :, : self.end]


@dataclass
class _Segment:
    """One packed KV batch: per layer ``[bins, heads, capacity, d_head]`` keys and values, of
    which positions ``[:used]`` are filled (the rest is room for later tokens)."""

    keys: list[Tensor]
    values: list[Tensor]
    used: int

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]


@dataclass
class _PackedState:
    """Where each row's context lives: row ``i`` reads bin ``bin[i]`` of segment ``seg[i]``, at the
    positions ``vis[i]`` (its prefix and its own path through the tree); ``pos[i]`` is its next
    position id."""

    segments: list[_Segment]
    seg: Int[Tensor, " rows"]
    bin: Int[Tensor, " rows"]
    vis: Any  # Bool[Tensor, "rows width"], padded to the widest segment
    pos: Int[Tensor, " rows"]


#: relative costs of one packed forward (per token through the weights = 1), for choosing the
#: number of query slots per bin: copying one cached position of one bin, one query × key score
_COST_COPY, _COST_SCORE = 0.1, 0.0025
_SLOT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: free positions a started (or grown) bin gets, so that a few more tokens fit without a new buffer
_ROOM = 8


class BridgeLM(LM):
    """A TransformerBridge as an LM, with KV-cached tree extension.

    ``start`` left-pads prefixes of unequal length (explicit position ids and a 4-D causal+padding
    mask), so a batch of rows shares one forward. ``extend`` packs the tree: the new rows that
    descend from the same cached context (a *bin*: one prefix and the suffix tokens read after
    it) are read as several query tokens of that bin in one forward, each attending to its own
    prefix and path only (a 4-D mask over the bin's positions), with its own position id. So a
    level costs one copy of each bin's cached keys/values (compacted to the positions its rows
    still read, or, when they read all of it, copied whole with the new tokens written into free
    room at its end) instead of one copy per row, and siblings share it; nothing is concatenated.
    The number of query slots per bin is chosen per call from a cost model (tokens, padding
    included, copied positions, attention scores); a bin with more children is split.
    ``extend`` never modifies its cursor: a cursor can be extended any number of times.

    Whatever hooks are registered on the bridge when ``start``/``extend`` run (an intervention's
    context manager) apply to every token the network reads; while any hook is registered,
    ``extend`` reads one new token per batch row (``[rows, 1]``, the layout that
    position-indexed interventions such as ``"last"`` expect) instead of packing several.
    ``batch_size`` bounds the rows of a ``start`` forward and the tokens (bins × slots) of an
    ``extend`` forward, ``kv_bytes`` the keys/values one forward holds; ``slots`` fixes the query
    slots per bin (default: chosen per call).
    """

    def __init__(self, bridge, vocab: Vocab, batch_size: int = 1024, slots: int | None = None, kv_bytes: int = 1 << 30):
        self.bridge, self.vocab, self.batch_size, self.slots = bridge, vocab, batch_size, slots
        self.kv_bytes = kv_bytes
        self.forward_tokens = 0
        self.forward_calls = 0
        self.n_ctx = int(getattr(bridge.cfg, "n_ctx", 0) or 0)
        d_vocab = int(getattr(bridge.cfg, "d_vocab", len(vocab)))
        if d_vocab != len(vocab):
            raise WorldError(f"model vocabulary ({d_vocab}) ≠ world vocabulary ({len(vocab)})")
        cfg = bridge.cfg
        self._n_layers, self._n_heads = int(cfg.n_layers), int(cfg.n_heads)
        self._n_kv_heads = int(getattr(cfg, "n_key_value_heads", None) or self._n_heads)
        self._d_head = int(getattr(cfg, "d_head", 0) or int(cfg.d_model) // self._n_heads)
        self._hook_points: list[Any] | None = None
        from interp.models.device import model_device

        param = next(bridge.parameters())
        # inputs and the KV buffers live where the model's first module does (one device: metrics
        # and navigate offer no device map, whose layers could sit on several GPUs)
        self._device, self._dtype = model_device(bridge), param.dtype
        # bytes of the cached keys and values of one position of one batch row
        self._pos_bytes = 2 * self._n_layers * self._n_kv_heads * self._d_head * param.element_size()

    def describe(self) -> str:
        return f"bridge ({self.bridge.cfg.n_layers} layers)"

    def _hooked(self) -> bool:
        """Whether a hook is registered on any of the bridge's hook points (where interventions go;
        the bridge's and transformers' own capture hooks on the wrapped modules do not count)."""
        if self._hook_points is None:
            from transformer_lens.hook_points import HookPoint

            self._hook_points = [m for m in self.bridge.modules() if isinstance(m, HookPoint)]
        return any(m._forward_hooks or m._forward_pre_hooks for m in self._hook_points)

    def _buffers(self, bins: int, width: int) -> tuple[list[Tensor], list[Tensor]]:
        shape = (bins, self._n_kv_heads, width, self._d_head)
        return (
            [torch.empty(shape, dtype=self._dtype, device=self._device) for _ in range(self._n_layers)],
            [torch.empty(shape, dtype=self._dtype, device=self._device) for _ in range(self._n_layers)],
        )

    @torch.no_grad()
    def _forward(self, ids: Tensor, mask: Tensor, positions: Tensor, cache: PackedCache) -> Tensor:
        """Logits of every input position; ``mask`` is ``[batch, 1, query, key]`` (True = attend)."""
        if self.n_ctx and int(positions.max()) >= self.n_ctx:
            raise ValueError(f"sequence longer than the model context n_ctx={self.n_ctx}")
        self.forward_tokens += int(ids.numel())
        self.forward_calls += 1
        dev = self._device
        with kv_cache_shim(self.bridge):
            logits, _ = self.bridge(
                ids.to(dev),
                return_type="logits_and_cache",
                attention_mask=mask.to(dev),
                position_ids=positions.to(dev),
                past_key_values=cache,
                use_cache=True,
            )
        return logits

    def start(self, prefixes: Sequence[Sequence[str]]) -> Cursor:
        if not prefixes:
            raise ValueError("start() needs at least one prefix")
        rows = [self.vocab.encode(p) for p in prefixes]
        width = max(map(len, rows))
        valid = torch.zeros((len(rows), width), dtype=torch.bool)
        ids = torch.full((len(rows), width), self.vocab.pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r) :] = torch.tensor(r)
            valid[i, width - len(r) :] = True
        positions = position_ids(valid)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        eye = torch.eye(width, dtype=torch.bool)
        segments, lps = [], []
        step = max(1, min(self.batch_size, self.kv_bytes // (width * self._pos_bytes)))
        for lo in range(0, len(rows), step):
            v = valid[lo : lo + step]
            # a padding position attends to itself only (finite values; no real row ever reads it)
            mask = (causal & v[:, None, :]) | eye
            keys, values = self._buffers(len(v), width + _ROOM)
            logits = self._forward(
                ids[lo : lo + step], mask[:, None], positions[lo : lo + step], PackedCache(keys, values, 0, width)
            )
            lps.append(torch.log_softmax(logits[:, -1].float(), dim=-1).cpu())
            segments.append(_Segment(keys, values, width))
        n = len(rows)
        seg = torch.arange(n) // step
        state = _PackedState(segments, seg, torch.arange(n) - seg * step, valid, valid.sum(dim=1))
        return Cursor(torch.cat(lps), state)

    def _extend(self, cursor: Cursor, parents: Tensor, token_ids: Tensor) -> Cursor:
        st: _PackedState = cursor.state
        n = len(parents)
        if n == 0:
            empty = torch.zeros(0, dtype=torch.long)
            return Cursor(cursor.logprobs[:0], _PackedState([], empty, empty, st.vis[:0], empty))
        # group the new rows by the bin their parent reads; siblings next to each other
        offsets = torch.tensor([0] + [seg.keys[0].shape[0] for seg in st.segments]).cumsum(0)
        gid = offsets[st.seg[parents]] + st.bin[parents]
        order = torch.argsort(gid * len(st.seg) + parents, stable=True)
        p_sorted, gid_sorted = parents[order], gid[order]
        _, counts = torch.unique_consecutive(gid_sorted, return_counts=True)
        group_start = counts.cumsum(0) - counts
        group_of = torch.repeat_interleave(torch.arange(len(counts)), counts)
        rank = torch.arange(n) - group_start[group_of]
        vis_p = st.vis[p_sorted]
        vis_i = vis_p.to(torch.int32)
        if self._hooked():
            q = 1
        elif self.slots:
            q = self.slots
        else:
            q = self._slots(counts, group_of, rank, vis_i)
        bins_per, new_bin, used = self._assign(counts, group_of, rank, vis_i, q)
        slot = rank % q
        n_bins = int(bins_per.sum())
        src_gid = torch.repeat_interleave(gid_sorted[group_start], bins_per)
        src_seg = torch.searchsorted(offsets, src_gid, right=True) - 1
        src_bin = src_gid - offsets[src_seg]
        kept = used.sum(dim=1)
        cols = torch.argsort((~used).to(torch.int8), dim=1, stable=True)  # kept positions first, in order
        per_fwd = max(1, min(self.batch_size // q, self.kv_bytes // ((int(kept.max()) + q) * self._pos_bytes)))
        bin_new = new_bin - (new_bin // per_fwd) * per_fwd
        seg_new = new_bin // per_fwd
        widths, segments, lps, vis_rows = [], [], [], []
        row_lo = 0
        for s, lo in enumerate(range(0, n_bins, per_fwd)):
            hi = min(n_bins, lo + per_fwd)
            row_hi = int(torch.searchsorted(seg_new, s, right=True))  # rows are sorted by new bin
            rows = slice(row_lo, row_hi)
            kc = int(kept[lo:hi].max())
            srcs = torch.unique(src_seg[lo:hi]).tolist()
            first = st.segments[srcs[0]]
            if len(srcs) == 1 and kc == first.used and bool((kept[lo:hi] == kc).all()):
                # every new bin keeps all of its source bin: copy whole bins (contiguous blocks)
                keys, values = self._copy_bins(first, src_bin[lo:hi], q)
            else:
                keys, values = self._buffers(hi - lo, kc + q)
                for o in srcs:
                    self._gather(
                        st.segments[o],
                        src_seg[lo:hi] == o if len(srcs) > 1 else None,
                        src_bin[lo:hi],
                        cols[lo:hi, :kc],
                        q,
                        keys + values,
                    )
            b, sl = bin_new[rows], slot[rows]
            vis_c = torch.gather(vis_p[rows], 1, cols[new_bin[rows], :kc]) & (
                torch.arange(kc)[None, :] < kept[new_bin[rows]][:, None]
            )
            ids = torch.full((hi - lo, q), self.vocab.pad_id, dtype=torch.long)
            ids[b, sl] = token_ids[order[rows]]
            positions = torch.zeros((hi - lo, q), dtype=torch.long)
            positions[b, sl] = st.pos[p_sorted[rows]]
            mask = torch.zeros((hi - lo, q, kc + q), dtype=torch.bool)
            mask[b, sl, :kc] = vis_c
            mask[:, torch.arange(q), kc + torch.arange(q)] = True  # every slot reads itself
            logits = self._forward(ids, mask[:, None], positions, PackedCache(keys, values, kc, q))
            lps.append(torch.log_softmax(logits[b, sl].float(), dim=-1).cpu())
            segments.append(_Segment(keys, values, kc + q))
            own = torch.zeros((row_hi - row_lo, q), dtype=torch.bool)
            own[torch.arange(row_hi - row_lo), sl] = True
            vis_rows.append(torch.cat([vis_c, own], dim=1))
            widths.append(kc + q)
            row_lo = row_hi
        width = max(widths)
        vis = torch.zeros((n, width), dtype=torch.bool)
        lp = torch.empty((n, len(self.vocab)), dtype=torch.float32)
        row_lo = 0
        for v, row_lp in zip(vis_rows, lps):
            idx = order[row_lo : row_lo + len(v)]
            vis[idx, : v.shape[1]] = v
            lp[idx] = row_lp
            row_lo += len(v)
        inv = torch.empty_like(order)
        inv[order] = torch.arange(n)
        state = _PackedState(segments, seg_new[inv], bin_new[inv], vis, st.pos[parents] + 1)
        return Cursor(lp, state)

    def _copy_bins(self, old: _Segment, bins: Tensor, q: int) -> tuple[list[Tensor], list[Tensor]]:
        """Whole bins of ``old`` (all their filled positions), with room for ``q`` more tokens."""
        idx = bins.to(self._device)
        if old.used + q <= old.capacity:
            return (
                [torch.index_select(k, 0, idx) for k in old.keys],
                [torch.index_select(v, 0, idx) for v in old.values],
            )
        keys, values = self._buffers(len(bins), old.used + q + max(_ROOM, q))
        for src, dst in zip(old.keys + old.values, keys + values):
            dst[:, :, : old.used] = src[idx, :, : old.used]
        return keys, values

    def _gather(
        self, old: _Segment, pick: Tensor | None, bins: Tensor, cols: Tensor, q: int, out: list[Tensor]
    ) -> None:
        """Compacted bins: new bin ``i`` (those in ``pick``, default all) gets positions
        ``cols[i]`` of bin ``bins[i]`` of ``old``; one ``index_select`` per layer over rows of
        ``d_head`` values. The ``q`` new positions at the end read position 0 and are overwritten
        by the forward."""
        if pick is not None:
            pick = pick.nonzero().squeeze(1)
            bins, cols = bins[pick], cols[pick]
        heads, width = old.keys[0].shape[1], old.capacity
        cc = torch.cat([cols.clamp(max=old.used - 1), torch.zeros((len(cols), q), dtype=torch.long)], dim=1)
        flat = ((bins[:, None] * heads + torch.arange(heads)[None, :]) * width)[:, :, None] + cc[:, None, :]
        flat = flat.reshape(-1).to(self._device)
        for src, dst in zip(old.keys + old.values, out):
            if pick is None:
                torch.index_select(src.view(-1, src.shape[-1]), 0, flat, out=dst.view(-1, dst.shape[-1]))
            else:
                part = torch.index_select(src.view(-1, src.shape[-1]), 0, flat)
                dst.index_copy_(0, pick.to(self._device), part.view(len(pick), *dst.shape[1:]))

    @staticmethod
    def _assign(counts: Tensor, group_of: Tensor, rank: Tensor, vis_i: Tensor, q: int):
        """Bins of ``q`` slots for the rows of each group: (bins per group, each row's new bin,
        the positions each new bin keeps = those any of its rows reads)."""
        bins_per = (counts + q - 1) // q
        new_bin = (bins_per.cumsum(0) - bins_per)[group_of] + rank // q
        used = torch.zeros(int(bins_per.sum()), vis_i.shape[1], dtype=torch.int32)
        used.index_add_(0, new_bin, vis_i)
        return bins_per, new_bin, used > 0

    def _slots(self, counts: Tensor, group_of: Tensor, rank: Tensor, vis_i: Tensor) -> int:
        """Query slots per bin minimising the modelled cost of the forwards (see ``_COST_*``):
        tokens (padding included), cached positions copied, query × key scores."""
        n_max = int(counts.max())
        best, best_cost = 1, math.inf
        for q in _SLOT_CHOICES:
            if q > max(1, self.batch_size) or (q > 1 and q // 2 >= n_max):
                break
            bins_per, _, used = self._assign(counts, group_of, rank, vis_i, q)
            width = used.sum(dim=1).to(torch.float64) + q
            cost = float(len(width) * q + (_COST_COPY * width + _COST_SCORE * q * width).sum())
            if cost < best_cost:
                best, best_cost = q, cost
        return best


# ---- from a CLI argument ------------------------------------------------------------------------


def lm_from_arg(arg: str, world: World | None = None, placement: Any = None) -> tuple[LM, World]:
    """``oracle`` | ``ideal`` | ``uniform`` | ``dfa:PATH`` | a checkpoint folder → (LM, the world it is
    judged on).

    A checkpoint brings its own world unless ``world`` is given (vocabularies must then match).
    """
    from interp.worlds import parse_world

    if arg in ("oracle", "ideal", "uniform") or arg.startswith("dfa:"):
        if world is None:
            raise WorldError(f"model {arg!r} needs --world (it carries no world of its own)")
        if arg == "oracle":
            return WorldLM(world), world
        if arg == "ideal":
            return IdealLM(world), world
        if arg == "uniform":
            return UniformLM(world), world
        return DFALM(parse_world(arg), world), world
    from interp.models.checkpoint import load_checkpoint

    ckpt = load_checkpoint(arg, world=world, placement=placement)  # device/dtype: interp.models.device
    return BridgeLM(ckpt.bridge, ckpt.world.vocab), ckpt.world
