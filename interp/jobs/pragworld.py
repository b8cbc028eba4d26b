"""The PragWorld pipeline on a pretrained model, end to end (PragWorld §4, §6.1–6.3): the job behind
``experiments/smollm2_pragworld.py`` and ``interp run CONFIG`` with ``job = "pragworld"``.

Stages, each writing into the run folder (:class:`~interp.config.PragWorldJobConfig`):

a. **evaluate** (Table 1): the first ``eval.rows`` manual rows (whole groups) asked both ways —
   the published generation prompt through the chat template, read by the benchmark's parser, and
   the label prompt scored by the two-way yes/no softmax (:func:`interp.metrics.pragworld_eval.evaluate_model`,
   resumable) — with cluster-bootstrap intervals over PragWorld groups
   (:func:`interp.metrics.pragworld.score_pragworld`), beside the paper's rows (``table1.md``).
b. **layers**: the MLP zero-out sweep over every layer on the first ``layers.rows`` rows
   (:func:`interp.jobs.task_sweep.run_pragworld_sweep`: verdicts, per-alteration effects) and direct-effect
   patching of (original, alteration) pairs chosen by the reference's rule from (a)'s label scores
   (:func:`~interp.analysis.engines.pragworld_sweep.reference_pairs`; flip pairs added when it leaves
   fewer than ``layers.min_pairs``, said in the results); figures in the layout of the paper's
   Phi-3.5 plots (accuracy with each layer zeroed against the unablated one, the layer ×
   alteration heatmap, the per-layer effects with intervals).
c. **fine-tune** on the synthetic split (:func:`interp.train.finetune.run_finetune`): plain, HLS
   on the layers (b) calls harmful, ULA on those it calls useful (none: the paper's raw rule,
   at most ``layers.fallback_max`` layers, said), each for every seed; then (a) and (b) again on
   the manual split for every fine-tuned model, and the before/after table
   (:func:`interp.stats.summarise`: before on the same rows with its bootstrap interval; each
   objective's mean over seeds with a t interval; ``hls − plain`` / ``ula − plain`` per seed).

``results.json`` (key ``pragworld``) holds every number; ``report.html`` leads with the findings.
A finished stage is reused when rerun (the evaluations resume row by row; fine-tuning reuses
finished runs); ``fresh=True`` starts over.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from interp.config import PragWorldJobConfig, to_dict
from interp.config.flags import run_record
from interp.jobs.pragworld_stages import (
    PROMPTS,
    after_rows_of,
    choose_layers,
    choose_pairs,
    direct_effect,
    evaluate_prompts,
    job_placement,
    mlp_zero,
    rescore,
    subset_verdicts,
    table1,
    table1_markdown,
)
from interp.results import write_json


def resolve_job_model(name: str, log: Callable[[str], Any] = print) -> Path:
    """A pinned model name (fetched and converted, :func:`interp.models.registry.get_model`), a
    .gguf file (its converted folder) or a Hugging Face folder → the folder."""
    import sys

    from interp.models.checkpoint import check_folder, local_model
    from interp.models.registry import PINNED, get_model

    folder = get_model(name, log=sys.stderr) if name in PINNED else Path(local_model(name))
    check_folder(folder)
    return folder


def run_pragworld_job(
    cfg: PragWorldJobConfig,
    out: str | Path | None = None,
    *,
    fresh: bool = False,
    progress: bool = True,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """Run stages (a)–(c) (module docstring) into ``out`` (default ``<runs_dir>/<name>``); returns
    the ``results.json`` content (plus ``run_dir``)."""
    from interp.datasets.pragworld import first_groups, load_pragworld
    from interp.models.checkpoint import load_bridge
    from interp.stats import markdown_table
    from interp.train.finetune import run_finetune

    run_dir = Path(out) if out else Path(cfg.runs_dir) / cfg.name
    if fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", to_dict(cfg))
    write_json(run_dir / "run.json", run_record(cfg))  # PragWorldJobConfig.from_run reads it back
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    model_dir = resolve_job_model(cfg.model, log)
    placement = job_placement(cfg)
    data = load_pragworld(cfg.manual, grouping=cfg.grouping)
    n_a = len(first_groups(data.rows, cfg.eval.rows))
    n_a_after = min(n_a, len(first_groups(data.rows, cfg.eval.after_rows)))
    n_b = len(first_groups(data.rows, cfg.layers.rows))
    n_b_after = min(n_b, len(first_groups(data.rows, cfg.layers.after_rows)))
    label = cfg.model if not Path(cfg.model).exists() else Path(cfg.model).name
    log(f"model {model_dir} ({label}); manual split {data.describe()}")
    log(f"(a) {n_a} rows (after fine-tuning {n_a_after}); (b) sweep {n_b} rows (after {n_b_after})")
    results: dict[str, Any] = {
        "model": str(model_dir),
        "model_name": label,
        "rows": {"eval": n_a, "eval_after": n_a_after, "sweep": n_b, "sweep_after": n_b_after},
    }
    timings["load"] = time.perf_counter() - t0

    # (a) before
    t = time.perf_counter()
    bridge = load_bridge(model_dir, placement=placement)
    before = evaluate_prompts(bridge, data, n_a, run_dir / "eval_before", cfg, progress=progress, model_name=label)
    t1 = _write_table1(before, label, run_dir, log)
    timings["evaluate"] = time.perf_counter() - t

    # (b) before: MLP zero-out over every layer, direct-effect patching
    t = time.perf_counter()
    sweep = mlp_zero(model_dir, cfg, n_b, None, run_dir / "sweep_mlp-zero", title=f"{label}: MLP zero-out, {n_b} rows")
    log(f"[mlp-zero, {n_b} rows]\n{sweep.table()}")
    timings["mlp_zero"] = time.perf_counter() - t
    t = time.perf_counter()
    task, pairs, pair_info, de_sweep, de = _direct_effect_stage(
        bridge, model_dir, data, n_a, before, cfg, run_dir, label, log
    )
    timings["direct_effect"] = time.perf_counter() - t
    del bridge
    harmful, why_h = choose_layers(sweep.verdicts, "harmful", cfg)
    useful, why_u = choose_layers(sweep.verdicts, "useful", cfg)
    log(f"HLS layers {harmful} ({why_h}); ULA layers {useful} ({why_u})")
    results["layers"] = _layers_record(sweep, de, pair_info, (harmful, why_h), (useful, why_u))

    # (c) fine-tune, then (a) and (b) again
    f = cfg.finetune
    objectives = [o for o in f.objectives if not (o == "hls" and not harmful) and not (o == "ula" and not useful)]
    dropped = sorted(set(f.objectives) - set(objectives))
    if dropped:
        log(f"skipped {dropped}: no layers to regularise")
    after_layers = None if cfg.layers.after_layers == "all" else sorted(set(harmful) | set(useful)) or None
    ft = _job_finetune_config(cfg, model_dir, run_dir, objectives, harmful, useful)
    t = time.perf_counter()
    report = run_finetune(ft, fresh=fresh, progress=progress, log=log)
    if report is None:  # only a non-main process of a multi-process run gets None; the job runs one
        raise RuntimeError("run_finetune returned no report: the PragWorld job runs in one process")
    timings["finetune"] = time.perf_counter() - t
    t = time.perf_counter()
    at = _After(cfg, data, task, pairs, after_layers, n_a_after, n_b_after, run_dir, placement)
    long = _before_rows(report, before, sweep, de_sweep, at) + _after_rows(report, at, progress, log)
    long += [
        x for x in report.table.to_dict(orient="records") if x["model"] != "before" and x["metric"] == "mlp_out_sq"
    ]
    timings["after"] = time.perf_counter() - t
    wide = _before_after_table(
        long,
        objectives,
        harmful,
        useful,
        run_dir,
        f"{label}: before vs {', '.join(objectives)} × {len(f.seeds)} seeds, {f.steps} steps",
    )
    log("before / after (manual split):\n" + markdown_table(wide))
    timings["total"] = time.perf_counter() - t0
    results["table1"] = json.loads(t1.to_json(orient="records"))
    results["before"] = {p: {k: v for k, v in before[p].items() if k not in ("p_yes", "predictions")} for p in PROMPTS}
    results["finetune"] = _finetune_record(cfg, objectives, dropped, after_layers, report)
    results["before_after"] = json.loads(wide.to_json(orient="records"))
    results["seconds"] = {k: round(v, 1) for k, v in timings.items()}
    final = {"job": "pragworld", "pragworld": results, "config": to_dict(cfg)}
    write_json(run_dir / "results.json", final)
    from interp.viz.report import write_report

    write_report(run_dir, model=False)
    final["run_dir"] = str(run_dir)
    return final


def _before_after_table(
    long: list[dict[str, Any]], objectives: list[str], harmful: list[int], useful: list[int], run_dir: Path, title: str
) -> pd.DataFrame:
    """The before / after rows as ``before_after.csv`` / ``.md`` and the figure of the headline
    scalars (harmful layers marked H, useful U); returns the wide table."""
    from interp.stats import markdown_table, summarise
    from interp.viz.finetune import draw_finetune

    table = pd.DataFrame(long, columns=["model", "seed", "metric", "layer", "value", "se", "ci_low", "ci_high", "n"])
    table.to_csv(run_dir / "before_after.csv", index=False)
    wide = summarise(table, objectives)
    (run_dir / "before_after.md").write_text(markdown_table(wide) + "\n")
    focus = {x: "H" for x in harmful}
    for x in useful:
        focus[x] = focus.get(x, "") + "U"
    scalars = table[
        table.metric.isin(
            [f"label_{k}" for k in ("robust", "yes", "no", "total")]
            + [f"benchmark_{k}" for k in ("robust", "yes", "no", "total")]
        )
        | table.metric.isin(["sweep_effect_p_gold", "mlp_out_sq"])
    ]
    draw_finetune(
        scalars,
        objectives,
        run_dir / "before_after.png",
        focus=focus,
        title=title,
    )
    return wide


def _finetune_record(
    cfg: PragWorldJobConfig, objectives: list[str], dropped: list[str], after_layers: list[int] | None, report: Any
) -> dict[str, Any]:
    """``results.json``'s ``finetune``: what ran, its settings and the runs' training time."""
    f = cfg.finetune
    return {
        "objectives": objectives,
        "skipped": dropped,
        "seeds": list(f.seeds),
        "steps": f.steps,
        "batch_size": f.batch_size,
        "lr": f.lr,
        "lora": to_dict(f.lora),
        "beta": f.beta,
        "alpha": f.alpha,
        "after_layers": after_layers or "all",
        "runs": report.info["runs"],
        "train_seconds": _train_seconds(report),
    }


def _direct_effect_stage(
    bridge: Any,
    model_dir: Path,
    data: Any,
    n_a: int,
    before: dict[str, Any],
    cfg: PragWorldJobConfig,
    run_dir: Path,
    label: str,
    log: Callable[[str], Any],
) -> tuple[Any, Any, dict[str, Any], Any, Any]:
    """Stage (b)'s direct-effect patching (§6.1) on the pairs :func:`choose_pairs` picks from the
    label prompt's answers: ``(task, pairs, pair_info, sweep, verdicts)`` (the last two None
    without a pair)."""
    from interp.tasks import YesNoTask

    task = YesNoTask.pragworld(
        model_dir, data.rows.iloc[:n_a], prompt="label", chat_template=cfg.eval.label_chat_template
    )
    pairs, pair_info = choose_pairs(task, before["label"]["p_yes"], cfg)
    log(f"direct-effect pairs: {pair_info}")
    de = de_sweep = None
    if pairs:
        de_sweep, de = direct_effect(
            bridge,
            task,
            pairs,
            None,
            run_dir / "sweep_direct-effect",
            cfg,
            title=f"{label}: direct-effect patching, {len(pairs)} pairs",
        )
    return task, pairs, pair_info, de_sweep, de


def _write_table1(before: dict[str, Any], label: str, run_dir: Path, log: Callable[[str], Any]) -> pd.DataFrame:
    """Stage (a)'s Table 1 of the model before, as ``table1.csv`` / ``.md``."""
    t1 = table1(before, label)
    t1.to_csv(run_dir / "table1.csv", index=False)
    (run_dir / "table1.md").write_text(table1_markdown(t1) + "\n")
    log("Table 1 (manual split; brackets: 95 % cluster bootstrap over groups):\n" + table1_markdown(t1))
    return t1


