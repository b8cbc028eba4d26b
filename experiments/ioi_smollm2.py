"""Where SmolLM2-135M-Instruct computes indirect-object identification (IOI), checked against
TransformerLens's own patching: accuracy, the two patching maps, attribution vs exact, attention
views of the top heads, and the 30-layer MLP zero-out sweep with the calibrated verdicts.

    OMP_NUM_THREADS=1 python experiments/ioi_smollm2.py --out runs/ioi_smollm2           # ~30-60 min, 1 thread
    OMP_NUM_THREADS=1 python experiments/ioi_smollm2.py --quick --out runs/ioi_quick     # CI size, ~5 min

Steps (each writes into ``OUT``):

1. ``eval``: IOI accuracy and mean logit difference IO − S with group-bootstrap intervals, per
   template and order (:func:`interp.analysis.contrast_eval.evaluate_contrast`) on ``--n-eval``
   prompts of all eight templates (:func:`interp.datasets.ioi.ioi_examples`).
2. ``maps``: on ``--n-maps`` prompts of one template (positions must line up), the ABC-corrupted
   run restored from the clean one — ``resid_pre`` by layer × position and each head's output
   (``hook_z``, all positions) by layer × head (:func:`interp.analysis.stacked_patching.stacked_patching`);
   heatmaps of the normalised logit difference (patched − corrupted) / (clean − corrupted), CSVs.
3. ``tl_check``: the same cells from ``transformer_lens.patching.get_act_patch_resid_pre`` /
   ``get_act_patch_attn_head_out_all_pos`` on the same bridge and prompts (``--check-layers``; all
   layers with ``--check-all``): the maximum absolute difference, printed.
4. ``attribution``: AtP of the head map (one clean forward, one corrupted forward, one backward;
   :func:`interp.analysis.attribution.activation_attribution`) against the exact map: Spearman
   over all 270 heads and over the top 20 by exact effect, same-sign share; scatter.
5. ``views``: CircuitsVis attention patterns of the top heads by |effect| (offline HTML).
6. ``sweep``: MLP zero-out of all 30 layers on the ``eval`` prompts (logit difference), verdicts
   by the calibrated rule (:func:`interp.analysis.verdicts.layer_verdicts`; groups = template ×
   name pair) and the paper's raw rule beside it.

``results.json`` holds every number with the date, the machine and the fp32 matmul peak measured in
this run (:func:`interp.machine.machine`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MODEL = "smollm2-135m-instruct"


def top_heads(pmap, k: int):
    """The ``k`` heads of a layer × head map with the largest |mean effect|: a DataFrame with
    layer, head, mean effect and the share of the gap restored."""
    from interp.analysis.attribution import rank_sites

    gap = pmap.meta["clean_mean"] - pmap.meta["corrupted_mean"]
    top = rank_sites(pmap, k).rename(columns={"attribution": "mean_effect"})
    top["restored"] = top["mean_effect"] / gap
    return top


def top_agreement(atp, exact, k: int) -> float:
    """Spearman of AtP against exact over the ``k`` sites of largest |exact mean effect|."""
    from interp.analysis.attribution import site_table, spearman

    table = site_table(atp, exact)
    top = table.reindex(table["exact"].abs().sort_values(ascending=False).index).head(k)
    return spearman(top["attribution"], top["exact"])


def token_strings(tokenizer, ids) -> list[list[str]]:
    """Each row's tokens as text (byte-level ``Ġ`` shown as a space)."""
    return [
        [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(row)] for row in ids.tolist()
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", default="runs/ioi_smollm2", help="run folder (default runs/ioi_smollm2)")
    p.add_argument("--quick", action="store_true", help="CI size: 16 eval prompts, 2 map prompts, 2 checked layers")
    p.add_argument("--model", default=MODEL, help=f"a pinned name, a model folder or a .gguf file (default {MODEL})")
    p.add_argument("--n-eval", type=int, help="IOI prompts for accuracy and the MLP sweep (default 48; quick 16)")
    p.add_argument("--n-maps", type=int, help="prompts of one template for the patching maps (default 8; quick 2)")
    p.add_argument("--template", type=int, default=0, help="index of the template the maps use (default 0)")
    p.add_argument(
        "--check-layers", type=int, nargs="+", help="layers TransformerLens recomputes (default 0 12 23 29; quick 0 29)"
    )
    p.add_argument("--check-all", action="store_true", help="TransformerLens recomputes every cell of both maps")
    p.add_argument("--top", type=int, default=6, help="top heads to view (default 6)")
    p.add_argument("--seed", type=int, default=0, help="prompt and bootstrap seed (default 0)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    from interp.analysis.attribution import activation_attribution, agreement
    from interp.analysis.contrast_eval import evaluate_contrast
    from interp.analysis.stacked_patching import stacked_patching, transformer_lens_check
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.machine import machine
    from interp.models import load_bridge
    from interp.models.registry import PINNED, get_model
    from interp.tasks import own_tokenizer
    from interp.tasks.contrast import GROUP_UNIT, ContrastTask
    from interp.viz.attribution import draw_attribution_scatter
    from interp.viz.circuits import head_attention_views, patching_view, write_standalone
    from interp.viz.layers import draw_layer_effects, draw_patching_heatmap

    torch.manual_seed(args.seed)
    progress = not args.no_progress
    n_eval = args.n_eval or (16 if args.quick else 48)
    n_maps = args.n_maps or (2 if args.quick else 8)
    check_layers = args.check_layers or ([0, 29] if args.quick else [0, 12, 23, 29])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not 0 <= args.template < len(IOI_TEMPLATES):
        p.error(f"--template must be in 0..{len(IOI_TEMPLATES) - 1}, got {args.template}")
    folder = get_model(args.model) if args.model in PINNED else args.model
    results: dict = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": str(args.model),
        "command": "python experiments/ioi_smollm2.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(peak=True),
        "seconds": {},
    }
    print(f"{results['date']}: {results['machine']}", flush=True)

    def stage(name: str, t0: float) -> None:
        results["seconds"][name] = round(time.perf_counter() - t0, 1)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))

    t = time.perf_counter()
    bridge = load_bridge(folder)
    tok = own_tokenizer(folder)
    stage("load", t)

    # 1. accuracy and logit difference, all templates
    t = time.perf_counter()
    task = ContrastTask.build(bridge, ioi_examples(tok, n_eval, seed=args.seed), tokenizer=tok)
    ev = evaluate_contrast(bridge, task, n_boot=args.n_boot, seed=args.seed, progress=progress)
    ev.save(out, "eval")
    (out / "eval.md").write_text(ev.markdown() + "\n")
    s = ev.summary()
    results["eval"] = {
        k: s[k]
        for k in (
            "n",
            "groups",
            "n_right",
            "accuracy",
            "accuracy_lo",
            "accuracy_hi",
            "logit_diff",
            "logit_diff_lo",
            "logit_diff_hi",
        )
    }
    print(
        f"IOI: {s['n_right']}/{s['n']} right, accuracy {s['accuracy']:.3f} [{s['accuracy_lo']:.3f}, "
        f"{s['accuracy_hi']:.3f}], logit diff {s['logit_diff']:.2f} [{s['logit_diff_lo']:.2f}, "
        f"{s['logit_diff_hi']:.2f}]",
        flush=True,
    )
    stage("eval", t)

    # 2. the two maps on one template
    t = time.perf_counter()
    maps_task = ContrastTask.build(
        bridge, ioi_examples(tok, n_maps, seed=args.seed + 1, templates=[IOI_TEMPLATES[args.template]]), tokenizer=tok
    )
    clean, corrupted = torch.tensor(maps_task.ids), torch.tensor(maps_task.corrupted_ids)
    metric = maps_task.metric()
    labels = token_strings(tok, clean[:1])[0]
    maps = {}
    for comp in ("resid_pre", "heads"):
        maps[comp] = stacked_patching(bridge, clean, corrupted, metric, comp, labels=labels, progress=progress)
        maps[comp].save(out, f"patching_{comp}")
        draw_patching_heatmap(
            maps[comp],
            out / f"patching_{comp}.png",
            title=f"IOI, {comp}: share of the logit-difference gap restored ({n_maps} prompts)",
        )
        write_standalone(patching_view(maps[comp]), out / f"patching_{comp}.html")
    pm = maps["heads"]
    results["maps"] = {
        "template": IOI_TEMPLATES[args.template],
        "n_prompts": n_maps,
        "positions": int(clean.shape[1]),
        "clean_logit_diff": pm.meta["clean_mean"],
        "corrupted_logit_diff": pm.meta["corrupted_mean"],
        "example": maps_task.prompts[0],
        "corrupted_example": str(maps_task.examples[0].corrupted),
    }
    rs = maps["resid_pre"].restored().stack().rename("restored").reset_index()
    results["maps"]["resid_pre_top"] = (
        rs.reindex(rs["restored"].abs().sort_values(ascending=False).index)
        .head(10)
        .assign(token=lambda d: [labels[int(i)] for i in d["pos"]])
        .to_dict(orient="records")
    )
    heads = top_heads(pm, 12)
    heads.to_csv(out / "top_heads.csv", index=False)
    results["maps"]["heads_top"] = heads.to_dict(orient="records")
    print("top heads by |effect| (restored share of the gap):\n" + heads.round(3).to_string(index=False), flush=True)
    stage("maps", t)

    # 3. TransformerLens's own patching on the same bridge and prompts
    t = time.perf_counter()
    results["tl_check"] = {}
    for comp in ("resid_pre", "heads"):
        chk = transformer_lens_check(
            bridge, clean, corrupted, metric, maps[comp], layers=None if args.check_all else check_layers
        )
        results["tl_check"][comp] = chk
        print(
            f"TransformerLens {chk['engine']}: {chk['n_cells']} cells × {chk['n_examples']} prompts, "
            f"max |ours − TL| = {chk['max_abs_diff']:.2e} (corrupted baseline {chk['max_abs_diff_baseline']:.2e})",
            flush=True,
        )
    stage("tl_check", t)

    # 4. attribution of the head map
    t = time.perf_counter()
    atp = activation_attribution(bridge, clean, corrupted, metric, "heads")
    agree = agreement(atp, pm)
    agree["spearman_top20"] = top_agreement(atp, pm, 20)
    results["attribution"] = {"heads_atp": agree}
    atp.save(out, "attribution_heads")
    draw_attribution_scatter(atp, out / "attribution_heads.png", exact=pm, title="IOI heads: AtP vs exact")
    print(
        f"AtP vs exact (heads): Spearman {agree['spearman']:.3f} (top 20: {agree['spearman_top20']:.3f}), "
        f"same sign {agree['sign_agreement']:.3f}, Pearson {agree['pearson']:.3f}",
        flush=True,
    )
    stage("attribution", t)

    # 5. attention views of the top heads
    t = time.perf_counter()
    chosen = [(int(r.layer), int(r.head)) for r in heads.head(args.top).itertuples()]
    views = head_attention_views(bridge, clean[:2], token_strings(tok, clean[:2]), chosen, id_prefix="ioi-top")
    write_standalone(
        views, out / "attention_top_heads.html", title="IOI: attention of the top heads by patching effect"
    )
    results["views"] = {"heads": chosen, "file": "attention_top_heads.html"}
    stage("views", t)

    # 6. MLP zero-out over all layers, calibrated verdicts
    t = time.perf_counter()
    ids, mask = task.inputs()
    sweep = mlp_zero_sweep(
        bridge, ids, task.metric(), mask, categories=task.categories, groups=task.groups, batch_size=16
    )
    sweep = sweep.with_groups(task.groups, GROUP_UNIT)
    verdicts = layer_verdicts(sweep, n_boot=args.n_boot, seed=args.seed, threshold=0.0)
    sweep.save(out, "mlp_sweep")
    verdicts.save(out, "verdicts")
    draw_layer_effects(
        verdicts, out / "mlp_sweep.png", title="IOI: MLP zero-out, logit difference (calibrated verdicts)"
    )
    vf = verdicts.frame
    results["sweep"] = {
        "n": len(task),
        "verdicts": vf["verdict"].value_counts().to_dict(),
        "raw_verdicts": vf["raw_verdict"].value_counts().to_dict(),
        "layers": vf[["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].to_dict(orient="records"),
    }
    print(vf[["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].round(3).to_string(index=False))
    stage("sweep", t)
    print(f"wrote {out}; stages (s): {results['seconds']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
