"""Myhill–Nerode metrics: the exact estimator vs the paper's sampled one (M = 30), same pairs.

The sampled estimator runs as the reference code does (continuations until ``end`` or the 128-token
cap, nothing after ``end`` scored, one prefix length per pair); at the end, the same pairs are also
scored once with continuations cut at ``--depth`` tokens (this package's earlier rule), to show how
much that cut changes the sampled scores.

For one trained model and the same state pairs (same ``--seed``), after a warm-up on other pairs,
each estimator runs each metric ``max(2, --seeds)`` times, interleaved (exact, sampled, exact, …;
the sampled runs redraw their continuations, same pairs). We report forward tokens
(``lm.forward_tokens``: tokens run through the network, padding included) and the median wall
and CPU time per prefix pair, side by side with exact/sampled ratios (CPU time is the steadier
one on a shared machine), then the spread of the sampled estimator's scores over its seeds next
to the exact estimator's, which is deterministic (checked across its runs).

    python bench/mn_estimators.py [--model runs/demo/best] [--pairs 100] [--seeds 5]
    python bench/mn_estimators.py --world streets:../shared/data/manhattan/edges.csv --pairs 1000

Without ``--model`` a small GPT-2 is first trained on random walks of the default streets world
(a few minutes on CPU). With a ``--world`` and no ``--model`` the true world model (oracle) runs
instead: a scale check that prints pairs/s and the peak resident memory (state sampling is lazy;
nothing of size |V|² is ever built).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from interp.metrics.acceptance import Epsilon
from interp.metrics.myhill_nerode import myhill_nerode

SCORES = ("compression_precision", "distinction_precision", "distinction_recall")


def train_small_model(folder: Path) -> Path:
    """Random walks on the default streets world, a 2-layer GPT-2: a few minutes on 1 CPU thread."""
    from interp.config import TrainConfig
    from interp.jobs.experiment import DataConfig, ExperimentConfig, run_experiment
    from interp.models.gpt2 import ModelConfig

    cfg = ExperimentConfig(
        name="mn_bench",
        world="streets",
        runs_dir=str(folder),
        eval_sequences=200,
        data=DataConfig(n_sequences=8000, seed=0),
        model=ModelConfig(n_layer=2, d_model=128, n_head=4, n_ctx=128),
        train=TrainConfig(
            steps=2000, batch_size=32, lr=3e-3, min_lr=3e-4, warmup_steps=50, eval_every=0, checkpoint_every=0
        ),
    )
    t = time.perf_counter()
    run_experiment(cfg, fresh=True, progress=False, log=lambda m: print(f"  {m}", file=sys.stderr))
    print(f"trained the benchmark model in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return folder / "mn_bench" / "best"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run(
    world,
    lm,
    estimator: str,
    metric: str,
    args,
    sample_seed: int | None = None,
    pairs: int | None = None,
    seed: int | None = None,
    continuations: str = "to_end",
) -> dict:
    before = lm.forward_tokens
    t, c = time.perf_counter(), time.process_time()
    r = myhill_nerode(
        world,
        lm,
        rule=Epsilon(args.epsilon),
        depth=args.depth,
        pairs=pairs or args.pairs,
        estimator=estimator,
        samples=args.samples,
        seed=args.seed if seed is None else seed,
        metrics=(metric,),
        sample_seed=sample_seed,
        max_nodes=args.max_nodes,
        continuations=continuations,
    )
    s = r.summary()
    s["wall"] = time.perf_counter() - t
    s["cpu"] = time.process_time() - c
    s["tokens"] = lm.forward_tokens - before
    s["used"] = s["pairs_used"]
    return s


def compare(world, lm, args) -> None:
    reps = max(2, args.seeds)
    print(
        f"{world.describe()}\nmodel: {lm.describe()}; epsilon={args.epsilon}, depth {args.depth}, "
        f"{args.pairs} states / state pairs, seed {args.seed}, sampled M = {args.samples}; "
        f"{reps} interleaved runs per estimator after a warm-up (sampled: one sampling seed per run, "
        f"same pairs); times are medians\n"
    )
    for metric in ("compression", "distinction"):  # warm-up (other pairs): first-call costs out of the timing
        for est in ("exact", "sampled"):
            run(world, lm, est, metric, args, pairs=5, seed=args.seed + 12345)
    head = (
        f"{'metric':<12} {'estimator':<8} {'pairs':>5} {'fwd tokens/pair':>16} {'ms/pair':>9} "
        f"{'cpu ms/pair':>12}   scores"
    )
    print(head)
    print("-" * len(head))
    totals = {"exact": 0.0, "sampled": 0.0}
    spreads = []
    for metric in ("compression", "distinction"):
        runs: dict[str, list[dict]] = {"exact": [], "sampled": []}
        for i in range(reps):
            runs["exact"].append(run(world, lm, "exact", metric, args))
            runs["sampled"].append(run(world, lm, "sampled", metric, args, sample_seed=None if i == 0 else 1000 + i))
        med = {}
        for est in ("exact", "sampled"):
            rs = runs[est]
            s = rs[0]
            n = max(1, s["used"])
            med[est] = {k: statistics.median(r[k] for r in rs) for k in ("wall", "cpu", "tokens")}
            totals[est] += med[est]["wall"]
            scores = ", ".join(f"{k.split('_', 1)[1]} {s[k]:.3f}" for k in SCORES if k.startswith(metric))
            skipped = f"  (skipped {s['pairs_skipped_total']})" if s["pairs_skipped_total"] else ""
            print(
                f"{metric:<12} {est:<8} {s['used']:>5} {med[est]['tokens'] / n:>16,.0f} "
                f"{1000 * med[est]['wall'] / n:>9.1f} {1000 * med[est]['cpu'] / n:>12.1f}   {scores}{skipped}"
            )
        e, m = med["exact"], med["sampled"]
        print(
            f"{metric:<12} {'ratio':<8} {'':>5} {(e['tokens'] / max(1, m['tokens'])):>15.2f}x "
            f"{(e['wall'] / m['wall']):>8.2f}x {(e['cpu'] / m['cpu']):>11.2f}x   exact / sampled"
        )
        for key in (k for k in SCORES if k.startswith(metric)):
            vals = [r[key] for r in runs["sampled"]]
            exact = [r[key] for r in runs["exact"]]
            same = all(v == exact[0] for v in exact)
            spreads.append(
                f"  {key:<22} sampled {statistics.mean(vals):.4f} ± sd {statistics.stdev(vals):.4f} "
                f"(min {min(vals):.4f}, max {max(vals):.4f});  exact {exact[0]:.4f}, "
                f"{reps} runs {'identical' if same else 'DIFFER: ' + str(exact)}"
            )
    print(
        f"both metrics: exact {totals['exact']:.1f} s, sampled {totals['sampled']:.1f} s "
        f"(ratio {totals['exact'] / totals['sampled']:.2f})\n"
    )
    print(f"spread over {reps} sampling seeds (same pairs) vs the exact estimator:")
    print("\n".join(spreads))
    print(f"\nsampled, continuations cut at {args.depth} tokens (the earlier rule), same pairs, first sampling seed:")
    for metric in ("compression", "distinction"):
        s = run(world, lm, "sampled", metric, args, continuations="depth")
        scores = ", ".join(f"{k.split('_', 1)[1]} {s[k]:.3f}" for k in SCORES if k.startswith(metric))
        print(f"  {metric:<12} {scores}")
    print(f"\npeak RSS {peak_rss_mb():.0f} MB")


def scale_check(world, lm, args) -> None:
    print(
        f"{world.describe()}\nmodel: {lm.describe()}; exact estimator, depth {args.depth}, "
        f"{args.pairs} states and {args.pairs} state pairs"
    )
    print(f"peak RSS after loading: {peak_rss_mb():.0f} MB")
    for metric in ("compression", "distinction"):
        s = run(world, lm, "exact", metric, args)
        scores = ", ".join(f"{k} {s[k]:.3f}" for k in SCORES if k.startswith(metric))
        print(
            f"{metric:<12} {s['used']} pairs used, {s['pairs_skipped_total']} skipped {s['pairs_skipped'][metric]}; "
            f"{s['used'] / s['wall']:.0f} pairs/s; {scores}; peak RSS {peak_rss_mb():.0f} MB"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="checkpoint folder (default: train a small one / oracle with --world)")
    ap.add_argument("--world", help="world argument; with no --model, run the oracle on it (scale check)")
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument(
        "--seeds", type=int, default=5, help="runs per estimator (sampled: one sampling seed each), at least 2"
    )
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--epsilon", type=float, default=0.01)
    ap.add_argument("--max-nodes", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from interp.models.lm import lm_from_arg
    from interp.worlds import parse_world

    world = parse_world(args.world) if args.world else None
    if world is not None and args.model is None:
        from interp.models.lm import WorldLM

        scale_check(world, WorldLM(world), args)
        return
    model = args.model or str(train_small_model(Path(tempfile.mkdtemp(prefix="mn_bench_"))))
    lm, world = lm_from_arg(model, world)
    compare(world, lm, args)


if __name__ == "__main__":
    main()
