"""The PragWorld job's stages as functions (:mod:`interp.jobs.pragworld` runs them in order):
(a) the manual split asked both ways and Table 1 beside the paper's rows (:func:`evaluate_prompts`,
:func:`table1`), (b) the MLP zero-out sweep and direct-effect patching with the layers chosen
(:func:`mlp_zero`, :func:`choose_pairs`, :func:`direct_effect`, :func:`choose_layers`), and the rows
of the before / after table (:func:`rescore`, :func:`subset_verdicts`, :func:`after_rows_of`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from interp.config import PragWorldJobConfig
from interp.results import write_json

#: PragWorld Table 1, manual split, base models (robust / yes / no / original / altered / flip /
#: invariant, %), generation prompt — the paper's rows for the small models and one strong one
PAPER_TABLE1 = {
    "Llama-3.2-1B (paper)": (14.29, 10.83, 95.96, 48.98, 48.76, 55.40, 45.05),
    "Qwen2.5-0.5B (paper)": (19.39, 57.04, 54.71, 48.98, 57.71, 69.78, 50.92),
    "Phi-3.5-mini (paper)": (48.98, 66.06, 86.10, 78.57, 74.13, 74.10, 74.36),
}
TABLE1_KEYS = ("robust", "yes", "no", "original", "altered", "flip", "invariant")
PROMPTS = ("benchmark", "label")


def job_placement(cfg: PragWorldJobConfig) -> Any:
    """Where the job loads its models: the config's device, dtype and attention."""
    from interp.models.device import Placement

    return Placement.resolve(cfg.device, cfg.dtype, attention=cfg.attention)


# ---- (a) evaluation ---------------------------------------------------------------------------------


def evaluate_prompts(
    bridge: Any,
    data: Any,
    n_rows: int,
    out: Path,
    cfg: PragWorldJobConfig,
    *,
    progress: bool = True,
    model_name: str = "",
) -> dict[str, Any]:
    """Both prompts on the first ``n_rows`` rows of ``data``: per prompt the score summary (with the
    cluster-bootstrap intervals), written to ``out/<prompt>/``; the label prompt's P(yes) too."""
    from interp.metrics.pragworld import score_pragworld
    from interp.metrics.pragworld_eval import evaluate_model

    e = cfg.eval
    rows = data.rows.iloc[:n_rows]
    res: dict[str, Any] = {}
    for prompt in PROMPTS:
        template = e.benchmark_chat_template if prompt == "benchmark" else e.label_chat_template
        t = time.perf_counter()
        run = evaluate_model(
            bridge,
            data,
            out / prompt / "responses.jsonl",
            prompt=prompt,
            batch_size=e.batch_size,
            max_new_tokens=e.max_new_tokens,
            chat_template=template,
            limit=n_rows,
            progress=progress,
            model_name=model_name,
        )
        score = score_pragworld(rows, run.predictions, n_boot=e.n_boot, seed=cfg.seed)
        score.settings.update(prompt=prompt, chat_template=bool(run.meta["chat_template"]), model=model_name)
        score.save(out / prompt)
        res[prompt] = {
            "summary": score.summary(),
            "chat_template": bool(run.meta["chat_template"]),
            "seconds": round(time.perf_counter() - t, 1),
            "computed": run.computed,
            "predictions": run.predictions,
        }
        if prompt == "label":
            res[prompt]["p_yes"] = [r["p_yes"] for r in run.records]
    return res


def rescore(evals: dict[str, Any], data: Any, n_rows: int, cfg: PragWorldJobConfig) -> dict[str, Any]:
    """The summaries of :func:`evaluate_prompts`'s predictions on the first ``n_rows`` rows only
    (the before model on the rows the fine-tuned models are scored on)."""
    from interp.metrics.pragworld import score_pragworld

    rows = data.rows.iloc[:n_rows]
    return {
        p: {
            "summary": score_pragworld(
                rows, evals[p]["predictions"][:n_rows], n_boot=cfg.eval.n_boot, seed=cfg.seed
            ).summary()
        }
        for p in PROMPTS
    }


def subset_verdicts(
    sweep: Any, cfg: PragWorldJobConfig, n_examples: int | None = None, layers: list[int] | None = None
) -> Any:
    """The verdicts of a sweep restricted to its first ``n_examples`` examples and to ``layers``."""
    from interp.analysis.engines.sweeps import SweepResult
    from interp.analysis.verdicts.layers import layer_verdicts

    f = sweep.frame
    keep = (f["example"] < n_examples) if n_examples is not None else pd.Series(True, index=f.index)
    if layers is not None:
        keep &= f["layer"].isin(layers)
    return layer_verdicts(
        SweepResult(f[keep].reset_index(drop=True), dict(sweep.meta)),
        n_boot=cfg.layers.n_boot,
        seed=cfg.seed,
        threshold=0.5,
        **cfg.layers.verdict_rule(),
    )


