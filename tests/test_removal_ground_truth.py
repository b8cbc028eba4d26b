"""Ground truth for the removal kinds on the shipped demo model (slow: `make test-slow`; ≈ 10 min on
2 cores): harm planted in layer 2's MLP is harmful under zero-out and every dose with a rising
dose-response, the same planting with its constant part taken out is harmful under zero, mean and
resample, no unplanted layer is harmful under zero or a dose, and a planting in the vital layer 0
is useful under every full removal but harmful at α = 0.75 (docs/reproductions/planted-harm.md,
"Removal kinds"; the full table: experiments/removal_ground_truth.py, interp.jobs.removal_truth)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def _verdicts(folder: Path, removal: str) -> dict:
    return json.loads((folder / f"verdicts_{removal}.json").read_text())


@pytest.mark.slow
def test_planted_layers_under_every_removal(tmp_path):
    from interp.jobs.removal_truth import ABLATION, PLANTINGS, centered_planting, demo_run
    from interp.jobs.sweep import run_sweep
    from interp.train.plant import plant_harm

    best = demo_run(tmp_path / "demo", log=lambda m: None)
    quiet = open(os.devnull, "w")
    found = {}
    for name in ("L2_turns", "L0_turns"):
        model = plant_harm(best, tmp_path / name, PLANTINGS[name], progress=False, log=lambda m: None).model
        found[name] = run_sweep(
            model, kind="mlp-zero", n=100, seed=0, ablation=ABLATION, out=tmp_path / f"s_{name}", log=quiet
        )
        if name == "L2_turns":
            centered = centered_planting(best, model, 2, tmp_path / "L2_centered")
            found["L2_centered"] = run_sweep(
                centered,
                kind="mlp-zero",
                n=100,
                seed=0,
                ablation="zero,mean,resample",
                out=tmp_path / "s_L2_centered",
                log=quiet,
            )
    l2 = found["L2_turns"].out
    for removal in ("zero", "scale0.75", "scale0.5", "scale0.25"):
        assert _verdicts(l2, removal)["harmful"] == [2], removal
    assert {r["layer"]: r["dose_response"] for r in found["L2_turns"].info["agreement"]}[2] == "rising"
    for removal in ("mean", "resample"):  # the planting is a constant shift: these keep it
        assert 2 not in _verdicts(l2, removal)["harmful"], removal
    for removal in ("zero", "mean", "resample"):  # without its constant part, every removal finds it
        assert _verdicts(found["L2_centered"].out, removal)["harmful"] == [2], removal
    l0 = found["L0_turns"].out
    for removal in ("zero", "mean", "resample"):  # the vital layer: useful under every full removal
        assert 0 in _verdicts(l0, removal)["useful"], removal
    assert _verdicts(l0, "scale0.75")["harmful"] == [0]  # the dose near α = 1 sees the harm
    for removal in ("zero", "scale0.75", "scale0.5", "scale0.25"):
        assert _verdicts(l0, removal)["harmful"] in ([], [0])
