"""MLP zero-out sweep: reusing the clean run's early layers vs one ``run_with_hooks`` per layer.

The baseline is the straightforward loop ``transformer_lens.patching`` uses: a clean forward, then
for each layer one ``bridge.run_with_hooks`` forward with that layer's ``hook_mlp_out`` zeroed,
scored by the per-example next-token loss (the metric ``interp sweep`` uses on world models).
Against it, in the same run and on the same batch: :func:`interp.analysis.mlp_zero_sweep` with
``method="reuse"`` (resume each variant after block ℓ from ``resid_post − mlp_out``),
``"batched"`` (all variants stacked in one forward) and ``"loop"`` (our hook loop). Each method
runs ``--rounds`` times in alternation; the median wall time is reported with the ratio to the
baseline and the max abs difference of every per-example value from the baseline's.

    python bench/sweep_reuse.py [--model runs/demo/best] [--n 200] [--rounds 5] [--batch-size 64|0]

``--batch-size 0`` runs interp's sweeps on the whole batch at once, as the baseline does, which
isolates the reuse of early layers (at most 2× for a metric over every position: the variants
run L(L+1)/2 blocks instead of L(L+1)); the default 64 adds the library's length-grouped chunks.

Without ``--model`` (or when runs/demo/best is missing) the default demo architecture (``interp
run``: 4 layers, d_model 128) is built with random weights: the cost does not depend on the weights.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def load_model(path: str | None):
    """(bridge, world) of the checkpoint, or of the default demo architecture with random weights."""
    from interp.models.checkpoint import load_checkpoint

    if path and Path(path).exists():
        ckpt = load_checkpoint(Path(path))
        return ckpt.bridge, ckpt.world, path
    from interp.jobs.experiment import ExperimentConfig
    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds import parse_world

    cfg = ExperimentConfig()
    world = parse_world(cfg.world)
    folder = Path(tempfile.mkdtemp()) / "demo_arch"
    save_checkpoint(build_gpt2(world.vocab, cfg.model), world, folder)
    ckpt = load_checkpoint(folder)
    return ckpt.bridge, ckpt.world, f"default demo architecture, random weights ({cfg.model.n_layer} layers)"


def baseline(bridge, ids, mask, metric) -> np.ndarray:
    """[1 + n_layers, n]: the clean metric, then one run_with_hooks per layer with mlp_out zeroed."""
    from interp.analysis.engines.scoring import Batch

    batch = Batch(ids, mask, torch.arange(ids.shape[0]))
    kw = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}

    def zero(act, hook):
        return torch.zeros_like(act)

    out = []
    with torch.no_grad():
        out.append(metric(bridge(ids, **kw), batch))
        for layer in range(int(bridge.cfg.n_layers)):
            logits = bridge.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", zero)], **kw)
            out.append(metric(logits, batch))
    return torch.stack(out).numpy()


def main(argv: list[str] | None = None) -> None:
    from interp.analysis import mlp_zero_sweep, token_loss
    from interp.worlds.encoding import encode_sequences

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="runs/demo/best")
    p.add_argument("--n", type=int, default=200, help="held-out sequences (default 200, as interp sweep)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="examples per forward of interp's sweeps (default 64, the library default: "
        "length-grouped chunks); 0 = all at once, as the baseline",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    bridge, world, what = load_model(args.model)
    bridge.eval()
    seqs = world.generate(args.n, np.random.default_rng(args.seed))
    ids = encode_sequences(seqs, world.vocab, int(bridge.cfg.n_ctx))
    mask = (ids != world.vocab.pad_id).long()
    n_layers = int(bridge.cfg.n_layers)
    print(
        f"model: {what}; {n_layers} layers, d_model {bridge.cfg.d_model}; batch {tuple(ids.shape)}; "
        f"torch threads {torch.get_num_threads()}"
    )

    def ours(method):
        def run():
            res = mlp_zero_sweep(
                bridge, ids, token_loss, mask, batch_size=args.batch_size or None, method=method, higher_is_better=False
            )
            wide = res.frame.pivot(index="example", columns="layer", values="ablated").to_numpy().T
            clean = res.frame[res.frame.layer == 0].sort_values("example")["clean"].to_numpy()
            return np.vstack([clean, wide])

        return run

    runs = {
        "run_with_hooks loop (baseline)": lambda: baseline(bridge, ids, mask, token_loss),
        "interp reuse": ours("reuse"),
        "interp batched": ours("batched"),
        "interp loop": ours("loop"),
    }
    for fn in runs.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {k: [] for k in runs}
    values: dict[str, np.ndarray] = {}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t = time.perf_counter()
            values[name] = fn()
            times[name].append(time.perf_counter() - t)
    base_name = next(iter(runs))
    base_t = statistics.median(times[base_name])
    print(f"\n{'method':<32} {'median s':>9} {'speed-up':>9} {'max |Δ| vs baseline':>20}")
    for name in runs:
        t = statistics.median(times[name])
        diff = float(np.abs(values[name] - values[base_name]).max())
        print(f"{name:<32} {t:>9.3f} {base_t / t:>8.2f}× {diff:>20.2e}")


if __name__ == "__main__":
    main()
