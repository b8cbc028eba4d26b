"""Train a small GPT-2 on the dialogue world and score its question answering as PragWorld does.

    python experiments/dialogue_qa.py [--config experiments/configs/dialogue_small.toml]
                                      [--curriculum 1,2 | --curriculum none] [--name NAME]
                                      [--groups 500] [--bench-seed 1000] [--fresh] [--eval-only]

1. Training, with the config's model, data and training settings:
   - ``--curriculum none``: exactly ``interp train --config CONFIG`` (one stage on the config's world);
   - ``--curriculum 1,2`` (the default): short conversations first — the config's world cut to
     at most 1, then 2 utterances, then the config's world itself; ``train.steps`` is split
     equally over the stages and each stage continues the previous one's weights (the trainer is
     called once per stage; its warmup and cosine schedule restart). Without it the model here
     stays at chance (see the README): answering needs a match between the question and
     utterances at varying distances, and a model trained on mixed lengths from the start never
     leaves the answer-prior plateau in this budget, while one that first learns one-utterance
     conversations (fixed positions) carries that over.
   The final stage writes the run folder exactly as ``interp train`` does (``best/``, ``last/``,
   ``data/``, ``train_log.csv``, ``next_token.*``, ``results.json``); warm-up stages go to
   ``curriculum/``. A finished run is not retrained; an interrupted one resumes.
2. Probe accuracy on the run's held-out sequences (``data/test.txt``: no conversation of the
   training set), overall, by question type, yes / no.
3. A synthetic PragWorld file (``pragworld_dialogue.csv`` in the run folder: ``--groups`` originals,
   each followed by one alteration per category, drawn with ``--bench-seed``), read back with the
   benchmark's loader and scored with its metrics: robust accuracy next to plain accuracy and the
   yes / no gap, with three reference answerers — always "no", always "yes", and "ignores the
   alteration" (each altered row answered with its original's gold).

Writes ``dialogue_qa.json`` (every number) and the per-row / per-category tables
(``dialogue_qa*.csv``) in the run folder; prints a summary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

DEFAULT_CONFIG = REPO / "experiments" / "configs" / "dialogue_small.toml"


def _save(model, path, world) -> None:
    from interp.models.checkpoint import save_checkpoint

    save_checkpoint(model, world, path)


def train_curriculum(
    cfg, base: Path, run_dir: Path, stages: list[int], fresh: bool = False, progress: bool = True, log=print
) -> dict:
    """``interp train`` with warm-up stages on shorter conversations (see the module docstring)."""
    from interp.config import to_dict
    from interp.jobs.experiment import make_data, resolve_world_arg, test_best
    from interp.models.gpt2 import build_gpt2, count_parameters
    from interp.results import write_json
    from interp.train.trainer import train
    from interp.worlds import parse_world
    from interp.worlds.dialogue import DialogueWorld
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import write_sequences

    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    world = parse_world(resolve_world_arg(cfg.world, base))
    if not isinstance(world, DialogueWorld):
        raise SystemExit(f"--curriculum needs a dialogue world, the config has {cfg.world!r}")
    spec = world.spec()
    cuts = [k for k in stages if k < world.max_utts]
    plan = [DialogueWorld.from_spec({**spec, "max_utts": k, "min_utts": min(spec["min_utts"], k)}) for k in cuts] + [
        world
    ]
    share = cfg.train.steps // len(plan)
    model = build_gpt2(world.vocab, cfg.model)
    log(f"world: {world.describe()}")
    log(
        f"model: GPT-2 {cfg.model.n_layer} layers × {cfg.model.d_model} wide, "
        f"{count_parameters(model):,} parameters; curriculum max_utts "
        f"{[w.max_utts for w in plan]}, {share} steps per warm-up stage"
    )
    done, stage_info = 0, []
    for i, w in enumerate(plan):
        last = i == len(plan) - 1
        steps = cfg.train.steps - done if last else share
        tcfg = replace(
            cfg.train,
            steps=steps,
            warmup_steps=min(cfg.train.warmup_steps, steps // 5),
            eval_every=min(cfg.train.eval_every, steps) if cfg.train.eval_every else 0,
        )
        data_cfg = cfg.data if last else replace(cfg.data, seed=cfg.data.seed + 1 + i, dir=None)
        train_seqs, test_seqs = make_data(w, data_cfg, base)
        out = run_dir if last else run_dir / "curriculum" / f"stage{i + 1}_max_utts{w.max_utts}"
        if last:
            write_sequences(run_dir / "data" / "train.txt", train_seqs)
            write_sequences(run_dir / "data" / "test.txt", test_seqs)
            write_json(run_dir / "config.json", {**to_dict(cfg), "curriculum": stages})
            write_json(run_dir / "world.json", world.spec())
        result = train(
            model,
            encode_sequences(train_seqs, w.vocab, cfg.model.n_ctx),
            encode_sequences(test_seqs, w.vocab, cfg.model.n_ctx),
            tcfg,
            out,
            pad_id=w.vocab.pad_id,
            save_model_fn=partial(_save, world=w),
            progress=progress,
            run_info={"name": cfg.name, "stage": i + 1},
        )
        done += result.steps
        stage_info.append(
            {
                "max_utts": w.max_utts,
                "steps": result.steps,
                "train": len(train_seqs),
                "best_eval_loss": result.best_eval_loss,
                "final_train_loss": result.final_train_loss,
                "tokens_per_second": result.tokens_per_second,
            }
        )
        log(
            f"stage {i + 1}/{len(plan)} (max_utts {w.max_utts}): {result.steps} steps, train loss "
            f"{result.final_train_loss:.4f}, best held-out loss {result.best_eval_loss:.4f}, "
            f"{result.tokens_per_second:,.0f} tokens/s"
        )
    nt = test_best(run_dir, world, test_seqs, cfg.eval_sequences, progress, log)
    results = {
        "config": to_dict(cfg),
        "world": world.describe(),
        "curriculum": stage_info,
        "data": {"train": len(train_seqs), "test": len(test_seqs)},
        "train": {**result.to_dict(), "steps": done, "final_stage_steps": result.steps},
        "next_token": nt.summary(),
    }
    write_json(run_dir / "results.json", results)
    return results


def _seen_contexts(train_seqs, world, rows) -> float:
    """Share of the benchmark's originals whose conversation is an utterance-prefix of a training one."""
    from interp.worlds.dialogue.grammar import SPEAKERS

    prefixes = set()
    for s in train_seqs:
        conv = world.split_key(s)
        for i, t in enumerate(conv):
            if t in SPEAKERS:
                prefixes.add(tuple(conv[:i]))
        prefixes.add(tuple(conv))
    originals = rows[~rows["altered"]]
    return float(sum(tuple(c.split()) in prefixes for c in originals["context"]) / max(len(originals), 1))


