"""End to end: a config trains a small model that passes the next-token test; the CLI drives it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, SHARED_DATA

from interp.jobs.experiment import load_experiment, run_experiment


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg, base = load_experiment(REPO / "experiments/configs/tiny.toml")
    runs = tmp_path_factory.mktemp("runs")
    from dataclasses import replace

    cfg = replace(cfg, runs_dir=str(runs))
    results = run_experiment(cfg, base, progress=False, log=lambda *_: None)
    return results


def test_two_layer_model_learns_legal_moves_on_the_tiny_city(tiny_run):
    nt = tiny_run["next_token"]
    assert nt["next_token_position"] >= 0.9, nt
    assert nt["sequences"] > 100


def test_run_folder_has_everything(tiny_run):
    from pathlib import Path

    run = Path(tiny_run["run_dir"])
    for name in (
        "config.json",
        "world.json",
        "results.json",
        "train_log.csv",
        "next_token.csv",
        "data/train.txt",
        "data/test.txt",
        "best/model.safetensors",
        "last/interp.json",
    ):
        assert (run / name).exists(), name
    saved = json.loads((run / "results.json").read_text())
    assert saved["next_token"] == tiny_run["next_token"]
    # no (origin, destination) pair is in both train and test
    pairs = [
        {tuple(line.split()[:2]) for line in (run / f"data/{s}.txt").read_text().splitlines()}
        for s in ("train", "test")
    ]
    assert not pairs[0] & pairs[1]


def _cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "interp.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_cli_next_token_json_on_the_trained_checkpoint(tiny_run):
    out = _cli("next-token", "--model", f"{tiny_run['run_dir']}/best", "--n", "300", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["next_token_position"] == pytest.approx(tiny_run["next_token"]["next_token_position"])


def test_cli_next_token_refuses_a_world_with_another_vocabulary(tiny_run):
    out = _cli("next-token", "--model", f"{tiny_run['run_dir']}/best", "--world", "connect4")
    assert out.returncode == 2
    assert "vocabulary does not match" in out.stderr


def test_manhattan_graph_loads(tmp_path):
    edges = SHARED_DATA / "manhattan" / "edges.csv"
    if not edges.exists():
        pytest.skip(f"Manhattan graph not found at {edges} (../shared/data is absent)")
    from interp.worlds import parse_world

    world = parse_world(f"streets:{edges}")
    assert world.graph.num_nodes == 4579 and world.graph.num_edges == 9705
