"""Ground truth for the removal kinds (issue 31, items 1 and 5): are planted layers harmful under zero,
mean, resample and scale, and the unplanted ones under none? — what ``experiments/removal_ground_truth.py``
runs.

On the shipped demo model (``interp/demo_model/``, 4 layers, with the data it was trained on drawn
again from the embedded default's seed — byte-identical, checked by SHA-256: :func:`demo_run`), plant
harm (:data:`PLANTINGS`, :func:`interp.train.plant.plant_harm`), take the constant part out of some
plantings (:func:`centered_planting`), then run the MLP sweep of each model (and of the unplanted one)
under :data:`ABLATION` on held-out routes with the shipped verdict rule
(:func:`run_removal_ground_truth`). :func:`constant_share` says how much of a planting's change of
its layer's MLP output is a constant shift (which mean and resample ablation keep).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from interp.train.plant import PlantSpec

#: the plantings of the table: harm in each layer with 30 % random turns, and the mirrored half-map in layer 2
PLANTINGS = {
    "L0_turns": PlantSpec(layers=(0,), corruption="random_turns", share=0.3, seed=0),
    "L1_turns": PlantSpec(layers=(1,), corruption="random_turns", share=0.3, seed=0),
    "L2_turns": PlantSpec(layers=(2,), corruption="random_turns", share=0.3, seed=0),
    "L3_turns": PlantSpec(layers=(3,), corruption="random_turns", share=0.3, seed=0),
    "L2_mirror": PlantSpec(layers=(2,), corruption="mirror", share=0.5, seed=0),
}
#: the removals each model is swept under
ABLATION = "zero,mean,resample,scale"
#: plantings also run with their constant part subtracted (:func:`centered_planting`)
CENTERED = ("L2_turns", "L3_turns")


def demo_run(folder: Path, log: Callable[[str], Any]) -> Path:
    """``folder/best`` (the shipped checkpoint) and ``folder/data`` (its train/test split, drawn
    again and checked against the manifest's SHA-256)."""
    from interp.jobs.experiment import DEMO_MODEL, ExperimentConfig, make_data
    from interp.worlds import parse_world
    from interp.worlds.io import write_sequences

    manifest = json.loads((DEMO_MODEL / "manifest.json").read_text())
    data = folder / "data"
    want = manifest["data_sha256"]

    def sha(name: str) -> str | None:
        p = data / f"{name}.txt"
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None

    if {k: sha(k) for k in want} != want:
        cfg = ExperimentConfig()
        train, test = make_data(parse_world(cfg.world), cfg.data, folder)
        data.mkdir(parents=True, exist_ok=True)
        write_sequences(data / "train.txt", train)
        write_sequences(data / "test.txt", test)
        if {k: sha(k) for k in want} != want:
            raise RuntimeError("the data drawn here differ from the shipped model's (SHA-256)")
        log(f"drew the demo data: {len(train)} / {len(test)} routes (SHA-256 equal to the manifest's)")
    if not (folder / "best").is_dir():
        shutil.copytree(DEMO_MODEL / "checkpoint", folder / "best")
    return folder / "best"


def mlp_outputs(base: Path, planted: Path, layer: int, n: int) -> list[tuple[Any, Any]]:
    """For the base and the planted model: ``layer``'s MLP output on the first ``n`` held-out routes
    of the base run (``[routes, pos, d_model]``) and the mask of its real (non-padding) positions."""
    import torch

    from interp.hooks import Site, hooked
    from interp.hooks.capture import capturing
    from interp.models.checkpoint import load_checkpoint, run_data_dir
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    name = Site(layer, "mlp_out").hook_name
    outs = []
    for model in (base, planted):
        ckpt = load_checkpoint(model)
        seqs = read_sequences(run_data_dir(base) / "test.txt", ckpt.world)[:n]
        ids = encode_sequences(seqs, ckpt.world.vocab, int(ckpt.bridge.cfg.n_ctx))
        mask = ids != ckpt.world.vocab.pad_id
        got: dict = {}
        with torch.no_grad(), hooked(ckpt.bridge, capturing(got, [name], clone=False)):
            ckpt.bridge(ids, attention_mask=mask.long())
        outs.append((got[name], mask))
    return outs


def constant_share(base: Path, planted: Path, layer: int, n: int = 100) -> dict[str, float]:
    """How much of what the planting changed in ``layer``'s MLP output is the same at every input:
    with Δ = output(planted) − output(base) at every non-first real position of ``n`` held-out
    routes, ``‖mean Δ‖² / mean ‖Δ‖²`` (1: a constant shift, which mean and resample ablation keep;
    0: purely input-dependent), and the norms of the mean output before and after."""
    outs = []
    for out, mask in mlp_outputs(base, planted, layer, n):
        keep = mask.clone()
        keep[:, 0] = False
        outs.append(out[keep].double())
    delta = outs[1] - outs[0]
    return {
        "constant_share": float(delta.mean(0).pow(2).sum() / delta.pow(2).sum(1).mean()),
        "mean_norm_before": float(outs[0].mean(0).norm()),
        "mean_norm_after": float(outs[1].mean(0).norm()),
    }


def centered_planting(base: Path, planted: Path, layer: int, out: Path, n: int = 500) -> Path:
    """The planting with its constant part taken out: the mean change Δ of ``layer``'s MLP output
    (over every real position of ``n`` held-out routes, planted − base) subtracted from that MLP's
    output bias (GPT-2 ``mlp.c_proj.bias``), so what remains of the planting is input-dependent —
    the harm mean and resample ablation are built to see. ``out/model`` (the run's ``data/`` linked)."""
    import torch

    from interp.models.checkpoint import load_checkpoint, read_meta, run_data_dir, save_checkpoint

    mean = [out[mask].double().mean(0) for out, mask in mlp_outputs(base, planted, layer, n)]
    from transformers import AutoModelForCausalLM

    hf: Any = AutoModelForCausalLM.from_pretrained(planted, dtype=torch.float32)
    with torch.no_grad():
        hf.transformer.h[layer].mlp.c_proj.bias -= (mean[1] - mean[0]).to(hf.dtype)
    extra = dict((read_meta(planted) or {}).get("extra") or {})
    extra["centered"] = {"layer": layer, "removed_shift_norm": float((mean[1] - mean[0]).norm()), "routes": n}
    save_checkpoint(hf, load_checkpoint(planted).world, out / "model", extra=extra)
    if not (out / "data").exists():
        (out / "data").symlink_to(run_data_dir(base).resolve())
    return out / "model"


@dataclass
class RemovalTruthConfig:
    """Settings of :func:`run_removal_ground_truth`: ``out`` folder, ``n`` held-out routes per sweep,
    ``only`` comma-separated plantings (None: all of :data:`PLANTINGS`), ``draws`` of the resample
    removal, ``confirm``: also confirm each verdict on held-out groups (two folds)."""

    out: str = "runs/removal_ground_truth"
    n: int = 200
    only: str | None = None
    draws: int = 3
    confirm: bool = False


def run_removal_ground_truth(cfg: RemovalTruthConfig, log: Callable[[str], Any] = print) -> pd.DataFrame:
    """Plant, sweep and tabulate; writes ``cfg.out`` (the demo run folder, one folder per planting and
    per sweep, ``ground_truth.csv`` / ``.md`` and ``results.json``) and returns the table: per model and
    removal, the layers called harmful and useful, and the planted layer's effect, interval, verdict
    and dose-response shape."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from interp.jobs.sweep import run_sweep
    from interp.train.plant import plant_harm

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    best = demo_run(out / "demo", log)
    names = cfg.only.split(",") if cfg.only else list(PLANTINGS)
    models: dict[str, tuple[Path, tuple[int, ...]]] = {"unplanted": (best, ())}
    for name in names:
        spec = PLANTINGS[name]
        t = time.perf_counter()
        res = plant_harm(best, out / f"plant_{name}", spec, progress=False, log=log)
        log(f"{name}: planted in {time.perf_counter() - t:.0f} s")
        models[name] = (res.model, spec.layers)
        if name in CENTERED:
            models[f"{name}_centered"] = (
                centered_planting(best, res.model, spec.layers[0], out / f"plant_{name}_centered"),
                spec.layers,
            )
    rows, timing = [], {}
    for name, (model, planted) in models.items():
        t = time.perf_counter()
        run = run_sweep(
            model,
            kind="mlp-zero",
            n=cfg.n,
            seed=0,
            ablation=ABLATION,
            draws=cfg.draws,
            folds=2 if cfg.confirm else None,
            out=out / f"sweep_{name}",
            log=open(os.devnull, "w"),
        )
        timing[name] = round(time.perf_counter() - t, 1)
        log(f"{name} ({timing[name]} s)\n{run.table()}")
        agree = pd.DataFrame(run.info["agreement"]).set_index("layer")
        dose = pd.read_csv(run.out / "dose_response.csv")
        for removal in ["zero", "mean", "resample", "scale0.75", "scale0.5", "scale0.25"]:
            v = json.loads((run.out / f"verdicts_{removal}.json").read_text())
            by_layer = {int(r["layer"]): r for r in v["layers"]}
            row = {
                "model": name,
                "planted": list(planted),
                "removal": removal,
                "harmful": v["harmful"],
                "useful": v["useful"],
            }
            for p in planted:
                r = by_layer[p]
                lo, hi = (-r["ci_high"], -r["ci_low"])  # the loss effect (lower is better): flip the benefit
                row.update(
                    planted_effect=round(r["mean_effect"], 4),
                    planted_ci=f"[{lo:+.4f}, {hi:+.4f}]",
                    planted_verdict=r["verdict"],
                    planted_dose=agree.loc[p, "dose_response"],
                )
                if cfg.confirm:  # rounds (of 2) in which the discovery half selected it, and the held-out half agreed
                    row.update(planted_selected=r["selected_rounds"], planted_confirmed=r["confirmed_rounds"])
            rows.append(row)
        near_one = dose[dose.alpha == 0.75][["layer", "mean_effect", "ci_low", "ci_high", "verdict"]]
        log(f"{name}: α = 0.75\n{near_one.to_string(index=False)}")
    shares = {name: constant_share(best, model, planted[0]) for name, (model, planted) in models.items() if planted}
    log(f"constant share of the planted change: {json.dumps(shares, indent=1)}")
    table = pd.DataFrame(rows)
    table.to_csv(out / "ground_truth.csv", index=False)
    (out / "ground_truth.md").write_text(table.to_markdown(index=False) + "\n")
    (out / "results.json").write_text(
        json.dumps(
            {
                "rows": rows,
                "constant_share": shares,
                "sweep_seconds": timing,
                "ablation": ABLATION,
                "n": cfg.n,
                "draws": cfg.draws,
                "confirm": cfg.confirm,
            },
            indent=1,
            default=str,
        )
    )
    return table


__all__ = [
    "ABLATION",
    "CENTERED",
    "PLANTINGS",
    "RemovalTruthConfig",
    "centered_planting",
    "constant_share",
    "demo_run",
    "mlp_outputs",
    "run_removal_ground_truth",
]