def table1(before: dict[str, Any], model_label: str) -> pd.DataFrame:
    """Table 1 rows: this model under both prompts (with intervals) beside the paper's rows."""
    rows = []
    for prompt in PROMPTS:
        s = before[prompt]["summary"]
        how = "generation prompt, chat template" if prompt == "benchmark" else "label score, bare prompt"
        row: dict[str, Any] = {"model": f"{model_label} ({how})", "groups": s["groups"], "rows": s["rows"]}
        for k in TABLE1_KEYS:
            row[k] = s.get(k)
            row[f"{k}_lo"], row[f"{k}_hi"] = s.get(f"{k}_ci_low"), s.get(f"{k}_ci_high")
        row["unparseable"] = s.get("unparseable")
        rows.append(row)
    for name, vals in PAPER_TABLE1.items():
        rows.append({"model": name, "groups": 98, "rows": 500, **dict(zip(TABLE1_KEYS, vals))})
    return pd.DataFrame(rows)


def table1_markdown(t: pd.DataFrame) -> str:
    """:func:`table1` as Markdown: each cell its value with the 95 % interval in brackets (– where none)."""

    def cell(r: pd.Series, k: str) -> str:
        v = r.get(k)
        if v is None or pd.isna(v):
            return "–"
        lo, hi = r.get(f"{k}_lo"), r.get(f"{k}_hi")
        return f"{v:.1f} [{lo:.1f}, {hi:.1f}]" if lo is not None and not pd.isna(lo) else f"{v:.2f}"

    head = "| model | groups / rows | " + " | ".join(TABLE1_KEYS) + " | unparseable |"
    lines = [head, "|" + "---|" * (len(TABLE1_KEYS) + 3)]
    for _, r in t.iterrows():
        unp = "–" if r.get("unparseable") is None or pd.isna(r.get("unparseable")) else f"{r['unparseable']:.1f}"
        lines.append(
            f"| {r['model']} | {int(r['groups'])} / {int(r['rows'])} | "
            + " | ".join(cell(r, k) for k in TABLE1_KEYS)
            + f" | {unp} |"
        )
    return "\n".join(lines)


# ---- (b) layers -------------------------------------------------------------------------------------


def choose_pairs(
    task: Any, p_yes: list[float], cfg: PragWorldJobConfig
) -> tuple[list[tuple[int, int]], dict[str, Any]]:
    """The direct-effect pairs from the label scores (:func:`reference_pairs`), topped up with flip
    pairs when the reference rule leaves fewer than ``min_pairs``; capped at ``max_pairs``."""
    import numpy as np

    from interp.analysis.engines.pragworld_sweep import reference_pairs

    lay = cfg.layers
    p = np.asarray(p_yes, dtype=float)
    p_gold = np.where(task.gold == 1, p, 1 - p)
    ref, skipped = reference_pairs(None, task, p_gold=p_gold)
    info: dict[str, Any] = {"reference_pairs": len(ref), "skipped": skipped, "rule": "reference"}
    pairs = list(ref)
    if lay.pairs == "flip" or len(pairs) < lay.min_pairs:
        candidates, _ = task.pairs()
        flips = [(o, i) for o, i in candidates if task.gold[o] != task.gold[i] and (o, i) not in pairs]
        need = len(flips) if lay.pairs == "flip" else lay.min_pairs - len(pairs)
        pairs += flips[:need]
        info["rule"] = "flip" if lay.pairs == "flip" else "reference + flip pairs"
        info["flip_pairs_added"] = min(need, len(flips))
    info["patched"] = min(len(pairs), lay.max_pairs)
    return pairs[: lay.max_pairs], info


def direct_effect(
    bridge: Any,
    task: Any,
    pairs: list[tuple[int, int]],
    layers: list[int] | None,
    out: Path,
    cfg: PragWorldJobConfig,
    title: str,
) -> Any:
    """Direct-effect patching of ``pairs`` (rows of ``task``) at ``layers``: the altered prompt's
    residual stream entering each layer patched into the original's run, scored by P(altered gold);
    ``(sweep, verdicts)``; ``sweep.csv``, ``verdicts.json``, ``layers.png`` in ``out``."""
    from interp.analysis.engines.direct_patching import PatchPair, direct_effect_patching
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.viz.layers import draw_layer_effects

    pp = [PatchPair(list(task.ids[o]), list(task.ids[i])) for o, i in pairs]
    gold = [int(task.gold[i]) for _, i in pairs]
    cats = [task.categories[i] for _, i in pairs]
    sweep = direct_effect_patching(
        bridge, pp, task.metric(gold), layers, categories=cats, groups=task.pair_groups(pairs), higher_is_better=True
    )
    verdicts = layer_verdicts(
        sweep, n_boot=cfg.layers.n_boot, seed=cfg.seed, threshold=0.5, **cfg.layers.verdict_rule()
    )
    sweep.save(out)
    verdicts.save(out)
    draw_layer_effects(verdicts, out / "layers.png", title=title)
    write_json(out / "pairs.json", {"pairs": [list(p) for p in pairs], "rows_altered_gold": gold, "categories": cats})
    return sweep, verdicts


