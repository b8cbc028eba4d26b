"""The evaluation suite of a checkpoint, before and after fine-tuning (``interp finetune``, the
pipeline's fix stage, ``experiments/planted_harm.py``): one call, long rows
``{metric, layer, value, se, ci_low, ci_high, n}``.

What is measured depends on the task (:mod:`interp.train.finetune_data`: its ``kind``,
``eval_ids``, ``pad_id``, ``world``, ``eval_sequences``, ``heldout_sequences``, ``qa``) and on
:class:`~interp.config.FinetuneEval`:

- world sequences: ``heldout_loss`` (per-row mean next-token loss on the HF model),
  ``next_token_position`` / ``next_token_sequence`` and the Myhill–Nerode precisions and recall
  ``mn_*`` (the metric suite, :func:`interp.metrics.named_metrics.world_model_metrics`);
  the dialogue world adds ``qa_probe_*`` and, on a generated benchmark, ``pragworld_*``;
- PragWorld rows: ``pragworld_*`` (:func:`interp.metrics.pragworld.score_pragworld`);
- contrast examples: ``contrast_accuracy``, ``contrast_logit_diff``, ``contrast_p_correct``
  (:func:`interp.analysis.evaluation.contrast.evaluate_contrast`);
- both: ``mlp_out_sq`` per layer (what HLS pushes down, :func:`mean_squared_mlp_out`) and ``sweep_effect_*`` per layer, the MLP
  zero-out sweep with the verdicts' intervals (:func:`interp.analysis.engines.sweeps.mlp_zero_sweep`,
  :func:`interp.analysis.verdicts.layers.layer_verdicts`: PragWorld groups resampled, simultaneous
  over the layers).

It runs a layer sweep, so it sits in analysis (above metrics, whose metrics it calls).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor, nn

from interp.config import FinetuneEval


def _shifted(ids: Int[Tensor, "batch pos"], pad_id: int) -> tuple[Tensor, Tensor]:
    """``(inputs, targets)`` for next-token prediction, trailing all-padding columns trimmed and
    padding targets ``-100``: the rows the trainer's :func:`~interp.train.data.make_batch` builds."""
    width = int((ids != pad_id).sum(dim=1).max())
    ids = ids[:, :width]
    targets = ids[:, 1:].clone()
    targets[targets == pad_id] = -100
    return ids[:, :-1], targets


@torch.no_grad()
def mean_squared_mlp_out(
    model: nn.Module, ids: Int[Tensor, "n pos"], pad_id: int, layers: Sequence[int], batch_size: int = 128
) -> dict[int, Tensor]:
    """Per layer, each row's mean squared MLP output over its scored positions (every real token
    but the last: the positions HLS penalises, :class:`~interp.train.regularisers.HLS`), on the
    module of ``Site(ℓ, "mlp_out")`` (its output is ``blocks.{ℓ}.hook_mlp_out``), in eval mode
    without gradients: ``{layer: [n]}`` on the CPU. ``ids`` move to the model's device; under a
    device map each layer is reduced on its own device. No hook remains after the call."""
    from interp.hooks import Site, module_hooks
    from interp.models.device import model_device

    outputs: dict[int, Tensor] = {}

    def keep(layer: int) -> Callable[..., None]:
        def fn(module: nn.Module, args: Any, output: Any) -> None:
            outputs[layer] = output[0] if isinstance(output, tuple) else output

        return fn

    was, device = model.training, model_device(model)
    model.eval()
    res: dict[int, list[Tensor]] = {int(x): [] for x in layers}
    hooks = [(Site(int(x), "mlp_out").module(model), keep(int(x))) for x in layers]
    try:
        with module_hooks(hooks):
            for i in range(0, len(ids), batch_size):
                inputs, targets = _shifted(ids[i : i + batch_size].to(device), pad_id)
                model(inputs)
                for layer in res:
                    out = outputs.pop(layer)
                    m = (targets != -100).to(out.device).float()
                    res[layer].append(((out.float().pow(2).mean(-1) * m).sum(1) / m.sum(1).clamp(min=1)).cpu())
    finally:
        model.train(was)
    return {x: torch.cat(v) for x, v in res.items()}


def _est(values: Any) -> dict[str, float]:
    from interp.results import mean_se

    e = mean_se(values)
    return {"value": e.mean, "se": e.se, "n": e.n}


