"""Demo-model training trials with a curriculum, scored every 1,000 steps of the last stage.

Trains the demo's model (4-layer GPT-2, 128 wide, 2 heads) on the demo's data (30,000 random walks
on the default city, the same split) through stages ``MAX_DIRECTIONS:STEPS`` (``0``: every
route), each its own call of :func:`interp.train.train` with the demo's ``[train]`` settings and a
fresh warmup + cosine schedule — what ``[curriculum]`` + ``[train]`` of an experiment config do
(:func:`interp.jobs.experiment.train_curriculum`). After each stage, and every 1,000 steps of the last
one, it prints the held-out loss, P(end | at the destination) and how often ``end`` is the argmax
there (200 held-out routes), and the valid share of greedy routes between 200 held-out pairs
with their failures — the numbers of the README's curriculum table.

    python experiments/curriculum.py t4 20:1000,40:1000,0:5000 min_lr=2e-5
    python experiments/curriculum.py plain 0:3000                      # no curriculum

Extra ``key=value`` arguments override ``[train]`` or ``[model]`` fields (``n_sequences=`` the
data size). Runs go to ``/tmp/interp_curriculum/<name>_<stage>``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from interp.metrics.navigation import decode_routes, end_at_destination, pairs_from_sequences
from interp.models import ModelConfig, build_gpt2
from interp.models.checkpoint import load_checkpoint, save_checkpoint
from interp.models.lm import BridgeLM
from interp.train import TrainConfig, train
from interp.worlds import parse_world
from interp.worlds.encoding import encode_sequences
from interp.worlds.split import split_sequences

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

OUT = Path("/tmp/interp_curriculum")


def _number(v: str):
    for f in (int, float):
        try:
            return f(v)
        except ValueError:
            pass
    return v


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    name, stages = sys.argv[1], [tuple(map(int, p.split(":"))) for p in sys.argv[2].split(",")]
    kv = {k: _number(v) for k, v in (a.split("=", 1) for a in sys.argv[3:])}
    n_sequences = kv.pop("n_sequences", 30000)
    model_keys = {f.name for f in dataclasses.fields(ModelConfig)}
    mcfg = ModelConfig(**{"n_head": 2, **{k: v for k, v in kv.items() if k in model_keys}})
    base = dict(
        batch_size=32, lr=2e-3, min_lr=2e-4, warmup_steps=100, eval_every=500, eval_sequences=512, checkpoint_every=0
    )
    base.update({k: v for k, v in kv.items() if k not in model_keys})
    world = parse_world("streets")
    tr, te = split_sequences(world, world.generate(n_sequences, np.random.default_rng(0)), 0.1, 0)
    te_ids = encode_sequences(te, world.vocab, mcfg.n_ctx)
    model = build_gpt2(world.vocab, mcfg)
    pairs = pairs_from_sequences(te)[:200]
    trained_s, done = 0.0, 0
    for i, (cap, steps) in enumerate(stages):
        short = [s for s in tr if cap == 0 or len(s) - 3 <= cap]
        ids = encode_sequences(short, world.vocab, mcfg.n_ctx)
        out = OUT / f"{name}_{i}"
        shutil.rmtree(out, ignore_errors=True)
        cfg = TrainConfig(steps=steps, **base)
        stops = sorted({*range(1000, steps, 1000), steps}) if i == len(stages) - 1 else [steps]
        for stop in stops:
            t = time.time()
            train(
                model,
                ids,
                te_ids,
                cfg,
                out,
                pad_id=world.vocab.pad_id,
                progress=False,
                stop_at=stop if stop < steps else None,
            )
            trained_s += time.time() - t
            lm = BridgeLM(load_checkpoint(save_checkpoint(model, world, out / "eval")).bridge, world.vocab)
            routes, end = decode_routes(lm, world, pairs), end_at_destination(lm, world, te[:200])
            loss = pd.read_csv(out / "train_log.csv")["eval_loss"].dropna().iloc[-1]
            print(
                json.dumps(
                    {
                        "stage": i,
                        "max_directions": cap or None,
                        "routes": len(short),
                        "step": done + stop,
                        "train_s": round(trained_s),
                        "eval_loss": round(float(loss), 4),
                        "valid": routes.valid.mean,
                        "p_end": round(end["p_end"], 3),
                        "argmax_end": round(end["argmax_end"], 3),
                        "failures": routes.failures(),
                    }
                ),
                flush=True,
            )
        done += steps


if __name__ == "__main__":
    main()
