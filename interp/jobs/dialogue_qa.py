"""A small GPT-2 trained on the dialogue world and scored on question answering as PragWorld does, end
to end: what ``experiments/dialogue_qa.py`` runs.

1. Training (:func:`run_dialogue_qa`): with no curriculum exactly ``interp train`` of the config
   (:func:`interp.jobs.experiment.run_experiment`); with one, :func:`train_dialogue_curriculum` — short
   conversations first (at most 1, then 2 utterances, …), each stage continuing the previous one's
   weights. A finished run is not retrained; an interrupted one resumes.
2. :func:`evaluate_run`: probe accuracy on the run's held-out sequences, and a synthetic PragWorld file
   scored with the benchmark's metrics beside three reference answerers.

Writes ``dialogue_qa.json`` (every number) and the per-row / per-category tables (``dialogue_qa*.csv``)
in the run folder; :func:`summary_lines` is the printed summary.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any


@dataclass
class DialogueQAConfig:
    """Settings of :func:`run_dialogue_qa` (the options of ``experiments/dialogue_qa.py``, same names).

    ``config``: the experiment TOML; ``curriculum``: max_utts of the warm-up stages, comma-separated,
    or ``"none"`` (plain ``interp train``); ``name``: run name (None: the config's); ``groups`` /
    ``bench_seed``: the benchmark's originals and seed; ``fresh``: retrain from scratch;
    ``eval_only``: score the run's best checkpoint without training; ``no_progress``: no bars."""

    config: str
    curriculum: str = "1,2"
    name: str | None = None
    groups: int = 500
    bench_seed: int = 1000
    fresh: bool = False
    eval_only: bool = False
    no_progress: bool = False


def parse_stages(text: str) -> list[int]:
    """``"1,2"`` → ``[1, 2]``; ``"none"`` (any case) → ``[]``."""
    if text.strip().lower() == "none":
        return []
    try:
        return [int(k) for k in text.split(",")]
    except ValueError:
        raise ValueError(f"curriculum {text!r}: expected max_utts values separated by commas, or 'none'") from None


def _save(model: Any, path: Path, world: Any) -> None:
    from interp.models.checkpoint import save_checkpoint

    save_checkpoint(model, world, path)


def train_dialogue_curriculum(
    cfg: Any,
    base: Path,
    run_dir: Path,
    stages: list[int],
    fresh: bool = False,
    progress: bool = True,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """``interp train`` of the experiment config ``cfg`` (:class:`~interp.jobs.experiment.ExperimentConfig`,
    relative paths from ``base``) with warm-up stages on shorter conversations: the config's dialogue
    world cut to at most ``stages[i]`` utterances, ``train.steps`` split equally over the stages and
    the world itself, each stage continuing the previous one's weights. The final stage writes
    ``run_dir`` as ``interp train`` does; warm-up stages go to ``run_dir/curriculum``. Returns the
    run's ``results.json``."""
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
        raise ValueError(f"the curriculum needs a dialogue world, the config has {cfg.world!r}")
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


def evaluate_run(run_dir: Path, groups: int, bench_seed: int) -> dict[str, Any]:
    """Held-out probe accuracy and the synthetic PragWorld scores of ``run_dir/best``: the benchmark
    (``groups`` originals, drawn with ``bench_seed``) written to ``run_dir/pragworld_dialogue.csv`` and
    scored (``dialogue_qa*.csv``), beside three reference answerers (always "no", always "yes", and
    "ignores the alteration": each altered row answered with its original's gold)."""
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.dialogue_qa import evaluate_benchmark, probe_accuracy, seen_context_share
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
            "seen_context_share": seen_context_share(train_seqs, world, load_pragworld(bench_path).rows),
            **score.table1_row(),
            "total": s["total"],
            "yes_no_gap": s["yes"] - s["no"],
            "robust_ci": [s["robust_ci_low"], s["robust_ci_high"]],
        },
        "per_category": score.per_category.to_dict("records"),
        "baselines": baselines,
    }


