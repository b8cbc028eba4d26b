"""The main job behind ``interp run [CONFIG]`` (``make demo``): from a world to a fixed model.

Stages, each writing into the run folder ``<runs_dir>/<name>/``:

1. **train** (:func:`interp.jobs.experiment.run_experiment`): data → GPT-2 → next-token test (the
   embedded default: the shipped demo model, ``--retrain`` to train it).
2. **world model** (Vafa et al. 2024, Table 1): the trained model beside two references, an
   untrained transformer of the same shape and the true world model (the oracle), each with the
   next-token test, the best layer's current-state probe and the Myhill–Nerode metrics →
   ``table1.csv`` / ``table1.md`` / ``table1.png``, probe accuracy by layer (``probes.png``);
   on a street map also greedy routes and the map reconstructed from sampled routes
   (``navigation/``, ``map.png``).
3. **plant** (issue 14, ``[plant]``, on by default): only the MLP of a known layer (default the
   last) is fine-tuned on training routes with 30 % of the turns random (the issue's recipe:
   AdamW lr 3e-3, 150 steps of 32) → ``planted/`` beside ``best/``; ``plant/`` holds the record and
   the MLP zero-out sweep of the unplanted model (the control). The later stages read ``planted/``.
   ``results.json``: ``plant.layers`` (planted), ``plant.unplanted_sweep``.
4. **layers** (PragWorld §6.1–6.2): the MLP zero-out sweep with verdicts (``sweep_mlp-zero/``,
   ``layers.mlp_zero.layers[*].verdict``: useful / harmful / negligible / inconclusive, intervals
   simultaneous over the layers against the ``[analysis]`` margin ``min_effect``,
   ``docs/concepts/verdicts.md``), direct-effect patching of one-token state-changing edits
   (``sweep_direct-effect/``) and the activation-patching heatmaps (``sweep_activation-patching/``).
5. **fix** (PragWorld §6.3): the layers the sweep found harmful (``fix.layers``; none found: said,
   and HLS skipped — no stand-in) suppressed three ways: zeroed at inference, HLS fine-tuning, and
   plain fine-tuning on the same clean data and steps as the control; held-out loss, next-token
   test and Myhill–Nerode metrics of each beside the model before and the unplanted model
   (``fix.comparison``, ``finetune/repair_table.md``), and which repair lands closest to the
   unplanted model (``fix.closest``); the fine-tuning runs' own table (each layer's mean squared
   MLP output, the sweep after) in ``finetune/``.
6. **report**: ``report.html`` (tables, figures, CircuitsVis attention and patching views; opens
   offline) and ``results.json`` with every number, the config and the seed.

The same config and seed give the same ``results.json`` numbers (timings aside). A rerun into
the same run folder resumes: training from its last checkpoint, and stages 2–5 each read back
when it finished before with the same settings and input weights (:mod:`interp.jobs.stages`;
``results.json["read_back"]`` lists them); ``--fresh`` starts over.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from interp.analysis.engines.unitstore import file_sha256
from interp.config import AnalysisConfig, FixConfig, PlantConfig
from interp.results import write_json


def run_main_job(
    cfg: Any,
    base: Path | None = None,
    fresh: bool = False,
    progress: bool = True,
    log: Callable[[str], Any] = print,
    retrain: bool = False,
) -> dict[str, Any]:
    """Run every enabled stage of ``cfg`` (an :class:`~interp.jobs.experiment.ExperimentConfig`) and
    return the ``results.json`` content (plus ``run_dir``). The embedded default starts from the
    shipped demo model (:mod:`interp.jobs.experiment`) unless ``retrain``. Relative paths of ``cfg``
    start from ``base`` (default: the current directory when called)."""
    base = Path.cwd() if base is None else base
    from interp.hardware import machine
    from interp.jobs.experiment import run_experiment

    timings: dict[str, float] = {}
    here = machine()  # quoted beside the stage timings
    t = time.perf_counter()
    results = run_experiment(cfg, base, fresh=fresh, progress=progress, log=log, retrain=retrain)
    timings["train"] = time.perf_counter() - t
    run_dir = Path(results.pop("run_dir"))
    if cfg.analysis.enabled:
        from interp.jobs.stages import StageRecords, weights_sha256

        stages = StageRecords(run_dir, log)
        data = {name: file_sha256(run_dir / "data" / f"{name}.txt") for name in ("train", "test")}
        analysis = asdict(cfg.analysis)
        best = {"weights": weights_sha256(run_dir / "best"), "data": data}
        t = time.perf_counter()
        results["world_model"] = stages.run(
            "world_model", {"analysis": analysis, **best}, lambda: world_model_stage(run_dir, cfg.analysis, log)
        )
        timings["world_model"] = time.perf_counter() - t
        analysed = run_dir / "best"
        plant_cfg = getattr(cfg, "plant", None)
        if plant_cfg is not None and plant_cfg.enabled:
            t = time.perf_counter()
            results["plant"] = stages.run(
                "plant",
                {"plant": asdict(plant_cfg), "analysis": analysis, **best},
                lambda: plant_stage(run_dir, plant_cfg, cfg.analysis, progress, log),
            )
            timings["plant"] = time.perf_counter() - t
            if results["plant"].get("model"):
                analysed = Path(results["plant"]["model"])
        model = {"model": analysed.name, "weights": weights_sha256(analysed), "data": data}
        t = time.perf_counter()
        results["layers"] = stages.run(
            "layers", {"analysis": analysis, **model}, lambda: layer_stage(run_dir, cfg.analysis, log, model=analysed)
        )
        timings["layers"] = time.perf_counter() - t
        if cfg.fix.enabled:
            t = time.perf_counter()
            found = [(r["layer"], r["verdict"]) for r in results["layers"]["mlp_zero"]["layers"]]
            results["fix"] = stages.run(
                "fix",
                {"fix": asdict(cfg.fix), "verdicts": found, **model},
                lambda: fix_stage(run_dir, cfg.fix, results["layers"]["mlp_zero"], progress, log, model=analysed),
            )
            timings["fix"] = time.perf_counter() - t
        if stages.read_back:
            results["read_back"] = stages.read_back
    results["seconds"] = {k: round(v, 1) for k, v in timings.items()}
    results["machine"] = {**here, "date": time.strftime("%Y-%m-%d", time.gmtime())}
    write_json(run_dir / "results.json", results)
    t = time.perf_counter()
    from interp.viz.report import write_report

    report = write_report(run_dir)
    log(f"report: {report} ({time.perf_counter() - t:.0f} s)")
    results["run_dir"] = str(run_dir)
    return results


def world_model_stage(run_dir: Path, cfg: AnalysisConfig, log: Callable[[str], Any]) -> dict[str, Any]:
    """Table 1 on this world: trained model, untrained transformer, the ideal predictor of the
    training data (when the world has a traversal process: the ceiling next-token training can
    reach) and the true world model."""
    from interp.metrics.table import evaluate_lm, results_table, save_table, to_markdown
    from interp.models.checkpoint import load_checkpoint, save_checkpoint
    from interp.models.gpt2 import ModelConfig, build_gpt2
    from interp.models.lm import LM, BridgeLM, IdealLM, WorldLM
    from interp.viz.layers import draw_probe_layers
    from interp.viz.tables import draw_table1
    from interp.worlds.io import read_sequences

    ckpt = load_checkpoint(run_dir / "best")
    world = ckpt.world
    train = read_sequences(run_dir / "data" / "train.txt", world)
    test = read_sequences(run_dir / "data" / "test.txt", world)
    model_cfg = ModelConfig(**_model_config(run_dir))
    untrained = run_dir / "untrained"
    if not (untrained / "config.json").exists():
        save_checkpoint(build_gpt2(world.vocab, model_cfg), world, untrained)
    lms: dict[str, LM] = {
        "untrained transformer": BridgeLM(load_checkpoint(untrained).bridge, world.vocab),
        "trained model": BridgeLM(ckpt.bridge, world.vocab),
    }
    if callable(getattr(world, "traversal_process", None)):
        lms["ideal predictor"] = IdealLM(world)
    lms["true world model"] = WorldLM(world)
    rows, summaries = {}, {}
    for name, lm in lms.items():
        t = time.perf_counter()
        cells, summaries[name] = evaluate_lm(
            lm,
            world,
            test[:1000],
            probe_data=(train[: cfg.probe_train], test[: cfg.probe_test]),
            pairs=cfg.mn_pairs,
            depth=cfg.mn_depth,
            estimators=(cfg.estimator,),
            seed=cfg.seed,
            max_nodes=cfg.max_nodes,
        )
        rows[name] = cells[cfg.estimator]
        log(
            f"[{name}] "
            + ", ".join(f"{k} {v}" for k, v in rows[name].items() if v is not None)
            + f" ({time.perf_counter() - t:.0f} s)"
        )
    table = results_table(rows)
    save_table(table, run_dir, "table1")
    draw_table1(
        table,
        run_dir / "table1.png",
        title=f"world-model metrics ({cfg.estimator} estimator, {cfg.mn_pairs} state pairs, depth {cfg.mn_depth})",
    )
    draw_probe_layers({name: s["probe"] for name, s in summaries.items() if "probe" in s}, run_dir / "probes.png")
    log("\n" + to_markdown(table))
    out = {
        "table": table.to_dict(orient="records"),
        "summaries": summaries,
        "settings": {"pairs": cfg.mn_pairs, "depth": cfg.mn_depth, "estimator": cfg.estimator},
    }
    if getattr(world, "kind", None) == "streets" and cfg.map_routes:
        out["navigation"] = navigation_stage(
            run_dir, lms["trained model"], world, test, cfg, log, ideal=lms.get("ideal predictor")
        )
    return out


def navigation_stage(
    run_dir: Path, lm: Any, world: Any, test: list, cfg: AnalysisConfig, log: Callable[[str], Any], ideal: Any = None
) -> dict[str, Any]:
    """Streets only: greedy routes between held-out (origin, destination) pairs, ``P(end)`` where
    held-out routes stand at their destination (what decides whether greedy routes end), both
    beside the ideal predictor of the data when given (``ideal_routes``, ``end_at_destination``),
    and the map reconstructed from routes sampled at temperature 1 (Vafa et al. App. B) →
    ``map.png``."""
    from interp.metrics.navigation import decode_routes, end_at_destination, pairs_from_sequences, reconstruct_map
    from interp.viz.maps import draw_reconstruction

    pairs = pairs_from_sequences(test)[: cfg.map_routes]
    greedy = decode_routes(lm, world, pairs, seed=cfg.seed)
    sampled = decode_routes(lm, world, pairs, sample=True, seed=cfg.seed)
    rec = reconstruct_map(world.graph, sampled.routes)
    folder = run_dir / "navigation"
    greedy.save(folder, "routes")
    rec.save(folder, "map")
    draw_reconstruction(rec, run_dir / "map.png")
    ending = {"trained model": end_at_destination(lm, world, test[: cfg.map_routes])}
    out = {"routes": greedy.summary(), "map": rec.summary()}
    if ideal is not None:
        ideal_greedy = decode_routes(ideal, world, pairs, seed=cfg.seed)
        ideal_greedy.save(folder, "ideal_routes")
        out["ideal_routes"] = ideal_greedy.summary()
        ending["ideal predictor"] = end_at_destination(ideal, world, test[: cfg.map_routes])
        log(f"ideal predictor's routes: {ideal_greedy}")
    out["end_at_destination"] = ending
    log(
        f"routes: {greedy}\n"
        + "".join(
            f"P(end | at the destination), {name}: {e['p_end']:.3f} ± {e['p_end_se']:.3f} (argmax end at "
            f"{e['argmax_end']:.0%} of {e['visits']} visits)\n"
            for name, e in ending.items()
        )
        + f"map from {len(pairs)} sampled routes: {rec}"
    )
    return out


def layer_stage(
    run_dir: Path, cfg: AnalysisConfig, log: Callable[[str], Any], model: Path | None = None
) -> dict[str, Any]:
    """MLP zero-out sweep + verdicts, direct-effect patching, activation-patching heatmaps of
    ``model`` (default ``run_dir/best``; written beside it, ``sweep_<kind>/``)."""
    from interp.jobs.sweep import run_sweep

    model = model or run_dir / "best"
    out: dict[str, Any] = {}
    say = _LogFile(log)
    for kind, key, n in (
        ("mlp-zero", "mlp_zero", cfg.sweep_n),
        ("direct-effect", "direct_effect", cfg.patch_n),
        ("activation-patching", "activation_patching", cfg.patch_n),
    ):
        t = time.perf_counter()
        removals: dict[str, Any] = (
            dict(ablation=list(cfg.ablation), scales=list(cfg.scales), draws=cfg.draws) if kind == "mlp-zero" else {}
        )
        run = run_sweep(
            model,
            kind=kind,
            n=n,
            seed=cfg.seed,
            length=cfg.patching_length,
            edit_at=cfg.patching_edit_at,
            log=say,
            **removals,
            **cfg.verdict_rule(),
        )
        out[key] = run.summary()
        log(f"[{kind}] ({time.perf_counter() - t:.0f} s)\n{run.table()}")
    return out


def plant_stage(
    run_dir: Path, cfg: PlantConfig, analysis: AnalysisConfig, progress: bool, log: Callable[[str], Any]
) -> dict[str, Any]:
    """Plant harm in the trained model (:func:`interp.train.plant.plant_harm`): the checkpoint
    ``planted/`` beside ``best/`` (sharing ``data/``), the record in ``plant/``, and the MLP zero-out
    sweep of the *unplanted* model (``plant/sweep_unplanted/``) as the control. A world the
    corruption does not fit is said and skipped (the later stages then analyse ``best/``)."""
    from interp.jobs.sweep import SweepRun, run_sweep
    from interp.models.checkpoint import read_meta
    from interp.train.plant import PlantSpec, plant_harm

    best = run_dir / "best"
    kind = (read_meta(best) or {}).get("world", {}).get("kind")
    corruption = cfg.corruption
    if corruption == "auto":
        chosen = {"streets": "random_turns", "dialogue": "shortcut" if cfg.word else None}.get(kind)
        if chosen is None:
            why = (
                f"no corruption for a {kind!r} world without plant.word"
                if kind == "dialogue"
                else f"no default corruption for a {kind!r} world (streets: random_turns, mirror; dialogue: shortcut)"
            )
            log(f"plant: skipped, {why}")
            return {"enabled": False, "why": why, "layers": []}
        corruption = chosen
    n_layers = int(_model_config(run_dir)["n_layer"])
    layers = tuple(cfg.layers) if cfg.layers else (n_layers - 1,)
    spec = PlantSpec(
        layers=layers,
        corruption=corruption,
        share=cfg.share,
        word=cfg.word,
        seed=cfg.seed,
        steps=cfg.steps,
        batch_size=cfg.batch_size,
        lr=cfg.lr,
    )
    planted = plant_harm(best, run_dir / "plant", spec, model_dir=run_dir / "planted", progress=progress, log=log)
    control = run_sweep(
        best,
        kind="mlp-zero",
        n=analysis.sweep_n,
        seed=analysis.seed,
        out=run_dir / "plant" / "sweep_unplanted",
        log=_LogFile(log),
        **analysis.verdict_rule(),
    )
    if not isinstance(control, SweepRun):  # an mlp-zero sweep makes a SweepRun
        raise TypeError(f"the unplanted control sweep returned a {type(control).__name__}")
    log(f"[mlp-zero, unplanted control]\n{control.table()}")
    rows = control.layer_rows()
    return {
        **{
            k: planted.meta[k]
            for k in (
                "layers",
                "corruption",
                "share",
                "word",
                "seed",
                "steps",
                "batch_size",
                "lr",
                "changed_share",
                "final_train_loss",
            )
        },
        "model": str(planted.model),
        "out": str(planted.out),
        "unplanted_sweep": {"layers": rows, "harmful": [r["layer"] for r in rows if r["verdict"] == "harmful"]},
    }


#: the scalar metrics of the repair comparison (lower is better: the held-out loss and illegal turns);
#: the greedy routes (streets) are scored for every model
REPAIR_METRICS = (
    "heldout_loss",
    "next_token_position",
    "next_token_sequence",
    "mn_compression_precision",
    "mn_distinction_precision",
    "mn_distinction_recall",
    "routes_valid",
    "routes_illegal_turn",
)


def fix_stage(
    run_dir: Path,
    cfg: FixConfig,
    mlp_zero: dict[str, Any],
    progress: bool,
    log: Callable[[str], Any],
    model: Path | None = None,
) -> dict[str, Any]:
    """Suppress the harmful layers the sweep found (PragWorld §6.3) three ways and compare:
    zeroing their MLPs at inference (:func:`interp.hooks.intervene`), HLS fine-tuning, and plain
    fine-tuning on the same clean data, steps and seeds as the control; beside the model before
    (``model``, default ``best/``) and, when ``model`` is a planted one, the unplanted ``best/`` —
    the metrics a repair should recover. No harmful layer found: nothing to suppress, HLS skipped."""
    import pandas as pd

    from interp.stats import markdown_table, summarise
    from interp.train.finetune import run_finetune

    model = Path(model) if model else run_dir / "best"
    rows = removal_rows(mlp_zero, cfg.ablation)
    layers, why = choose_hls_layers(cfg.layers, rows, cfg.ablation)
    found = [r["layer"] for r in rows if r["verdict"] == "harmful"]
    out: dict[str, Any] = {
        "layers": layers,
        "found": found,
        "why": why,
        "beta": cfg.beta,
        "steps": cfg.steps,
        "seeds": list(cfg.seeds),
        "model": str(model),
    }
    if not layers:
        log(f"fix: {why}")
        return {**out, "skipped": True}
    log(f"HLS layers {layers}: {why}")
    ft = _fix_finetune_config(cfg, model, run_dir, layers)
    report = run_finetune(ft, progress=progress, log=log)
    if report is None:  # only a non-main process of a multi-process run gets None; the job runs one
        raise RuntimeError("run_finetune returned no report: the main job runs in one process")
    log(report.markdown())
    extra, names = _inference_rows(cfg, model, run_dir, layers, report, ft)
    table = pd.concat([report.table, pd.DataFrame(extra)], ignore_index=True)
    keep = table.metric.isin(REPAIR_METRICS) | ((table.metric == "mlp_out_sq") & table.layer.isin(layers))
    wide = summarise(table[keep], names)
    (run_dir / "finetune" / "repair_table.md").write_text(markdown_table(wide) + "\n")
    wide.to_csv(run_dir / "finetune" / "repair_table.csv", index=False)
    comparison = json.loads(wide.to_json(orient="records"))
    log("repair (before = the model the sweep read):\n" + markdown_table(wide))
    out.update(
        table=json.loads(report.table.to_json(orient="records")),
        out=str(report.out),
        comparison=comparison,
        closest=closest_to_reference(comparison, names),
    )
    return out


def _fix_finetune_config(cfg: FixConfig, model: Path, run_dir: Path, layers: list[int]) -> Any:
    """The fix stage's fine-tuning: plain and HLS on ``layers`` from ``model``, on the world's clean
    data, ``cfg``'s steps, batch, lr and seeds (the plain arm is the control)."""
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval, RegulariserConfig, TrainConfig

    ev = FinetuneEval(mn_pairs=cfg.mn_pairs, mn_depth=cfg.mn_depth)
    return FinetuneConfig(
        name="finetune",
        checkpoint=str(model),
        out=str(run_dir / "finetune"),
        objectives=("plain", "hls"),
        seeds=tuple(cfg.seeds),
        device="cpu",
        data=FinetuneData(kind="world", n_eval=cfg.n_eval),
        regulariser=RegulariserConfig(harmful=tuple(layers), beta=cfg.beta),
        train=TrainConfig(
            steps=cfg.steps,
            batch_size=cfg.batch_size,
            lr=cfg.lr,
            min_lr=cfg.lr / 10,
            warmup_steps=min(20, cfg.steps // 10),
            eval_every=0,
            checkpoint_every=0,
        ),
        eval=ev,
    )


def _inference_rows(
    cfg: FixConfig, model: Path, run_dir: Path, layers: list[int], report: Any, ft: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows beside the fine-tuned arms: ``model`` with ``layers`` zeroed at inference, the greedy
    routes of every model (streets worlds), and the unplanted ``best/`` when ``model`` is another —
    on the held-out sequences and state pairs the fine-tuning report used. Returns the rows and the
    model names of the repair table."""
    from interp.models.checkpoint import load_bridge, load_checkpoint
    from interp.train.plant import repair_metrics, route_metrics
    from interp.worlds.io import read_sequences

    ev = ft.eval
    ckpt = load_checkpoint(model)
    heldout = read_sequences(Path(report.info["source"]["test"]), ckpt.world)[: cfg.n_eval]
    routes = cfg.routes if getattr(ckpt.world, "kind", None) == "streets" else 0
    extra = [
        {**r, "model": "zeroed", "seed": None}
        for r in repair_metrics(
            ckpt.bridge,
            ckpt.world,
            heldout,
            zeroed=layers,
            mn_pairs=cfg.mn_pairs,
            mn_depth=cfg.mn_depth,
            seed=ev.seed,
            routes=routes,
        )
    ]
    if routes:
        extra += [
            {**r, "model": "before", "seed": None}
            for r in route_metrics(ckpt.bridge, ckpt.world, heldout, routes, seed=ev.seed)
        ]
        for objective in ft.objectives:  # the fine-tuned models' greedy routes, every seed
            for seed in ft.seeds:
                tuned = Path(report.out) / f"{objective}_s{seed}" / "model"
                extra += [
                    {**r, "model": objective, "seed": seed}
                    for r in route_metrics(load_bridge(tuned), ckpt.world, heldout, routes, seed=ev.seed)
                ]
    names = ["plain", "hls", "zeroed"]
    if model.resolve() != (run_dir / "best").resolve():
        extra += [
            {**r, "model": "unplanted", "seed": None}
            for r in repair_metrics(
                load_bridge(run_dir / "best"),
                ckpt.world,
                heldout,
                mn_pairs=cfg.mn_pairs,
                mn_depth=cfg.mn_depth,
                seed=ev.seed,
                routes=routes,
            )
        ]
        names.append("unplanted")
    return extra, names


def closest_to_reference(
    comparison: list[dict[str, Any]], names: Sequence[str], reference: str = "unplanted"
) -> dict[str, Any]:
    """Per scalar repair metric, the models (``before`` and every name but the reference) whose
    value lies closest to the reference model's — all of them on a tie — and each one's gap
    (value − reference)."""
    out: dict[str, Any] = {}
    for row in comparison:
        if row["metric"] not in REPAIR_METRICS or row.get(reference) is None:
            continue
        gaps = {m: row[m] - row[reference] for m in ["before", *names] if m != reference and row.get(m) is not None}
        if gaps:
            best = min(abs(g) for g in gaps.values())
            out[row["metric"]] = {"closest": [m for m, g in gaps.items() if abs(g) <= best + 1e-12], "gap": gaps}
    return out


def removal_rows(mlp_sweep: dict[str, Any], ablation: str = "zero") -> list[dict[str, Any]]:
    """Per layer ``layer`` and ``verdict`` under the removal ``ablation`` from the MLP sweep's
    summary: its own rows when it ran that removal first, else its agreement table's column (a
    sweep of several removals); a removal the sweep did not run is an error naming those it ran."""
    ran = mlp_sweep.get("ablation") or ["zero"]
    if ablation == ran[0]:
        return mlp_sweep["layers"]
    if ablation not in ran or not mlp_sweep.get("agreement"):
        raise ValueError(
            f"fix.ablation = {ablation!r}, but the MLP sweep ran {', '.join(ran)} (add it to analysis.ablation)"
        )
    return [{"layer": r["layer"], "verdict": r[ablation]} for r in mlp_sweep["agreement"]]


def choose_hls_layers(
    explicit: tuple[int, ...], verdict_rows: list[dict[str, Any]], ablation: str = "zero"
) -> tuple[list[int], str]:
    """The layers HLS suppresses and why: the explicit list, else the sweep's harmful layers under
    the removal ``ablation``; none found: an empty list (nothing to suppress; no stand-in)."""
    what = "MLP zero-out sweep" if ablation == "zero" else f"MLP sweep ({ablation} removal)"
    if explicit:
        return list(explicit), "given in the config"
    harmful = [r["layer"] for r in verdict_rows if r["verdict"] == "harmful"]
    if harmful:
        return harmful, f"the {what}'s harmful layers"
    return [], f"the {what} found no harmful layer: nothing to suppress, HLS skipped"


def _model_config(run_dir: Path) -> dict[str, Any]:
    import json

    return json.loads((run_dir / "config.json").read_text())["model"]


@dataclass
class _LogFile:
    """A file-like object that forwards lines to ``log`` (for functions that print notes to a file)."""

    log: Callable[[str], Any]
    buffer: list[str] = field(default_factory=list)

    def write(self, text: str) -> int:
        self.buffer.append(text)
        if text.endswith("\n"):
            self.log("".join(self.buffer).rstrip("\n"))
            self.buffer.clear()
        return len(text)

    def flush(self) -> None:
        pass


__all__ = ["REPAIR_METRICS", "choose_hls_layers", "closest_to_reference", "run_main_job"]
