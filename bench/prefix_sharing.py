"""Prefix sharing at real depth: SmolLM2-135M-Instruct on whole PragWorld groups of the manual split.

In one run, on the rows of the first ``--groups`` groups of the manual split (the same rows for
every path), beside the fp32 ``torch.mm`` peak measured in the same process
(:func:`interp.hardware.matmul_peak`):

- **label eval** (P(yes) of the label prompt, bare): right-padded batches in input order (the
  plain way), interp's length buckets (``share_prefix=False``) and interp's tree-packed reading
  (``share_prefix=True``);
- **the 30-layer MLP zero-out sweep**: TransformerLens's ``run_with_hooks`` loop (a clean forward
  and one hooked forward per layer, batches in input order), interp ``reuse`` and interp
  ``prefix`` (reuse over tree-packed rows), with the largest |ΔP(gold)| of each against the loop.

For each path: the wall time, the ratio to the plain/loop path, the padded positions, the achieved
FLOP/s (the FLOPs the path computes on real tokens over its time) and the **unique-token bound**:
the FLOPs of the sweep's (or eval's) necessary work on the unique tokens (a prefix shared by rows
counted once: the packed positions), over the peak. Per token, ``2 × parameters outside the
embedding`` FLOPs through the blocks and ``2 × vocab × d_model`` through the unembedding;
attention scores are left out (as in ``bench/real_model.py``). The necessary work of the sweep is
what the reuse trick leaves: a clean pass and, for layer ℓ, the blocks after ℓ — ``1 + (L − 1)/2``
block stacks per unique token — and one unembedding per row and variant (only the scored token is
read). ``--full`` then times interp's prefix sweep (and the shared label eval) alone on the whole
manual split.

On a GPU (``--device cuda --dtype bfloat16``, what ``bench/gpu_check.sh`` runs) the peak beside the
numbers is that device's ``torch.mm`` peak in that dtype (``bench/real_model.py``'s
``device_peak``), and the max |Δ| columns compare half-precision paths with each other (each
within the dtype's tolerance of float32: ``tests/test_precision.py``).

The PragWorld rows: ``../shared/data`` beside the checkout, or ``$INTERP_SHARED_DATA`` (a worktree
elsewhere, a GPU machine the data was carried to).

    python bench/prefix_sharing.py [--groups 8] [--pick first|shortest] [--batch 8] [--loop] [--reuse] [--full] [--profile]
                                   [--fused] [--long TOKENS] [--device cpu] [--dtype float32]

``--fused`` adds the fused-attention rows (:mod:`interp.models.attention`) in the run's dtype and in
bfloat16 (against the bfloat16 ``torch.mm`` peak measured in the run); every row reports its peak
memory above its start (CPU: resident set; CUDA: peak allocated). ``--long TOKENS`` runs the label
eval alone on rows made 2–4k tokens long by a shared preamble of other conversations.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from real_model import MANUAL, device_peak  # (the shared data path, a CUDA device's peak)


def timed(fn):
    """``(fn(), seconds)``; on a GPU the queued kernels are waited for before the clock stops."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t


class PeakMemory:
    """The peak memory of a block above its start: CUDA's peak allocated bytes, or on a CPU the
    process's resident set (RSS) sampled every 5 ms by a thread (``/proc`` through psutil), after
    ``malloc_trim`` has returned what earlier paths freed (else glibc keeps it resident and a later
    path's peak reads low). The first path also pays one-time allocations (weights touched, caches)."""

    def __init__(self, device: str = "cpu"):
        self.cuda = str(device).startswith("cuda")

    def __enter__(self):
        import threading

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        import ctypes
        import gc

        import psutil

        gc.collect()
        try:  # hand the pages freed by earlier paths back to the OS (glibc keeps them resident)
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        proc = psutil.Process()
        self.base = self.peak = proc.memory_info().rss
        self.stop = threading.Event()

        def sample():
            while not self.stop.wait(0.005):
                self.peak = max(self.peak, proc.memory_info().rss)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self.stop.set()
            self.thread.join()

    @property
    def mb(self) -> float:
        """Peak above the start, MiB."""
        return round((self.peak - self.base) / 2**20, 1)


MEMORY = {"device": "cpu"}


def timed_mem(fn):
    """``(fn(), seconds, peak MiB above the start)`` (:class:`PeakMemory` on ``MEMORY["device"]``)."""
    with PeakMemory(MEMORY["device"]) as mem:
        out, t = timed(fn)
    return out, t, mem.mb


