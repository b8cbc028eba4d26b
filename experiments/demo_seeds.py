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
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from interp.config import load_toml
from interp.jobs.experiment import ExperimentConfig, run_experiment
from interp.metrics.navigation import decode_routes, end_at_destination, pairs_from_sequences
from interp.models.checkpoint import load_checkpoint
from interp.models.lm import BridgeLM, IdealLM
from interp.worlds.io import read_sequences
from interp.worlds.streets.graph import END

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]

#: the competence bar of issue 22
MIN_VALID, MAX_P_END_GAP = 0.90, 0.05
#: a failed route counts as *late* when it fails at or after this turn (the data's walks last at
#: most 99: near the cap a walk must reach its destination in the turns left)
LATE_TURN = 80
#: turns of back-and-forth at a route's end that make a loop
MIN_LOOP = 10


def seed_config(seed: int, out: Path, config: str | None = None) -> ExperimentConfig:
    """The embedded default (or the recipe of ``config``, an ``interp run`` TOML) with its training
    seeds set to ``seed`` (the data unchanged)."""
    cfg = load_toml(ExperimentConfig, config) if config else ExperimentConfig()
    return replace(
        cfg,
        name=f"seed{seed}",
        runs_dir=str(out),
        model=replace(cfg.model, seed=seed),
        train=replace(cfg.train, seed=seed),
    )


def trailing_loops(routes: pd.DataFrame, world) -> pd.DataFrame:
    """Which greedy routes end in a back-and-forth loop between two intersections (``W E W E …``,
    ≥ ``MIN_LOOP`` turns to the route's end), from which turn, and whether the destination is one
    of the two. A route looping through its destination fails when the model never says ``end``
    there before the cap; one looping elsewhere has ranked two near-equal turns the wrong way."""
    rows = []
    for origin, dest, tokens in zip(routes.origin, routes.destination, routes.tokens):
        state, nodes = world.step(world.step(world.start(), origin), dest), [origin]
        for token in tokens.split():
            if token not in world.legal(state) or token == END:
                break
            state = world.step(state, token)
            nodes.append(world.state_label(state))
        start = len(nodes) - 2  # the loop's first turn: walk back while node[t] == node[t - 2]
        while start > 0 and nodes[start - 1] == nodes[start + 1]:
            start -= 1
        loop = len(nodes) - 1 - start >= MIN_LOOP
        rows.append(
            {"loop": loop, "loop_from": start if loop else -1, "through_destination": loop and dest in nodes[start:]}
        )
    return pd.DataFrame(rows, index=routes.index)


def score(run: Path, n_routes: int) -> dict:
    """Greedy routes and P(end | at the destination) of ``run/best`` beside the ideal predictor."""
    ckpt = load_checkpoint(run / "best")
    world = ckpt.world
    test = read_sequences(run / "data" / "test.txt", world)
    pairs = pairs_from_sequences(test)[:n_routes]
    row = {}
    for name, lm in {"model": BridgeLM(ckpt.bridge, world.vocab), "ideal": IdealLM(world)}.items():
        routes = decode_routes(lm, world, pairs)
        end = end_at_destination(lm, world, test[:n_routes])
        row[f"{name}_valid"], row[f"{name}_p_end"] = routes.valid.mean, end["p_end"]
        if name == "model":
            row["failures"] = json.dumps(routes.failures())
            bad = routes.per_route[~routes.per_route.valid.astype(bool)]
            turn = bad.first_illegal.where(bad.first_illegal >= 0, bad.directions)  # where it failed
            row["late_failures"] = int((turn >= LATE_TURN).sum())
            loops = trailing_loops(bad, world)
            row["loops"], row["loops_through_destination"] = int(loops.loop.sum()), int(loops.through_destination.sum())
            row["loop_from_median"] = float(loops.loop_from[loops.loop].median()) if loops.loop.any() else None
    results = json.loads((run / "results.json").read_text())
    row["best_eval_loss"] = results["train"]["best_eval_loss"]
    timing = run / "train_timing.json"  # written when this script trained the seed
    row["train_s"] = json.loads(timing.read_text())["wall_s"] if timing.exists() else float("nan")
    row["p_end_gap"] = row["model_p_end"] - row["ideal_p_end"]
    row["competent"] = bool(row["model_valid"] >= MIN_VALID and abs(row["p_end_gap"]) <= MAX_P_END_GAP)
    return row


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
