"""Planted harm at real depth: SmolLM2-135M-Instruct (30 layers) on indirect-object identification.

Issue 30, item 4. Starting from the unplanted model:

1. **Prompts** (:func:`interp.datasets.ioi.ioi_examples`): training and held-out IOI prompts with
   disjoint name pairs (a training prompt whose unordered {IO, S} pair occurs among the held-out
   ones is dropped, and counted), written as contrast files ``train.jsonl`` / ``heldout.jsonl``.
2. **Plant** (:func:`interp.train.plant.plant_harm`, ``interp plant --corruption foil_share``): only the
   MLP of the planted layer(s) trained, toward the subject S instead of the indirect object IO on a
   ``--share`` of the training prompts (every other weight bit-identical; checked here on the saved
   weights); plantings at an early, a middle and a late layer and one two-layer planting, and two
   controls: the unplanted model and the same recipe on correct targets (``clean``) at one layer
   (``--control-lr``: also at smaller learning rates, a control whose change is sized like a planting's).
3. **Judge** each model by the 30-layer MLP zero-out sweep on the held-out prompts (metric: logit
   difference IO − S; the calibrated rule of :mod:`interp.analysis.verdicts`, groups = template ×
   name pair), against the unplanted model's own verdicts (:mod:`interp.analysis.planted`): the
   layers that *become* harmful, the rank of the planted layer among the layers whose verdict
   changes, precision / recall of the newly harmful layers beside the paper's raw rule (accuracy
   with the layer ablated vs without). A layer harmful on both models whose harm grew (the paired
   change of its effect on the same prompts beyond the margin, :func:`interp.analysis.planted.harm_rise`)
   counts as newly harmful. A planting in several layers is also undone one layer at a time (its
   MLP weights put back): the harm each planted layer carries, an oracle that removes nothing. Every other layer that changes is measured along two paths
   (:func:`interp.analysis.paths.mlp_path_removal`): its output removed only from the planted MLP's
   input (what it does *through* the planted layer) and only from the final norm's input (its
   direct effect).
4. **Repair** (``--repair`` plantings): the found (newly harmful) layers zeroed at inference; plain
   fine-tuning of the whole model on the clean training prompts (loss on the answer token); HLS on
   the found layers (:class:`interp.train.regularisers.HLS`, the same data and steps) — held-out
   accuracy and logit difference beside the planted and the unplanted model, with a t-interval
   over the fine-tuning seeds (one value: the evaluation's cluster-bootstrap interval).

Writes ``--out`` (default ``runs/ioi_planted``): the prompt files, one folder per model (planted
weights, ``sweep.*``, ``verdicts.json``), ``changes.csv``, ``detection.csv``, ``paths.csv``,
``repair.csv``, ``ioi_planted.md`` (both tables) and ``results.json`` (settings, machine, the fp32
matmul peak measured at the start, date, seconds). Plantings, sweeps and repair evaluations found
in ``--out`` with the same settings are reused.

    python experiments/ioi_planted.py                  # the issue's table (≈ 1 h on 2 loaded cores)
    python experiments/ioi_planted.py --quick          # one planting, few prompts (CI-sized)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
REPO = Path(__file__).resolve().parents[1]

MODEL = "smollm2-135m-instruct"


# ---- prompts ---------------------------------------------------------------------------------------


def split_prompts(tokenizer, n_train: int, n_heldout: int, seed: int = 0):
    """Held-out and training IOI prompts with disjoint name pairs: ``(train, heldout, dropped)``."""
    from interp.datasets.ioi import ioi_examples

    heldout = ioi_examples(tokenizer, n_heldout, seed=seed + 1)
    pairs = {frozenset((e.meta["IO"], e.meta["S"])) for e in heldout}
    pool = ioi_examples(tokenizer, 2 * n_train + 2 * len(pairs), seed=seed + 2)
    train = [e for e in pool if frozenset((e.meta["IO"], e.meta["S"])) not in pairs]
    dropped = len(pool) - len(train)
    if len(train) < n_train:
        raise RuntimeError(f"only {len(train)} training prompts with name pairs unseen in the held-out set")
    return train[:n_train], list(heldout), dropped


# ---- one model: the sweep, its verdicts, accuracy ---------------------------------------------------


def cluster_interval(values: np.ndarray, groups: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Mean with its 95 % cluster-bootstrap-t interval over ``groups`` (the project's resampler)."""
    from interp.analysis.bands import cluster_band

    band = cluster_band(np.asarray(values, dtype=float)[:, None], groups, seed=seed, simultaneous=False)
    lo, hi = float(band.low[0]), float(band.high[0])
    if not (math.isfinite(lo) and math.isfinite(hi)):  # bootstrap-t with (nearly) no spread: no interval
        lo = hi = math.nan
    return float(band.estimate[0]), lo, hi


