"""Planted harm at real depth: SmolLM2-135M-Instruct (30 layers) on indirect-object identification
(issue 30, item 4), end to end — what ``experiments/ioi_planted.py`` runs.

1. **Prompts** (:func:`interp.datasets.ioi.split_ioi_prompts`): training and held-out IOI prompts with
   disjoint name pairs, written as contrast files ``train.jsonl`` / ``heldout.jsonl``.
2. **Plant** (:func:`interp.train.plant.plant_harm`, corruption ``foil_share``): only the MLP of the
   planted layer(s) trained toward S instead of IO on a ``share`` of the training prompts (every other
   weight bit-identical: :func:`~interp.analysis.planted.ioi.check_frozen`); controls: the unplanted
   model and the same recipe on correct targets (``clean``), also at smaller learning rates.
3. **Judge** each model by the MLP zero-out sweep on the held-out prompts against the unplanted
   model's verdicts (:mod:`interp.analysis.planted.judge`): the newly harmful layers, the planted layer's
   rank, precision / recall beside the raw rule; other changed layers measured along two paths, and a
   several-layer planting undone one layer at a time (:mod:`interp.analysis.planted.ioi`).
4. **Repair**: the found layers zeroed; plain fine-tuning and HLS on the found layers, over seeds.

Writes ``cfg.out``: prompt files, one folder per model, ``changes.csv``, ``detection.csv``,
``paths.csv``, ``unplanted_layers.csv``, ``repair.csv``, ``repair_summary.csv``, ``ioi_planted.md``
and ``results.json``. Plantings, sweeps and repair evaluations found there with the same settings are
reused.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.analysis.planted.ioi import (
    check_frozen,
    eval_rows,
    evaluate_hf,
    mean_sq,
    path_rows,
    repair_summary,
    sweep_model,
    unplant_rows,
)
from interp.viz.planted_tables import detection_markdown, pooled_markdown, repair_markdown, unplant_markdown

#: the pinned unplanted model (:func:`interp.models.registry.get_model`)
MODEL = "smollm2-135m-instruct"


@dataclass
class IOIPlantedConfig:
    """Settings of :func:`run_ioi_planted` (the options of ``experiments/ioi_planted.py``, same names).

    ``plant``: planted layer(s) per planting as text (``"15"``, ``"8,20"``; None: 4, 15, 24 and 8,20);
    ``repair``: plantings to repair (``"15"`` or ``"L8+L20"``; None: the second planting);
    ``quick``: CI-sized (:meth:`resolved`)."""

    model: str | None = None
    out: str = "runs/ioi_planted"
    plant: list[str] | None = None
    control_layer: int = 15
    control_lr: list[float] | None = None
    share: float = 0.3
    steps: int = 30
    lr: float = 2e-3
    batch_size: int = 16
    plant_seed: int = 0
    n_train: int = 256
    n_heldout: int = 48
    sweep_batch: int = 32
    repair: list[str] | None = None
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    repair_steps: int = 12
    repair_lr: float = 2e-5
    beta: float = 1e-3
    repair_objectives: list[str] = field(default_factory=lambda: ["plain", "hls"])
    no_control: bool = False
    threads: int = 2
    no_progress: bool = False
    quick: bool = False

    def resolved(self) -> IOIPlantedConfig:
        """With ``quick``: one planting (layer 15), 24 held-out and 64 training prompts, 10 planting
        steps at lr 3e-3, one repair seed of 4 steps; otherwise itself."""
        if self.quick:
            self.plant = self.plant or ["15"]
            self.n_heldout, self.n_train, self.steps, self.seeds, self.repair_steps = 24, 64, 10, [0], 4
            self.lr = 3e-3
        return self


def parse_planting(text: str) -> tuple[int, ...]:
    """Planted layers from ``"8,20"`` or ``"8+20"``."""
    return tuple(int(x) for x in text.replace("+", ",").split(",") if x.strip())


def _finetune(
    folder: Path, train_task: Any, objective: str, layers: list[int], seed: int, cfg: IOIPlantedConfig, out: Path
) -> tuple[Any, Any]:
    """Plain or HLS fine-tuning of the whole model on the clean training prompts (loss on the answer
    token); returns the fine-tuned HF model (not saved: only its evaluation is kept)."""
    from interp.config import TrainConfig
    from interp.models.checkpoint import load_hf_model
    from interp.tasks import pad_right
    from interp.train.finetune_data import free_pad_id
    from interp.train.regularisers import HLS
    from interp.train.trainer import train

    seqs, start = train_task.training_rows("correct")
    pad = free_pad_id(seqs, train_task.pad_id, len(train_task.tokenization.tokenizer))
    ids, _, _ = pad_right(seqs, pad, "cpu")
    torch.manual_seed(seed)
    model = load_hf_model(folder)
    terms = [HLS(layers, cfg.beta)] if objective == "hls" else []
    train_cfg = TrainConfig(
        steps=cfg.repair_steps,
        batch_size=cfg.batch_size,
        lr=cfg.repair_lr,
        min_lr=cfg.repair_lr / 10,
        warmup_steps=min(5, cfg.repair_steps // 5),
        eval_every=0,
        checkpoint_every=0,
        seed=seed,
    )
    result = train(
        model,
        ids,
        None,
        train_cfg,
        out,
        pad_id=pad,
        loss_terms=terms,
        loss_from=torch.tensor(start),
        resume=False,
        progress=not cfg.no_progress,
    )
    return model, result


def repair(
    name: str,
    folder: Path,
    base: Path,
    found: list[int],
    train_task: Any,
    task: Any,
    cfg: IOIPlantedConfig,
    out: Path,
    log: Callable[[str], Any],
) -> pd.DataFrame:
    """The repair table of one planting (long form, :func:`~interp.analysis.planted.ioi.eval_rows` rows): the
    planted model, the found layers zeroed, the unplanted model, and per seed each fine-tuning repair
    (``cfg.repair_objectives``; cached in ``out/<objective>_s<seed>/eval.json`` under a key of its settings)."""
    from interp.models.checkpoint import load_hf_model

    groups = task.groups
    rows = []
    planted_model = load_hf_model(folder)
    rows += eval_rows(evaluate_hf(planted_model, task), groups, "planted", None)
    if found:
        rows += eval_rows(evaluate_hf(planted_model, task, tuple(found)), groups, f"zeroed {found}", None)
    sq = mean_sq(planted_model, task, found) if found else math.nan
    del planted_model
    rows += eval_rows(evaluate_hf(load_hf_model(base), task), groups, "unplanted", None)
    objectives = [o for o in cfg.repair_objectives if o == "plain" or found]
    for seed in cfg.seeds:  # seed-major: an interrupted run has every objective of the first seed
        for objective in objectives:
            run = out / f"{objective}_s{seed}"
            key = {
                "objective": objective,
                "seed": seed,
                "layers": found,
                "beta": cfg.beta,
                "steps": cfg.repair_steps,
                "lr": cfg.repair_lr,
                "batch_size": cfg.batch_size,
                "n_train": len(train_task),
                "model": str(folder.resolve()),
            }
            cached = run / "eval.json"
            label = "plain" if objective == "plain" else f"HLS β={cfg.beta:g} on {found}"
            if cached.is_file() and json.loads(cached.read_text()).get("key") == key:
                ld = np.array(json.loads(cached.read_text())["logit_diff"])
                log(f"  repair {name} {objective} seed {seed}: reused")
            else:
                t0 = time.perf_counter()
                model, result = _finetune(folder, train_task, objective, found, seed, cfg, run)
                ld = evaluate_hf(model, task)
                run.mkdir(parents=True, exist_ok=True)
                cached.write_text(
                    json.dumps(
                        {
                            "key": key,
                            "logit_diff": ld.tolist(),
                            "final_train_loss": result.final_train_loss,
                            "seconds": round(time.perf_counter() - t0, 1),
                        }
                    )
                    + "\n"
                )
                log(
                    f"  repair {name} {objective} seed {seed}: {cfg.repair_steps} steps, LD {ld.mean():.2f}, "
                    f"{time.perf_counter() - t0:.0f} s"
                )
                del model
            rows += eval_rows(ld, groups, label, seed)
    table = pd.DataFrame(rows)
    table.insert(0, "planting", name)
    table.attrs["hls_mean_sq"] = sq
    return table


@dataclass
class PlantedRun:
    """One run's shared state: the resolved config, the unplanted model's folder, the output folder,
    the log, and what each stage hands on (the prompts, the models, their sweeps and detections)."""

    cfg: IOIPlantedConfig
    base: Path
    out: Path
    log: Callable[[str], Any]
    train_task: Any = None
    task: Any = None
    dropped: int = 0
    #: (name, planted layers, folder, "planting" | "control"), the unplanted model first
    models: list[tuple[str, tuple[int, ...], Path, str]] = field(default_factory=list)
    sweeps: dict[str, Any] = field(default_factory=dict)  # name → (sweep, verdicts, scores)
    detection: list[dict[str, Any]] = field(default_factory=list)
    restored: list[dict[str, Any]] = field(default_factory=list)  # several-layer plantings undone a layer at a time


def run_ioi_planted(cfg: IOIPlantedConfig, log: Callable[[str], Any] = print) -> str:
    """Plant, judge and repair as the module docstring says; returns the report ``ioi_planted.md``."""
    from interp.hardware import machine

    cfg = cfg.resolved()
    plantings = [parse_planting(x) for x in (cfg.plant or ["4", "15", "24", "8,20"])]
    torch.set_num_threads(cfg.threads)
    started = datetime.now(UTC)
    t_start = time.perf_counter()
    info = machine()  # the fp32 matmul peak of this run, measured before the work starts
    log(f"machine: {info}")
    if cfg.model is None:
        from interp.models.registry import get_model

        cfg.model = str(get_model(MODEL))
    run = PlantedRun(cfg, Path(cfg.model), Path(cfg.out), log)
    run.out.mkdir(parents=True, exist_ok=True)
    prompts_stage(run)
    plant_stage(run, plantings)
    judge_stage(run)
    names = ["L" + "+L".join(map(str, x)) for x in plantings]
    tables, summary = repair_stage(run, names[1] if len(names) > 1 else names[0])
    return report(run, tables, summary, started, time.perf_counter() - t_start, info)


def prompts_stage(run: PlantedRun) -> None:
    """1. Training and held-out IOI prompts with disjoint name pairs, as contrast files and tasks."""
    from transformers import AutoTokenizer

    from interp.datasets.contrast import write_contrast
    from interp.datasets.ioi import split_ioi_prompts
    from interp.tasks import ContrastTask

    cfg, out = run.cfg, run.out
    tok = AutoTokenizer.from_pretrained(run.base)
    train_ex, held_ex, run.dropped = split_ioi_prompts(tok, cfg.n_train, cfg.n_heldout)
    write_contrast(train_ex, out / "train.jsonl")
    write_contrast(held_ex, out / "heldout.jsonl")
    run.task = ContrastTask.build(run.base, out / "heldout.jsonl")
    run.train_task = ContrastTask.build(run.base, out / "train.jsonl")
    run.log(
        f"prompts: {len(run.train_task)} training, {len(run.task)} held-out ({len(set(run.task.groups))} groups); "
        f"{run.dropped} training prompts dropped for sharing a name pair with the held-out set"
    )


def plant_stage(run: PlantedRun, plantings: list[tuple[int, ...]]) -> None:
    """2. Each planting (only its layers' MLPs trained toward S; the rest checked bit-identical) and,
    unless quick or ``no_control``, the clean-target controls."""
    from interp.train.plant import PlantSpec, plant_harm

    cfg, base, out = run.cfg, run.base, run.out

    def make_spec(layers: tuple[int, ...], corruption: str, lr: float) -> PlantSpec:
        share = cfg.share if corruption == "foil_share" else PlantSpec.share
        return PlantSpec(layers=layers, corruption=corruption, share=share, seed=cfg.plant_seed, steps=cfg.steps,
                         batch_size=cfg.batch_size, lr=lr)  # fmt: skip

    run.models = [("unplanted", (), base, "control")]
    todo = [("L" + "+L".join(map(str, x)), x, make_spec(x, "foil_share", cfg.lr), "planting") for x in plantings]
    if not cfg.quick and not cfg.no_control:
        k = cfg.control_layer
        for lr in cfg.control_lr or [cfg.lr]:
            name = f"L{k}_clean" + ("" if lr == cfg.lr else f"_lr{lr:g}")
            todo.append((name, (k,), make_spec((k,), "clean", lr), "control"))
    for name, layers, spec, kind in todo:
        res = plant_harm(
            base, out / name, spec, train_file=out / "train.jsonl", progress=not cfg.no_progress, log=run.log
        )
        check_frozen(base, res.model, layers)
        run.models.append((name, layers if kind == "planting" else (), res.model, kind))


def judge_stage(run: PlantedRun) -> None:
    """3. Every model's MLP zero-out sweep on the held-out prompts, judged against the unplanted
    model's verdicts; ``changes.csv``, ``detection.csv``, ``paths.csv``, ``unplanted_layers.csv``."""
    out = run.out
    run.log(f"sweeps (every layer, {len(run.task)} held-out prompts):")
    for name, _layers, folder, _kind in run.models:
        run.sweeps[name] = sweep_model(folder, run.task, out / name, run.cfg.sweep_batch, run.log)
    changes_all, paths_all = [], []
    for name, layers, folder, kind in run.models:
        ch, prow, row = judge_model(run, name, layers, folder, kind)
        changes_all.append(ch)
        if len(prow):
            paths_all.append(prow)
        run.detection.append(row)
    pd.concat(changes_all, ignore_index=True).to_csv(out / "changes.csv", index=False)
    pd.DataFrame(
        [{k: (json.dumps(v) if isinstance(v, (list, tuple)) else v) for k, v in r.items()} for r in run.detection]
    ).to_csv(out / "detection.csv", index=False)
    (pd.concat(paths_all, ignore_index=True) if paths_all else pd.DataFrame()).to_csv(out / "paths.csv", index=False)
    for name, layers, folder, kind in run.models:  # several planted layers: the harm each one carries
        if kind == "planting" and len(layers) > 1:
            run.restored += unplant_rows(name, folder, run.base, run.task, layers)
    pd.DataFrame(run.restored).to_csv(out / "unplanted_layers.csv", index=False)


def judge_model(
    run: PlantedRun, name: str, layers: tuple[int, ...], folder: Path, kind: str
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """One model against the unplanted one: its verdict changes, the paths of the other changed
    layers whose removal now helps, and its detection row (logged)."""
    from interp.analysis.planted.judge import detection_scores, harm_rise, verdict_changes

    base_sweep, base_verdicts, _ = run.sweeps["unplanted"]
    sweep, verdicts, scores = run.sweeps[name]
    rise = harm_rise(base_sweep, sweep, min_effect=verdicts.min_effect, higher_is_better=True)
    ch = verdict_changes(base_verdicts, verdicts, layers, rise=rise)
    ch.insert(0, "model", name)
    d = detection_scores(ch)
    ranks = ", ".join(
        f"L{int(r.layer)}: {int(r['rank'])}" if not math.isnan(r["rank"]) else f"L{int(r.layer)}: –"
        for _, r in ch[ch.planted].iterrows()
    ) or "–"  # fmt: skip
    others, prow = [], pd.DataFrame()
    if name != "unplanted" and d["other_changed"]:
        # paths measured for the other changed layers whose removal now helps (benefit > 0); those whose
        # removal still hurts moved because the planting lowered the clean logit difference they protect
        helps = [j for j in d["other_changed"] if float(ch.loc[ch.layer == j, "benefit_after"].iloc[0]) > 0]
        if helps:
            prow = pd.DataFrame(path_rows(folder, run.task, layers, helps, run.cfg.sweep_batch))
        if len(prow):
            prow.insert(0, "model", name)
        for j in d["other_changed"]:
            r = ch[ch.layer == j].iloc[0]
            line = f"L{j} {r.verdict_before}→{r.verdict_after} (Δ {r.delta_effect:+.2f}"
            if len(prow):
                for _, q in prow[prow.layer == j].iterrows():
                    line += f"; {q.path} {q.mean_effect:+.2f}"
            others.append(line + ")")
    rose = ", ".join(
        f"L{int(q.layer)} {q.effect_before:+.2f} → {q.effect_after:+.2f} (rise {q.rise:+.2f} [{q.rise_low:+.2f}, "
        f"{q.rise_high:+.2f}])"
        for _, q in ch[ch.harm_rose].iterrows()
    )
    row = {"model": name, "rose": rose or "–", "kind": kind, "planted": list(layers), **d, "ranks": ranks,
           "other": "; ".join(others) or "–", **scores}  # fmt: skip
    run.log(
        f"  {name}: newly harmful {d['newly_harmful']} (raw rule {d['raw_newly_harmful']}), planted ranks {ranks}, "
        f"accuracy {scores['accuracy'][0]:.2f}, logit diff {scores['logit_diff'][0]:.2f}"
    )
    return ch, prow, row


def repair_stage(run: PlantedRun, default: str) -> tuple[list[pd.DataFrame], pd.DataFrame]:
    """4. The repair tables of the plantings ``cfg.repair`` names (else ``default``), on the layers
    each one's judging found; ``repair.csv`` and ``repair_summary.csv``."""
    cfg = run.cfg
    run.log("repair:")
    names = [f"L{x}" if x.isdigit() else x for x in cfg.repair] if cfg.repair else [default]
    tables = []
    for name, _layers, folder, _kind in run.models:
        if name not in names:
            continue
        found = next(r["newly_harmful"] for r in run.detection if r["model"] == name)
        tables.append(
            repair(name, folder, run.base, found, run.train_task, run.task, cfg, run.out / name / "repair", run.log)
        )
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    table.to_csv(run.out / "repair.csv", index=False)
    summary = repair_summary(table) if tables else pd.DataFrame()
    summary.to_csv(run.out / "repair_summary.csv", index=False)
    return tables, summary


def report(
    run: PlantedRun, tables: list[pd.DataFrame], summary: pd.DataFrame, started: datetime, seconds: float, info: dict
) -> str:
    """``ioi_planted.md`` (returned) and ``results.json``."""
    from interp.results import write_json

    cfg, task, train_task, detection = run.cfg, run.task, run.train_task, run.detection
    n_found = sum(bool(r["found"]) for r in detection if r["kind"] == "planting")
    n_plant = sum(r["kind"] == "planting" for r in detection)
    head = (
        f"Recorded {started:%Y-%m-%d %H:%M} UTC on {info['cpu']} ({info['cores']} cores, {info['threads']} torch "
        f"thread(s)), fp32 matmul peak {info['matmul_peak_gflops']} GFLOP/s measured at the start of the run; "
        f"{seconds / 60:.1f} min."
    )
    text: list[str] = [
        "# Planted harm on SmolLM2-135M-Instruct, IOI",
        "",
        head,
        "",
        f"Recipe: `--share {cfg.share} --steps {cfg.steps} --lr {cfg.lr:g} --batch-size {cfg.batch_size}`, "
        f"{len(train_task)} training prompts, {len(task)} held-out prompts ({len(set(task.groups))} groups, name "
        f"pairs disjoint from training). Planted layers found (newly harmful and first among the changed "
        f"layers): {n_found} of {n_plant}.",
        "",
        detection_markdown(detection),
        "",
        pooled_markdown(detection),
        "",
    ]
    if run.restored:
        text += [
            "The harm each layer of a several-layer planting carries: its MLP weights put back to the "
            "unplanted model's, one layer at a time (plain HF forwards; nothing removed).",
            "",
            unplant_markdown(run.restored, run.sweeps["unplanted"][2]["logit_diff"][0]),
            "",
        ]
    if len(summary):
        sq = {t.planting.iloc[0]: t.attrs.get("hls_mean_sq") for t in tables}
        tuned = (
            f"{cfg.repair_steps} fine-tuning steps (lr {cfg.repair_lr:g}, batch {cfg.batch_size}) of "
            f"{', '.join(cfg.repair_objectives)} on the clean training prompts, seeds {cfg.seeds}; HLS β = "
            f"{cfg.beta:g}"
            if cfg.repair_objectives
            else "the found layers zeroed only (no fine-tuning run)"
        )
        text += [
            f"Repair: {tuned}; Σ mean MLP_out² of the found layers on the planted model: "
            + ", ".join(f"{k}: {v:.3g}" for k, v in sq.items())
            + ".",
            "",
            repair_markdown(summary),
            "",
        ]
    (run.out / "ioi_planted.md").write_text("\n".join(text))
    write_json(
        run.out / "results.json",
        {
            "date": started.isoformat(timespec="seconds"),
            "machine": info,
            "seconds": round(seconds, 1),
            "settings": asdict(cfg),
            "prompts": {"train": len(train_task), "heldout": len(task), "dropped": run.dropped},
            "detection": detection,
            "repair": summary.to_dict(orient="records") if len(summary) else [],
        },
    )
    return "\n".join(text)


__all__ = ["MODEL", "IOIPlantedConfig", "PlantedRun", "parse_planting", "repair", "run_ioi_planted"]
