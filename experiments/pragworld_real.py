"""PragWorld's question on a real model (issue 39): natural conversations with the seven alterations,
the layers that hurt tracking, and harmful-layer suppression against plain fine-tuning and a
random-layer control — a config and calls of the public API.

    python experiments/pragworld_real.py --out runs/pragworld_real              # the full size
    python experiments/pragworld_real.py --out runs/pw_small --groups 12 --steps 8 --seeds 0
    python experiments/pragworld_real.py --out runs/pw_quick --quick            # every arm tiny (the suite)

Per model: (a) train / selection / evaluation splits (selection: train templates, another seed;
evaluation: held-out templates and words); (b) the baseline table, bare and (where the tokenizer has
one) chat template, heuristics as columns; (c) a sweep of removals zero / mean / scale on the
selection split's flip and invariant items separately, and the head map (an original patched into
its flipped alteration of equal token length); (d) fine-tuning arms at matched steps, lr and data —
none, plain, HLS on the harmful layers, HLS on as many random non-harmful layers near them, ULA on
the useful layers — scored on the evaluation split, IOI before / after as the cost elsewhere;
(e) ``results.json`` and Markdown tables in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

import interp
from interp.analysis.evaluation.dialogue import arm_table, control_layers, evaluate_dialogue, paired_difference
from interp.analysis.evaluation.dialogue_boundary import dialogue_boundary
from interp.api import provenance
from interp.hardware import machine
from interp.worlds.dialogue.natural import flip_pairs


@dataclass(frozen=True)
class Config:
    """Sizes: ``groups`` per split, fine-tuning ``steps`` / ``lr`` / ``weight`` / ``batch_size``,
    swept ``layers`` (None: all), ``scales`` of the scale removal, confirmation ``folds``, bootstrap
    ``n_boot``, ``ioi_n`` IOI prompts, head-map ``patch_pairs`` by ``patch_kind``."""

    groups: int = 40
    steps: int = 16
    lr: float = 5e-5
    weight: float = 1e-3
    batch_size: int = 8
    layers: tuple[int, ...] | None = None
    scales: tuple[float, ...] = (0.5,)
    folds: int | None = 2
    n_boot: int = 1000
    ioi_n: int = 48
    patch_pairs: int = 4
    patch_kind: str = "attribution"
    quick: bool = False
    baseline_only: bool = False


QUICK = Config(groups=4, steps=2, batch_size=4, layers=(0, 1), n_boot=50, ioi_n=8, patch_pairs=2, quick=True)


def splits(model, c: Config) -> dict[str, list]:
    def make(seed: int, split: str) -> list:
        return list(interp.dialogue(model, c.groups, seed=seed, split=split).examples)

    return {"train": make(0, "train"), "selection": make(1, "train"), "eval": make(0, "heldout")}


def layers_step(model, data, c: Config, out: Path) -> dict:
    rule = interp.VerdictRule(n_boot=c.n_boot)
    res: dict = {"verdicts": {}, "harmful": set(), "useful": set()}
    for eff in ("Flip", "Invariant"):
        xs = [e for e in data["selection"] if e.meta["effect"] == eff]
        folds = c.folds if c.folds and len({e.group for e in xs}) >= 2 * c.folds else None  # 2 groups a fold
        res[f"folds_{eff.lower()}"] = folds
        task = interp.contrast(model, xs)
        sw = interp.sweep(model, task, removals=["zero", "mean", "scale"], scales=c.scales, layers=c.layers,
                          folds=folds, rule=rule, out=out / f"sweep_{eff.lower()}")  # fmt: skip
        for removal in sw.removals:
            v = sw.verdicts(removal=removal)
            res["verdicts"][f"{eff.lower()}/{removal}"] = v.frame[
                ["layer", "mean_effect", "ci_low", "ci_high", "verdict"]
            ]
            if removal == "zero":
                res["harmful"] |= set(v.harmful)
                res["useful"] |= set(v.useful)
    res["harmful"], res["useful"] = sorted(res["harmful"] - res["useful"]), sorted(res["useful"] - res["harmful"])
    pairs = flip_pairs(model.tokenizer, data["selection"])
    res["patch_pairs_available"] = len(pairs)
    if pairs:
        p = interp.patch(
            model, interp.contrast(model, pairs[: c.patch_pairs]), kind=c.patch_kind, rule=rule, out=out / "patch"
        )
        res["top_heads"], res["head_map"] = p.top_heads(6), p.restored("head").round(3).to_dict()
    else:
        res["patch_skipped"] = (
            "no flipped alteration has the token length of its original (patching needs equal lengths)"
        )
    return res


def finetune_step(model, data, lay: dict, c: Config, seeds: list[int], out: Path, base) -> dict:
    harmful, useful = lay["harmful"], lay["useful"]
    note = {}
    if c.quick and not (harmful and useful):  # the suite exercises every arm even when no verdict names a layer
        harmful, useful, note["quick"] = harmful or [0], useful or [1 % model.n_layers], "quick: layers 0 / 1 stand in"
    ctrl = control_layers(harmful, useful, model.n_layers)
    arms = {"plain": ("plain", []), "hls": ("hls", harmful), "hls_random": ("hls", ctrl), "ula": ("ula", useful)}
    train, ioi = interp.contrast(model, data["train"]), interp.ioi(model, n=c.ioi_n, seed=0)
    scores, ioi_rows, skipped = {"none": [base]}, {}, {}
    bounds = {"none": [dialogue_boundary(model, data["eval"], n_boot=c.n_boot).summary]}  # Myhill–Nerode on the cloze
    for arm, (method, layers) in arms.items():
        scores[arm] = []
        if method != "plain" and not layers:
            skipped[arm] = f"no {'harmful' if arm == 'hls' else 'useful'} layer named on the selection split"
            continue
        for seed in seeds:
            ft = interp.finetune(model, train, method=method, suppress=layers or None, steps=c.steps, lr=c.lr,
                                 weight=c.weight, batch_size=c.batch_size, seed=seed, eval_task=ioi,
                                 out=out / "ckpt", progress=False)  # fmt: skip
            scores[arm].append(evaluate_dialogue(ft.model, interp.contrast(ft.model, data["eval"]), n_boot=c.n_boot))
            bounds.setdefault(arm, []).append(dialogue_boundary(ft.model, data["eval"], n_boot=c.n_boot).summary)
            ioi_rows[f"{arm}/{seed}"] = ft.table.to_dict()
            shutil.rmtree(ft.folder)
    pairs = [("hls", "plain"), ("hls", "hls_random"), ("hls_random", "plain"), ("hls", "none"), ("plain", "none"), ("hls_random", "none"), ("ula", "none"), ("ula", "plain")]  # fmt: skip
    diffs = {f"{a} - {b}": {q: paired_difference(scores[a], scores[b], q, n_boot=c.n_boot) for q in ("robust", "accuracy")}
             for a, b in pairs if scores.get(a) and scores.get(b)}  # fmt: skip
    tables = {q: arm_table(scores, q) for q in ("accuracy", "robust", "logit_diff")}
    tables["myhill_nerode"] = pd.DataFrame({a: {k: np.mean([b[k]["value"] for b in bs if b[k]["value"] is not None] or [np.nan])
                                                for k in ("compression", "distinction")} for a, bs in bounds.items()}).T  # fmt: skip
    return {"layers": {"hls": harmful, "hls_random": ctrl, "ula": useful}, "skipped": skipped, "note": note,
            "ioi": ioi_rows, "differences": diffs, "tables": tables, "scores": scores, "boundary": bounds}  # fmt: skip


def run_model(name: str, c: Config, seeds: list[int], out: Path) -> dict:
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
    lmd = [
        f"# {name}: layers on the selection split\n",
        f"harmful (zero, flip or invariant): {lay['harmful']}; useful: {lay['useful']}\n",
    ]
    lmd += [f"## {k}\n\n{v.to_markdown(index=False, floatfmt='+.3f')}\n" for k, v in lay["verdicts"].items()]
    (out / f"layers_{stem}.md").write_text("\n".join(lmd))
    fmd = [
        f"# {name}: fine-tuning arms ({c.steps} steps, lr {c.lr}, seeds {seeds})\n",
        f"layers {ft['layers']}; skipped {ft['skipped']}\n",
    ]
    fmd += [f"## {q} (mean over seeds)\n\n{t.to_markdown(floatfmt='.3f')}\n" for q, t in ft["tables"].items()]
    fmd += ["## paired differences (group bootstrap)\n"] + [
        f"- {k}: {json.dumps(v)}" for k, v in ft["differences"].items()
    ]
    (out / f"finetune_{stem}.md").write_text("\n".join(fmd))
    return {
        "baseline": {k: s.to_dict() for k, s in base.items()},
        "layers": {**{k: v for k, v in lay.items() if k != "verdicts"}, "verdicts": {k: v.to_dict("records") for k, v in lay["verdicts"].items()}},
        "finetune": {**{k: v for k, v in ft.items() if k not in ("scores", "tables")}, "tables": {q: t.reset_index().to_dict("records") for q, t in ft["tables"].items()},
                     "scores": {a: [s.to_dict() for s in ss] for a, ss in ft["scores"].items()}},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the run folder (results.json and the Markdown tables)")
    p.add_argument("--quick", action="store_true", help="every arm tiny: 4 groups, 2 steps, 2 layers, 1 seed")
    p.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m", help="comma-separated names or folders")
    p.add_argument("--seeds", default="0,1,2", help="fine-tuning seeds (quick: the first)")
    p.add_argument("--groups", type=int, help="groups per split (default 40; quick 4)")
    p.add_argument("--steps", type=int, help="fine-tuning steps (default 16; quick 2)")
    p.add_argument("--batch-size", type=int, help="fine-tuning batch size (default 8; quick 4)")
    p.add_argument("--layers", help="swept layers, comma-separated (default all; quick 0,1)")
    p.add_argument("--baseline-only", action="store_true", help="stop after each model's baseline table")
    a = p.parse_args(argv)
    c = QUICK if a.quick else Config()
    c = replace(
        c,
        **{k: v for k, v in (("groups", a.groups), ("steps", a.steps), ("batch_size", a.batch_size)) if v is not None},
    )
    c = replace(c, layers=tuple(int(x) for x in a.layers.split(","))) if a.layers else c
    c = replace(c, baseline_only=a.baseline_only)
    seeds = [int(s) for s in a.seeds.split(",")][: 1 if a.quick else None]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {"config": asdict(c), "seeds": seeds, "machine": machine(), "provenance": provenance(), "models": {}}
    for name in a.models.split(","):
        results["models"][name] = run_model(name, c, seeds, out)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"wrote {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
