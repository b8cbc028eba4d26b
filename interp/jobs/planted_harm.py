"""Planted harm on a world model, end to end (issue 14): what ``experiments/planted_harm.py`` runs.

Starting from a trained streets checkpoint (``cfg.base``, default ``runs/demo/best``):

1. **Plant** (:func:`interp.train.plant.plant_harm`): fine-tune only chosen layers' MLPs on corrupted
   training routes (:data:`PLANTINGS`), plus the controls (:data:`CONTROLS`): the unplanted model and
   the same recipe on *clean* routes.
2. **Detect**, on every model, with each verdict source of :data:`SOURCES` (:func:`detect`): the MLP
   zero-out sweep, direct-effect patching, the current-state probes, and the /1 rule on the same
   sweeps; scored by :func:`interp.analysis.planted.world.source_scores`.
3. **Repair** the first planting on the MLP zero-out verdict file's harmful layers (:func:`repair`):
   zeroing at inference, plain fine-tuning, HLS over the β grid, ULA on the useful layers, beside
   the planted and the unplanted model (:func:`interp.analysis.planted.world.repair_summary`).

Writes ``cfg.out``: one folder per model, ``detection.csv``, ``detection_summary.csv``,
``repair.csv``, ``repair_summary.csv``, ``planted_harm.md``, ``results.json`` and ``log.txt``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from interp.analysis.planted.world import repair_summary, source_scores
from interp.jobs.pipeline import REPAIR_METRICS
from interp.train.plant import PlantSpec
from interp.viz.planted_tables import frame_markdown, metric_columns_markdown


@dataclass
class PlantedHarmConfig:
    """Settings of :func:`run_planted_harm` (the options of ``experiments/planted_harm.py``, same names
    and defaults). ``n``: held-out sequences of each sweep; ``probe_train`` / ``probe_test``: probe
    sequences; ``betas``: the HLS β grid (``loss = L + β · Σ_{ℓ∈H} mean(MLP_out_ℓ²)``); ``alpha``: ULA α;
    ``seeds`` / ``steps`` / ``lr``: the repair fine-tuning; ``n_eval``: held-out sequences of the
    repair metrics; ``mn_pairs`` / ``mn_depth``: Myhill–Nerode; ``routes``: greedy routes (0: none);
    ``reuse_detection``: read an earlier run's verdict files; ``detect_only``: no repair; ``quick``:
    3 plantings, 1 control, β 1e-3 and 1e-1, one seed (:meth:`resolved`)."""

    base: str = "runs/demo/best"
    out: str = "runs/planted_harm"
    n: int = 200
    probe_train: int = 100
    probe_test: int = 100
    betas: list[float] = field(default_factory=lambda: [1e-4, 1e-3, 1e-2, 1e-1])
    alpha: float = 1e-3
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    steps: int = 100
    lr: float = 3e-4
    n_eval: int = 200
    mn_pairs: int = 50
    mn_depth: int = 3
    routes: int = 100
    reuse_detection: bool = False
    detect_only: bool = False
    quick: bool = False

    def resolved(self) -> PlantedHarmConfig:
        """With ``quick``: β 1e-3 and 1e-1 and one seed (the fewer plantings are :func:`run_planted_harm`'s);
        otherwise itself."""
        if self.quick:
            self.betas, self.seeds = [1e-3, 1e-1], [0]
        return self


#: (name, spec) of every planting; None: the unplanted base model (a control)
PLANTINGS: list[tuple[str, PlantSpec | None]] = [
    ("L3_turns_s0", PlantSpec(layers=(3,), corruption="random_turns", share=0.3, seed=0)),
    ("L3_turns_s1", PlantSpec(layers=(3,), corruption="random_turns", share=0.3, seed=1)),
    ("L2_turns_s0", PlantSpec(layers=(2,), corruption="random_turns", share=0.3, seed=0)),
    ("L1_turns_s0", PlantSpec(layers=(1,), corruption="random_turns", share=0.3, seed=0)),
    ("L2_mirror_s0", PlantSpec(layers=(2,), corruption="mirror", share=0.5, seed=0)),
    ("L1L3_turns_s2", PlantSpec(layers=(1, 3), corruption="random_turns", share=0.3, seed=2)),
]
#: the controls: the unplanted model, and the planting recipe on clean routes (a layer fine-tuned hard
#: must not be called harmful just for having been fine-tuned)
CONTROLS: list[tuple[str, PlantSpec | None]] = [
    ("unplanted", None),
    ("L3_clean_s0", PlantSpec(layers=(3,), corruption="clean", seed=0)),
]
#: the verdict sources: the MLP zero-out sweep, direct-effect patching and the probes, each sweep with
#: the shipped rule (``interp.layer_verdicts/2``) and beside it (``_v1``) the /1 rule these sweeps had
#: before (rows resampled, a 95 % interval per layer, no margin), on the same sweep: the before/after of issue 20
SOURCES = ("mlp_zero", "direct_effect", "probe", "mlp_zero_v1", "direct_effect_v1")
#: the repair's metrics in the summary (with the harmful layers' ``mlp_out_sq``): the main job's list
METRICS = REPAIR_METRICS


def detect(model: Path, out: Path, cfg: PlantedHarmConfig, log: Any) -> dict[str, dict]:
    """Verdict rows of the three sources for one model (sweeps ``cfg.n`` sequences, probes on
    ``cfg.probe_train`` / ``cfg.probe_test``), written under ``out``; ``log``: a file for the sweeps' notes."""
    from interp.analysis.verdicts.layers import legacy_verdicts
    from interp.analysis.verdicts.probes import probe_verdicts
    from interp.jobs.sweep import run_sweep
    from interp.models.checkpoint import load_checkpoint
    from interp.worlds.io import read_sequences

    res: dict[str, dict[str, Any]] = {}
    for kind, key in (("mlp-zero", "mlp_zero"), ("direct-effect", "direct_effect")):
        # a SweepRun: both kinds are layer sweeps
        run: Any = run_sweep(model, kind=kind, n=cfg.n, seed=0, out=out / f"sweep_{kind}", log=log)
        res[key] = {"rows": run.layer_rows(), "verdicts": str(out / f"sweep_{kind}" / "verdicts.json")}
        res[f"{key}_v1"] = {"rows": legacy_verdicts(run.sweep).layer_rows(), "verdicts": None}
    ckpt = load_checkpoint(model)
    data = model.resolve().parent / "data"
    train = read_sequences(data / "train.txt", ckpt.world)[: cfg.probe_train]
    test = read_sequences(data / "test.txt", ckpt.world)[: cfg.probe_test]
    v = probe_verdicts(ckpt.bridge, ckpt.world, train, test, seed=0)
    v.save(out, stem="probe_verdicts")
    res["probe"] = {"rows": v.layer_rows(), "verdicts": str(out / "probe_verdicts.json")}
    return res


def reread(folder: Path) -> dict[str, dict]:
    """The verdict rows :func:`detect` wrote for one model (``reuse_detection``); a
    :class:`FileNotFoundError` naming the missing files."""
    from interp.analysis.engines.sweeps import SweepResult
    from interp.analysis.verdicts.layers import legacy_verdicts, load_verdicts

    paths = {
        "mlp_zero": folder / "sweep_mlp-zero" / "verdicts.json",
        "direct_effect": folder / "sweep_direct-effect" / "verdicts.json",
        "probe": folder / "probe_verdicts.json",
    }
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--reuse-detection: no earlier verdicts at {', '.join(missing)}")
    found: dict[str, dict[str, Any]] = {
        k: {"rows": load_verdicts(p).layer_rows(), "verdicts": str(p)} for k, p in paths.items()
    }
    for kind, key in (("mlp-zero", "mlp_zero"), ("direct-effect", "direct_effect")):  # the /1 rule, same sweep
        sweep_dir = folder / f"sweep_{kind}"
        meta = {k: v for k, v in json.loads((sweep_dir / "sweep.json").read_text()).items() if k != "summary"}
        sweep = SweepResult(pd.read_csv(sweep_dir / "sweep.csv"), meta)
        found[f"{key}_v1"] = {"rows": legacy_verdicts(sweep).layer_rows(), "verdicts": None}
    return found


def repair(
    name: str, model: Path, base: Path, verdicts: str, out: Path, cfg: PlantedHarmConfig, log: Callable[[str], Any]
) -> pd.DataFrame:
    """Zeroing, plain, HLS over the β grid and ULA on one planted model (its harmful and useful layers from
    the verdict file ``verdicts``), the unplanted ``base`` beside it; the long table, fine-tuning runs under ``out``."""
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval, RegulariserConfig, TrainConfig
    from interp.models.checkpoint import load_bridge, load_checkpoint
    from interp.train.finetune import run_finetune
    from interp.train.plant import repair_metrics, route_metrics
    from interp.train.regularisers import layers_from_verdicts
    from interp.worlds.io import read_sequences

    harmful = layers_from_verdicts(verdicts, "harmful")
    useful = layers_from_verdicts(verdicts, "useful")
    log(f"repair {name}: harmful {harmful}, useful {useful} (from {verdicts})")
    ev = FinetuneEval(mn_pairs=cfg.mn_pairs, mn_depth=cfg.mn_depth, sweep=True, mlp_sq=True)
    train = TrainConfig(
        steps=cfg.steps,
        batch_size=32,
        lr=cfg.lr,
        min_lr=cfg.lr / 10,
        warmup_steps=min(20, cfg.steps // 10),
        eval_every=0,
        checkpoint_every=0,
    )
    tables = []
    for i, beta in enumerate(cfg.betas):
        objectives: tuple[str, ...] = ("plain", "hls", "ula") if i == 0 else ("hls",)
        if not useful:
            objectives = tuple(o for o in objectives if o != "ula")
        ft = FinetuneConfig(
            name=f"{name}_beta{beta:g}",
            checkpoint=str(model),
            out=str(out / f"beta_{beta:g}"),
            objectives=objectives,
            seeds=tuple(cfg.seeds),
            device="cpu",
            data=FinetuneData(kind="world", n_eval=cfg.n_eval),
            regulariser=RegulariserConfig(verdicts=verdicts, beta=beta, alpha=cfg.alpha),
            train=train,
            eval=ev,
        )
        report = run_finetune(ft, progress=False, log=log)
        assert report is not None, "run_finetune returns its report in a single process"
        t = report.table.copy()
        t.loc[t.model == "hls", "model"] = f"hls β={beta:g}"
        if i > 0:
            t = t[t.model != "before"]
        tables.append(t)
    ckpt = load_checkpoint(model)
    heldout = read_sequences(model.resolve().parent / "data" / "test.txt", ckpt.world)[: cfg.n_eval]
    for label, bridge, zeroed in (("zeroed", ckpt.bridge, harmful), ("unplanted", load_bridge(base), ())):
        rows = repair_metrics(
            bridge,
            ckpt.world,
            heldout,
            zeroed=zeroed,
            mn_pairs=cfg.mn_pairs,
            mn_depth=cfg.mn_depth,
            seed=ev.seed,
            routes=cfg.routes,
        )
        tables.append(pd.DataFrame([{**r, "model": label, "seed": None} for r in rows]))
    if cfg.routes:
        rows = route_metrics(ckpt.bridge, ckpt.world, heldout, cfg.routes, seed=ev.seed)
        tables.append(pd.DataFrame([{**r, "model": "before", "seed": None} for r in rows]))
    table = pd.concat(tables, ignore_index=True)
    table.insert(0, "planting", name)
    return table


def run_planted_harm(cfg: PlantedHarmConfig, command: str = "", say: Callable[[str], Any] = print) -> str:
    """Plant, detect and repair as the module docstring says; returns the report ``planted_harm.md``.
    ``command``: quoted in the report; ``say``: one line per model as it is judged (the sweeps' and
    fine-tuning notes go to ``log.txt``)."""
    cfg = cfg.resolved()
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    with open(Path(cfg.out) / "log.txt", "w") as logf:
        return _run(cfg, command, say, logf)


def _run(cfg: PlantedHarmConfig, command: str, say: Callable[[str], Any], logf: Any) -> str:
    from interp.results import write_json
    from interp.train.plant import plant_harm
    from interp.train.regularisers import layers_from_verdicts

    base, out = Path(cfg.base), Path(cfg.out)

    def log(msg: str) -> None:
        print(msg, file=logf, flush=True)

    plantings, controls = (PLANTINGS[:3], CONTROLS[:1]) if cfg.quick else (PLANTINGS, CONTROLS)
    t0 = time.perf_counter()
    detection: list[dict[str, Any]] = []
    models: dict[str, dict[str, Any]] = {}
    for name, spec in plantings + controls:
        t = time.perf_counter()
        if spec is None:
            model, planted, folder = base, [], out / name
        else:
            res = plant_harm(base, out / name, spec, progress=False, log=log)
            model, planted, folder = res.model, list(spec.layers) if spec.corruption != "clean" else [], out / name
        found = detect(model, folder, cfg, logf) if not cfg.reuse_detection else reread(folder)
        models[name] = {
            "model": str(model),
            "planted": planted,
            "spec": None if spec is None else spec.corruption,
            "verdicts": {k: v["verdicts"] for k, v in found.items()},
        }
        for source, v in found.items():
            for r in v["rows"]:
                detection.append(
                    {
                        "model": name,
                        "control": (name, spec) in controls,
                        "source": source,
                        "layer": r["layer"],
                        "planted": r["layer"] in planted,
                        "effect": r["effect"],
                        "ci_low": r["ci"][0],
                        "ci_high": r["ci"][1],
                        "verdict": r["verdict"],
                    }
                )
        harm = {s: [r["layer"] for r in found[s]["rows"] if r["verdict"] == "harmful"] for s in SOURCES}
        say(
            f"{name}: planted {planted}; harmful by "
            + ", ".join(f"{s} {harm[s]}" for s in SOURCES)
            + f" ({time.perf_counter() - t:.0f} s)"
        )
    det = pd.DataFrame(detection)
    det.to_csv(out / "detection.csv", index=False)
    summary = source_scores(det, SOURCES)
    summary.to_csv(out / "detection_summary.csv", index=False)
    t_detect = time.perf_counter() - t0

    name = plantings[0][0]
    verdicts = models[name]["verdicts"]["mlp_zero"]
    harmful = layers_from_verdicts(verdicts, "harmful")
    rep = rsum = None
    if harmful and not cfg.detect_only:
        rep = repair(name, Path(models[name]["model"]), base, verdicts, out / name / "repair", cfg, log)
        rep.to_csv(out / "repair.csv", index=False)
        rsum = repair_summary(rep, harmful, METRICS)
        rsum.to_csv(out / "repair_summary.csv", index=False)
    seconds = time.perf_counter() - t0

    per_model = det[det.verdict == "harmful"].groupby(["model", "source"]).layer.apply(list).unstack()
    found_table = pd.DataFrame(
        [
            {
                "model": m,
                "planted": str(models[m]["planted"]),
                **{
                    s: str(per_model.loc[m, s])
                    if m in per_model.index and s in per_model and isinstance(per_model.loc[m, s], list)
                    else "[]"
                    for s in SOURCES
                },
            }
            for m in models
        ]
    )
    text = [
        f"# Planted harm (base {base}; {len(plantings)} plantings, {len(controls)} controls)",
        "",
        f"Command: `{command}`; "
        f"detection {t_detect / 60:.1f} min{' (reread)' if cfg.reuse_detection else ''}, "
        f"total {seconds / 60:.1f} min.",
        "",
        "## Layers called harmful",
        "",
        frame_markdown(found_table),
        "",
        "## Detection scores",
        "",
        frame_markdown(summary),
        "",
    ]
    if rsum is not None:
        text += [
            f"## Repair of {name} (harmful layers {harmful}; β in β·Σ_ℓ mean(MLP_out²); "
            f"{cfg.steps} steps, seeds {cfg.seeds})",
            "",
            metric_columns_markdown(rsum),
            "",
        ]
    elif cfg.detect_only:
        text += ["## Repair: not run (--detect-only)", ""]
    else:
        text += [f"## Repair of {name}: skipped, the MLP zero-out sweep found no harmful layer", ""]
    (out / "planted_harm.md").write_text("\n".join(text))
    write_json(
        out / "results.json",
        {
            "base": str(base),
            "models": models,
            "detection": summary.to_dict(orient="records"),
            "found": found_table.to_dict(orient="records"),
            "repair_planting": name,
            "harmful": harmful,
            "repair": None if rsum is None else rsum.to_dict(orient="records"),
            "settings": asdict(cfg),
            "seconds": round(seconds, 1),
        },
    )
    return "\n".join(text)


__all__ = [
    "CONTROLS",
    "METRICS",
    "PLANTINGS",
    "SOURCES",
    "PlantedHarmConfig",
    "detect",
    "repair",
    "reread",
    "run_planted_harm",
]
