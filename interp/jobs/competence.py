"""Is a demo-recipe run competent? The scorer of ``experiments/demo_seeds.py`` (and
``experiments/tail_stage_trial.py``): greedy routes between held-out (origin, destination) pairs
(valid share, failures, late failures, back-and-forth loops at a route's end) and P(end | at the
destination), beside the ideal predictor's (:class:`~interp.models.lm.IdealLM`), against the bar of
issue 22 (:data:`MIN_VALID`, :data:`MAX_P_END_GAP`); :func:`seed_config` sets a recipe's training seeds.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from interp.config import load_toml
from interp.jobs.experiment import ExperimentConfig
from interp.metrics.navigation import decode_routes, end_at_destination, pairs_from_sequences
from interp.models.checkpoint import load_checkpoint
from interp.models.lm import BridgeLM, IdealLM
from interp.worlds.io import read_sequences
from interp.worlds.streets.graph import END

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


def trailing_loops(routes: pd.DataFrame, world: Any) -> pd.DataFrame:
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
    world: Any = ckpt.world  # a streets world (the demo recipe's)
    test = read_sequences(run / "data" / "test.txt", world)
    pairs = pairs_from_sequences(test)[:n_routes]
    row: dict[str, Any] = {}
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


__all__ = ["LATE_TURN", "MAX_P_END_GAP", "MIN_LOOP", "MIN_VALID", "score", "seed_config", "trailing_loops"]