def _layers_record(
    sweep: Any, de: Any, pair_info: dict[str, Any], harmful: tuple[list[int], str], useful: tuple[list[int], str]
) -> dict[str, Any]:
    """``results.json``'s ``layers``: the MLP zero-out and direct-effect verdicts, by category, and
    the HLS / ULA layers chosen with why."""
    return {
        "mlp_zero": {
            "layers": sweep.layer_rows(),
            "harmful": sweep.verdicts.harmful,
            "useful": sweep.verdicts.useful,
            "a_0": float(sweep.verdicts.frame["a_0"].iloc[0]),
            "by_category": _by_category(sweep.verdicts),
            "words": sweep.summary()["words"],
        },
        "direct_effect": (
            {
                "layers": de.layer_rows(),
                "harmful": de.harmful,
                "useful": de.useful,
                "by_category": _by_category(de),
                **pair_info,
            }
            if de is not None
            else {"skipped": "no pair", **pair_info}
        ),
        "hls_layers": harmful[0],
        "hls_why": harmful[1],
        "ula_layers": useful[0],
        "ula_why": useful[1],
    }


def _job_finetune_config(
    cfg: PragWorldJobConfig,
    model_dir: Path,
    run_dir: Path,
    objectives: list[str],
    harmful: list[int],
    useful: list[int],
) -> Any:
    """Stage (c)'s fine-tuning: ``objectives`` on the synthetic split from ``model_dir``, HLS on
    ``harmful`` and ULA on ``useful``, the job's steps, batch, lr, LoRA and seed."""
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval, RegulariserConfig, TrainConfig

    f = cfg.finetune
    return FinetuneConfig(
        name=cfg.name,
        checkpoint=str(model_dir),
        out=str(run_dir / "finetune"),
        objectives=tuple(objectives),
        seeds=tuple(f.seeds),
        device=cfg.device,
        dtype=cfg.dtype,
        data=FinetuneData(
            kind="pragworld", train=cfg.synthetic, test=cfg.manual, n_train=f.n_train, n_eval=cfg.layers.after_rows
        ),
        regulariser=RegulariserConfig(
            harmful=tuple(harmful) or None, useful=tuple(useful) or None, beta=f.beta, alpha=f.alpha
        ),
        lora=f.lora,
        train=TrainConfig(
            steps=f.steps,
            batch_size=f.batch_size,
            lr=f.lr,
            min_lr=f.lr / 10,
            warmup_steps=f.warmup_steps,
            eval_every=0,
            checkpoint_every=0,
            seed=cfg.seed,
        ),
        eval=FinetuneEval(
            next_token=False, mlp_sq=True, sweep=False, mn=False, qa=False, pragworld=False, seed=cfg.seed
        ),
    )


