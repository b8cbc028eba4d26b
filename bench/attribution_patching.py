"""Attribution patching (AtP) vs the exact sweeps, side by side on the same examples.

Two models: a 12-layer, 768-wide, 12-head GPT-2 built from a config (random weights: the cost does
not depend on them) and the trained demo model (``runs/demo/best``, when present). On each, in one
process and in alternating rounds (median wall time over ``--rounds``):

- layer × head map (``attn.hook_z``, all positions): TransformerLens's loop
  ``transformer_lens.patching.get_act_patch_attn_head_out_all_pos`` (one forward per head, what
  ``interp.analysis.engines.activation_patching`` runs) vs :func:`interp.analysis.engines.attribution.activation_attribution`
  (a clean forward, a corrupted forward with gradients, one backward);
- layer × position map of ``resid_pre``: ``get_act_patch_resid_pre`` vs the same attribution call;
- layer-only MLP zero-out: our exact ``mlp_zero_sweep(method="reuse")`` (and the one-forward-per-layer
  ``"loop"``) vs :func:`~interp.analysis.engines.attribution.mlp_zero_attribution`. Here the gain is bounded:
  the reuse sweep costs ≈ 1 + (L−1)/2 forward-equivalents, attribution ≈ 3 (forward + backward ≈ 2
  forwards), so the bound is (1 + (L−1)/2) / 3 — printed beside the measured ratio.

Memory: ``peak MiB`` is the kernel's peak resident set (VmHWM, reset before each call through
``/proc/self/clear_refs``) above the resident set when the call starts — what the method adds on
top of the loaded model (glibc's thresholds are fixed so freed blocks go back at once); the
smallest over the calls. A method whose first call takes over 2 s (the exact loops on the
12-layer model) runs once; the others run ``--rounds`` more times, alternating, median reported.
Agreement (Spearman / Pearson over the map's cells, sign agreement) is printed for each pair, from
the same runs. Examples: aligned one-token edits of held-out streets sequences (``interp sweep
--kind activation-patching``'s pairs), metric: the clean state's legal-token mass at the last position.

    python bench/attribution_patching.py [--n 8] [--length 12] [--rounds 3] [--demo runs/demo/best]

The last line is ``speed-up over exact layer x head patching: N.NNx`` on the 12-layer model.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def fixed_malloc_thresholds() -> None:
    """Make glibc return large freed blocks to the system at once (fixed mmap/trim thresholds), so a
    method's peak RSS is not hidden by memory a previous method left in the heap."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD: 64 KiB, no dynamic raise
    libc.mallopt(-1, 1 << 17)  # M_TRIM_THRESHOLD: 128 KiB


def timed(fn) -> tuple[float, float, object]:
    """(seconds, peak MiB above the resident set at the start, result) of one call. The peak is
    the kernel's high-water mark (VmHWM), reset just before the call (``/proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")
    base = _status_kib("VmRSS")
    t = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t
    return dt, (_status_kib("VmHWM") - base) / 1024, out


def examples(world, n: int, length: int, edit_at: int, seed: int):
    """(clean ids, corrupted ids, legal-mass metric) of ``n`` aligned one-token edits."""
    from interp.analysis.engines.activation_patching import legal_mass
    from interp.analysis.engines.edit_pairs import aligned_edit_pairs

    seqs = world.generate(40 * n, np.random.default_rng(seed))
    pairs = aligned_edit_pairs(world, seqs, length, edit_at, seed)
    if len(pairs.originals) < n:
        raise SystemExit(f"only {len(pairs.originals)} pairs of length {length}; lower --length or --n")
    v = world.vocab
    clean = torch.tensor([v.encode(s) for s in pairs.originals[:n]])
    corrupted = torch.tensor([v.encode(s) for s in pairs.altered[:n]])
    legal = torch.zeros(n, len(v), dtype=torch.bool)
    for i, s in enumerate(pairs.originals[:n]):
        legal[i, [v.id(t) for t in world.legal(world.states_along(s)[-1])]] = True
    return clean, corrupted, legal_mass(legal)


def tl_map(bridge, fn_name: str, clean, corrupted, metric) -> np.ndarray:
    """TransformerLens's patching loop: [layer, pos|head] mean effect (patched − corrupted)."""
    import transformer_lens.patching as tl_patching

    from interp.analysis.engines.scoring import Batch

    batch = Batch(corrupted, None, torch.arange(corrupted.shape[0]))
    with torch.no_grad():
        _, cache = bridge.run_with_cache(clean)
        base = metric(bridge(corrupted), batch)
        out = getattr(tl_patching, fn_name)(bridge, corrupted, cache, lambda logits: metric(logits, batch).mean())
    return (out - base.mean()).numpy()


def compare(a: np.ndarray, e: np.ndarray) -> str:
    from interp.analysis.engines.attribution import spearman

    a, e = np.asarray(a).ravel(), np.asarray(e).ravel()
    pear = float(np.corrcoef(a, e)[0, 1]) if a.std() > 0 and e.std() > 0 else float("nan")
    return f"spearman {spearman(a, e):+.2f}, pearson {pear:+.2f}, same sign {np.mean(np.sign(a) == np.sign(e)):.2f}"


