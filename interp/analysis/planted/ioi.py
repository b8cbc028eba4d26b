"""Judging and repairing a planting on a contrast task at real depth (IOI on SmolLM2; issue 30, item 4).

The pieces ``experiments/ioi_planted.py`` chains (through :func:`interp.jobs.ioi_planted.run_ioi_planted`):

- :func:`sweep_model`: one model's MLP zero-out sweep over every layer, its verdicts and clean scores,
  cached in a folder;
- :func:`check_frozen`: exactly the planted MLPs' weights moved (read from the saved weights);
- :func:`path_rows`: the other changed layers' effect through each planted MLP and their direct effect
  (:func:`interp.analysis.engines.path_removal.mlp_path_removal`);
- :func:`unplant_rows`: a several-layer planting undone one layer at a time (its MLP weights put
  back), the harm each planted layer carries, an oracle that removes nothing;
- :func:`evaluate_hf` / :func:`mean_sq`: plain HF forwards (IO − S at the last prompt token; the
  summed mean squared MLP output HLS penalises), hooks through :func:`interp.hooks.module_hooks`;
- :func:`eval_rows` / :func:`repair_summary`: long-table rows and their mean over fine-tuning seeds.

Intervals are the project's cluster bootstrap-t over the task's groups (:func:`cluster_interval`);
one value of :func:`repair_summary` keeps its own, several get a t-interval over the seeds.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float

from interp.hooks import module_hooks
from interp.hooks.sites import Site


def cluster_interval(values: Any, groups: Any, seed: int = 0) -> tuple[float, float, float]:
    """Mean with its 95 % cluster-bootstrap-t interval over ``groups`` (the project's resampler);
    ``(mean, nan, nan)`` where the bootstrap has (nearly) no spread."""
    from interp.analysis.verdicts.bands import cluster_band

    band = cluster_band(np.asarray(values, dtype=float)[:, None], groups, seed=seed, simultaneous=False)
    lo, hi = float(band.low[0]), float(band.high[0])
    if not (math.isfinite(lo) and math.isfinite(hi)):  # bootstrap-t with (nearly) no spread: no interval
        lo = hi = math.nan
    return float(band.estimate[0]), lo, hi


def sweep_model(
    folder: Path, task: Any, out: Path, batch_size: int, log: Callable[[str], Any]
) -> tuple[Any, Any, dict]:
    """The MLP zero-out sweep over every layer on the held-out ``task``, its verdicts (calibrated rule,
    raw rule at threshold 0 = accuracy), and the clean accuracy / logit difference with intervals;
    the sweep is cached in ``out`` (``sweep.csv`` / ``sweep.json``) and reused when there."""
    from interp.analysis.engines.sweeps import SweepResult, mlp_zero_sweep
    from interp.analysis.verdicts.layers import layer_verdicts
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


def check_frozen(base: Path, planted: Path, layers: Sequence[int]) -> list[str]:
    """Names of the parameters that moved between two saved HF folders; raises unless exactly the
    MLPs of the planted ``layers`` moved (every other weight bit-identical)."""
    from safetensors.torch import load_file

    a, b = load_file(str(base / "model.safetensors")), load_file(str(planted / "model.safetensors"))
    moved = sorted(n for n in a if not torch.equal(a[n], b[n]))
    allowed = {n for n in a if any(n.startswith(f"model.layers.{k}.mlp.") for k in layers)}
    if set(moved) != allowed:
        raise AssertionError(f"{planted}: moved {moved}, expected exactly {sorted(allowed)}")
    return moved


def path_rows(folder: Path, task: Any, planted: Sequence[int], layers: list[int], batch_size: int) -> list[dict]:
    """Per other changed layer: its effect through each planted MLP it feeds (its output removed only
    from that MLP's input) and its direct effect (removed only from the final norm's input)."""
    from interp.analysis.engines.path_removal import mlp_path_removal
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


def unplant_rows(name: str, folder: Path, base: Path, task: Any, layers: Sequence[int]) -> list[dict]:
    """For a planting in several layers, the held-out logit difference with each planted layer's MLP
    weights put back to the unplanted model's (plain HF forwards): the harm that layer carries, an
    oracle that removes nothing (the planted model, the others restored and the unplanted model beside)."""
    from safetensors.torch import load_file

    from interp.models.checkpoint import load_hf_model

    original = load_file(str(base / "model.safetensors"))
    groups = task.groups
    rows = []
    restorations: list[tuple[int, ...]] = [(), *((k,) for k in layers)]
    for restored in restorations:
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


def evaluate_hf(model: Any, task: Any, zeroed: Sequence[int] = (), batch_size: int = 32) -> Float[np.ndarray, " row"]:
    """Per prompt of ``task``, logit(correct) − logit(foil) (IOI: IO − S) at the last prompt token of a
    plain HF forward, with the MLPs of ``zeroed`` replaced by zeros (PyTorch forward hooks, removed
    after the call, also on error)."""
    ids, mask = task.inputs()
    correct, foil = torch.as_tensor(task.correct_ids), torch.as_tensor(task.foil_ids)
    out = []
    hooks = [(Site(k, "mlp_out").module(model), lambda m, a, o: torch.zeros_like(o)) for k in zeroed]
    with module_hooks(hooks):
        model.eval()
        with torch.no_grad():
            for i in range(0, len(ids), batch_size):
                x, m = ids[i : i + batch_size], mask[i : i + batch_size]
                logits = model(x, attention_mask=m, position_ids=(m.cumsum(1) - 1).clamp(min=0)).logits
                last = logits[torch.arange(len(x)), m.sum(1) - 1]
                rows = torch.arange(len(x))
                out.append((last[rows, correct[i : i + batch_size]] - last[rows, foil[i : i + batch_size]]).float())
    return torch.cat(out).numpy()


def mean_sq(model: Any, task: Any, layers: Sequence[int]) -> float:
    """Σ over ``layers`` of the mean squared MLP output over the prompts' real tokens (what
    :class:`interp.train.regularisers.HLS` penalises, to size β)."""
    ids, mask = task.inputs()
    got: dict[int, torch.Tensor] = {}
    hooks = [(Site(k, "mlp_out").module(model), lambda m, a, o, k=k: got.__setitem__(k, o.detach())) for k in layers]
    with module_hooks(hooks), torch.no_grad():
        model(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    keep = mask.bool()
    return float(sum((got[k] ** 2).mean(-1)[keep].mean() for k in layers))


def eval_rows(ld: Any, groups: Any, model: str, seed: int | None) -> list[dict]:
    """Long-table rows (:func:`interp.stats.summarise`'s columns) of accuracy (``ld > 0``) and logit
    difference, each with its cluster-bootstrap interval over ``groups``."""
    ld = np.asarray(ld, dtype=float)
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


def repair_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per planting, model and metric of a repair table (:func:`eval_rows` rows with a ``planting``
    column): the mean over seeds with a 95 % t-interval (one value: its own cluster-bootstrap
    interval), the number of seeds, and the gap to the unplanted model."""
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


__all__ = [
    "check_frozen",
    "cluster_interval",
    "eval_rows",
    "evaluate_hf",
    "mean_sq",
    "path_rows",
    "repair_summary",
    "sweep_model",
    "unplant_rows",
]
