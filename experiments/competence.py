"""How close trained streets models come to the ideal predictor of their random-walk data.

For each run folder (``interp train`` / ``interp run`` output): the best held-out loss of its
training log, its greedy routes on the first ``--routes`` held-out (origin, destination) pairs
(valid share and failures), and — on the first ``--routes`` held-out sequences — the mean
P(end) where the route stands at its destination and how often ``end`` is the argmax there, and
the next-token loss per token on the first ``--nll`` held-out sequences; each beside the ideal
predictor's (:class:`~interp.models.lm.IdealLM`) on the same material.

    python experiments/competence.py runs/demo runs/competence/a runs/competence/c
    python experiments/competence.py runs/demo --by-turns-on train --by-turns-n 3000   # calibration on its own data
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pandas as pd
import torch

from interp.metrics.navigation import decode_routes, end_at_destination, pairs_from_sequences
from interp.models.checkpoint import load_checkpoint
from interp.models.lm import BridgeLM, IdealLM
from interp.worlds.io import read_sequences

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]


def nll_per_token(lm, world, sequences) -> float:
    """Mean −log P(token | prefix) over every token of ``sequences`` (origin to ``end``)."""
    total, n = 0.0, 0
    for s in sequences:
        lp = lm.start([s[:i] for i in range(len(s))]).logprobs
        ids = torch.tensor([world.vocab.id(t) for t in s])
        total -= float(lp.gather(1, ids[:, None]).sum())
        n += len(s)
    return total / n


def by_turns(lms, world, sequences, edges=(0, 10, 25, 50, 75, 100)) -> str:
    """Mean P(end) at destination visits, by the number of turns taken, for each LM, beside the
    data's own rate: how often the route's next token there *is* ``end`` (an LM trained on these
    sequences, calibrated, matches it on average; the ideal predictor does)."""
    prefixes, turns, ended = [], [], []
    for s in sequences:
        for p, q in enumerate(world.states_along(s)):
            if q[0] == "at" and q[1] == q[2] and p < len(s):
                prefixes.append(list(s[:p]))
                turns.append(p - 2)
                ended.append(float(s[p] == "end"))
    end_id = world.vocab.id("end")
    p_end = {
        name: torch.cat([lm.logprobs(prefixes[i : i + 256])[:, end_id].exp() for i in range(0, len(prefixes), 256)])
        for name, lm in lms.items()
    }
    p_end["data"] = torch.tensor(ended)
    t = torch.tensor(turns)
    lines = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        k = (t >= lo) & (t < hi)
        cells = ", ".join(f"{name} {float(v[k].mean()):.3f}" for name, v in p_end.items())
        lines.append(f"  P(end | at the destination), turns in [{lo}, {hi}): {int(k.sum())} visits; {cells}")
    cells = ", ".join(f"{name} {float(v.mean()):.3f}" for name, v in p_end.items())
    lines.append(f"  P(end | at the destination), all {len(turns)} visits: {cells}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders with best/, data/test.txt, train_log.csv")
    ap.add_argument("--routes", type=int, default=200)
    ap.add_argument("--nll", type=int, default=100)
    ap.add_argument(
        "--by-turns-on",
        choices=("test", "train"),
        default="test",
        help="the routes of the by-turns table: held-out (default) or the model's own training routes",
    )
    ap.add_argument("--by-turns-n", type=int, default=None, help="routes of the by-turns table (default --routes)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for run in map(Path, args.runs):
        ckpt = load_checkpoint(run / "best")
        world = ckpt.world
        test = read_sequences(run / "data" / "test.txt", world)
        log = pd.read_csv(run / "train_log.csv") if (run / "train_log.csv").exists() else None
        lms = {"model": BridgeLM(ckpt.bridge, world.vocab), "ideal": IdealLM(world)}
        pairs = pairs_from_sequences(test)[: args.routes]
        row = {
            "run": str(run),
            "steps": int(log["step"].max()) if log is not None else None,
            "best_eval_loss": float(log["eval_loss"].min()) if log is not None else None,
        }
        for name, lm in lms.items():
            routes = decode_routes(lm, world, pairs)
            end = end_at_destination(lm, world, test[: args.routes])
            row.update(
                {
                    f"{name}_valid": routes.valid.mean,
                    f"{name}_p_end": end["p_end"],
                    f"{name}_argmax_end": end["argmax_end"],
                    f"{name}_nll": nll_per_token(lm, world, test[: args.nll]),
                }
            )
            if name == "model":
                row["model_failures"] = routes.failures()
        rows.append(row)
        print(json.dumps(row), flush=True)
        on = test if args.by_turns_on == "test" else read_sequences(run / "data" / "train.txt", world)
        print(f"by turns, on {args.by_turns_on} routes:", flush=True)
        print(by_turns(lms, world, on[: args.by_turns_n or args.routes]), flush=True)
    df = pd.DataFrame(rows)
    print(df.drop(columns=["model_failures"]).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
