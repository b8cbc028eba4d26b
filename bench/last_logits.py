"""Logits only where they are read (``logits_to_keep``) vs every position, side by side.

On a large vocabulary the unembedding is most of a forward: Gemma 3 270M's 262,144 × 640 output
matrix costs ≈ 168 MFLOP a token against ≈ 270 MFLOP for the 18 blocks, and the full logits of 8
prompts of 190 tokens are 1.6 GB in fp32. Two uses in interp read few positions:

- **a scoring forward** (no grad) for a metric that reads each row's last position — what
  ``interp.analysis.engines.scoring.forward(..., last=True)`` asks of the model;
- **a training step** with the loss on the answer token only — what the trainer's ``Objective``
  does when the model's forward takes ``logits_to_keep`` (``few_logits``).

Each pair is timed alternately (A B A B …, median of ``--rounds``) in one process, on the same
batch; the outputs are compared (the kept logits equal the full forward's at the same positions,
the losses equal) so the speed-up is of the same computation. The model: the converted Gemma 3 270M
when it is cached (``interp models get gemma-3-270m``), else a random-weight model of its shape
built from the config (the cost does not depend on the weights). The fp32 matmul peak is measured
beside it.

    python bench/last_logits.py [--batch 8] [--length 190] [--rounds 3] [--random]

The last two lines are ``speed-up, scoring forward: N.NNx`` and ``speed-up, training step: N.NNx``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def gemma_270m(random: bool) -> tuple[torch.nn.Module, str]:
    """The cached Gemma 3 270M, or a random-weight model of its shape."""
    from transformers import AutoModelForCausalLM, Gemma3TextConfig

    from interp.models.cache import cache_dir

    folder = cache_dir() / "models" / "gemma-3-270m"
    if not random and (folder / "config.json").is_file():
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), f"Gemma 3 270M ({folder})"
    cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                           num_attention_heads=4, num_key_value_heads=1, head_dim=256)  # fmt: skip
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg), "random weights, Gemma 3 270M's shape"


def seconds(fn) -> float:
    """Wall time of one call."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=190)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--random", action="store_true", help="random weights even when the model is cached")
    args = ap.parse_args()

    from interp.hardware import matmul_peak
    from interp.models.lm import logits_of
    from interp.train.trainer import Objective

    peak_before = matmul_peak()
    model, what = gemma_270m(args.random)
    model.train(False)
    b, n = args.batch, args.length
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(0, model.config.vocab_size, (b, n), generator=g)
    last = torch.tensor([n - 1])

    def full_forward() -> torch.Tensor:
        with torch.no_grad():
            return logits_of(model, inputs)[:, -1:]

    def kept_forward() -> torch.Tensor:
        with torch.no_grad():
            return logits_of(model, inputs, last)

    gap = (full_forward() - kept_forward()).abs().max().item()
    fwd = {}
    for _ in range(args.rounds):  # alternate, so drift hits both alike
        for name, fn in (("all positions", full_forward), ("last only", kept_forward)):
            fwd.setdefault(name, []).append(seconds(fn))

    targets = torch.full((b, n), -100)
    targets[:, -1] = inputs[:, 0]  # the answer token only, as the fine-tuning recipes train
    labels = torch.zeros(b, dtype=torch.long)
    objective = Objective(model)

    def step(few: bool) -> float:
        objective.few_logits = few
        model.zero_grad(set_to_none=True)
        ce, count = objective(inputs, targets, labels, loss_targets=targets)[:2]
        (ce / count).backward()
        return float(ce.detach() / count)

    loss_gap = abs(step(True) - step(False))
    trn = {}
    for _ in range(args.rounds):
        for name, few in (("all positions", False), ("answer only", True)):
            trn.setdefault(name, []).append(seconds(lambda few=few: step(few)))
    peak = max(peak_before, matmul_peak())

    f = {k: statistics.median(v) for k, v in fwd.items()}
    t = {k: statistics.median(v) for k, v in trn.items()}
    print(f"model: {what}; batch {b} × {n} tokens; threads {torch.get_num_threads()}; rounds {args.rounds}")
    print(f"matmul peak (best fp32 torch.mm, before and after): {peak / 1e9:.1f} GFLOP/s")
    print(f"scoring forward (no grad): all positions {f['all positions']:.2f} s, last only {f['last only']:.2f} s; "
          f"max |logit gap| {gap:.2e}")  # fmt: skip
    print(f"training step (answer-token loss, forward + backward): all positions {t['all positions']:.2f} s, "
          f"answer only {t['answer only']:.2f} s; |loss gap| {loss_gap:.2e}")  # fmt: skip
    print(f"speed-up, scoring forward: {f['all positions'] / f['last only']:.2f}x")
    print(f"speed-up, training step: {t['all positions'] / t['answer only']:.2f}x")


if __name__ == "__main__":
    main()
