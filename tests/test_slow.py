"""Slow tests (`make test-slow`): the embedded default job end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest



@pytest.mark.slow
def test_default_demo_learns_the_city(tmp_path):
    """`interp run` on the embedded default: a 4-layer GPT-2 trained on random walks of the default
    city passes the next-token test on held-out routes, and prints the run folder last."""
    out = subprocess.run([sys.executable, "-m", "interp.cli", "run", "--no-progress"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    results = json.loads((tmp_path / "runs" / "demo" / "results.json").read_text())
    assert run_dir.endswith("runs/demo")
    assert results["next_token"]["next_token_position"] >= 0.95
    assert results["train"]["steps"] == results["config"]["train"]["steps"]
