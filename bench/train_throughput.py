"""Trainer throughput vs a minimal hand-written PyTorch loop, and achieved FLOP/s vs matmul peak.

Both loops train the same HF GPT-2 (the default ``ModelConfig``) on the same batches of the
default world (random walks on the default synthetic city) with the same batch size; they run
alternately (A B A B …) so drift on the machine hits both alike, and the medians are compared.

FLOPs per trained token = 6·N + 12·L·d·T (Kaplan et al. 2020 / PaLM appendix B): N = matmul
parameters (blocks + LM head; embeddings lookups are free), L layers, d width, T the padded
sequence width actually computed. The matmul peak is measured in the same run: the best of
several fp32 ``torch.mm`` of 1024² and 2048² matrices on the same threads, taken before and after
the training rounds (the larger counts).

    python bench/train_throughput.py [--steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from interp.hardware import matmul_peak
from interp.models import ModelConfig, build_gpt2
from interp.train import TrainConfig, make_batch, train
from interp.train.data import batch_indices
from interp.worlds import parse_world
from interp.worlds.encoding import encode_sequences


def minimal_loop(model, batches, lr: float) -> float:
    """What one writes by hand: forward, masked cross-entropy, backward, AdamW step."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    t = time.perf_counter()
    for b in batches:
        logits = model(b.inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), b.targets.reshape(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - t


def flops_per_token(model, cfg: ModelConfig, width: int, vocab: int) -> float:
    block = sum(p.numel() for n, p in model.named_parameters() if ".h." in n and p.dim() == 2)
    matmul_params = block + cfg.d_model * vocab
    return 6 * matmul_params + 12 * cfg.n_layer * cfg.d_model * width


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()

    world = parse_world("streets")
    mcfg = ModelConfig()
    seqs = world.generate(4000, np.random.default_rng(0))
    ids = encode_sequences(seqs, world.vocab, mcfg.n_ctx)
    # identical batches for both loops: the ratio measures the trainer's own overhead
    tcfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        warmup_steps=5,
        eval_every=0,
        checkpoint_every=0,
        length_bucketing=False,
        seed=0,
    )
    bucketed_cfg = TrainConfig(**{**tcfg.__dict__, "length_bucketing": True})
    batches = [make_batch(ids[batch_indices(len(ids), tcfg.batch_size, tcfg.seed, s)], 0) for s in range(tcfg.steps)]
    tokens = sum(b.n_tokens for b in batches)
    computed = sum(b.inputs.numel() for b in batches)
    widths = [b.inputs.shape[1] for b in batches]
    print(f"world: {world.describe()}")
    print(
        f"model: {mcfg}; batch {tcfg.batch_size}; {tcfg.steps} steps; {tokens:,} target tokens "
        f"({computed:,} positions computed, mean width {statistics.mean(widths):.1f}); "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    peak_before = matmul_peak()
    # warm up both paths once
    minimal_loop(build_gpt2(world.vocab, mcfg), batches[:3], tcfg.lr)
    hand, ours, bucketed = [], [], []
    for r in range(args.rounds):
        hand.append(minimal_loop(build_gpt2(world.vocab, mcfg), batches, tcfg.lr))
        for cfg, times in ((tcfg, ours), (bucketed_cfg, bucketed)):
            with tempfile.TemporaryDirectory() as d:
                model = build_gpt2(world.vocab, mcfg)
                t = time.perf_counter()
                res = train(model, ids, None, cfg, d, progress=False, resume=False)
                times.append(time.perf_counter() - t)
            if cfg is bucketed_cfg:
                bucketed_rate = res.tokens_per_second  # its batches differ: report its own count
        print(
            f"round {r + 1}: minimal loop {tokens / hand[-1]:,.0f} tok/s, trainer {tokens / ours[-1]:,.0f} tok/s, "
            f"trainer with length bucketing {bucketed_rate:,.0f} tok/s"
        )
    t_hand, t_ours = statistics.median(hand), statistics.median(ours)
    peak = max(peak_before, matmul_peak())  # measured before and after the rounds
    model = build_gpt2(world.vocab, mcfg)
    flops = sum(flops_per_token(model, mcfg, b.inputs.shape[1], len(world.vocab)) * b.inputs.numel() for b in batches)
    achieved = flops / t_ours
    print(f"\ntrainer / minimal loop throughput: {t_hand / t_ours:.3f}x (target >= 0.9)")
    print(f"trainer: {tokens / t_ours:,.0f} target tokens/s; achieved {achieved / 1e9:.1f} GFLOP/s")
    print(f"matmul peak (best fp32 torch.mm of 1024^2 and 2048^2, before and after): {peak / 1e9:.1f} GFLOP/s")
    print(f"achieved / peak: {achieved / peak:.1%} (target >= 35%)")
    print(
        f"length bucketing (the trainer's default) vs the same trainer on random batches: "
        f"{statistics.median(ours) / statistics.median(bucketed):.2f}x wall-clock speed-up for the same steps"
    )


if __name__ == "__main__":
    main()