def mm_peak(device: str, dtype: torch.dtype) -> float:
    """The best FLOP/s of a square ``torch.mm`` in ``dtype`` on ``device`` (CPU: 1024 and 2048, the
    sizes of :func:`interp.hardware.matmul_peak`; CUDA: :func:`real_model.device_peak`)."""
    if str(device).startswith("cuda"):
        return device_peak(device, dtype)
    best = 0.0
    for n in (1024, 2048):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.mm(a, b)
        for _ in range(5):
            t = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def plain_batches(n: int, batch: int) -> list[np.ndarray]:
    return [np.arange(i, min(n, i + batch)) for i in range(0, n, batch)]


def padding_of(mask: torch.Tensor, chunks: list[np.ndarray]) -> int:
    """Padded positions when each chunk is right-padded to its own longest row."""
    lengths = mask.sum(1).numpy()
    return int(sum(lengths[c].max() * len(c) - lengths[c].sum() for c in chunks))


def tl_loop(bridge, ids, mask, metric, batch: int) -> np.ndarray:
    """[1 + L, n] P(gold): per batch (input order, right-padded) the clean forward, then one
    ``run_with_hooks`` per layer with its MLP zeroed (TransformerLens's way)."""
    from interp.analysis.engines.scoring import Batch, to_model_device

    L = int(bridge.cfg.n_layers)
    out = np.zeros((1 + L, ids.shape[0]))
    for idx in plain_batches(ids.shape[0], batch):
        width = int(mask[idx].sum(1).max())
        i, m = to_model_device(bridge, ids[idx, :width]), to_model_device(bridge, mask[idx, :width])
        b = Batch(i, m, torch.as_tensor(idx))
        pos = (m.cumsum(1) - 1).clamp(min=0)
        with torch.no_grad():
            out[0, idx] = metric(bridge(i, attention_mask=m, position_ids=pos), b).float().cpu().numpy()
            for layer in range(L):
                logits = bridge.run_with_hooks(
                    i,
                    fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", lambda a, hook: a * 0)],
                    attention_mask=m,
                    position_ids=pos,
                )
                out[1 + layer, idx] = metric(logits, b).float().cpu().numpy()
    return out


def attention_kernels(batch, cfg, repeats: int = 10, flex: bool = False) -> dict:
    """One layer's attention over a packed batch's shape and mask, with random queries, keys and
    values: the TransformerBridge's eager chain (scores, scale, additive mask, fp32 softmax, weighted
    values: what it runs so that ``hook_attn_scores`` / ``hook_pattern`` can fire) against
    ``torch.nn.functional.scaled_dot_product_attention`` with the same boolean mask (fused; it too
    computes every pair of the pack) and, with ``flex``, FlexAttention (compiled) with a block mask
    of the same mask (128 × 128 blocks: a block with no allowed pair is skipped). Milliseconds per
    call, the best of two rounds; ``blocks_kept``: the share of blocks FlexAttention computes."""
    b, _, n, _ = batch.mask.shape
    heads, dh = int(cfg.n_heads), int(cfg.d_head)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, heads, n, dh, generator=gen) for _ in range(3))
    allowed = batch.mask
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)

    def eager():
        s = torch.matmul(q, k.transpose(-2, -1)) * dh**-0.5 + additive
        return torch.matmul(torch.softmax(s, dim=-1, dtype=torch.float32), v)

    def fused():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    kernels = [eager, fused]
    extra: dict = {}
    if flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        dense = allowed[:, 0].contiguous()
        block_mask = create_block_mask(
            lambda bi, h, qi, ki: dense[bi, qi, ki], B=b, H=None, Q_LEN=n, KV_LEN=n, device=str(q.device)
        )
        compiled = torch.compile(flex_attention, dynamic=False)
        t0 = time.perf_counter()
        compiled(q, k, v, block_mask=block_mask)  # the compilation, timed apart
        extra["flex_compile_s"] = round(time.perf_counter() - t0, 1)
        extra["blocks_kept"] = round(1 - float(block_mask.sparsity()) / 100, 3)

        def flexattention():
            return compiled(q, k, v, block_mask=block_mask)

        kernels.append(flexattention)
    best = {}
    for fn in kernels + kernels:
        fn()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best[fn.__name__] = min(best.get(fn.__name__, np.inf), (time.perf_counter() - start) / repeats * 1e3)
    ref = eager()
    return {
        "shape": [int(b), heads, int(n), int(n)],
        **{f"{name.replace('flexattention', 'flex')}_ms": round(t, 1) for name, t in best.items()},
        "max_abs_diff": float((ref - fused()).abs().max()),
        **({"flex_max_abs_diff": float((ref - kernels[2]()).abs().max()), **extra} if flex else {}),
    }