@dataclass(frozen=True)
class _After:
    """What each fine-tuned model is scored on again (the rows and layers of (a) and (b))."""

    cfg: PragWorldJobConfig
    data: Any
    task: Any
    pairs: Any
    after_layers: list[int] | None
    n_a_after: int
    n_b_after: int
    run_dir: Path
    placement: Any


def _before_rows(report: Any, before: dict[str, Any], sweep: Any, de_sweep: Any, at: _After) -> list[dict[str, Any]]:
    """The model before, on the rows and layers the fine-tuned models are scored on (from (a) and
    (b)), as rows of the before / after table."""
    cfg, data, after_layers, n_a_after, n_b_after = at.cfg, at.data, at.after_layers, at.n_a_after, at.n_b_after
    long = [
        {**r, "model": "before", "seed": None} for r in report.table.to_dict(orient="records") if r["model"] == "before"
    ]
    base = rescore(before, data, n_a_after, cfg)
    de_before = subset_verdicts(de_sweep, cfg, layers=after_layers) if de_sweep is not None else None
    sw_before = subset_verdicts(sweep.sweep, cfg, n_b_after, after_layers)
    long += [{**r, "model": "before", "seed": None} for r in after_rows_of(base, sw_before, de_before)]
    return long


def _after_rows(report: Any, at: _After, progress: bool, log: Callable[[str], Any]) -> list[dict[str, Any]]:
    """(a) and (b) again on every fine-tuned model of ``report``: its rows of the before / after table."""
    from interp.models.checkpoint import load_bridge

    cfg, data, task, pairs, after_layers, run_dir = at.cfg, at.data, at.task, at.pairs, at.after_layers, at.run_dir
    n_a_after, n_b_after, placement = at.n_a_after, at.n_b_after, at.placement
    long: list[dict[str, Any]] = []
    for r in report.info["runs"]:
        name = f"{r['objective']}_s{r['seed']}"
        mdir = Path(r["dir"]) / "model"
        log(f"evaluating {name} …")
        bridge = load_bridge(mdir, placement=placement)
        ev = evaluate_prompts(
            bridge, data, n_a_after, run_dir / "after" / name / "eval", cfg, progress=progress, model_name=name
        )
        de_after = (
            direct_effect(
                bridge,
                task,
                pairs,
                after_layers,
                run_dir / "after" / name / "direct-effect",
                cfg,
                f"{name}: direct-effect",
            )[1]
            if pairs
            else None
        )
        del bridge
        sw = mlp_zero(mdir, cfg, n_b_after, after_layers, run_dir / "after" / name / "mlp-zero", name, figures=False)
        long += [{**x, "model": r["objective"], "seed": r["seed"]} for x in after_rows_of(ev, sw.verdicts, de_after)]
    return long


def _by_category(verdicts: Any) -> dict[str, Any] | None:
    bc = verdicts.by_category
    if bc is None:
        return None
    return {str(c): {str(int(k)): (None if pd.isna(v) else float(v)) for k, v in col.items()} for c, col in bc.items()}


def _train_seconds(report: Any) -> dict[str, float]:
    out = {}
    for r in report.info["runs"]:
        f = Path(r["dir"]) / "train.json"
        if f.is_file():
            out[f"{r['objective']}_s{r['seed']}"] = json.loads(f.read_text()).get("seconds")
    return out


def load_job_config(path: str | Path, **overrides: Any) -> PragWorldJobConfig:
    """A :class:`PragWorldJobConfig` TOML file, with top-level ``overrides`` (e.g. ``model=``)."""
    from interp.config import check_files, load_toml

    cfg = replace(load_toml(PragWorldJobConfig, path), **{k: v for k, v in overrides.items() if v is not None})
    check_files(cfg, path)  # the PragWorld CSVs exist and parse before the model loads
    return cfg


__all__ = ["load_job_config", "resolve_job_model", "run_pragworld_job"]