def mlp_zero(
    model_dir: Path,
    cfg: PragWorldJobConfig,
    n_rows: int,
    layers: list[int] | None,
    out: Path,
    title: str,
    figures: bool = True,
) -> Any:
    """The MLP zero-out sweep (:func:`interp.jobs.task_sweep.run_pragworld_sweep`) on the first ``n_rows``
    manual rows at ``layers``; with ``figures`` also the paper-style accuracy plot and the layer ×
    alteration heatmap."""
    from interp.jobs.run_records import SweepRun
    from interp.jobs.task_sweep import run_pragworld_sweep
    from interp.viz.layers import draw_category_effects, draw_layer_accuracy

    run = run_pragworld_sweep(
        model_dir,
        cfg.manual,
        kind="mlp-zero",
        grouping=cfg.grouping,
        layers=layers,
        out=out,
        seed=cfg.seed,
        batch_size=cfg.layers.batch_size,
        n=n_rows,
        n_boot=cfg.layers.n_boot,
        placement=job_placement(cfg),
        ablation=cfg.layers.ablation,
        **cfg.layers.verdict_rule(),
    )
    if not isinstance(run, SweepRun):  # an mlp-zero sweep makes a SweepRun
        raise TypeError(f"the mlp-zero sweep returned a {type(run).__name__}")
    if figures:
        draw_layer_accuracy(run.verdicts, out / "layer_accuracy.png", title=title)
        if run.verdicts.by_category is not None:
            draw_category_effects(
                run.verdicts.by_category, out / "categories.png", title=f"{title}: mean effect on P(gold) by alteration"
            )
    return run


def choose_layers(verdicts: Any, which: str, cfg: PragWorldJobConfig) -> tuple[list[int], str]:
    """HLS's (``harmful``) or ULA's (``useful``) layers: the verdicts', else the paper's raw rule
    (``layers.fallback = "raw"``), with why."""
    found = verdicts.harmful if which == "harmful" else verdicts.useful
    if found:
        return found, f"the verdicts' {which} layers"
    if cfg.layers.fallback == "none":
        return [], f"the verdicts call no layer {which}"
    f = verdicts.frame.copy()
    f["size"] = f["mean_benefit"].abs()
    raw = f[f["raw_verdict"] == which]
    rule = "the paper's raw rule (accuracy A_ℓ vs A_0, no test)"
    if raw.empty:  # accuracy ties A_0 everywhere: the same rule on the mean score
        raw = f[(f["mean_benefit"] > 0) if which == "harmful" else (f["mean_benefit"] < 0)]
        rule = "the paper's raw rule on the mean P(gold) (accuracy ties A_0 on every layer; no test)"
    picked = sorted(int(x) for x in raw.sort_values("size", ascending=False)["layer"].head(cfg.layers.fallback_max))
    if not picked:
        return [], f"neither the verdicts nor the paper's raw rule call a layer {which}"
    return picked, (
        f"the verdicts call no layer {which}; {rule} calls {len(raw)}, of which the {len(picked)} with "
        f"the largest |mean effect|"
    )


# ---- the before/after table -------------------------------------------------------------------------


def _score_rows(summary: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    rows = []
    for k in (*TABLE1_KEYS, "total"):
        v = summary.get(k)
        if v is None:
            continue
        rows.append(
            {
                "metric": f"{prefix}_{k}",
                "layer": None,
                "value": float(v),
                "se": summary.get(f"{k}_se"),
                "ci_low": summary.get(f"{k}_ci_low"),
                "ci_high": summary.get(f"{k}_ci_high"),
                "n": summary.get("groups" if k == "robust" else "rows"),
            }
        )
    return rows


def _verdict_rows(verdicts: Any, metric: str) -> list[dict[str, Any]]:
    out = []
    for r in verdicts.layer_rows():
        n = int(verdicts.frame.loc[verdicts.frame.layer == r["layer"], "n"].iloc[0])
        out.append(
            {
                "metric": metric,
                "layer": r["layer"],
                "value": r["effect"],
                "se": None,
                "ci_low": r["ci"][0],
                "ci_high": r["ci"][1],
                "n": n,
            }
        )
    return out


def after_rows_of(evals: dict[str, Any], sweep: Any, de: Any) -> list[dict[str, Any]]:
    """Long rows (``metric, layer, value, se, ci_low, ci_high, n``) of one model's after-evaluation:
    both prompts' accuracies, the MLP zero-out and direct-effect verdicts' per-layer effects."""
    rows = _score_rows(evals["benchmark"]["summary"], "benchmark") + _score_rows(evals["label"]["summary"], "label")
    if sweep is not None:
        rows += _verdict_rows(sweep, "sweep_effect_p_gold")
    if de is not None:
        rows += _verdict_rows(de, "direct_effect_p_gold")
    return rows


# ---- the job ----------------------------------------------------------------------------------------


__all__ = [
    "PAPER_TABLE1",
    "PROMPTS",
    "TABLE1_KEYS",
    "after_rows_of",
    "choose_layers",
    "choose_pairs",
    "direct_effect",
    "evaluate_prompts",
    "job_placement",
    "mlp_zero",
    "rescore",
    "subset_verdicts",
    "table1",
    "table1_markdown",
]