def write_json(path: str, out: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=2) + "\n")


def wide(res) -> np.ndarray:
    ablated = res.frame.pivot(index="example", columns="layer", values="ablated").to_numpy().T
    clean = res.frame.groupby("example").clean.first().to_numpy()
    return np.vstack([clean, ablated])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=8, help="first whole groups of the manual split (default 8)")
    p.add_argument("--batch", type=int, default=8, help="rows per forward (default 8; packed: 8 × longest row)")
    p.add_argument("--full", action="store_true", help="then interp's prefix sweep alone on the whole manual split")
    p.add_argument(
        "--loop",
        action="store_true",
        help="run the TransformerLens loop (default: its time estimated as (L + 1) × the plain label "
        "forward of the same rows measured in this run: the loop is L + 1 such forwards)",
    )
    p.add_argument("--reuse", action="store_true", help="also run interp's unshared reuse sweep")
    p.add_argument(
        "--pick",
        choices=("first", "shortest"),
        default="first",
        help="which groups: the first in the file (default) or those with the fewest tokens",
    )
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    p.add_argument(
        "--profile",
        action="store_true",
        help="instead: interp's prefix sweep of the chosen groups once under torch.profiler, its time "
        "split into the weight matmuls, attention and the rest, with the attention pairs computed",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="also the fused-attention rows: interp's packed label eval and prefix sweep with fused attention "
        "(SDPA, interp.models.attention) in the run's dtype and in bfloat16, beside the eager ones",
    )
    p.add_argument(
        "--long",
        type=int,
        default=None,
        metavar="TOKENS",
        help="instead: the label eval only, on the chosen groups' rows with about TOKENS tokens of other "
        "conversations of the split prepended to each context (one shared preamble: a long-context case "
        "where the eager attention's [batch, heads, n, n] tensors dominate the memory)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="instead: one layer's attention timed alone over each packed batch of the chosen groups' label "
        "eval (with --long: of the long rows): eager, SDPA with the boolean mask, FlexAttention (compiled) "
        "with a block mask of it",
    )
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, auto")
    p.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, float16, auto")
    args = p.parse_args(argv)

    from interp.analysis.engines.batching import row_chunks
    from interp.analysis.engines.scoring import to_model_device
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.datasets.pragworld import load_pragworld
    from interp.hardware import cpu_name, matmul_peak
    from interp.metrics.pragworld_eval import score_label_prompts
    from interp.models import load_bridge
    from interp.models.attention import attention, set_attention
    from interp.models.device import Placement
    from interp.models.packing import plan
    from interp.models.registry import get_model
    from interp.tasks import YesNoTask

    place = Placement.resolve(args.device, args.dtype)
    if place.device.startswith("cuda"):
        peak, where = device_peak(place.device, place.dtype), torch.cuda.get_device_name(place.device)
        print(f"{where}; torch {torch.__version__}, {place.dtype}; torch.mm peak {peak / 1e9:.1f} GFLOP/s")
    else:
        peak, where = matmul_peak(), cpu_name()
        print(
            f"{where}; torch {torch.__version__}, {torch.get_num_threads()} thread(s), {place.dtype}; fp32 torch.mm "
            f"peak {peak / 1e9:.1f} GFLOP/s"
            + ("" if place.dtype == torch.float32 else f" (the % of peak compare {place.dtype} FLOP/s with it)")
        )
    out: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": where,
        "torch_device": place.device,
        "dtype": str(place.dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "peak_gflops": round(peak / 1e9, 1),
    }
    MEMORY["device"] = place.device
    half_peak = mm_peak(place.device, torch.bfloat16) if args.fused else None
    if half_peak is not None:
        print(f"bfloat16 torch.mm peak {half_peak / 1e9:.1f} GFLOP/s (the bfloat16 rows' % of peak and bound)")
        out["bf16_peak_gflops"] = round(half_peak / 1e9, 1)
    folder = get_model("smollm2-135m-instruct")
    bridge = load_bridge(folder, placement=place)
    set_attention(bridge, "eager")  # the paths as TransformerLens runs them; the fused rows switch
    half = None
    if args.fused:  # the fused bfloat16 rows: the same model loaded in bfloat16
        half = load_bridge(folder, placement=Placement.resolve(args.device, "bfloat16", attention="fused"))

    def fused(fn):
        """``fn`` run with the eager bridge's attention fused."""

        def run():
            with attention(bridge, "fused"):
                return fn()

        return run

    cfg = bridge.cfg
    L, d, vocab = int(cfg.n_layers), int(cfg.d_model), int(cfg.d_vocab)
    n_params = sum(q.numel() for q in bridge.parameters())
    f_block, f_unembed = 2.0 * (n_params - vocab * d), 2.0 * vocab * d  # FLOPs per token

    def run_on(rows, label: str, with_loop: bool, alone: bool = False) -> dict:
        task = YesNoTask.pragworld(folder, rows, prompt="label", chat_template=False)
        ids, mask = task.inputs()
        n, tokens = len(rows), int(mask.sum())
        pp = plan(task.ids, bridge, batch_tokens=args.batch * int(ids.shape[1]), pad_id=task.pad_id)
        unique = pp.unique_tokens
        res: dict = {"rows": n, "groups": int(rows["group"].nunique()), "row_tokens": tokens, "unique_tokens": unique}
        print(
            f"\n== {label}: {n} rows in {res['groups']} groups, {tokens} tokens ({tokens / n:.0f} a row), "
            f"{unique} unique ({unique / tokens:.0%}) in {len(pp.packs)} packs",
            flush=True,
        )
        # ---- label eval
        eval_bound = (unique * f_block + n * f_unembed) / peak
        evals = {}
        if True:

            def plain():
                o = np.zeros(n)
                for idx in plain_batches(n, args.batch):
                    w = int(mask[idx].sum(1).max())
                    m = to_model_device(bridge, mask[idx, :w])
                    with torch.no_grad():
                        lg = bridge(to_model_device(bridge, ids[idx, :w]), attention_mask=m)
                    last = lg[torch.arange(len(idx), device=lg.device), m.sum(1) - 1]
                    o[idx] = task.p_yes(last).float().cpu().numpy()
                return o

            evals["plain batches (input order)"] = (
                plain,
                tokens * (f_block + f_unembed),
                padding_of(mask, plain_batches(n, args.batch)),
                peak,
            )
        if not alone:
            evals["interp, length buckets"] = (
                lambda: score_label_prompts(
                    bridge, task.prompts, batch_size=args.batch, chat_template=False, share_prefix=False
                ),
                tokens * (f_block + f_unembed),
                padding_of(
                    mask,
                    [
                        np.sort(c)
                        for c in np.array_split(
                            np.argsort(mask.sum(1).numpy(), kind="stable"), range(args.batch, n, args.batch)
                        )
                    ],
                ),
                peak,
            )
        shared = lambda b=bridge: score_label_prompts(b, task.prompts, batch_size=args.batch, chat_template=False)  # noqa: E731
        evals["interp, shared prefixes"] = (shared, unique * f_block + n * f_unembed, pp.padding, peak)
        if args.fused:
            evals["interp, shared prefixes, fused"] = (
                fused(shared),
                unique * f_block + n * f_unembed,
                pp.padding,
                peak,
            )
            evals["interp, shared prefixes, fused bf16"] = (
                lambda: shared(half),
                unique * f_block + n * f_unembed,
                pp.padding,
                half_peak,
            )
        res["eval"], base_t, ref = {}, None, None
        if alone:
            evals.pop("plain batches (input order)")
        print(f"label eval (unique-token bound {eval_bound:.2f} s):")
        for name, (fn, flops, pad, pk) in evals.items():
            vals, t, mb = timed_mem(fn)
            ref = vals if ref is None else ref
            base_t = t if base_t is None else base_t
            bound = eval_bound * peak / pk  # the bound at this row's dtype's peak
            row = {
                "s": round(t, 2),
                "speedup": round(base_t / t, 2),
                "gflops": round(flops / t / 1e9, 1),
                "of_peak": round(flops / t / pk, 3),
                "bound_s": round(bound, 2),
                "x_bound": round(t / bound, 2),
                "padding": pad,
                "peak_mb": mb,
                "max_abs_diff": float(np.abs(vals - ref).max()),
            }
            res["eval"][name] = row
            print(
                f"  {name:<36} {t:7.1f} s  {base_t / t:5.2f}×  {flops / t / 1e9:6.1f} GFLOP/s ({flops / t / pk:.0%} "
                f"of peak)  {t / bound:4.1f}× bound  padding {pad}  peak +{mb:.0f} MiB  max|Δ| {row['max_abs_diff']:.1e}",
                flush=True,
            )
        if args.long:  # the long-context case: the eval only
            return res
        # ---- the sweep
        stacks = 1 + (L - 1) / 2  # block stacks per token the reuse trick leaves
        sweep_bound = (unique * f_block * stacks + n * f_unembed * (L + 1)) / peak
        metric = task.metric()
        paths = {}
        if with_loop:
            paths["TransformerLens run_with_hooks loop"] = (
                lambda: tl_loop(bridge, ids, mask, metric, args.batch),
                tokens * (f_block + f_unembed) * (L + 1),
                padding_of(mask, plain_batches(n, args.batch)) * (L + 1),
                peak,
            )
        if args.reuse and not alone:
            paths["interp reuse"] = (
                lambda: wide(mlp_zero_sweep(bridge, ids, metric, mask, batch_size=args.batch, method="reuse")),
                tokens * (f_block * stacks + f_unembed * (L + 1)),
                padding_of(mask, row_chunks(n, args.batch, mask)),
                peak,
            )
        prefix = lambda b=bridge: wide(  # noqa: E731
            mlp_zero_sweep(b, ids, metric, mask, batch_size=args.batch, method="prefix")
        )
        prefix_flops = unique * f_block * stacks + n * f_unembed * (L + 1)
        paths["interp prefix (reuse + shared prefixes)"] = (prefix, prefix_flops, pp.padding, peak)
        if args.fused:
            paths["interp prefix, fused"] = (fused(prefix), prefix_flops, pp.padding, peak)
            paths["interp prefix, fused bf16"] = (lambda: prefix(half), prefix_flops, pp.padding, half_peak)
        res["sweep"], times, values, mbs = {}, {}, {}, {}
        print(f"MLP zero-out sweep, {L} layers (unique-token bound {sweep_bound:.1f} s); interp first, the loop last:")
        for name in list(paths)[::-1]:
            values[name], times[name], mbs[name] = timed_mem(paths[name][0])
            print(f"  {name:<42} {times[name]:7.1f} s", flush=True)
        if (
            not with_loop and not alone
        ):  # the loop is L + 1 plain forwards of these rows: (L + 1) × the plain eval's time
            name = "TransformerLens run_with_hooks loop (estimated)"
            t_plain = res["eval"]["plain batches (input order)"]["s"]
            paths = {
                name: (
                    None,
                    tokens * (f_block + f_unembed) * (L + 1),
                    padding_of(mask, plain_batches(n, args.batch)) * (L + 1),
                    peak,
                ),
                **paths,
            }
            times[name] = t_plain * (L + 1)
            values[name], mbs[name] = None, res["eval"]["plain batches (input order)"]["peak_mb"]
        base = next(iter(paths))
        # |Δ| against the loop, or (the loop estimated, not run) against the eager prefix sweep
        ref_name = base if values[base] is not None else "interp prefix (reuse + shared prefixes)"
        res["sweep_diff_against"] = ref_name
        for name, (_, flops, pad, pk) in paths.items():
            t = times[name]
            bound = sweep_bound * peak / pk
            row = {
                "s": round(t, 1),
                "speedup": round(times[base] / t, 2),
                "gflops": round(flops / t / 1e9, 1),
                "of_peak": round(flops / t / pk, 3),
                "bound_s": round(bound, 1),
                "x_bound": round(t / bound, 2),
                "padding": pad,
                "peak_mb": mbs[name],
                "max_abs_diff": (
                    float(np.abs(values[name] - values[ref_name]).max()) if values[name] is not None else None
                ),
            }
            res["sweep"][name] = row
            print(
                f"  {name:<42} {t:7.1f} s  {row['speedup']:5.2f}×  {flops / t / 1e9:6.1f} GFLOP/s ({flops / t / pk:.0%} "
                f"of peak)  {t / bound:4.1f}× bound  padding {pad}  peak +{mbs[name]:.0f} MiB  max|Δ| {row['max_abs_diff']}"
            )
        return res

    def profile_on(rows) -> dict:
        """Where the prefix sweep's time goes, by torch.profiler (CPU time of each op, with its input
        shapes): the weight matmuls (``aten::linear``), attention (``aten::bmm`` of the scores and
        of the weighted values, the softmax, and every other op on a ``[..., q, k]`` score tensor:
        the mask added, the scaling; or ``aten::scaled_dot_product_attention`` where the model calls
        it) and the rest; beside it the attention pairs the packed forwards compute (every (query,
        key) pair of a pack, masked or not) and those the rows' own causal triangles need."""
        from torch.profiler import ProfilerActivity, profile

        task = YesNoTask.pragworld(folder, rows, prompt="label", chat_template=False)
        ids, mask = task.inputs()
        pp = plan(task.ids, bridge, batch_tokens=args.batch * int(ids.shape[1]), pad_id=task.pad_id)
        dense = sum(int(b.tokens.shape[0]) * int(b.tokens.shape[1]) ** 2 for b in pp.batches)
        needed = sum(int(b.mask.sum()) for b in pp.batches)
        metric = task.metric()
        _, wall = timed(lambda: mlp_zero_sweep(bridge, ids, metric, mask, batch_size=args.batch, method="prefix"))
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            _, t = timed(lambda: mlp_zero_sweep(bridge, ids, metric, mask, batch_size=args.batch, method="prefix"))
        events = prof.key_averages(group_by_input_shape=True)

        def on_scores(e) -> bool:  # an op whose first input is a [..., q, k] score tensor
            shape = e.input_shapes[0] if e.input_shapes else []
            return len(shape) == 4 and shape[-1] == shape[-2] and shape[-1] > 1 and shape[1] > 1

        linear = sum(e.cpu_time_total for e in events if e.key == "aten::linear") / 1e6
        sdpa = sum(e.cpu_time_total for e in events if e.key == "aten::scaled_dot_product_attention") / 1e6
        eager = (
            sum(
                e.self_cpu_time_total
                for e in events
                if e.key in ("aten::bmm", "aten::_softmax") or (e.key.startswith("aten::") and on_scores(e))
            )
            / 1e6
        )
        attention = sdpa or eager
        # the attention calls of each packed batch shape (profiler counts), each timed alone without
        # the profiler (which slows the large elementwise ops most): the eager chain's and a fused
        # kernel's share of the un-profiled wall time
        calls = {tuple(e.input_shapes[0]): e.count for e in events if e.key == "aten::_softmax" and on_scores(e)}
        per_shape = {}
        for b in pp.batches:
            shape = (int(b.mask.shape[0]), int(cfg.n_heads), int(b.mask.shape[-1]), int(b.mask.shape[-1]))
            if shape in calls and shape not in per_shape:
                per_shape[shape] = attention_kernels(b, cfg)
        eager_s = sum(calls[sh] * k["eager_ms"] for sh, k in per_shape.items()) / 1e3
        fused_s = sum(calls[sh] * k["fused_ms"] for sh, k in per_shape.items()) / 1e3
        # two projections of the sweep with a fused kernel: the timed kernels' difference taken off
        # the wall time, and the profiled attention share scaled by the kernels' ratio
        projected = wall - eager_s + fused_s
        share = attention / t
        projected_share = wall * (1 - share + share * fused_s / eager_s) if eager_s else wall
        kernels = {
            "attention_calls": int(sum(calls[sh] for sh in per_shape)),
            "eager_attention_s": round(eager_s, 1),
            "fused_attention_s": round(fused_s, 1),
            "max_abs_diff": max((k["max_abs_diff"] for k in per_shape.values()), default=0.0),
        }
        res = {
            "rows": len(rows),
            "groups": int(rows["group"].nunique()),
            "wall_s": round(wall, 1),
            "profiled_s": round(t, 1),
            "linear_s": round(linear, 1),
            "attention_s": round(attention, 1),
            "other_s": round(t - linear - attention, 1),
            "attention_pairs_dense": dense,
            "attention_pairs_needed": needed,
            **kernels,
            "projected_fused_s": sorted([round(projected, 1), round(projected_share, 1)]),
        }
        print(
            f"\n== profile of interp's prefix sweep, {res['rows']} rows in {res['groups']} groups: {wall:.1f} s, "
            f"{t:.1f} s under the profiler\n  weight matmuls (aten::linear)     {linear:7.1f} s ({linear / t:.0%})"
            f"\n  attention ({'sdpa' if sdpa else 'eager: bmm, softmax, ops on scores'})  {attention:7.1f} s "
            f"({attention / t:.0%})\n  the rest (norms, activations, residual adds, hooks, Python) "
            f"{t - linear - attention:7.1f} s ({(t - linear - attention) / t:.0%})\n  attention pairs per "
            f"layer and pass: {dense:,} computed (dense packs), {needed:,} needed (ancestors): "
            f"{needed / dense:.0%} of the computed ones are read\n  attention timed alone, {kernels['attention_calls']} "
            f"layer calls over {len(per_shape)} packed batch shape(s): eager {eager_s:.1f} s ({eager_s / wall:.0%} of the "
            f"{wall:.1f} s), fused SDPA with the same boolean mask {fused_s:.1f} s (max |Δ| {kernels['max_abs_diff']:.1e}); "
            f"the sweep with fused attention ≈ {projected:.1f} s ({wall / projected:.2f}× faster) by the timed kernels, "
            f"≈ {projected_share:.1f} s ({wall / projected_share:.2f}×) by the profiled share: projected, not run",
            flush=True,
        )
        print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=24))
        return res

    def kernels_on(rows) -> list[dict]:
        """:func:`attention_kernels` (with FlexAttention) on each packed batch of the label eval."""
        task = YesNoTask.pragworld(folder, rows, prompt="label", chat_template=False)
        ids, _ = task.inputs()
        pp = plan(task.ids, bridge, batch_tokens=args.batch * int(ids.shape[1]), pad_id=task.pad_id)
        print(f"\n== attention of one layer over the {len(pp.batches)} packed batch(es) of {len(rows)} rows")
        res = []
        for pb in pp.batches:
            k = attention_kernels(pb, cfg, repeats=3, flex=True)
            res.append(k)
            print(
                f"  {k['shape']}: eager {k['eager_ms']:8.1f} ms  SDPA {k['fused_ms']:8.1f} ms  FlexAttention "
                f"{k['flex_ms']:8.1f} ms (blocks computed {k['blocks_kept']:.0%}, compiled in {k['flex_compile_s']} s; "
                f"max |Δ| SDPA {k['max_abs_diff']:.1e}, flex {k['flex_max_abs_diff']:.1e})",
                flush=True,
            )
        tot = {key: sum(k[key] for k in res) for key in ("eager_ms", "fused_ms", "flex_ms")}
        print(
            f"  total: eager {tot['eager_ms']:.0f} ms, SDPA {tot['fused_ms']:.0f} ms, FlexAttention {tot['flex_ms']:.0f} ms"
        )
        return res

    rows = load_pragworld(MANUAL).rows
    if args.pick == "first":
        groups = list(dict.fromkeys(rows["group"]))[: args.groups]
    else:
        size = (
            rows.assign(n=[len(x) for x in YesNoTask.pragworld(folder, rows, prompt="label").ids])
            .groupby("group")
            .n.sum()
        )
        groups = list(size.sort_values(kind="stable").index[: args.groups])
    chosen = rows[rows["group"].isin(groups)].reset_index(drop=True)
    if args.long:
        others, preamble = rows[~rows["group"].isin(groups) & ~rows["altered"]]["context"], ""
        for text in others:  # about 4 characters a token
            if len(preamble) >= 4 * args.long:
                break
            preamble += text + "\n\n"
        chosen = chosen.assign(context=[preamble + c for c in chosen["context"]])
    if args.kernels:
        out["kernels"] = kernels_on(chosen)
        if args.json:
            write_json(args.json, out)
        return
    if args.long:
        out["long"] = run_on(chosen, f"long context (+{len(preamble)} characters a row)", False)
        if args.json:
            write_json(args.json, out)
        return
    if args.profile:
        out["profile"] = profile_on(rows[rows["group"].isin(groups)].reset_index(drop=True))
        if args.json:
            write_json(args.json, out)
        return
    out["groups"] = run_on(
        rows[rows["group"].isin(groups)].reset_index(drop=True), f"{args.pick} {args.groups} groups", args.loop
    )
    if args.full:
        out["full"] = run_on(rows, "whole manual split", False, alone=True)
    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
