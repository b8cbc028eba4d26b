"""Cost of an HLS step and a ULA step relative to a plain fine-tuning step (target ≤ 1.15×).

All variants fine-tune the same model (the default demo GPT-2, or ``--checkpoint``) on the same
batches of the same world with the same loop (:func:`interp.train.train`, the one loop of
pre-training and ``interp finetune``, one process), differing only in the loss terms:

- ``plain`` — next-token loss only;
- ``hls`` — + β · mean squared MLP output of the regularised layers, collected by hooks in the
  training forward (:class:`interp.train.regularisers.HLS`);
- ``ula`` — + α · the classification heads' loss on the same layers' MLP outputs
  (:class:`interp.train.regularisers.ULA`, heads trained with the model);
- ``hls-2fwd`` — the reference's way, for comparison: a *second* forward per step to collect the
  MLP outputs, averaged over every position, padding included.

Variants run in interleaved rounds (plain, hls, ula, hls-2fwd, plain, …) so drift on the machine
hits all alike; the median time per step of each is divided by plain's, all in this one run.

    python bench/regulariser_step.py [--steps 30] [--rounds 3] [--layers 2,3]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics

import numpy as np
import torch

from interp.models import ModelConfig, build_gpt2
from interp.train import TrainConfig, train
from interp.train.regularisers import (
    HLS,
    ULA,
    LabelCoding,
    ULAHeads,
    last_state_labels,
    mlp_modules,
)
from interp.worlds import parse_world
from interp.worlds.encoding import encode_sequences


class SecondForwardHLS:
    """The reference's HLS: run the model a second time with hooks; per layer the mean over all
    positions (padding included), summed over the layers."""

    name = "hls-2fwd"

    def __init__(self, layers: list[int], weight: float):
        self.layers, self.weight, self.model = layers, weight, None

    @contextlib.contextmanager
    def install(self, model):
        self.model = model
        yield

    def partial(self, batch):
        outs = []
        handles = [
            m.register_forward_hook(lambda mod, a, o: outs.append(o)) for m in mlp_modules(self.model, self.layers)
        ]
        try:
            self.model(batch.inputs)
        finally:
            for h in handles:
                h.remove()
        total = sum(o.pow(2).mean() for o in outs)
        return total, torch.ones(())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--layers", default="2,3", help="regularised layers (default 2,3)")
    ap.add_argument("--checkpoint", help="fine-tune this interp checkpoint instead of a fresh demo-sized GPT-2")
    args = ap.parse_args()
    layers = [int(x) for x in args.layers.split(",")]

    if args.checkpoint:
        from interp.models import load_hf_model
        from interp.models.checkpoint import read_meta
        from interp.worlds import world_from_spec

        world = world_from_spec(read_meta(args.checkpoint)["world"])

        def fresh_model():
            return load_hf_model(args.checkpoint)
    else:
        world = parse_world("streets")
        mcfg = ModelConfig()

        def fresh_model():
            return build_gpt2(world.vocab, mcfg)

    seqs = world.generate(2000, np.random.default_rng(0))
    ids = encode_sequences(seqs, world.vocab)
    raw = last_state_labels(world, seqs)
    coding = LabelCoding.fit(raw)
    labels = coding.encode(raw)
    cfg = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=3e-4,
        min_lr=3e-5,
        warmup_steps=5,
        eval_every=0,
        checkpoint_every=0,
        seed=0,
    )
    probe = fresh_model()
    d_model = int(probe.config.hidden_size if hasattr(probe.config, "hidden_size") else probe.config.n_embd)

    def terms_for(kind: str):
        if kind == "plain":
            return []
        if kind == "hls":
            return [HLS(layers, 1e-3)]
        if kind == "ula":
            return [ULA(ULAHeads(layers, d_model, coding.classes, hidden=128, seed=0), 1e-3)]
        return [SecondForwardHLS(layers, 1e-3)]

    kinds = ["plain", "hls", "ula", "hls-2fwd"]
    print(
        f"world: {world.describe()}; model: {sum(p.numel() for p in probe.parameters()):,} parameters, "
        f"hooks on layers {layers}; batch {args.batch_size}; {args.steps} steps "
        f"× {args.rounds} rounds; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    train(fresh_model(), ids, None, TrainConfig(**{**cfg.__dict__, "steps": 3}), labels=labels, progress=False)
    per_step: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        line = []
        for kind in kinds:
            hist = train(
                fresh_model(), ids, None, cfg, loss_terms=terms_for(kind), labels=labels, progress=False
            ).history
            per_step[kind].append(float(hist["elapsed_s"].iloc[-1]) / args.steps)
            line.append(f"{kind} {per_step[kind][-1] * 1e3:.1f} ms")
        print(f"round {r + 1}: " + ", ".join(line))
    base, best = statistics.median(per_step["plain"]), min(per_step["plain"])
    print("\nmedian over rounds (and the fastest round, least disturbed by other load on the machine):")
    for kind in kinds:
        t, m = statistics.median(per_step[kind]), min(per_step[kind])
        target = (
            " (target ≤ 1.15)"
            if kind in ("hls", "ula")
            else " (the reference's second forward)"
            if kind == "hls-2fwd"
            else ""
        )
        print(f"{kind:>9}: {t * 1e3:7.1f} ms/step  {t / base:.3f}× plain   (fastest: {m / best:.3f}×){target}")


if __name__ == "__main__":
    main()
