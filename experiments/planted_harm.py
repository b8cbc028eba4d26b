"""Planted harm: do the layer verdicts find harm planted in known layers, and which repair removes it?

Issue 14. Starting from a trained streets checkpoint (default ``runs/demo/best``):

1. **Plant** (:func:`interp.train.plant.plant_harm`): fine-tune only chosen layers' MLPs on
   corrupted training routes — several layers, corruptions and seeds — plus two controls: the
   unplanted model, and the same recipe on *clean* routes (a layer fine-tuned hard must not be
   called harmful just for having been fine-tuned).
2. **Detect**, on every model, with three verdict sources: the MLP zero-out sweep (PragWorld §6.2,
   per-sequence next-token loss, paired bootstrap), direct-effect patching of one-token
   state-changing edits (§6.1), and the current-state probes (the change of held-out probe
   accuracy across each block, :func:`interp.analysis.probe_verdicts.probe_verdicts`). Per source:
   precision and recall of the planted layers over the plantings, and the false-positive rate
   (layers called harmful) on the controls.
3. **Repair** the issue's recipe planting (layer 3, 30 % random turns), on the MLP zero-out verdict
   file's harmful layers: (a) zeroing them at inference through the intervention context; (b) HLS
   fine-tuning on the clean routes over a β grid, against plain fine-tuning on the same data,
   steps and seeds, and ULA on the verdict file's useful layers; held-out loss, next-token test and
   Myhill–Nerode metrics of each beside the planted and the unplanted model, with 95 % intervals
   over seeds (t) or of the evaluation (±1.96 SE, one seed). β is in the regulariser's
   convention: ``loss = L + β · Σ_{ℓ∈H} mean(MLP_out_ℓ²)`` (a single harmful layer: sum = mean).

Writes ``--out`` (default ``runs/planted_harm``): one folder per model (checkpoint, sweeps,
probe verdicts), ``detection.csv`` / ``detection_summary.csv`` / ``repair.csv``, the Markdown
tables ``planted_harm.md`` and ``results.json``.

    python experiments/planted_harm.py                       # ≈ 15–20 min on 2 cores
    python experiments/planted_harm.py --quick               # fewer plantings and β values
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import pandas as pd

from interp.train.plant import PlantSpec

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]

#: (name, spec) of every planting; None: the unplanted base model (a control)
PLANTINGS: list[tuple[str, PlantSpec | None]] = [
    ("L3_turns_s0", PlantSpec(layers=(3,), corruption="random_turns", share=0.3, seed=0)),
    ("L3_turns_s1", PlantSpec(layers=(3,), corruption="random_turns", share=0.3, seed=1)),
    ("L2_turns_s0", PlantSpec(layers=(2,), corruption="random_turns", share=0.3, seed=0)),
    ("L1_turns_s0", PlantSpec(layers=(1,), corruption="random_turns", share=0.3, seed=0)),
    ("L2_mirror_s0", PlantSpec(layers=(2,), corruption="mirror", share=0.5, seed=0)),
    ("L1L3_turns_s2", PlantSpec(layers=(1, 3), corruption="random_turns", share=0.3, seed=2)),
]
CONTROLS: list[tuple[str, PlantSpec | None]] = [
    ("unplanted", None),
    ("L3_clean_s0", PlantSpec(layers=(3,), corruption="clean", seed=0)),
]
SOURCES = ("mlp_zero", "direct_effect", "probe", "mlp_zero_v1", "direct_effect_v1")
#: the verdict rule of each source: the shipped one (``interp.layer_verdicts/2``), and beside it the
#: /1 rule these sweeps had before (rows resampled, a 95 % interval per layer, no margin), on the
#: same sweep: the before/after of issue 20
METRICS = (
    "heldout_loss",
    "next_token_position",
    "next_token_sequence",
    "mn_compression_precision",
    "mn_distinction_precision",
    "mn_distinction_recall",
    "routes_valid",
    "routes_illegal_turn",
)


def detect(model: Path, out: Path, args, log) -> dict[str, dict]:
    """Verdict rows of the three sources for one model."""
    from interp.analysis.probe_verdicts import probe_verdicts
    from interp.analysis.verdicts import legacy_verdicts
    from interp.jobs.sweep import run_sweep
    from interp.models.checkpoint import load_checkpoint
    from interp.worlds.io import read_sequences

    res = {}
    for kind, key in (("mlp-zero", "mlp_zero"), ("direct-effect", "direct_effect")):
        run = run_sweep(model, kind=kind, n=args.n, seed=0, out=out / f"sweep_{kind}", log=log)
        res[key] = {"rows": run.layer_rows(), "verdicts": str(out / f"sweep_{kind}" / "verdicts.json")}
        res[f"{key}_v1"] = {"rows": legacy_verdicts(run.sweep).layer_rows(), "verdicts": None}
    ckpt = load_checkpoint(model)
    data = model.resolve().parent / "data"
    train = read_sequences(data / "train.txt", ckpt.world)[: args.probe_train]
    test = read_sequences(data / "test.txt", ckpt.world)[: args.probe_test]
    v = probe_verdicts(ckpt.bridge, ckpt.world, train, test, seed=0)
    v.save(out, stem="probe_verdicts")
    res["probe"] = {"rows": v.layer_rows(), "verdicts": str(out / "probe_verdicts.json")}
    return res


def reread(folder: Path) -> dict[str, dict]:
    """The verdict rows :func:`detect` wrote for one model (``--reuse-detection``)."""
    from interp.analysis.sweeps import SweepResult
    from interp.analysis.verdicts import legacy_verdicts, load_verdicts

    paths = {
        "mlp_zero": folder / "sweep_mlp-zero" / "verdicts.json",
        "direct_effect": folder / "sweep_direct-effect" / "verdicts.json",
        "probe": folder / "probe_verdicts.json",
    }
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"--reuse-detection: no earlier verdicts at {', '.join(missing)}")
    found = {k: {"rows": load_verdicts(p).layer_rows(), "verdicts": str(p)} for k, p in paths.items()}
    for kind, key in (("mlp-zero", "mlp_zero"), ("direct-effect", "direct_effect")):  # the /1 rule, same sweep
        sweep_dir = folder / f"sweep_{kind}"
        meta = {k: v for k, v in json.loads((sweep_dir / "sweep.json").read_text()).items() if k != "summary"}
        sweep = SweepResult(pd.read_csv(sweep_dir / "sweep.csv"), meta)
        found[f"{key}_v1"] = {"rows": legacy_verdicts(sweep).layer_rows(), "verdicts": None}
    return found


def scores(frame: pd.DataFrame) -> pd.DataFrame:
    """Precision / recall of the planted layers over the plantings and the false-positive rate on
    the controls, per verdict source."""
    rows = []
    for source in SOURCES:
        sub = frame[frame.source == source]
        pl, ct = sub[sub.control == False], sub[sub.control == True]  # noqa: E712
        tp = int(((pl.planted) & (pl.verdict == "harmful")).sum())
        fp = int(((~pl.planted) & (pl.verdict == "harmful")).sum())
        fn = int(((pl.planted) & (pl.verdict != "harmful")).sum())
        exact = sum(set(g[g.verdict == "harmful"].layer) == set(g[g.planted].layer) for _, g in pl.groupby("model"))
        rows.append(
            {
                "source": source,
                "planted layers": tp + fn,
                "found": tp,
                "false alarms": fp,
                "precision": tp / (tp + fp) if tp + fp else math.nan,
                "recall": tp / (tp + fn) if tp + fn else math.nan,
                "exact plantings": f"{exact}/{pl.model.nunique()}",
                "control FPR": (ct.verdict == "harmful").mean() if len(ct) else math.nan,
                "control layers": len(ct),
            }
        )
    return pd.DataFrame(rows)


def repair(name: str, model: Path, base: Path, verdicts: str, out: Path, args, log) -> pd.DataFrame:
    """Zeroing, plain, HLS over the β grid and ULA on one planted model; the long table."""
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval, RegulariserConfig, TrainConfig
    from interp.models.checkpoint import load_bridge, load_checkpoint
    from interp.train.finetune import run_finetune
    from interp.train.plant import route_metrics, world_model_metrics
    from interp.train.regularisers import layers_from_verdicts
    from interp.worlds.io import read_sequences

    harmful = layers_from_verdicts(verdicts, "harmful")
    useful = layers_from_verdicts(verdicts, "useful")
    log(f"repair {name}: harmful {harmful}, useful {useful} (from {verdicts})")
    ev = FinetuneEval(mn_pairs=args.mn_pairs, mn_depth=args.mn_depth, sweep=True, mlp_sq=True)
    train = TrainConfig(
        steps=args.steps,
        batch_size=32,
        lr=args.lr,
        min_lr=args.lr / 10,
        warmup_steps=min(20, args.steps // 10),
        eval_every=0,
        checkpoint_every=0,
    )
    tables = []
    for i, beta in enumerate(args.betas):
        objectives = ("plain", "hls", "ula") if i == 0 else ("hls",)
        if not useful:
            objectives = tuple(o for o in objectives if o != "ula")
        cfg = FinetuneConfig(
            name=f"{name}_beta{beta:g}",
            checkpoint=str(model),
            out=str(out / f"beta_{beta:g}"),
            objectives=objectives,
            seeds=tuple(args.seeds),
            device="cpu",
            data=FinetuneData(kind="world", n_eval=args.n_eval),
            regulariser=RegulariserConfig(verdicts=verdicts, beta=beta, alpha=args.alpha),
            train=train,
            eval=ev,
        )
        report = run_finetune(cfg, progress=False, log=log)
        t = report.table.copy()
        t.loc[t.model == "hls", "model"] = f"hls β={beta:g}"
        if i > 0:
            t = t[t.model != "before"]
        tables.append(t)
    ckpt = load_checkpoint(model)
    heldout = read_sequences(model.resolve().parent / "data" / "test.txt", ckpt.world)[: args.n_eval]
    for label, bridge, zeroed in (("zeroed", ckpt.bridge, harmful), ("unplanted", load_bridge(base), ())):
        rows = world_model_metrics(
            bridge,
            ckpt.world,
            heldout,
            zeroed=zeroed,
            mn_pairs=args.mn_pairs,
            mn_depth=args.mn_depth,
            seed=ev.seed,
            routes=args.routes,
        )
        tables.append(pd.DataFrame([{**r, "model": label, "seed": None} for r in rows]))
    if args.routes:
        rows = route_metrics(ckpt.bridge, ckpt.world, heldout, args.routes, seed=ev.seed)
        tables.append(pd.DataFrame([{**r, "model": "before", "seed": None} for r in rows]))
    table = pd.concat(tables, ignore_index=True)
    table.insert(0, "planting", name)
    return table


def repair_summary(table: pd.DataFrame, harmful: list[int]) -> pd.DataFrame:
    """Per model and metric: the mean over seeds with a 95 % interval (t over seeds; one value:
    ±1.96 SE), and its gap to the unplanted model."""
    from interp.stats import summarise

    keep = table.metric.isin(METRICS) | ((table.metric == "mlp_out_sq") & table.layer.isin(harmful))
    names = [m for m in table.model.unique() if m != "before"]
    wide = summarise(table[keep].drop(columns="planting"), names)
    out = []
    for r in wide.to_dict(orient="records"):
        ref = r.get("unplanted")
        for m in ["before", *names]:
            if m not in r or r[m] is None or (isinstance(r[m], float) and math.isnan(r[m])):
                continue
            out.append(
                {
                    "metric": r["metric"]
                    + ("" if r["layer"] is None or pd.isna(r["layer"]) else f" L{int(r['layer'])}"),
                    "model": "planted (before)" if m == "before" else m,
                    "value": r[m],
                    "lo": r[f"{m}_lo"],
                    "hi": r[f"{m}_hi"],
                    "seeds": r.get(f"{m}_seeds", 1) if m != "before" else 1,
                    "gap to unplanted": (r[m] - ref) if ref is not None and not pd.isna(ref) else math.nan,
                }
            )
    return pd.DataFrame(out)


def _md(frame: pd.DataFrame) -> str:
    def cell(v):
        if isinstance(v, float):
            return "–" if math.isnan(v) else f"{v:.4g}"
        return str(v)

    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def repair_markdown(summary: pd.DataFrame) -> str:
    """One row per model, one column per metric: ``value [lo, hi]``."""
    models = list(dict.fromkeys(summary.model))
    metrics = list(dict.fromkeys(summary.metric))
    lines = ["| model | " + " | ".join(metrics) + " |", "|" + "---|" * (len(metrics) + 1)]
    for m in models:
        cells = []
        for k in metrics:
            r = summary[(summary.model == m) & (summary.metric == k)]
            if not len(r):
                cells.append("–")
                continue
            r = r.iloc[0]
            ci = "" if pd.isna(r.lo) or pd.isna(r.hi) else f" [{r.lo:.3g}, {r.hi:.3g}]"
            cells.append(f"{r.value:.3g}{ci}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="runs/demo/best", help="trained streets checkpoint (default runs/demo/best)")
    p.add_argument("--out", default="runs/planted_harm", help="output folder (default runs/planted_harm)")
    p.add_argument("--n", type=int, default=200, help="held-out sequences of each sweep (default 200)")
    p.add_argument("--probe-train", type=int, default=100, help="probe training sequences (default 100)")
    p.add_argument("--probe-test", type=int, default=100, help="probe test sequences (default 100)")
    p.add_argument("--betas", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2, 1e-1], help="HLS β grid")
    p.add_argument("--alpha", type=float, default=1e-3, help="ULA α (default 1e-3, the paper's)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds (default 0 1)")
    p.add_argument("--steps", type=int, default=100, help="fine-tuning steps of every repair run (default 100)")
    p.add_argument("--lr", type=float, default=3e-4, help="fine-tuning peak lr (default 3e-4)")
    p.add_argument("--n-eval", type=int, default=200, help="held-out sequences of the repair metrics")
    p.add_argument("--mn-pairs", type=int, default=50, help="Myhill–Nerode states / state pairs (default 50)")
    p.add_argument("--mn-depth", type=int, default=3, help="Myhill–Nerode suffix depth (default 3)")
    p.add_argument(
        "--routes",
        type=int,
        default=100,
        help="greedy routes of the planted, zeroed and unplanted models (default 100; 0: none)",
    )
    p.add_argument(
        "--reuse-detection",
        action="store_true",
        help="read the verdict files of an earlier run in --out instead of "
        "sweeping again (plantings and finished fine-tuning runs are always reused)",
    )
    p.add_argument("--detect-only", action="store_true", help="plant and detect; no repair")
    p.add_argument("--quick", action="store_true", help="3 plantings, 1 control, β 1e-3 and 1e-1, one seed")
    args = p.parse_args(argv)
    from interp.results import write_json
    from interp.train.plant import plant_harm

    base, out = Path(args.base), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logf = open(out / "log.txt", "w")

    def log(msg: str) -> None:
        print(msg, file=logf, flush=True)

    plantings, controls = PLANTINGS, CONTROLS
    if args.quick:
        plantings, controls = PLANTINGS[:3], CONTROLS[:1]
        args.betas, args.seeds = [1e-3, 1e-1], [0]
    t0 = time.perf_counter()
    detection, models = [], {}
    for name, spec in plantings + controls:
        t = time.perf_counter()
        if spec is None:
            model, planted, folder = base, [], out / name
        else:
            res = plant_harm(base, out / name, spec, progress=False, log=log)
            model, planted, folder = res.model, list(spec.layers) if spec.corruption != "clean" else [], out / name
        found = detect(model, folder, args, logf) if not args.reuse_detection else reread(folder)
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
        print(
            f"{name}: planted {planted}; harmful by "
            + ", ".join(f"{s} {harm[s]}" for s in SOURCES)
            + f" ({time.perf_counter() - t:.0f} s)",
            flush=True,
        )
    det = pd.DataFrame(detection)
    det.to_csv(out / "detection.csv", index=False)
    summary = scores(det)
    summary.to_csv(out / "detection_summary.csv", index=False)
    t_detect = time.perf_counter() - t0

    name = plantings[0][0]
    verdicts = models[name]["verdicts"]["mlp_zero"]
    from interp.train.regularisers import layers_from_verdicts

    harmful = layers_from_verdicts(verdicts, "harmful")
    rep = rsum = None
    if harmful and not args.detect_only:
        rep = repair(name, Path(models[name]["model"]), base, verdicts, out / name / "repair", args, log)
        rep.to_csv(out / "repair.csv", index=False)
        rsum = repair_summary(rep, harmful)
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
        f"Command: `python experiments/planted_harm.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
        f"detection {t_detect / 60:.1f} min{' (reread)' if args.reuse_detection else ''}, "
        f"total {seconds / 60:.1f} min.",
        "",
        "## Layers called harmful",
        "",
        _md(found_table),
        "",
        "## Detection scores",
        "",
        _md(summary),
        "",
    ]
    if rsum is not None:
        text += [
            f"## Repair of {name} (harmful layers {harmful}; β in β·Σ_ℓ mean(MLP_out²); "
            f"{args.steps} steps, seeds {args.seeds})",
            "",
            repair_markdown(rsum),
            "",
        ]
    elif args.detect_only:
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
            "settings": {k: v for k, v in vars(args).items()},
            "seconds": round(seconds, 1),
        },
    )
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
