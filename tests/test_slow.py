"""Slow tests (`make test-slow`): the embedded default job end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest



@pytest.mark.slow
def test_default_main_job_end_to_end(tmp_path):
    """`interp run` on the embedded default: a 4-layer GPT-2 trained on random walks of the default
    city passes the next-token test on held-out routes; the world-model table has the oracle at
    1.0; the sweeps, verdicts, HLS before/after and the report are written; the run folder is
    printed last."""
    out = subprocess.run([sys.executable, "-m", "interp.cli", "run", "--no-progress"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.loads((tmp_path / "runs" / "demo" / "results.json").read_text())
    assert run_dir.endswith("runs/demo")
    assert results["next_token"]["next_token_position"] >= 0.95
    assert results["train"]["steps"] == results["config"]["train"]["steps"]
    table = {r["model"]: r for r in results["world_model"]["table"]}
    oracle = table["true world model"]
    assert oracle["next_token"] == 1.0 and oracle["compression_precision"] == 1.0
    assert oracle["distinction_precision"] == 1.0 and oracle["distinction_recall"] == 1.0
    assert table["trained model"]["next_token"] >= 0.95
    layers = results["layers"]["mlp_zero"]["layers"]
    assert len(layers) == results["config"]["model"]["n_layer"]
    assert {r["verdict"] for r in layers} <= {"useful", "harmful", "negligible", "inconclusive"}
    assert results["fix"]["layers"] and results["fix"]["table"]
    folder = tmp_path / "runs" / "demo"
    for name in ("table1.md", "table1.png", "sweep_mlp-zero/layers.png", "sweep_activation-patching/patching_resid_pre.png",
                 "finetune/finetune.png", "report.html"):
        assert (folder / name).is_file(), name
