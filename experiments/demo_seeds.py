"""Is the demo recipe competent on every training seed? Train it on several seeds and score each.

Trains the embedded default (:class:`interp.jobs.experiment.ExperimentConfig`: the demo's data, model,
curriculum and ``[train]``) once per seed — ``model.seed`` (initialisation) and ``train.seed``
(batch order) both set to it, the data fixed — through :func:`interp.jobs.experiment.run_experiment`,
the path of ``interp train``. Each run is scored as the README's competence table is: greedy
routes between the first ``--routes`` held-out (origin, destination) pairs (valid share,
failures, how many fail at turn ≥ ``LATE_TURN``, and how many end in a back-and-forth loop, see
:func:`trailing_loops`) and P(end | at the destination) on the
first ``--routes`` held-out routes, beside the ideal predictor's
(:class:`~interp.models.lm.IdealLM`). The bar (issue 22): valid ≥ 0.90 and |P(end) − ideal| ≤ 0.05
on every seed. A finished seed's run folder is reused.

    python experiments/demo_seeds.py --seeds 0 1 2                   # one after another, ≈ 22 min a seed on 2 cores
    python experiments/demo_seeds.py --seeds 1 --threads 1 &          # seeds side by side, one core each
    python experiments/demo_seeds.py --seeds 0 1 2 --score-only       # the table of finished seeds
    python experiments/demo_seeds.py --config experiments/configs/competence/wide.toml \
        --out runs/demo_seeds_wide --seeds 2                           # a candidate recipe

Writes ``--out`` (default ``runs/demo_seeds``): ``seed<k>/`` run folders, ``competence.csv`` and
``competence.md`` (one row a seed, then min / mean / max).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from interp.jobs.competence import MAX_P_END_GAP, MIN_VALID, score, seed_config
from interp.jobs.experiment import run_experiment

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/demo_seeds")
    ap.add_argument("--config", help="a candidate recipe (an `interp run` TOML; default: the embedded default)")
    ap.add_argument("--routes", type=int, default=200, help="held-out pairs and routes scored (default 200)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--score-only", action="store_true", help="score finished seeds only, train nothing")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    rows = []
    for seed in args.seeds:
        run = out / f"seed{seed}"
        if not (run / "results.json").exists():
            if args.score_only:
                print(f"seed {seed}: not trained ({run}/results.json missing), skipped", flush=True)
                continue
            t = time.perf_counter()
            run_experiment(seed_config(seed, out, args.config), REPO, progress=False)
            (run / "train_timing.json").write_text(
                json.dumps({"wall_s": round(time.perf_counter() - t), "threads": torch.get_num_threads()})
            )
        row = {"seed": seed, **score(run, args.routes)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if not rows:
        sys.exit("no finished seed to score")
    df = pd.DataFrame(rows)
    cols = ["model_valid", "model_p_end", "ideal_p_end", "p_end_gap", "best_eval_loss", "train_s"]
    summary = df[cols].agg(["min", "mean", "max"])
    df.to_csv(out / "competence.csv", index=False)
    table = df[
        [
            "seed",
            *cols,
            "competent",
            "failures",
            "late_failures",
            "loops",
            "loops_through_destination",
            "loop_from_median",
        ]
    ].to_markdown(index=False, floatfmt=".3f")
    (out / "competence.md").write_text(table + "\n\n" + summary.to_markdown(floatfmt=".3f") + "\n")
    print(table, "\n", summary.to_string(float_format=lambda x: f"{x:.3f}"), sep="")
    print(
        f"competent on {int(df.competent.sum())} of {len(df)} seeds "
        f"(valid ≥ {MIN_VALID}, |P(end) − ideal| ≤ {MAX_P_END_GAP})"
    )


if __name__ == "__main__":
    main()