def run_dialogue_qa(qa: DialogueQAConfig) -> dict[str, Any]:
    """Train (unless ``eval_only``) and score as the module docstring says; writes and returns
    ``dialogue_qa.json``'s content."""
    from interp.jobs.experiment import load_experiment, run_experiment
    from interp.results import write_json

    cfg, base = load_experiment(qa.config)
    if qa.name:
        cfg = replace(cfg, name=qa.name)
    run_dir = Path(cfg.runs_dir) / cfg.name
    run_dir = run_dir if run_dir.is_absolute() else Path.cwd() / run_dir
    stages = parse_stages(qa.curriculum)
    timing = run_dir / "dialogue_qa_timing.json"
    if not qa.eval_only:
        t0 = time.perf_counter()
        if stages:
            train_dialogue_curriculum(cfg, base, run_dir, stages, fresh=qa.fresh, progress=not qa.no_progress)
        else:
            run_experiment(cfg, base, fresh=qa.fresh, progress=not qa.no_progress)
        write_json(timing, {"training_seconds": round(time.perf_counter() - t0, 1), "curriculum": stages})
    timed = json.loads(timing.read_text()) if timing.exists() else {}
    wall, stages = timed.get("training_seconds"), timed.get("curriculum", stages)
    train_info = json.loads((run_dir / "results.json").read_text())["train"]

    out = {
        "run_dir": str(run_dir),
        "config": qa.config,
        "curriculum": stages,
        "train": {
            "steps": train_info["steps"],
            "best_eval_loss": train_info["best_eval_loss"],
            "tokens_per_second": train_info["tokens_per_second"],
            "seconds": wall,
        },
        **evaluate_run(run_dir, qa.groups, qa.bench_seed),
    }
    write_json(run_dir / "dialogue_qa.json", out)
    return out


def summary_lines(out: dict[str, Any]) -> list[str]:
    """The printed summary of :func:`run_dialogue_qa`'s result: the world, training, held-out probes,
    the benchmark and its reference answerers."""
    h, b = out["held_out_probes"], out["benchmark"]
    stages, wall = out["curriculum"], out["train"]["seconds"]
    lines = []
    lines.append(f"world: {out['world']}")
    lines.append(
        f"training: {out['train']['steps']} steps{f' (curriculum {stages})' if stages else ''}, "
        f"{wall} s with data and next-token test, best held-out loss {out['train']['best_eval_loss']:.4f}"
    )
    lines.append(
        f"held-out probes: accuracy {h['accuracy']:.3f} ± {h['accuracy_se']:.3f} over {h['probes']} "
        f"(yes {h['yes']:.3f}, no {h['no']:.3f}; always-no {h['always_no_baseline']:.3f}); by type "
        + ", ".join(f"{k} {v:.3f}" for k, v in h["by_type"].items())
    )
    lines.append(
        f"benchmark ({b['groups']} groups, {b['rows']} rows; {100 * b['seen_context_share']:.0f}% of original "
        f"conversations also begin a training one): robust {b['robust']:.2f} [{b['robust_ci'][0]:.1f}, "
        f"{b['robust_ci'][1]:.1f}], total {b['total']:.2f}, original {b['original']:.2f}, altered "
        f"{b['altered']:.2f}, flip {b['flip']:.2f}, invariant {b['invariant']:.2f}, yes {b['yes']:.2f}, "
        f"no {b['no']:.2f} (gap {b['yes_no_gap']:+.2f})"
    )
    for name, r in out["baselines"].items():
        lines.append(
            f"  baseline {name}: robust {r['robust']:.2f}, original {r['original']:.2f}, "
            f"flip {r['flip']:.2f}, invariant {r['invariant']:.2f}"
        )
    return lines


__all__ = [
    "DialogueQAConfig",
    "evaluate_run",
    "parse_stages",
    "run_dialogue_qa",
    "summary_lines",
    "train_dialogue_curriculum",
]