def sweep_model(folder: Path, task, out: Path, batch_size: int, log) -> tuple[object, object, dict]:
    """The MLP zero-out sweep over every layer on the held-out task, its verdicts (calibrated rule,
    raw rule at threshold 0 = accuracy), and the clean accuracy / logit difference; cached in ``out``."""
    from interp.analysis.sweeps import SweepResult, mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.models.checkpoint import load_bridge
    from interp.tasks.contrast import GROUP_UNIT

    if (out / "sweep.csv").is_file() and (out / "sweep.json").is_file():
        meta = {k: v for k, v in json.loads((out / "sweep.json").read_text()).items() if k != "summary"}
        sweep = SweepResult(pd.read_csv(out / "sweep.csv"), meta)
        log(f"  {out.name}: sweep reused")
    else:
        t0 = time.perf_counter()
        bridge = load_bridge(folder)
        ids, mask = task.inputs()
        sweep = mlp_zero_sweep(
            bridge, ids, task.metric(), attention_mask=mask, groups=task.groups, batch_size=batch_size
        ).with_groups(task.groups, GROUP_UNIT)
        sweep.meta["seconds"] = round(time.perf_counter() - t0, 1)
        sweep.save(out)
        del bridge
        log(f"  {out.name}: 30-layer sweep of {len(task)} prompts in {sweep.meta['seconds']:.0f} s")
    verdicts = layer_verdicts(sweep, threshold=0.0)
    verdicts.save(out)
    clean = sweep.frame[sweep.frame.layer == sweep.frame.layer.min()].sort_values("example")
    groups = clean["group"].to_numpy()
    ld = clean["clean"].to_numpy(dtype=float)
    acc = cluster_interval((ld > 0).astype(float), groups)
    mean_ld = cluster_interval(ld, groups)
    return sweep, verdicts, {"accuracy": acc, "logit_diff": mean_ld}


# ---- plantings --------------------------------------------------------------------------------------


def parse_planting(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace("+", ",").split(",") if x.strip())


def check_frozen(base: Path, planted: Path, layers: tuple[int, ...]) -> list[str]:
    """Names of the parameters that moved; raises unless exactly the planted MLPs' moved."""
    from safetensors.torch import load_file

    a, b = load_file(str(base / "model.safetensors")), load_file(str(planted / "model.safetensors"))
    moved = sorted(n for n in a if not torch.equal(a[n], b[n]))
    allowed = {n for n in a if any(n.startswith(f"model.layers.{k}.mlp.") for k in layers)}
    if set(moved) != allowed:
        raise AssertionError(f"{planted}: moved {moved}, expected exactly {sorted(allowed)}")
    return moved


# ---- the other changed layers: two path-restricted removals -----------------------------------------