def evaluate_run(run_dir: Path, groups: int, bench_seed: int) -> dict:
    """Held-out probe accuracy and the synthetic PragWorld scores of ``run_dir/best``."""
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.dialogue_qa import evaluate_benchmark, probe_accuracy
    from interp.metrics.pragworld import score_pragworld
    from interp.models.checkpoint import load_checkpoint
    from interp.worlds.dialogue.export import write_benchmark
    from interp.worlds.io import read_sequences

    ckpt = load_checkpoint(run_dir / "best")
    world = ckpt.world
    held_out = probe_accuracy(ckpt.bridge, world, read_sequences(run_dir / "data" / "test.txt", world))
    bench_path = write_benchmark(world, run_dir / "pragworld_dialogue.csv", groups, bench_seed)
    score, _ = evaluate_benchmark(ckpt.bridge, world, bench_path)
    score.save(run_dir, "dialogue_qa")
    rows = score.per_example
    orig_gold = rows.groupby("group")["gold"].transform(lambda g: g.iloc[0])
    baselines = {
        "always_no": score_pragworld(rows, ["no"] * len(rows)).table1_row(),
        "always_yes": score_pragworld(rows, ["yes"] * len(rows)).table1_row(),
        "ignores_alteration": score_pragworld(rows, ["yes" if g else "no" for g in orig_gold]).table1_row(),
    }
    s = score.summary()
    train_seqs = read_sequences(run_dir / "data" / "train.txt", world)
    return {
        "world": world.describe(),
        "held_out_probes": held_out,
        "benchmark": {
            "path": str(bench_path),
            "groups": s["groups"],
            "rows": s["rows"],
            "seen_context_share": _seen_contexts(train_seqs, world, load_pragworld(bench_path).rows),
            **score.table1_row(),
            "total": s["total"],
            "yes_no_gap": s["yes"] - s["no"],
            "robust_ci": [s["robust_ci_low"], s["robust_ci_high"]],
        },
        "per_category": score.per_category.to_dict("records"),
        "baselines": baselines,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument(
        "--curriculum",
        default="1,2",
        help="max_utts of the warm-up stages, comma-separated, or 'none' (plain interp train)",
    )
    ap.add_argument("--name", help="run name (default: the config's name)")
    ap.add_argument("--groups", type=int, default=500, help="benchmark groups (originals)")
    ap.add_argument("--bench-seed", type=int, default=1000)
    ap.add_argument("--fresh", action="store_true", help="retrain from scratch")
    ap.add_argument("--eval-only", action="store_true", help="score the run's best checkpoint, do not train")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    from interp.jobs.experiment import load_experiment, run_experiment
    from interp.results import write_json

    cfg, base = load_experiment(args.config)
    if args.name:
        cfg = replace(cfg, name=args.name)
    run_dir = Path(cfg.runs_dir) / cfg.name
    run_dir = run_dir if run_dir.is_absolute() else Path.cwd() / run_dir
    stages = [] if args.curriculum.strip().lower() == "none" else [int(k) for k in args.curriculum.split(",")]
    timing = run_dir / "dialogue_qa_timing.json"
    if not args.eval_only:
        t0 = time.perf_counter()
        if stages:
            train_curriculum(cfg, base, run_dir, stages, fresh=args.fresh, progress=not args.no_progress)
        else:
            run_experiment(cfg, base, fresh=args.fresh, progress=not args.no_progress)
        write_json(timing, {"training_seconds": round(time.perf_counter() - t0, 1), "curriculum": stages})
    timed = json.loads(timing.read_text()) if timing.exists() else {}
    wall, stages = timed.get("training_seconds"), timed.get("curriculum", stages)
    train_info = json.loads((run_dir / "results.json").read_text())["train"]

    out = {
        "run_dir": str(run_dir),
        "config": args.config,
        "curriculum": stages,
        "train": {
            "steps": train_info["steps"],
            "best_eval_loss": train_info["best_eval_loss"],
            "tokens_per_second": train_info["tokens_per_second"],
            "seconds": wall,
        },
        **evaluate_run(run_dir, args.groups, args.bench_seed),
    }
    write_json(run_dir / "dialogue_qa.json", out)
    h, b = out["held_out_probes"], out["benchmark"]
    print(f"world: {out['world']}")
    print(
        f"training: {out['train']['steps']} steps{f' (curriculum {stages})' if stages else ''}, "
        f"{wall} s with data and next-token test, best held-out loss {out['train']['best_eval_loss']:.4f}"
    )
    print(
        f"held-out probes: accuracy {h['accuracy']:.3f} ± {h['accuracy_se']:.3f} over {h['probes']} "
        f"(yes {h['yes']:.3f}, no {h['no']:.3f}; always-no {h['always_no_baseline']:.3f}); by type "
        + ", ".join(f"{k} {v:.3f}" for k, v in h["by_type"].items())
    )
    print(
        f"benchmark ({b['groups']} groups, {b['rows']} rows; {100 * b['seen_context_share']:.0f}% of original "
        f"conversations also begin a training one): robust {b['robust']:.2f} [{b['robust_ci'][0]:.1f}, "
        f"{b['robust_ci'][1]:.1f}], total {b['total']:.2f}, original {b['original']:.2f}, altered "
        f"{b['altered']:.2f}, flip {b['flip']:.2f}, invariant {b['invariant']:.2f}, yes {b['yes']:.2f}, "
        f"no {b['no']:.2f} (gap {b['yes_no_gap']:+.2f})"
    )
    for name, r in out["baselines"].items():
        print(
            f"  baseline {name}: robust {r['robust']:.2f}, original {r['original']:.2f}, "
            f"flip {r['flip']:.2f}, invariant {r['invariant']:.2f}"
        )
    print(run_dir / "dialogue_qa.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
