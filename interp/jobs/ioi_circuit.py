"""Where a model (default SmolLM2-135M-Instruct) computes indirect-object identification (IOI), checked
against TransformerLens's own patching, end to end: what ``experiments/ioi_smollm2.py`` runs.

Stages, each writing into ``cfg.out`` (``results.json`` rewritten after each, with its seconds):

1. ``eval``: IOI accuracy and logit difference IO − S with group-bootstrap intervals
   (:func:`interp.analysis.evaluation.contrast.evaluate_contrast`) on prompts of all eight templates.
2. ``maps``: on prompts of one template, the ABC-corrupted run restored from the clean one —
   ``resid_pre`` by layer × position and each head's output by layer × head
   (:func:`interp.analysis.engines.stacked_patching.stacked_patching`); heatmaps, HTML views, CSVs and the top
   heads (:func:`interp.analysis.engines.attribution.top_patching_sites`).
3. ``tl_check``: the same cells from TransformerLens's patching functions
   (:func:`interp.analysis.engines.stacked_patching.transformer_lens_check`).
4. ``attribution``: AtP of the head map against the exact one (Spearman over all heads and the top 20).
5. ``views``: CircuitsVis attention patterns of the top heads.
6. ``sweep``: MLP zero-out of every layer, calibrated verdicts beside the paper's raw rule.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: the pinned default model (:func:`interp.models.registry.get_model`)
MODEL = "smollm2-135m-instruct"


@dataclass
class IOICircuitConfig:
    """Settings of :func:`run_ioi_circuit` (the options of ``experiments/ioi_smollm2.py``, same names).

    ``model``: a pinned name, a model folder or a .gguf file; ``n_eval``: prompts for accuracy and the
    MLP sweep (None: 48, quick 16); ``n_maps``: prompts of template ``template`` for the maps (None: 8,
    quick 2); ``check_layers``: layers TransformerLens recomputes (None: 0 12 23 29, quick 0 29;
    ``check_all``: every cell); ``top``: top heads to view; ``seed``: prompts and bootstrap;
    ``n_boot``: bootstrap resamples; ``no_progress``: no bars."""

    out: str = "runs/ioi_smollm2"
    quick: bool = False
    model: str = MODEL
    n_eval: int | None = None
    n_maps: int | None = None
    template: int = 0
    check_layers: list[int] | None = None
    check_all: bool = False
    top: int = 6
    seed: int = 0
    n_boot: int = 2000
    no_progress: bool = False


def run_ioi_circuit(cfg: IOICircuitConfig, command: str = "", say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the six stages of the module docstring; ``command`` is recorded in ``results.json``,
    progress goes to ``say``. Returns ``results.json``'s content."""
    import torch

    from interp.analysis.engines.attribution import activation_attribution, agreement, top_agreement, top_patching_sites
    from interp.analysis.engines.stacked_patching import stacked_patching, transformer_lens_check
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.evaluation.contrast import evaluate_contrast
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.hardware import machine
    from interp.models import load_bridge
    from interp.models.registry import PINNED, get_model
    from interp.tasks import own_tokenizer
    from interp.tasks.contrast import GROUP_UNIT, ContrastTask
    from interp.tasks.tokens import token_strings
    from interp.viz.attribution import draw_attribution_scatter
    from interp.viz.circuits import head_attention_views, patching_view, write_standalone
    from interp.viz.layers import draw_layer_effects, draw_patching_heatmap

    torch.manual_seed(cfg.seed)
    progress = not cfg.no_progress
    n_eval = cfg.n_eval or (16 if cfg.quick else 48)
    n_maps = cfg.n_maps or (2 if cfg.quick else 8)
    check_layers = cfg.check_layers or ([0, 29] if cfg.quick else [0, 12, 23, 29])
    if not 0 <= cfg.template < len(IOI_TEMPLATES):
        raise ValueError(f"template must be in 0..{len(IOI_TEMPLATES) - 1}, got {cfg.template}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    folder = get_model(cfg.model) if cfg.model in PINNED else cfg.model
    results: dict = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "model": str(cfg.model),
        "command": command,
        "machine": machine(peak=True),
        "seconds": {},
    }
    say(f"{results['date']}: {results['machine']}")

    def stage(name: str, t0: float) -> None:
        results["seconds"][name] = round(time.perf_counter() - t0, 1)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))

    t = time.perf_counter()
    bridge = load_bridge(folder)
    tok = own_tokenizer(folder)
    stage("load", t)

    # 1. accuracy and logit difference, all templates
    t = time.perf_counter()
    task = ContrastTask.build(bridge, ioi_examples(tok, n_eval, seed=cfg.seed), tokenizer=tok)
    ev = evaluate_contrast(bridge, task, n_boot=cfg.n_boot, seed=cfg.seed, progress=progress)
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
    say(
        f"IOI: {s['n_right']}/{s['n']} right, accuracy {s['accuracy']:.3f} [{s['accuracy_lo']:.3f}, "
        f"{s['accuracy_hi']:.3f}], logit diff {s['logit_diff']:.2f} [{s['logit_diff_lo']:.2f}, "
        f"{s['logit_diff_hi']:.2f}]"
    )
    stage("eval", t)

    # 2. the two maps on one template
    t = time.perf_counter()
    maps_task = ContrastTask.build(
        bridge, ioi_examples(tok, n_maps, seed=cfg.seed + 1, templates=[IOI_TEMPLATES[cfg.template]]), tokenizer=tok
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
        "template": IOI_TEMPLATES[cfg.template],
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
    heads = top_patching_sites(pm, 12)
    heads.to_csv(out / "top_heads.csv", index=False)
    results["maps"]["heads_top"] = heads.to_dict(orient="records")
    say("top heads by |effect| (restored share of the gap):\n" + heads.round(3).to_string(index=False))
    stage("maps", t)

    # 3. TransformerLens's own patching on the same bridge and prompts
    t = time.perf_counter()
    results["tl_check"] = {}
    for comp in ("resid_pre", "heads"):
        chk = transformer_lens_check(
            bridge, clean, corrupted, metric, maps[comp], layers=None if cfg.check_all else check_layers
        )
        results["tl_check"][comp] = chk
        say(
            f"TransformerLens {chk['engine']}: {chk['n_cells']} cells × {chk['n_examples']} prompts, "
            f"max |ours − TL| = {chk['max_abs_diff']:.2e} (corrupted baseline {chk['max_abs_diff_baseline']:.2e})"
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
    say(
        f"AtP vs exact (heads): Spearman {agree['spearman']:.3f} (top 20: {agree['spearman_top20']:.3f}), "
        f"same sign {agree['sign_agreement']:.3f}, Pearson {agree['pearson']:.3f}"
    )
    stage("attribution", t)

    # 5. attention views of the top heads
    t = time.perf_counter()
    chosen = [(int(r.layer), int(r.head)) for r in heads.head(cfg.top).itertuples()]
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
    verdicts = layer_verdicts(sweep, n_boot=cfg.n_boot, seed=cfg.seed, threshold=0.0)
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
    say(vf[["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]].round(3).to_string(index=False))
    stage("sweep", t)
    say(f"wrote {out}; stages (s): {results['seconds']}")
    return results


__all__ = ["MODEL", "IOICircuitConfig", "run_ioi_circuit"]
