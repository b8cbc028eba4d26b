"""PragWorld's question on a real model (issue 39), end to end over the public API: natural
conversations with the seven alterations, the layers that hurt tracking, and harmful-layer
suppression against plain fine-tuning and a random-layer control.

Per model (:func:`run_model`): (a) train / selection / evaluation splits (selection: the train
templates, another seed; evaluation: held-out templates and words; :func:`splits`); (b) the baseline
table, bare and (where the tokenizer has one) chat template, heuristics as columns; (c) a sweep of
removals zero / mean / scale on the selection split's flip and invariant items separately, the head
map (an original patched into its flipped alteration of equal token length; by AtP, and exactly for the
heads alone), the sweep's effects per alteration (per cell, and as verdicts family-wise over layers ×
alterations) and the layers PragWorld's own rule would pick (point estimates, §6.2;
:func:`layers_step`); (d) fine-tuning arms at matched steps, lr and data — none, plain, HLS on the
harmful layers, HLS on the paper's rule's layers, HLS on as many random non-harmful layers near them
(the control), ULA on the useful layers — scored on the evaluation split; beside each arm the cost
elsewhere (IOI, next-token loss on PragWorld's human-written conversations), the cloze's
Myhill–Nerode boundary and (first seed) a current-place probe; the best arm's model kept as a
Hugging Face folder ``<out>/<model>/finetune/best_checkpoint`` (:func:`finetune_step`); (e)
``results.json`` and Markdown tables in ``out`` (:func:`run`). ``experiments/pragworld_real.py`` is
its command line.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import interp
from interp.analysis.evaluation.dialogue import (
    alteration_effects,
    alteration_verdicts,
    arm_table,
    control_layers,
    evaluate_dialogue,
    paired_difference,
    paper_rule_layers,
)
from interp.analysis.evaluation.dialogue_boundary import dialogue_boundary
from interp.analysis.evaluation.dialogue_probes import dialogue_probes
from interp.analysis.evaluation.text_loss import pragworld_conversations, text_loss
from interp.api import provenance
from interp.hardware import machine
from interp.worlds.dialogue.natural import flip_pairs

#: held-out text for the next-token-loss cost: PragWorld's human-written conversations (its originals),
#: where the source tree's ``../shared/data`` holds them (skipped, with the reason recorded, elsewhere)
TEXT = Path(__file__).resolve().parents[2] / "../shared/data/pragworld/Manual_Dataset_500_Final.csv"


@dataclass(frozen=True)
class Config:
    """Sizes: ``groups`` per split, fine-tuning ``steps`` / ``lr`` / ``weight`` / ``batch_size``,
    swept ``layers`` (None: all, or every ``layer_step``-th and the last) by ``removals`` (zero
    first: the harmful / useful layers are its verdicts), ``scales`` of the scale
    removal, confirmation ``folds``, bootstrap ``n_boot``, ``ioi_n`` IOI prompts, head-map
    ``patch_pairs`` by ``patch_kind`` (and, ``exact_heads``, by exact patching of the heads alone: :func:`exact_head_map`), ``paper_k`` layers by the paper's rule, ``text_n``
    conversations for the next-token-loss cost."""

    groups: int = 40
    steps: int = 16
    lr: float = 5e-5
    weight: float = 1e-3
    batch_size: int = 8
    layers: tuple[int, ...] | None = None
    removals: tuple[str, ...] = ("zero", "mean", "scale")
    scales: tuple[float, ...] = (0.5,)
    folds: int | None = 2
    n_boot: int = 1000
    ioi_n: int = 48
    patch_pairs: int = 4
    patch_kind: str = "attribution"
    exact_heads: bool = True
    layer_step: int | None = None
    paper_k: int = 2
    text_n: int = 40
    quick: bool = False
    baseline_only: bool = False


QUICK = Config(groups=4, steps=2, batch_size=4, layers=(0, 1), n_boot=50, ioi_n=8, patch_pairs=2, text_n=4, quick=True)


def swept_layers(c: Config, n_layers: int) -> tuple[int, ...] | None:
    """``c.layers``, or every ``c.layer_step``-th layer and the last, or None (all)."""
    if c.layers is not None or not c.layer_step:
        return c.layers
    return tuple(sorted({*range(0, n_layers, c.layer_step), n_layers - 1}))


def splits(model, c: Config) -> dict[str, list]:
    """``train`` (train templates and words, seed 0), ``selection`` (the same, seed 1) and ``eval``
    (held-out templates and words, seed 0): ``c.groups`` conversations each."""

    def make(seed: int, split: str) -> list:
        return list(interp.dialogue(model, c.groups, seed=seed, split=split).examples)

    return {"train": make(0, "train"), "selection": make(1, "train"), "eval": make(0, "heldout")}


def layers_step(model, data, c: Config, out: Path) -> dict:
    """The calibrated sweep (zero / mean / scale) on the selection split's flip and invariant items,
    the harmful and useful layers it names, the paper's rule's layers, the effects per alteration
    and the head map."""
    rule = interp.VerdictRule(n_boot=c.n_boot)
    res: dict = {"verdicts": {}, "harmful": set(), "useful": set()}
    layers, frames = swept_layers(c, model.n_layers), []
    for eff in ("Flip", "Invariant"):
        xs = [e for e in data["selection"] if e.meta["effect"] == eff]
        folds = c.folds if c.folds and len({e.group for e in xs}) >= 2 * c.folds else None  # 2 groups a fold
        res[f"folds_{eff.lower()}"] = folds
        task = interp.contrast(model, xs)
        sw = interp.sweep(model, task, removals=list(c.removals), scales=c.scales if "scale" in c.removals else (), layers=layers,
                          folds=folds, rule=rule, out=out / f"sweep_{eff.lower()}")  # fmt: skip
        frames.append(sw.frame.assign(effect_kind=eff))
        for removal in sw.removals:
            v = sw.verdicts(removal=removal)
            res["verdicts"][f"{eff.lower()}/{removal}"] = v.frame[
                ["layer", "mean_effect", "ci_low", "ci_high", "verdict"]
            ]
            if removal == "zero":
                res["harmful"] |= set(v.harmful)
                res["useful"] |= set(v.useful)
    res["harmful"], res["useful"] = sorted(res["harmful"] - res["useful"]), sorted(res["useful"] - res["harmful"])
    rows = pd.concat(frames, ignore_index=True)
    rows["example"] = rows["effect_kind"] + ":" + rows["example"].astype(str)  # two sweeps' rows, told apart
    paper = paper_rule_layers(rows[rows["removal"] == "zero"], k=c.paper_k)  # the paper's rule, point estimates
    res["paper_rule"] = paper.to_dict("records")
    res["paper_layers"] = [int(x) for x in paper.loc[paper["chosen"], "layer"]]
    res["alterations"] = alteration_effects(rows, n_boot=c.n_boot)
    res["alteration_verdicts"] = alteration_verdicts(rows, n_boot=c.n_boot)  # family-wise over layers × alterations
    pairs = flip_pairs(model.tokenizer, data["selection"])
    res["patch_pairs_available"] = len(pairs)
    if pairs:
        p = interp.patch(
            model, interp.contrast(model, pairs[: c.patch_pairs]), kind=c.patch_kind, rule=rule, out=out / "patch"
        )
        res["top_heads"], res["head_map"] = p.top_heads(6), p.restored("head").round(3).to_dict()
        if c.exact_heads:  # beside the AtP map just computed on the same pairs (not run again)
            atp = p.maps["heads"] if c.patch_kind == "attribution" else None
            res["exact_heads"] = exact_head_map(model, pairs[: c.patch_pairs], atp)
    else:
        res["patch_skipped"] = (
            "no flipped alteration has the token length of its original (patching needs equal lengths)"
        )
    return res


def exact_head_map(model, pairs: list, atp: Any = None) -> dict:
    """Exact activation patching of every head's output from an original into its flipped
    alteration (``pairs``: ``interp.worlds.dialogue.natural.flip_pairs``; heads only, no
    position map), beside AtP's first-order estimate of the same cells (``atp``: its head map when
    already computed on these pairs): the map (share of the gap restored), its top heads and how
    AtP agrees (Spearman over all heads and the top 20, sign)."""
    from interp.analysis.engines.attribution import agreement, top_agreement, top_patching_sites
    from interp.analysis.engines.contrast_sweep import contrast_activation_patching

    task = interp.contrast(model, pairs)
    exact = contrast_activation_patching(model.bridge, task, ("heads",), method="exact")[0]["heads"]
    if atp is None:
        atp = contrast_activation_patching(model.bridge, task, ("heads",), method="attribution")[0]["heads"]
    agree = {**agreement(atp, exact), "spearman_top20": top_agreement(atp, exact, 20)}
    return {
        "pairs": len(pairs),
        "gap": exact.meta["clean_mean"] - exact.meta["corrupted_mean"],
        "head_map": exact.restored().round(3).to_dict(),
        "top_heads": [(int(r.layer), int(r.head)) for r in top_patching_sites(exact, 6).itertuples()],
        "atp_vs_exact": {k: float(v) for k, v in agree.items()},
    }


def better(a, b) -> bool:
    """Whether score ``a`` beats ``b`` (None: nothing yet): robust accuracy, then accuracy, then logit difference."""
    if b is None:
        return True
    sa, sb = a.summary(), b.summary()
    ka = (sa["robust"], sa["total"], float(a.frame["logit_diff"].mean()))
    return ka > (sb["robust"], sb["total"], float(b.frame["logit_diff"].mean()))


def after(model, data, c: Config, texts: list[str], probes: bool) -> dict:
    """A model's measurements beside its score: the cloze's Myhill–Nerode boundary, the next-token
    loss on held-out text, and (``probes``) a current-place probe by layer on the selection split."""
    res = {"boundary": dialogue_boundary(model, data["eval"], n_boot=c.n_boot).summary}
    if texts:
        res["text_loss"] = text_loss(model, texts, n_boot=c.n_boot)
    if probes:
        n = model.n_layers
        layers = sorted({n // 2, (3 * n) // 4, n - 1, n})
        res["probe"] = dialogue_probes(model, data["selection"], labels=("gold_place",), layers=layers)[
            "gold_place"
        ].summary()
    return res


def finetune_step(model, data, lay: dict, c: Config, seeds: list[int], out: Path, base) -> dict:
    """The fine-tuning arms at matched steps, lr and data over ``seeds``, scored on the evaluation
    split beside ``base`` (no fine-tuning); each arm's cost elsewhere, boundary and probe; the
    paired differences; the best model kept in ``out / "best_checkpoint"``."""
    harmful, useful, paper = lay["harmful"], lay["useful"], lay["paper_layers"]
    note = {}
    if c.quick and not (harmful and useful):  # the suite exercises every arm even when no verdict names a layer
        harmful, useful, note["quick"] = harmful or [0], useful or [1 % model.n_layers], "quick: layers 0 / 1 stand in"
    paper = paper or ([0] if c.quick else [])
    ctrl = control_layers(harmful or paper, useful, model.n_layers)  # random layers near the suppressed ones
    arms = {"plain": ("plain", []), "hls": ("hls", harmful), "hls_paper": ("hls", paper),
            "hls_random": ("hls", ctrl), "ula": ("ula", useful)}  # fmt: skip
    train, ioi = interp.contrast(model, data["train"]), interp.ioi(model, n=c.ioi_n, seed=0)
    texts = pragworld_conversations(TEXT, c.text_n) if TEXT.is_file() else []
    if not texts:
        note["text_loss"] = f"skipped: the PragWorld manual split is not at {TEXT}"
    scores, ioi_rows, skipped = {"none": [base]}, {}, {}
    measured = {"none": [after(model, data, c, texts, probes=True)]}
    best: dict[str, Any] = {"arm": None, "seed": None, "score": None}
    best_dir = out / "best_checkpoint"
    for arm, (method, layers) in arms.items():
        scores[arm] = []
        if method != "plain" and not layers:
            what = {"hls": "harmful", "hls_paper": "positive zero-removal", "ula": "useful"}.get(arm, "")
            skipped[arm] = f"no {what} layer named on the selection split"
            continue
        for seed in seeds:
            ft = interp.finetune(model, train, method=method, suppress=layers or None, steps=c.steps, lr=c.lr,
                                 weight=c.weight, batch_size=c.batch_size, seed=seed, eval_task=ioi,
                                 out=out / "ckpt", progress=False)  # fmt: skip
            score = evaluate_dialogue(ft.model, interp.contrast(ft.model, data["eval"]), n_boot=c.n_boot)
            scores[arm].append(score)
            measured.setdefault(arm, []).append(after(ft.model, data, c, texts, probes=seed == seeds[0]))
            ioi_rows[f"{arm}/{seed}"] = ft.table.to_dict()
            if better(score, best["score"]):  # keep the best fine-tuned model as a Hugging Face folder
                shutil.rmtree(best_dir, ignore_errors=True)
                shutil.move(str(ft.folder), best_dir)
                best = {"arm": arm, "seed": seed, "score": score}
            else:
                shutil.rmtree(ft.folder)
    pairs = [("hls", "plain"), ("hls", "hls_random"), ("hls_paper", "plain"), ("hls_paper", "hls_random"), ("hls_random", "plain"), ("hls", "none"), ("hls_paper", "none"), ("plain", "none"), ("hls_random", "none"), ("ula", "none"), ("ula", "plain")]  # fmt: skip
    diffs = {f"{a} - {b}": {q: paired_difference(scores[a], scores[b], q, n_boot=c.n_boot) for q in ("robust", "accuracy", "logit_diff")}
             for a, b in pairs if scores.get(a) and scores.get(b)}  # fmt: skip
    tables = {q: arm_table(scores, q) for q in ("accuracy", "robust", "logit_diff")}
    tables["elsewhere"] = pd.DataFrame({a: {**{k: np.nanmean([m["boundary"][k]["value"] if m["boundary"][k]["value"] is not None else np.nan for m in ms])
                                                for k in ("compression", "distinction")},
                                            "text_loss": np.mean([m["text_loss"]["loss"] for m in ms]) if texts else np.nan,
                                            "probe_best": ms[0]["probe"]["probe_best_accuracy"] if "probe" in ms[0] else np.nan}
                                        for a, ms in measured.items()}).T  # fmt: skip
    kept = {"arm": best["arm"], "seed": best["seed"], "folder": str(best_dir) if best["arm"] else None,
            "chosen_by": "robust accuracy, then accuracy, then logit difference, on the evaluation split"}  # fmt: skip
    return {"layers": {k: v for k, (_, v) in arms.items() if k != "plain"}, "skipped": skipped, "note": note,
            "ioi": ioi_rows, "differences": diffs, "tables": tables, "scores": scores, "measured": measured,
            "best_checkpoint": kept}  # fmt: skip


def run_model(name: str, c: Config, seeds: list[int], out: Path) -> dict:
    """Every stage on one model (a pinned name or a folder); its Markdown tables written into ``out``."""
    model = interp.load_model(name)
    data = splits(model, c)
    chat = [False, True] if getattr(model.tokenizer, "chat_template", None) else [False]
    base = {("chat" if ch else "bare"): evaluate_dialogue(model, interp.contrast(model, data["eval"], chat_template=ch),
                                                          n_boot=c.n_boot) for ch in chat}  # fmt: skip
    stem = Path(name).name
    md = [f"# {name}: baseline on held-out templates and words\n"]
    md += [f"## {k}\n\n{s.markdown()}\n\n{stem} ({k}) {s.verdict()}.\n" for k, s in base.items()]
    (out / f"baseline_{stem}.md").write_text("\n".join(md))  # written before the long steps
    if c.baseline_only:
        return {"baseline": {k: s.to_dict() for k, s in base.items()}}
    lay = layers_step(model, data, c, out / stem / "layers")
    ft = finetune_step(model, data, lay, c, seeds, out / stem / "finetune", base["bare"])
    write_markdown(name, c, seeds, lay, ft, out)
    return {
        "baseline": {k: s.to_dict() for k, s in base.items()},
        "layers": {**{k: v for k, v in lay.items() if k not in ("verdicts", "alterations", "alteration_verdicts")},
                   "verdicts": {k: v.to_dict("records") for k, v in lay["verdicts"].items()},
                   "alterations": lay["alterations"].to_dict("records"),
                   "alteration_verdicts": lay["alteration_verdicts"].to_dict("records")},
        "finetune": {**{k: v for k, v in ft.items() if k not in ("scores", "tables")}, "tables": {q: t.reset_index().to_dict("records") for q, t in ft["tables"].items()},
                     "scores": {a: [s.to_dict() for s in ss] for a, ss in ft["scores"].items()}},
    }  # fmt: skip


def write_markdown(name: str, c: Config, seeds: list[int], lay: dict, ft: dict, out: Path) -> None:
    """``layers_<model>.md`` (verdicts, the paper's rule, effects and calibrated verdicts per alteration) and
    ``finetune_<model>.md`` (the arms' tables, the paired differences, the kept checkpoint)."""
    stem = Path(name).name
    lmd = [
        f"# {name}: layers on the selection split\n",
        f"harmful (zero, flip or invariant): {lay['harmful']}; useful: {lay['useful']}; "
        f"the paper's rule (zero removal, point estimates): {lay['paper_layers']}\n",
    ]
    lmd += [f"## {k}\n\n{v.to_markdown(index=False, floatfmt='+.3f')}\n" for k, v in lay["verdicts"].items()]
    alt = lay["alterations"]
    for removal in alt["removal"].unique():  # per alteration: mean effect; * where the interval excludes 0
        f = alt[alt["removal"] == removal]
        cell = f.assign(
            v=[
                f"{m:+.2f}{'*' if lo > 0 or hi < 0 else ''}"
                for m, lo, hi in zip(f["mean_effect"], f["ci_low"], f["ci_high"])
            ]
        )
        grid = cell.pivot(index="layer", columns="category", values="v")
        lmd.append(
            f"## per alteration, {removal} (mean effect; * interval excludes 0, per cell)\n\n{grid.to_markdown(disable_numparse=True)}\n"
        )
    av = lay["alteration_verdicts"]
    for removal, f in av.groupby("removal", sort=False):  # the family-wise reading of the same cells
        named = f[f["verdict"].isin(["harmful", "useful"])]
        cells = ", ".join(f"{r.category} × layer {r.layer}: {r.verdict} ({r.mean_effect:+.2f} [{r.band_low:+.2f}, {r.band_high:+.2f}])"
                          for r in named.itertuples()) or "none"  # fmt: skip
        counts = f["verdict"].value_counts().to_dict()
        lmd.append(
            f"## per alteration, {removal}: calibrated verdicts (band over all {len(f)} cells)\n\n{cells}; {counts}\n"
        )
    (out / f"layers_{stem}.md").write_text("\n".join(lmd))
    fmd = [
        f"# {name}: fine-tuning arms ({c.steps} steps, lr {c.lr}, seeds {seeds})\n",
        f"layers {ft['layers']}; skipped {ft['skipped']}\n",
        f"best checkpoint: {ft['best_checkpoint']}\n",
    ]
    fmd += [f"## {q} (mean over seeds)\n\n{t.to_markdown(floatfmt='.3f')}\n" for q, t in ft["tables"].items()]
    fmd += ["## paired differences (group bootstrap)\n"] + [
        f"- {k}: {json.dumps(v)}" for k, v in ft["differences"].items()
    ]
    (out / f"finetune_{stem}.md").write_text("\n".join(fmd))


def finished_models(out: str | Path, c: Config, seeds: list[int]) -> dict[str, dict]:
    """The models a run in ``out`` already finished with config ``c`` and ``seeds`` (``results.json``;
    a key an older run did not record counts as its default); {} when there is none. A
    ``results.json`` of another config or seeds is refused, naming the difference (nothing is overwritten)."""
    path = Path(out) / "results.json"
    if not path.is_file():
        return {}
    old = json.loads(path.read_text())
    want = json.loads(json.dumps({"config": asdict(c), "seeds": seeds}))
    have = {"config": {**want["config"], **old.get("config", {})}, "seeds": old.get("seeds")}
    diff = {k: (have["config"].get(k), v) for k, v in want["config"].items() if have["config"].get(k) != v}
    if have["seeds"] != seeds:
        diff["seeds"] = (have["seeds"], seeds)
    if diff:
        raise ValueError(f"{path} holds a run of another config (in the folder → now: {diff}); choose another --out")
    return {name: {"provenance": old.get("provenance"), **entry} for name, entry in old.get("models", {}).items()}


def run(models: list[str], c: Config, seeds: list[int], out: str | Path) -> dict:
    """Every stage for each of ``models`` (names or folders); ``results.json`` and the Markdown
    tables written into ``out`` after each model, each model's ``provenance`` beside its results.
    A model already finished in ``out`` with the same config and seeds is kept, not rerun
    (:func:`finished_models`): an interrupted run resumes at the model it was in. Returns the results."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kept = finished_models(out, c, seeds)
    results: dict[str, Any] = {"config": asdict(c), "seeds": seeds, "machine": machine(), "provenance": provenance()}
    results["models"] = {name: entry for name, entry in kept.items() if name not in models}  # others already there
    for name in models:
        if name in kept:
            print(f"{name}: finished in {out} with this config: kept (remove it from results.json to rerun)")
            results["models"][name] = kept[name]
        else:
            results["models"][name] = {
                **run_model(name, c, seeds, out),
                "provenance": provenance(),
                "machine": results["machine"],
            }
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return results


__all__ = [
    "QUICK",
    "TEXT",
    "Config",
    "exact_head_map",
    "finetune_step",
    "finished_models",
    "layers_step",
    "run",
    "run_model",
    "splits",
    "swept_layers",
]