def path_rows(folder: Path, task, planted: tuple[int, ...], layers: list[int], batch_size: int) -> list[dict]:
    """Per other changed layer: its effect through each planted MLP it feeds, and its direct effect."""
    from interp.analysis.paths import mlp_path_removal
    from interp.models.checkpoint import load_bridge

    if not layers:
        return []
    bridge = load_bridge(folder)
    ids, mask = task.inputs()
    rows = []
    targets = [("logits", layers)] + [(f"mlp:{k}", [j for j in layers if j < k]) for k in planted]
    for into, sources in targets:
        if not sources:
            continue
        res = mlp_path_removal(
            bridge, ids, task.metric(), sources, into, attention_mask=mask, groups=task.groups, batch_size=batch_size
        )
        for r in res.per_layer().to_dict(orient="records"):
            rows.append(
                {
                    "layer": int(r["layer"]),
                    "path": "direct" if into == "logits" else f"through {into}",
                    "mean_effect": r["mean_effect"],
                    "se": r["se"],
                }
            )
    return rows


# ---- the harm each planted layer carries: un-planting one layer at a time ------------------------------


def unplant_rows(name: str, folder: Path, base: Path, task, layers: tuple[int, ...]) -> list[dict]:
    """For a planting in several layers, the held-out logit difference with each planted layer's MLP
    weights put back to the unplanted model's (plain HF forwards): the harm that layer carries, an
    oracle that removes nothing (the planted model, the others restored and the unplanted model beside)."""
    from safetensors.torch import load_file

    from interp.models.checkpoint import load_hf_model

    original = load_file(str(base / "model.safetensors"))
    groups = task.groups
    rows = []
    for restored in [()] + [(k,) for k in layers]:
        model = load_hf_model(folder)
        if restored:
            prefix = tuple(f"model.layers.{k}.mlp." for k in restored)
            state = {n: t for n, t in original.items() if n.startswith(prefix)}
            unexpected = model.load_state_dict(state, strict=False).unexpected_keys
            if unexpected or not state:
                raise RuntimeError(f"{folder}: could not restore {restored} ({unexpected or 'no weights'})")
        ld = evaluate_hf(model, task)
        m, lo, hi = cluster_interval(ld, groups)
        rows.append(
            {
                "model": name,
                "restored": "none (planted)" if not restored else f"layer {restored[0]} restored",
                "logit_diff": m,
                "lo": lo,
                "hi": hi,
                "accuracy": float((ld > 0).mean()),
            }
        )
        del model
    return rows


def unplant_markdown(rows: list[dict], unplanted_ld: float) -> str:
    lines = [
        "| planting | MLP weights | held-out logit diff IO − S | accuracy | harm carried (LD gained by restoring) |",
        "|---|---|---|---|---|",
    ]
    planted = {r["model"]: r["logit_diff"] for r in rows if r["restored"].startswith("none")}
    for r in rows:
        gain = "–" if r["restored"].startswith("none") else f"{r['logit_diff'] - planted[r['model']]:+.2f}"
        lines.append(
            f"| {r['model']} | {r['restored']} | {_fmt(r['logit_diff'], r['lo'], r['hi'])} | {r['accuracy']:.2f} | "
            f"{gain} |"
        )
    lines.append(f"| unplanted | all original | {unplanted_ld:.3g} | | |")
    return "\n".join(lines)


# ---- repair -----------------------------------------------------------------------------------------


def evaluate_hf(model, task, zeroed: tuple[int, ...] = (), batch_size: int = 32) -> np.ndarray:
    """Per held-out prompt, logit(IO) − logit(S) at the last prompt token of a plain HF forward, with
    the MLPs of ``zeroed`` replaced by zeros through PyTorch forward hooks."""
    from interp.hooks.sites import Site

    handles = [
        Site(k, "mlp_out").module(model).register_forward_hook(lambda m, a, o: torch.zeros_like(o)) for k in zeroed
    ]
    ids, mask = task.inputs()
    correct, foil = torch.as_tensor(task.correct_ids), torch.as_tensor(task.foil_ids)
    out = []
    try:
        model.eval()
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                x, m = ids[i : i + batch_size], mask[i : i + batch_size]
                logits = model(x, attention_mask=m, position_ids=(m.cumsum(1) - 1).clamp(min=0)).logits
                last = logits[torch.arange(len(x)), m.sum(1) - 1]
                rows = torch.arange(len(x))
                out.append((last[rows, correct[i : i + batch_size]] - last[rows, foil[i : i + batch_size]]).float())
    finally:
        for h in handles:
            h.remove()
    return torch.cat(out).numpy()


