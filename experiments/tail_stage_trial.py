"""Trial (issue 22): one more stage on long routes after a finished demo-recipe run, then score it.

Most of the 30,000-route recipe's failed greedy routes fail at turn ≥ 80 (``late_failures`` in
``experiments/demo_seeds.py``), where a random walk of at most 99 turns must reach its
destination in the turns left — the rarest part of the data. (They go wrong earlier, in a loop
begun in the first turns: ``trailing_loops`` there; this stage did not make every seed competent,
more routes did — ``docs/reproductions/demo-training.md``.) This trial
trains the run's final weights (``RUN/last``) ``--steps`` more on the training routes of at least
``--from-turn`` turns, the loss counted only from that turn on. That keeps the data's conditionals
unbiased there: whether a route lasts ≥ N turns is known from its first N turns, so selecting long
routes changes nothing the counted tokens condition on. ``[train]``'s settings otherwise, with
peak learning rate ``--lr`` (cosine to ``min_lr``), a fresh optimizer and batch order ``seed +
100``. Scored as ``demo_seeds.py`` scores (best held-out checkpoint of the stage). ``--from-turn 0``
is the control: the same continuation on every route and token.

    python experiments/tail_stage_trial.py runs/demo_seeds_long/seed0 runs/tail_trial/seed0 \
        --config experiments/configs/competence/long.toml      # 11 min (three at once on 2 cores)
    python experiments/demo_seeds.py --out runs/tail_trial --seeds 0 1 2 --score-only
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

import torch

from interp.config import load_toml
from interp.jobs.competence import score
from interp.jobs.experiment import ExperimentConfig
from interp.models.checkpoint import save_checkpoint
from interp.train.trainer import train
from interp.worlds import world_from_spec
from interp.worlds.encoding import encode_sequences
from interp.worlds.io import read_sequences

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a finished run folder (its last/ weights are continued)")
    ap.add_argument("out", type=Path, help="the trial's run folder")
    ap.add_argument("--config", help="the run's recipe (an `interp run` TOML; default: the embedded default)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument(
        "--from-turn",
        type=int,
        default=60,
        help="routes of ≥ this many turns; loss from it on (0: all routes, all tokens)",
    )
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import GPT2LMHeadModel

    cfg = load_toml(ExperimentConfig, args.config) if args.config else ExperimentConfig()
    seed = json.loads((args.run / "config.json").read_text())["train"]["seed"]
    world = world_from_spec(json.loads((args.run / "world.json").read_text()))
    shutil.copytree(args.run / "data", args.out / "data", dirs_exist_ok=True)
    train_ids = encode_sequences(read_sequences(args.run / "data" / "train.txt", world), world.vocab, cfg.model.n_ctx)
    test_ids = encode_sequences(read_sequences(args.run / "data" / "test.txt", world), world.vocab, cfg.model.n_ctx)
    pad = world.vocab.pad_id
    # a row is <bos> origin destination d1 … dk end: turn t is at index t + 2
    long_rows = ((train_ids != pad).sum(dim=1) - 1) >= args.from_turn + 3
    loss_from = (
        torch.full((int(long_rows.sum()),), args.from_turn + 2, dtype=torch.long) if args.from_turn > 0 else None
    )  # 0: every route, every token (a plain continuation)
    print(f"{int(long_rows.sum())} of {len(train_ids)} training routes have ≥ {args.from_turn} turns", flush=True)
    model = GPT2LMHeadModel.from_pretrained(args.run / "last").train()
    stage = replace(cfg.train, steps=args.steps, lr=args.lr, seed=seed + 100)
    t0 = time.perf_counter()
    res = train(
        model,
        train_ids[long_rows],
        test_ids,
        stage,
        args.out,
        pad_id=pad,
        save_model_fn=lambda m, path: save_checkpoint(m, world, path),
        progress=False,
        loss_from=loss_from,
    )
    stage_args = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (args.out / "results.json").write_text(json.dumps({"train": res.to_dict(), "stage": stage_args}))
    (args.out / "train_timing.json").write_text(
        json.dumps({"wall_s": round(time.perf_counter() - t0), "threads": args.threads})
    )
    print(json.dumps(score(args.out, 200)))


if __name__ == "__main__":
    main()
