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
from dataclasses import dataclass, field
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


@dataclass
class CircuitRun:
    """One run's shared state: its config, output folder, ``results`` (``results.json``'s content,
    rewritten after each stage), the model and tokenizer, and what the stages hand on."""

    cfg: IOICircuitConfig
    out: Path
    say: Callable[[str], Any]
    results: dict[str, Any]
    bridge: Any = None
    tok: Any = None
    task: Any = None  # the accuracy prompts (all templates): also the sweep's
    maps: dict[str, Any] = field(default_factory=dict)  # the two exact patching maps
    inputs: tuple[Any, Any, Any] | None = None  # the maps' (clean, corrupted, metric)
    heads: Any = None  # the top heads, a frame

    @property
    def progress(self) -> bool:
        """Whether the stages show progress bars."""
        return not self.cfg.no_progress

    def stage(self, name: str, t0: float) -> None:
        """Record stage ``name`` (begun at ``t0``) and rewrite ``results.json``."""
        self.results["seconds"][name] = round(time.perf_counter() - t0, 1)
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))


def run_ioi_circuit(cfg: IOICircuitConfig, command: str = "", say: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run the six stages of the module docstring; ``command`` is recorded in ``results.json``,
    progress goes to ``say``. Returns ``results.json``'s content."""
    import torch

    from interp.datasets.ioi import IOI_TEMPLATES
    from interp.hardware import machine
    from interp.models import load_bridge
    from interp.models.registry import PINNED, get_model
    from interp.tasks import own_tokenizer

    torch.manual_seed(cfg.seed)
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
    run = CircuitRun(cfg, out, say, results)
    t = time.perf_counter()
    run.bridge, run.tok = load_bridge(folder), own_tokenizer(folder)
    run.stage("load", t)
    for name, step in (("eval", eval_stage), ("maps", maps_stage), ("tl_check", tl_check_stage),
                       ("attribution", attribution_stage), ("views", views_stage), ("sweep", sweep_stage)):  # fmt: skip
        t = time.perf_counter()
        step(run)
        run.stage(name, t)
    say(f"wrote {out}; stages (s): {results['seconds']}")
    return results


def eval_stage(run: CircuitRun) -> None:
    """1. IOI accuracy and logit difference on prompts of all eight templates."""
    from interp.analysis.evaluation.contrast import evaluate_contrast
    from interp.datasets.ioi import ioi_examples
    from interp.tasks.contrast import ContrastTask

    cfg, out = run.cfg, run.out
    n_eval = cfg.n_eval or (16 if cfg.quick else 48)
    run.task = ContrastTask.build(run.bridge, ioi_examples(run.tok, n_eval, seed=cfg.seed), tokenizer=run.tok)
    ev = evaluate_contrast(run.bridge, run.task, n_boot=cfg.n_boot, seed=cfg.seed, progress=run.progress)
    ev.save(out, "eval")
    (out / "eval.md").write_text(ev.markdown() + "\n")
    s = ev.summary()
    keys = (
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
    run.results["eval"] = {k: s[k] for k in keys}
    run.say(
        f"IOI: {s['n_right']}/{s['n']} right, accuracy {s['accuracy']:.3f} [{s['accuracy_lo']:.3f}, "
        f"{s['accuracy_hi']:.3f}], logit diff {s['logit_diff']:.2f} [{s['logit_diff_lo']:.2f}, "
        f"{s['logit_diff_hi']:.2f}]"
    )


def maps_stage(run: CircuitRun) -> None:
    """2. On prompts of one template, the ABC-corrupted run restored from the clean one: ``resid_pre``
    by layer × position and each head's output by layer × head; heat maps, HTML views, the top heads."""
    import torch

    from interp.analysis.engines.attribution import top_patching_sites
    from interp.analysis.engines.stacked_patching import stacked_patching
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.tasks.contrast import ContrastTask
    from interp.tasks.tokens import token_strings
    from interp.viz.circuits import patching_view, write_standalone
    from interp.viz.layers import draw_patching_heatmap

    cfg, out, tok = run.cfg, run.out, run.tok
    n_maps = cfg.n_maps or (2 if cfg.quick else 8)
    examples = ioi_examples(tok, n_maps, seed=cfg.seed + 1, templates=[IOI_TEMPLATES[cfg.template]])
    maps_task = ContrastTask.build(run.bridge, examples, tokenizer=tok)
    clean, corrupted = torch.tensor(maps_task.ids), torch.tensor(maps_task.corrupted_ids)
    metric = maps_task.metric()
    run.inputs = (clean, corrupted, metric)
    labels = token_strings(tok, clean[:1])[0]
    for comp in ("resid_pre", "heads"):
        m = stacked_patching(run.bridge, clean, corrupted, metric, comp, labels=labels, progress=run.progress)
        run.maps[comp] = m
        m.save(out, f"patching_{comp}")
        title = f"IOI, {comp}: share of the logit-difference gap restored ({n_maps} prompts)"
        draw_patching_heatmap(m, out / f"patching_{comp}.png", title=title)
        write_standalone(patching_view(m), out / f"patching_{comp}.html")
    pm = run.maps["heads"]
    rec = {
        "template": IOI_TEMPLATES[cfg.template],
        "n_prompts": n_maps,
        "positions": int(clean.shape[1]),
        "clean_logit_diff": pm.meta["clean_mean"],
        "corrupted_logit_diff": pm.meta["corrupted_mean"],
        "example": maps_task.prompts[0],
        "corrupted_example": str(maps_task.examples[0].corrupted),
    }
    rs = run.maps["resid_pre"].restored().stack().rename("restored").reset_index()
    rec["resid_pre_top"] = (
        rs.reindex(rs["restored"].abs().sort_values(ascending=False).index)
        .head(10)
        .assign(token=lambda d: [labels[int(i)] for i in d["pos"]])
        .to_dict(orient="records")
    )
    run.heads = top_patching_sites(pm, 12)
    run.heads.to_csv(out / "top_heads.csv", index=False)
    rec["heads_top"] = run.heads.to_dict(orient="records")
    run.results["maps"] = rec
    run.say("top heads by |effect| (restored share of the gap):\n" + run.heads.round(3).to_string(index=False))


def tl_check_stage(run: CircuitRun) -> None:
    """3. The same cells from TransformerLens's own patching functions, on the same bridge and prompts."""
    from interp.analysis.engines.stacked_patching import transformer_lens_check

    cfg = run.cfg
    check_layers = cfg.check_layers or ([0, 29] if cfg.quick else [0, 12, 23, 29])
    assert run.inputs is not None, "the maps stage runs first"
    clean, corrupted, metric = run.inputs
    run.results["tl_check"] = {}
    for comp in ("resid_pre", "heads"):
        layers = None if cfg.check_all else check_layers
        chk = transformer_lens_check(run.bridge, clean, corrupted, metric, run.maps[comp], layers=layers)
        run.results["tl_check"][comp] = chk
        run.say(
            f"TransformerLens {chk['engine']}: {chk['n_cells']} cells × {chk['n_examples']} prompts, "
            f"max |ours − TL| = {chk['max_abs_diff']:.2e} (corrupted baseline {chk['max_abs_diff_baseline']:.2e})"
        )


def attribution_stage(run: CircuitRun) -> None:
    """4. Attribution patching (AtP) of the head map against the exact one."""
    from interp.analysis.engines.attribution import activation_attribution, agreement, top_agreement
    from interp.viz.attribution import draw_attribution_scatter

    assert run.inputs is not None, "the maps stage runs first"
    clean, corrupted, metric = run.inputs
    pm = run.maps["heads"]
    atp = activation_attribution(run.bridge, clean, corrupted, metric, "heads")
    agree = agreement(atp, pm)
    agree["spearman_top20"] = top_agreement(atp, pm, 20)
    run.results["attribution"] = {"heads_atp": agree}
    atp.save(run.out, "attribution_heads")
    draw_attribution_scatter(atp, run.out / "attribution_heads.png", exact=pm, title="IOI heads: AtP vs exact")
    run.say(
        f"AtP vs exact (heads): Spearman {agree['spearman']:.3f} (top 20: {agree['spearman_top20']:.3f}), "
        f"same sign {agree['sign_agreement']:.3f}, Pearson {agree['pearson']:.3f}"
    )


def views_stage(run: CircuitRun) -> None:
    """5. CircuitsVis attention patterns of the top heads on the first two prompts."""
    from interp.tasks.tokens import token_strings
    from interp.viz.circuits import head_attention_views, write_standalone

    assert run.inputs is not None, "the maps stage runs first"
    clean = run.inputs[0]
    chosen = [(int(r.layer), int(r.head)) for r in run.heads.head(run.cfg.top).itertuples()]
    views = head_attention_views(run.bridge, clean[:2], token_strings(run.tok, clean[:2]), chosen, id_prefix="ioi-top")
    title = "IOI: attention of the top heads by patching effect"
    write_standalone(views, run.out / "attention_top_heads.html", title=title)
    run.results["views"] = {"heads": chosen, "file": "attention_top_heads.html"}


def sweep_stage(run: CircuitRun) -> None:
    """6. MLP zero-out of every layer on the accuracy prompts, calibrated verdicts beside the raw rule."""
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.tasks.contrast import GROUP_UNIT
    from interp.viz.layers import draw_layer_effects

    cfg, task = run.cfg, run.task
    ids, mask = task.inputs()
    sweep = mlp_zero_sweep(
        run.bridge, ids, task.metric(), mask, categories=task.categories, groups=task.groups, batch_size=16
    )
    sweep = sweep.with_groups(task.groups, GROUP_UNIT)
    verdicts = layer_verdicts(sweep, n_boot=cfg.n_boot, seed=cfg.seed, threshold=0.0)
    sweep.save(run.out, "mlp_sweep")
    verdicts.save(run.out, "verdicts")
    title = "IOI: MLP zero-out, logit difference (calibrated verdicts)"
    draw_layer_effects(verdicts, run.out / "mlp_sweep.png", title=title)
    vf = verdicts.frame
    cols = ["layer", "mean_effect", "ci_low", "ci_high", "verdict", "raw_verdict"]
    run.results["sweep"] = {
        "n": len(task),
        "verdicts": vf["verdict"].value_counts().to_dict(),
        "raw_verdicts": vf["raw_verdict"].value_counts().to_dict(),
        "layers": vf[cols].to_dict(orient="records"),
    }
    run.say(vf[cols].round(3).to_string(index=False))


__all__ = ["MODEL", "CircuitRun", "IOICircuitConfig", "run_ioi_circuit"]