def evaluate(
    path: Path,
    task: Any,
    ev: FinetuneEval,
    sweep_layers: Sequence[int] | None = None,
    log: Callable[[str], Any] = print,
    *,
    placement: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evaluate the checkpoint at ``path`` on the task's held-out rows, loaded on ``placement``
    (:class:`~interp.models.device.Placement`; default CPU, float32).

    Returns long rows ``{metric, layer, value, se, ci_low, ci_high, n}`` and extra JSON."""
    from interp.models.checkpoint import hf_dims, load_bridge, load_hf_model
    from interp.models.device import model_device

    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    t0 = time.perf_counter()
    hf = load_hf_model(path, placement).eval()
    device = model_device(hf)  # where the inputs go (under a device map: the first module's device)
    n_layers, _ = hf_dims(path)

    def add(metric: str, est: dict[str, float], layer: int | None = None, **kw: Any) -> None:
        rows.append(
            {
                "metric": metric,
                "layer": layer,
                "value": est["value"],
                "se": est.get("se", math.nan),
                "ci_low": kw.get("ci_low", math.nan),
                "ci_high": kw.get("ci_high", math.nan),
                "n": est.get("n", 0),
            }
        )

    ids, pad = task.eval_ids, task.pad_id
    if task.kind == "world":
        per_row = []
        with torch.no_grad():
            for i in range(0, len(ids), 128):
                inputs, targets = _shifted(ids[i : i + 128].to(device), pad)
                lg = hf(inputs).logits
                nll = F.cross_entropy(
                    lg.transpose(1, 2).float(), targets.to(lg.device), ignore_index=-100, reduction="none"
                )
                per_row.append((nll.sum(1) / (targets != -100).to(lg.device).sum(1).clamp(min=1)).cpu())
        add("heldout_loss", _est(torch.cat(per_row).numpy()))
    if ev.mlp_sq:
        sq = mean_squared_mlp_out(hf, ids.to(device), pad, list(range(n_layers)))
        for layer, v in sq.items():
            add("mlp_out_sq", _est(v.numpy()), layer)
    del hf
    dialogue_qa = ev.qa and task.kind == "world" and _is_dialogue(task.world)
    pragworld = task.kind == "pragworld" and ev.pragworld
    need_bridge = (
        ev.sweep
        or (task.kind == "world" and (ev.next_token or ev.mn))
        or pragworld
        or dialogue_qa
        or task.kind == "contrast"
    )
    bridge = load_bridge(path, placement=placement) if need_bridge else None
    if task.kind == "world" and ev.next_token:
        from interp.metrics.named_metrics import NEXT_TOKEN, world_model_metrics

        for name, e in world_model_metrics(bridge, task.world, task.eval_sequences, NEXT_TOKEN)[0].items():
            add(name, {"value": e.mean, "se": e.se, "n": e.n})
    if pragworld:
        extra["pragworld"] = _pragworld_scores(bridge, task, add)
    if task.kind == "contrast":
        extra["contrast"] = _contrast_scores(bridge, task, ev, add)
    if dialogue_qa:
        extra["dialogue_qa"] = _dialogue_qa(bridge, task, ev, add)
    if ev.sweep:
        extra["sweep"] = _sweep(bridge, task, ev, sweep_layers, add)
    if task.kind == "world" and ev.mn:
        from interp.metrics.named_metrics import MYHILL_NERODE, world_model_metrics

        ests, res = world_model_metrics(
            bridge,
            task.world,
            task.eval_sequences,
            MYHILL_NERODE,
            mn_pairs=ev.mn_pairs,
            mn_depth=ev.mn_depth,
            seed=ev.seed,
        )
        for name, e in ests.items():
            add(name, {"value": e.mean, "se": e.se, "n": e.n})
        extra["myhill_nerode"] = {k: v for k, v in res["myhill_nerode"].summary().items() if not isinstance(v, dict)}
    extra["seconds"] = round(time.perf_counter() - t0, 2)
    return rows, extra


def _pragworld_scores(bridge: Any, task: Any, add: Callable[..., None]) -> dict[str, Any]:
    from interp.analysis.engines.scoring import Batch, forward
    from interp.metrics.pragworld import score_pragworld

    qa, ids, pad = task.qa, task.eval_ids, task.pad_id
    mask = (ids != pad).long()
    probs = []
    for i in range(0, len(ids), 64):
        b = Batch(ids[i : i + 64], mask[i : i + 64], torch.arange(i, min(i + 64, len(ids))))
        lg = forward(bridge, b.tokens, b.attention_mask)[torch.arange(len(b.tokens)), b.last()]
        probs.append(qa["task"].p_yes(lg).cpu())
    p_yes = torch.cat(probs).numpy()
    preds = (p_yes > 0.5).astype(int)
    summary = dict(score_pragworld(qa["rows"], preds.tolist(), n_boot=1000).summary())
    _add_pragworld_summary(summary, add, len(preds))
    return {"summary": summary, "p_yes": p_yes.tolist()}


def _contrast_scores(bridge: Any, task: Any, ev: FinetuneEval, add: Callable[..., None]) -> dict[str, Any]:
    """Contrast examples: accuracy, mean logit difference and P(correct) on the held-out task, with
    the group-bootstrap intervals of :func:`interp.analysis.evaluation.contrast.evaluate_contrast`."""
    from interp.analysis.evaluation.contrast import evaluate_contrast

    result = evaluate_contrast(bridge, task.qa["task"], batch_size=64, n_boot=ev.n_boot, seed=ev.seed)
    s = result.summary()
    for name in ("accuracy", "logit_diff", "p_correct"):
        add(f"contrast_{name}", {"value": s[name], "n": s["groups"]}, ci_low=s[f"{name}_lo"], ci_high=s[f"{name}_hi"])
    return {k: v for k, v in s.items() if k != "settings"}


def _add_pragworld_summary(summary: dict[str, Any], add: Callable[..., None], n_rows: int) -> None:
    from interp.metrics.pragworld import SUMMARY_KEYS

    for key in SUMMARY_KEYS:
        value = summary.get(key)
        if key in ("groups", "rows") or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        ci = (
            {"ci_low": summary.get("robust_ci_low", math.nan), "ci_high": summary.get("robust_ci_high", math.nan)}
            if key == "robust"
            else {}
        )
        add(
            f"pragworld_{key}",
            {
                "value": float(value),
                "se": summary.get(f"{key}_se", math.nan),
                "n": int(summary.get("groups" if key == "robust" else "rows", n_rows)),
            },
            **ci,
        )


def _is_dialogue(world: Any) -> bool:
    from interp.worlds.dialogue import DialogueWorld

    return isinstance(world, DialogueWorld)


def _dialogue_qa(bridge: Any, task: Any, ev: FinetuneEval, add: Callable[..., None]) -> dict[str, Any]:
    """Dialogue world: accuracy at the answer position on every held-out probe
    (:func:`interp.metrics.dialogue_qa.probe_accuracy`, metrics ``qa_probe_*``) and, with
    ``ev.qa_groups``, the PragWorld accuracies on a generated benchmark (``pragworld_*``)."""
    import tempfile

    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.dialogue_qa import p_yes, probe_accuracy
    from interp.metrics.pragworld import score_pragworld
    from interp.worlds.dialogue.export import prompt_tokens, write_benchmark

    world = task.world
    h = probe_accuracy(bridge, world, task.heldout_sequences or task.eval_sequences)
    add("qa_probe_accuracy", {"value": h["accuracy"], "se": h["accuracy_se"], "n": h["probes"]})
    for key in ("yes", "no"):
        add(f"qa_probe_{key}", {"value": h[key], "n": h["probes"]})
    out: dict[str, Any] = {"held_out_probes": h}
    if ev.qa_groups > 0:
        bench_key = (ev.qa_groups, ev.qa_bench_seed)
        if bench_key not in task.benchmarks:
            with tempfile.TemporaryDirectory() as tmp:
                path = write_benchmark(world, Path(tmp) / "bench.csv", ev.qa_groups, ev.qa_bench_seed)
                task.benchmarks[bench_key] = load_pragworld(path).rows
        rows = task.benchmarks[bench_key]
        p = p_yes(bridge, world, [prompt_tokens(c, q) for c, q in zip(rows["context"], rows["question"])])
        summary = dict(
            score_pragworld(rows, ["yes" if x > 0.5 else "no" for x in p], n_boot=ev.n_boot, seed=ev.seed).summary()
        )
        _add_pragworld_summary(summary, add, len(p))
        out["benchmark"] = {"groups": ev.qa_groups, "seed": ev.qa_bench_seed, "summary": summary}
    return out


def _sweep(
    bridge: Any, task: Any, ev: FinetuneEval, layers: Sequence[int] | None, add: Callable[..., None]
) -> dict[str, Any]:
    from interp.analysis.engines.scoring import token_loss
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.tasks.yesno import GROUP_UNIT

    ids, pad = task.eval_ids, task.pad_id
    mask = (ids != pad).long()
    if task.kind == "world":
        metric, hib, name = token_loss, False, "sweep_effect_token_loss"
        cats, groups, unit = None, None, "each held-out sequence its own group"
    elif task.kind == "contrast":
        from interp.tasks.contrast import GROUP_UNIT as CONTRAST_UNIT

        metric, hib, name = task.qa["task"].logit_diff_metric(), True, "sweep_effect_logit_diff"
        cats, groups, unit = task.qa["task"].categories, task.qa["task"].groups, CONTRAST_UNIT
    else:
        metric, hib, name = task.qa["task"].metric(), True, "sweep_effect_p_gold"
        cats = [str(c) for c in task.qa["rows"]["category"]]
        groups, unit = task.qa["task"].groups, GROUP_UNIT
    sweep = mlp_zero_sweep(
        bridge,
        ids,
        metric,
        mask,
        list(layers) if layers else None,
        categories=cats,
        groups=groups,
        batch_size=64,
        method="batched",
        higher_is_better=hib,
    )
    sweep.meta["groups"] = unit
    verdicts = layer_verdicts(sweep, n_boot=ev.n_boot, seed=ev.seed)
    out = verdicts.layer_rows()
    for r in out:
        n = int(verdicts.frame.loc[verdicts.frame.layer == r["layer"], "n"].iloc[0])
        se = float(sweep.per_layer().set_index("layer").loc[r["layer"], "se"])
        add(name, {"value": r["effect"], "se": se, "n": n}, r["layer"], ci_low=r["ci"][0], ci_high=r["ci"][1])
    return {"metric": name, "layers": out}


__all__ = ["evaluate", "mean_squared_mlp_out"]