def bench_model(label: str, bridge, world, args) -> float:
    """Print the three comparisons for one model; return the layer × head speed-up."""
    from interp.analysis.engines.attribution import activation_attribution, mlp_zero_attribution
    from interp.analysis.engines.scoring import token_loss
    from interp.analysis.engines.sweeps import mlp_zero_sweep

    bridge.eval()
    L, H = int(bridge.cfg.n_layers), int(bridge.cfg.n_heads)
    clean, corrupted, metric = examples(world, args.n, args.length, args.edit_at, args.seed)
    P = int(clean.shape[1])
    with torch.no_grad():  # touch every weight once (safetensors are memory-mapped) before measuring
        bridge(clean)
    print(
        f"\n== {label}: {L} layers, d_model {bridge.cfg.d_model}, {H} heads; {args.n} pairs × {P} tokens; "
        f"torch threads {torch.get_num_threads()}"
    )

    def att(comp):
        return lambda: activation_attribution(bridge, clean, corrupted, metric, comp).mean().to_numpy()

    def mlp(method):
        def run():
            if method == "attribution":
                res = mlp_zero_attribution(bridge, clean, token_loss, higher_is_better=False)
            else:
                res = mlp_zero_sweep(bridge, clean, token_loss, method=method, higher_is_better=False)
            return res.per_layer()["mean_effect"].to_numpy()

        return run

    groups = {
        f"layer x head map ({L * H} cells)": {
            "TransformerLens loop (exact)": lambda: tl_map(
                bridge, "get_act_patch_attn_head_out_all_pos", clean, corrupted, metric
            ),
            "attribution": att("heads"),
        },
        f"layer x position resid_pre map ({L * P} cells)": {
            "TransformerLens loop (exact)": lambda: tl_map(bridge, "get_act_patch_resid_pre", clean, corrupted, metric),
            "attribution": att("resid_pre"),
        },
        f"MLP zero-out by layer ({L} sites)": {
            "interp loop (exact, 1 + L forwards)": mlp("loop"),
            "interp reuse (exact)": mlp("reuse"),
            "attribution": mlp("attribution"),
        },
    }
    head_speedup = float("nan")
    for title, runs in groups.items():
        times: dict[str, list[float]] = {k: [] for k in runs}
        mem: dict[str, float] = {}
        values = {}
        for name, fn in runs.items():  # first call: warm-up, memory; a call over 2 s also counts as a round
            dt, mem[name], values[name] = timed(fn)
            if dt > 2.0:
                times[name].append(dt)
        for _ in range(args.rounds):  # alternating rounds of the fast methods
            for name, fn in runs.items():
                if times[name] and times[name][0] > 2.0:
                    continue
                dt, m, values[name] = timed(fn)
                times[name].append(dt)
                mem[name] = min(mem[name], m)
        exact_name = [k for k in runs if k != "attribution"][-1]
        base = statistics.median(times[exact_name])
        print(f"\n{title}")
        print(f"  {'method':<38} {'median s':>9} {'vs exact':>9} {'peak MiB':>9}")
        for name in runs:
            t = statistics.median(times[name])
            print(f"  {name:<38} {t:>9.3f} {base / t:>8.2f}x {max(0.0, mem[name]):>9.1f}")
        print(f"  agreement with {exact_name}: {compare(values['attribution'], values[exact_name])}")
        if title.startswith("layer x head"):
            head_speedup = base / statistics.median(times["attribution"])
        if title.startswith("MLP"):
            bound = (1 + (L - 1) / 2) / 3
            ratio = base / statistics.median(times["attribution"])
            print(
                f"  layer-only MLP sweep: attribution / exact reuse speed-up {ratio:.2f}x; "
                f"bound (1 + (L-1)/2) / 3 = {bound:.2f}x at L = {L}"
            )
    return head_speedup


def main(argv: list[str] | None = None) -> None:
    from interp.models import ModelConfig, build_gpt2, load_checkpoint, save_checkpoint

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=8, help="pairs (default 8)")
    p.add_argument("--length", type=int, default=12, help="prefix length in tokens (default 12; + <bos>)")
    p.add_argument("--edit-at", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--demo", default="runs/demo/best", help="the trained demo checkpoint (skipped if absent)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    fixed_malloc_thresholds()

    demo = Path(args.demo)
    world = None
    if demo.exists():
        ckpt = load_checkpoint(demo)
        world = ckpt.world
        bench_model(f"demo model ({demo})", ckpt.bridge, world, args)
    else:
        print(f"note: no demo checkpoint at {demo}; only the 12-layer model runs")
    if world is None:
        from interp.jobs.experiment import ExperimentConfig
        from interp.worlds import parse_world

        world = parse_world(ExperimentConfig().world)
    folder = Path(tempfile.mkdtemp()) / "gpt2_12l"
    cfg = ModelConfig(n_layer=12, d_model=768, n_head=12, n_ctx=64, seed=args.seed)
    save_checkpoint(build_gpt2(world.vocab, cfg), world, folder)
    big = load_checkpoint(folder)
    speedup = bench_model("12-layer GPT-2 from a config (random weights)", big.bridge, world, args)
    print(f"\nspeed-up over exact layer x head patching: {speedup:.2f}x")


if __name__ == "__main__":
    main()