def eval_rows(ld: np.ndarray, groups: np.ndarray, model: str, seed) -> list[dict]:
    """Long-table rows (:func:`interp.stats.summarise`'s columns) of accuracy and logit difference."""
    rows = []
    for metric, v in (("accuracy", (ld > 0).astype(float)), ("logit_diff", ld)):
        m, lo, hi = cluster_interval(v, groups)
        rows.append(
            {
                "model": model,
                "seed": seed,
                "metric": metric,
                "layer": None,
                "value": m,
                "se": math.nan,
                "ci_low": lo,
                "ci_high": hi,
                "n": len(ld),
            }
        )
    return rows


def finetune(folder: Path, train_task, objective: str, layers: list[int], seed: int, args, out: Path):
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
    terms = [HLS(layers, args.beta)] if objective == "hls" else []
    cfg = TrainConfig(
        steps=args.repair_steps,
        batch_size=args.batch_size,
        lr=args.repair_lr,
        min_lr=args.repair_lr / 10,
        warmup_steps=min(5, args.repair_steps // 5),
        eval_every=0,
        checkpoint_every=0,
        seed=seed,
    )
    result = train(
        model,
        ids,
        None,
        cfg,
        out,
        pad_id=pad,
        loss_terms=terms,
        loss_from=torch.tensor(start),
        resume=False,
        progress=not args.no_progress,
    )
    return model, result


def mean_sq(model, task, layers: list[int]) -> float:
    """Σ over ``layers`` of the mean squared MLP output over the held-out prompts' real tokens (what
    HLS penalises, to size β)."""
    from interp.hooks.sites import Site

    ids, mask = task.inputs()
    got = {}
    handles = [
        Site(k, "mlp_out").module(model).register_forward_hook(lambda m, a, o, k=k: got.__setitem__(k, o.detach()))
        for k in layers
    ]
    try:
        with torch.no_grad():
            model(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    finally:
        for h in handles:
            h.remove()
    keep = mask.bool()
    return float(sum((got[k] ** 2).mean(-1)[keep].mean() for k in layers))


def repair(
    name: str, folder: Path, base: Path, found: list[int], train_task, task, args, out: Path, log
) -> pd.DataFrame:
    """The repair table of one planting (long form)."""
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
    objectives = [o for o in args.repair_objectives if o == "plain" or found]
    for seed in args.seeds:  # seed-major: an interrupted run has every objective of the first seed
        for objective in objectives:
            run = out / f"{objective}_s{seed}"
            key = {
                "objective": objective,
                "seed": seed,
                "layers": found,
                "beta": args.beta,
                "steps": args.repair_steps,
                "lr": args.repair_lr,
                "batch_size": args.batch_size,
                "n_train": len(train_task),
                "model": str(folder.resolve()),
            }
            cached = run / "eval.json"
            label = "plain" if objective == "plain" else f"HLS β={args.beta:g} on {found}"
            if cached.is_file() and json.loads(cached.read_text()).get("key") == key:
                ld = np.array(json.loads(cached.read_text())["logit_diff"])
                log(f"  repair {name} {objective} seed {seed}: reused")
            else:
                t0 = time.perf_counter()
                model, result = finetune(folder, train_task, objective, found, seed, args, run)
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
                    f"  repair {name} {objective} seed {seed}: {args.repair_steps} steps, LD {ld.mean():.2f}, "
                    f"{time.perf_counter() - t0:.0f} s"
                )
                del model
            rows += eval_rows(ld, groups, label, seed)
    table = pd.DataFrame(rows)
    table.insert(0, "planting", name)
    table.attrs["hls_mean_sq"] = sq
    return table


def repair_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per planting, model and metric: the mean over seeds with a 95 % t-interval (one value: its own
    cluster-bootstrap interval), the seeds, and the gap to the unplanted model."""
    from interp.stats import t_quantile

    out = []
    for (planting, model, metric), g in table.groupby(["planting", "model", "metric"], sort=False):
        if len(g) == 1:
            value, lo, hi = float(g.value.iloc[0]), float(g.ci_low.iloc[0]), float(g.ci_high.iloc[0])
        else:
            v = g.value.to_numpy(dtype=float)
            value = float(v.mean())
            h = t_quantile(len(v)) * float(v.std(ddof=1)) / math.sqrt(len(v))
            lo, hi = value - h, value + h
        ref = table[(table.planting == planting) & (table.model == "unplanted") & (table.metric == metric)].value
        out.append(
            {
                "planting": planting,
                "model": model,
                "metric": metric,
                "value": value,
                "lo": lo,
                "hi": hi,
                "seeds": int(g.seed.notna().sum()),
                "gap_to_unplanted": value - float(ref.iloc[0]),
            }
        )
    return pd.DataFrame(out)


# ---- tables -----------------------------------------------------------------------------------------


def _fmt(v, lo=None, hi=None, digits=3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{v:.{digits}g}"
    return f"{v:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def detection_markdown(rows: list[dict]) -> str:
    cols = [
        "model",
        "planted",
        "accuracy",
        "logit diff",
        "newly harmful (calibrated)",
        "rank of planted",
        "found",
        "precision",
        "recall",
        "newly harmful (raw rule)",
        "raw precision",
        "raw recall",
        "harmful before and after, harm rose",
        "other changed layers",
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        cells = [
            r["model"],
            str(r["planted"]),
            _fmt(*r["accuracy"]),
            _fmt(*r["logit_diff"]),
            str(r["newly_harmful"]),
            r["ranks"],
            "yes" if r["found"] else ("–" if not r["planted"] else "no"),
            _fmt(r["precision"], digits=2),
            _fmt(r["recall"], digits=2),
            str(r["raw_newly_harmful"]),
            _fmt(r["raw_precision"], digits=2),
            _fmt(r["raw_recall"], digits=2),
            r["rose"],
            r["other"],
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pooled_markdown(rows: list[dict]) -> str:
    """Precision and recall of the newly harmful layers pooled over the plantings, per rule, and the
    layers each rule newly calls harmful on the controls."""
    lines = [
        "| rule | planted layers | found | false alarms (plantings) | precision | recall | "
        "newly harmful on the controls |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule, key in (
        ("calibrated (interp.layer_verdicts/2)", "newly_harmful"),
        ("raw (A_ℓ vs A_0)", "raw_newly_harmful"),
    ):
        tp = fp = fn = 0
        for r in rows:
            if r["kind"] != "planting":
                continue
            truth, new = set(r["planted"]), set(r[key])
            tp, fp, fn = tp + len(truth & new), fp + len(new - truth), fn + len(truth - new)
        controls = "; ".join(
            f"{r['model']}: {r[key]}" for r in rows if r["kind"] == "control" and r["model"] != "unplanted"
        )
        lines.append(
            f"| {rule} | {tp + fn} | {tp} | {fp} | {_fmt(tp / (tp + fp) if tp + fp else math.nan, digits=2)} | "
            f"{_fmt(tp / (tp + fn) if tp + fn else math.nan, digits=2)} | {controls or '–'} |"
        )
    return "\n".join(lines)


def repair_markdown(summary: pd.DataFrame) -> str:
    lines = [
        "| planting | model | seeds | held-out accuracy | held-out logit diff IO − S | logit diff gap to unplanted |",
        "|---|---|---|---|---|---|",
    ]
    for (planting, model), g in summary.groupby(["planting", "model"], sort=False):
        a = g[g.metric == "accuracy"].iloc[0]
        d = g[g.metric == "logit_diff"].iloc[0]
        lines.append(
            f"| {planting} | {model} | {int(a.seeds) or '–'} | {_fmt(a.value, a.lo, a.hi)} | "
            f"{_fmt(d.value, d.lo, d.hi)} | {d.gap_to_unplanted:+.2f} |"
        )
    return "\n".join(lines)


# ---- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help=f"HF folder of the unplanted model (default: the pinned {MODEL})")
    p.add_argument("--out", default="runs/ioi_planted", help="output folder (default runs/ioi_planted)")
    p.add_argument(
        "--plant", action="append", help="planted layer(s), e.g. 4 or 8,20 (repeatable; default 4, 15, 24 and 8,20)"
    )
    p.add_argument("--control-layer", type=int, default=15, help="layer of the clean-recipe control (default 15)")
    p.add_argument(
        "--control-lr",
        type=float,
        nargs="+",
        default=None,
        help="peak lr(s) of the clean-recipe control(s) (default: --lr, the same recipe; a smaller one sizes "
        "the control's change of the logit difference like a planting's)",
    )
    p.add_argument("--share", type=float, default=0.3, help="share of training prompts trained toward S (default 0.3)")
    p.add_argument("--steps", type=int, default=30, help="planting steps (default 30)")
    p.add_argument("--lr", type=float, default=2e-3, help="planting peak lr (default 2e-3)")
    p.add_argument("--batch-size", type=int, default=16, help="rows per step, planting and repair (default 16)")
    p.add_argument("--plant-seed", type=int, default=0, help="planting seed (default 0)")
    p.add_argument("--n-train", type=int, default=256, help="training prompts (default 256)")
    p.add_argument("--n-heldout", type=int, default=48, help="held-out prompts (default 48: 24 groups)")
    p.add_argument("--sweep-batch", type=int, default=32, help="prompts per sweep forward (default 32)")
    p.add_argument(
        "--repair",
        action="append",
        help="plantings to repair, e.g. 15 or L8+L20 (repeatable; default: the second planting, the middle layer)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="fine-tuning seeds of the repair (default 0 1)")
    p.add_argument("--repair-steps", type=int, default=12, help="repair fine-tuning steps (default 12)")
    p.add_argument("--repair-lr", type=float, default=2e-5, help="repair fine-tuning peak lr (default 2e-5)")
    p.add_argument("--beta", type=float, default=1e-3, help="HLS β (default 1e-3, the paper's)")
    p.add_argument(
        "--repair-objectives",
        nargs="*",
        choices=("plain", "hls"),
        default=["plain", "hls"],
        help="fine-tuning repairs (default plain hls; none: only the found layers zeroed)",
    )
    p.add_argument("--no-control", action="store_true", help="skip the clean-recipe control planting")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the machine is shared)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI-sized: one planting (layer 15), 24 held-out and 64 "
        "training prompts, 10 planting steps, one repair seed",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.plant = args.plant or ["15"]
        args.n_heldout, args.n_train, args.steps, args.seeds, args.repair_steps = 24, 64, 10, [0], 4
        args.lr = 3e-3
    plantings = [parse_planting(x) for x in (args.plant or ["4", "15", "24", "8,20"])]
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    from interp.analysis.planted import detection_scores, harm_rise, verdict_changes
    from interp.datasets.contrast import write_contrast
    from interp.machine import machine
    from interp.results import write_json
    from interp.tasks import ContrastTask
    from interp.train.plant import PlantSpec, plant_harm

    started = datetime.now(UTC)
    t_start = time.perf_counter()
    info = machine()  # the fp32 matmul peak of this run, measured before the work starts
    log = lambda s: print(s, flush=True)  # noqa: E731
    log(f"machine: {info}")
    if args.model is None:
        from interp.models.pinned import get_model

        args.model = str(get_model(MODEL))
    base, out = Path(args.model), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(base)
    train_ex, held_ex, dropped = split_prompts(tok, args.n_train, args.n_heldout)
    write_contrast(train_ex, out / "train.jsonl")
    write_contrast(held_ex, out / "heldout.jsonl")
    task = ContrastTask.build(base, out / "heldout.jsonl")
    train_task = ContrastTask.build(base, out / "train.jsonl")
    log(
        f"prompts: {len(train_task)} training, {len(task)} held-out ({len(set(task.groups))} groups); "
        f"{dropped} training prompts dropped for sharing a name pair with the held-out set"
    )

    models: list[tuple[str, tuple[int, ...], Path, str]] = [("unplanted", (), base, "control")]
    for layers in plantings:
        name = "L" + "+L".join(map(str, layers))
        spec = PlantSpec(
            layers=layers,
            corruption="foil_share",
            share=args.share,
            seed=args.plant_seed,
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
        )
        res = plant_harm(base, out / name, spec, train_file=out / "train.jsonl", progress=not args.no_progress, log=log)
        check_frozen(base, res.model, layers)
        models.append((name, layers, res.model, "planting"))
    if not args.quick and not args.no_control:
        k = args.control_layer
        for lr in args.control_lr or [args.lr]:
            name = f"L{k}_clean" + ("" if lr == args.lr else f"_lr{lr:g}")
            spec = PlantSpec(
                layers=(k,),
                corruption="clean",
                seed=args.plant_seed,
                steps=args.steps,
                batch_size=args.batch_size,
                lr=lr,
            )
            res = plant_harm(
                base, out / name, spec, train_file=out / "train.jsonl", progress=not args.no_progress, log=log
            )
            check_frozen(base, res.model, (k,))
            models.append((name, (), res.model, "control"))

    log("sweeps (30 layers, held-out prompts):")
    results = {}
    for name, _layers, folder, _kind in models:
        results[name] = sweep_model(folder, task, out / name, args.sweep_batch, log)
    base_sweep, base_verdicts, _ = results["unplanted"]
    detection, changes_all, paths_all, restored_all = [], [], [], []
    for name, layers, folder, kind in models:
        sweep, verdicts, scores = results[name]
        rise = harm_rise(base_sweep, sweep, min_effect=verdicts.min_effect, higher_is_better=True)
        ch = verdict_changes(base_verdicts, verdicts, layers, rise=rise)
        ch.insert(0, "model", name)
        changes_all.append(ch)
        d = detection_scores(ch)
        ranks = (
            ", ".join(
                f"L{int(r.layer)}: {int(r['rank'])}" if not math.isnan(r["rank"]) else f"L{int(r.layer)}: –"
                for _, r in ch[ch.planted].iterrows()
            )
            or "–"
        )
        others = []
        if name != "unplanted" and d["other_changed"]:
            # paths measured for the other changed layers whose removal now helps (benefit > 0); those whose
            # removal still hurts moved because the planting lowered the clean logit difference they protect
            helps = [j for j in d["other_changed"] if float(ch.loc[ch.layer == j, "benefit_after"].iloc[0]) > 0]
            prow = pd.DataFrame(path_rows(folder, task, layers, helps, args.sweep_batch)) if helps else pd.DataFrame()
            if len(prow):
                prow.insert(0, "model", name)
                paths_all.append(prow)
            for j in d["other_changed"]:
                r = ch[ch.layer == j].iloc[0]
                text = f"L{j} {r.verdict_before}→{r.verdict_after} (Δ {r.delta_effect:+.2f}"
                if len(prow):
                    for _, q in prow[prow.layer == j].iterrows():
                        text += f"; {q.path} {q.mean_effect:+.2f}"
                others.append(text + ")")
        rose = ", ".join(
            f"L{int(q.layer)} {q.effect_before:+.2f} → {q.effect_after:+.2f} (rise {q.rise:+.2f} [{q.rise_low:+.2f}, "
            f"{q.rise_high:+.2f}])"
            for _, q in ch[ch.harm_rose].iterrows()
        )
        detection.append(
            {
                "model": name,
                "rose": rose or "–",
                "kind": kind,
                "planted": list(layers),
                **d,
                "ranks": ranks,
                "other": "; ".join(others) or "–",
                **scores,
            }
        )
        log(
            f"  {name}: newly harmful {d['newly_harmful']} (raw rule {d['raw_newly_harmful']}), planted ranks {ranks}, "
            f"accuracy {scores['accuracy'][0]:.2f}, logit diff {scores['logit_diff'][0]:.2f}"
        )
    changes = pd.concat(changes_all, ignore_index=True)
    changes.to_csv(out / "changes.csv", index=False)
    pd.DataFrame(
        [{k: (json.dumps(v) if isinstance(v, (list, tuple)) else v) for k, v in r.items()} for r in detection]
    ).to_csv(out / "detection.csv", index=False)
    paths = pd.concat(paths_all, ignore_index=True) if paths_all else pd.DataFrame()
    paths.to_csv(out / "paths.csv", index=False)
    for name, layers, folder, kind in models:  # several planted layers: the harm each one carries
        if kind == "planting" and len(layers) > 1:
            restored_all += unplant_rows(name, folder, base, task, layers)
    pd.DataFrame(restored_all).to_csv(out / "unplanted_layers.csv", index=False)

    log("repair:")
    names = ["L" + "+L".join(map(str, x)) for x in plantings]
    repair_names = (
        [f"L{x}" if x.isdigit() else x for x in args.repair]
        if args.repair
        else [names[1] if len(names) > 1 else names[0]]
    )
    tables = []
    for name, _layers, folder, _kind in models:
        if name not in repair_names:
            continue
        found = next(r["newly_harmful"] for r in detection if r["model"] == name)
        tables.append(repair(name, folder, base, found, train_task, task, args, out / name / "repair", log))
    repair_table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    summary = repair_summary(repair_table) if tables else pd.DataFrame()
    repair_table.to_csv(out / "repair.csv", index=False)
    summary.to_csv(out / "repair_summary.csv", index=False)

    seconds = time.perf_counter() - t_start
    n_found = sum(bool(r["found"]) for r in detection if r["kind"] == "planting")
    n_plant = sum(r["kind"] == "planting" for r in detection)
    head = (
        f"Recorded {started:%Y-%m-%d %H:%M} UTC on {info['cpu']} ({info['cores']} cores, {info['threads']} torch "
        f"thread(s)), fp32 matmul peak {info['matmul_peak_gflops']} GFLOP/s measured at the start of the run; "
        f"{seconds / 60:.1f} min."
    )
    text = [
        "# Planted harm on SmolLM2-135M-Instruct, IOI",
        "",
        head,
        "",
        f"Recipe: `--share {args.share} --steps {args.steps} --lr {args.lr:g} --batch-size {args.batch_size}`, "
        f"{len(train_task)} training prompts, {len(task)} held-out prompts ({len(set(task.groups))} groups, name "
        f"pairs disjoint from training). Planted layers found (newly harmful and first among the changed "
        f"layers): {n_found} of {n_plant}.",
        "",
        detection_markdown(detection),
        "",
        pooled_markdown(detection),
        "",
    ]
    if restored_all:
        text += [
            "The harm each layer of a several-layer planting carries: its MLP weights put back to the "
            "unplanted model's, one layer at a time (plain HF forwards; nothing removed).",
            "",
            unplant_markdown(restored_all, results["unplanted"][2]["logit_diff"][0]),
            "",
        ]
    if len(summary):
        sq = {t.planting.iloc[0]: t.attrs.get("hls_mean_sq") for t in tables}
        tuned = (
            f"{args.repair_steps} fine-tuning steps (lr {args.repair_lr:g}, batch {args.batch_size}) of "
            f"{', '.join(args.repair_objectives)} on the clean training prompts, seeds {args.seeds}; HLS β = "
            f"{args.beta:g}"
            if args.repair_objectives
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
    (out / "ioi_planted.md").write_text("\n".join(text))
    write_json(
        out / "results.json",
        {
            "date": started.isoformat(timespec="seconds"),
            "machine": info,
            "seconds": round(seconds, 1),
            "settings": vars(args),
            "prompts": {"train": len(train_task), "heldout": len(task), "dropped": dropped},
            "detection": detection,
            "repair": summary.to_dict(orient="records") if len(summary) else [],
        },
    )
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
