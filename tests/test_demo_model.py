"""The shipped demo model: ``interp run`` on the embedded default starts from it (same recipe,
byte-identical data), ``--retrain`` trains, a changed recipe or changed data train; the README's
demo block is what ``experiments/demo_results.py`` makes of the quoted run's ``results.json``."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO

from interp.jobs.experiment import (
    DEMO_MODEL,
    ExperimentConfig,
    data_hashes,
    load_experiment,
    make_data,
    package_model,
    run_experiment,
    shipped_model,
)
from interp.worlds import parse_world
from interp.worlds.io import write_sequences

QUOTED = REPO / "docs" / "reproductions" / "demo" / "results.json"


def test_the_embedded_default_is_the_shipped_models_recipe_and_data(tmp_path):
    from interp.models.checkpoint import load_checkpoint

    cfg = ExperimentConfig()
    manifest = shipped_model(cfg)
    assert manifest is not None, "the embedded default's recipe differs from interp/demo_model/manifest.json"
    world = parse_world(cfg.world)
    train, test = make_data(world, cfg.data, REPO)
    write_sequences(tmp_path / "data" / "train.txt", train)
    write_sequences(tmp_path / "data" / "test.txt", test)
    assert data_hashes(tmp_path) == manifest["data_sha256"]  # the data drawn here are the ones it saw
    ckpt = load_checkpoint(DEMO_MODEL / "checkpoint")
    assert ckpt.world.vocab.tokens == world.vocab.tokens
    assert ckpt.bridge.cfg.n_layers == cfg.model.n_layer
    assert manifest["train"]["steps"] == cfg.train.steps and manifest["train"]["best_eval_loss"] < 1.12
    # another recipe is not the shipped model's
    assert shipped_model(replace(cfg, train=replace(cfg.train, steps=10))) is None


@pytest.fixture(scope="module")
def tiny_shipped(tmp_path_factory):
    """A tiny run trained once and packaged like the demo model."""
    cfg, base = load_experiment(REPO / "experiments/configs/tiny.toml")
    root = tmp_path_factory.mktemp("ship")
    cfg = replace(cfg, runs_dir=str(root / "runs"), eval_sequences=50, train=replace(cfg.train, steps=40))
    run_experiment(cfg, base, progress=False, log=lambda *_: None, retrain=True)
    folder = package_model(root / "runs" / cfg.name, root / "shipped", command="test")
    return cfg, base, folder


def _weights(run: Path) -> bytes:
    return (run / "best" / "model.safetensors").read_bytes()


def test_a_run_of_the_shipped_recipe_starts_from_the_shipped_checkpoint(tiny_shipped):
    cfg, base, folder = tiny_shipped
    lines: list[str] = []
    res = run_experiment(replace(cfg, name="again"), base, progress=False, log=lines.append, shipped_folder=folder)
    run = Path(res["run_dir"])
    assert res["train"]["shipped"]["produced_by"] == "test" and any("shipped demo model" in x for x in lines)
    assert _weights(run) == (folder / "checkpoint" / "model.safetensors").read_bytes()
    assert not (run / "curriculum").exists()  # nothing trained
    assert res["next_token"]["sequences"] == 50


def test_retrain_a_changed_recipe_or_changed_data_train(tiny_shipped, tmp_path):
    cfg, base, folder = tiny_shipped
    res = run_experiment(
        replace(cfg, name="retrained"), base, progress=False, log=lambda *_: None, retrain=True, shipped_folder=folder
    )
    assert "shipped" not in res["train"] and (Path(res["run_dir"]) / "curriculum").exists()
    other = replace(cfg, name="other", train=replace(cfg.train, steps=30))
    res = run_experiment(other, base, progress=False, log=lambda *_: None, shipped_folder=folder)
    assert "shipped" not in res["train"] and res["train"]["steps"] == 30
    # the same recipe but data that differ (the manifest's hash altered): said, and trained
    manifest = json.loads((folder / "manifest.json").read_text())
    moved = tmp_path / "moved"
    import shutil

    shutil.copytree(folder, moved)
    manifest["data_sha256"]["train"] = "0" * 64
    (moved / "manifest.json").write_text(json.dumps(manifest))
    lines: list[str] = []
    res = run_experiment(replace(cfg, name="drifted"), base, progress=False, log=lines.append, shipped_folder=moved)
    assert "shipped" not in res["train"] and any("differ from the shipped model's" in x for x in lines)


def test_the_readme_demo_block_is_generated_from_the_quoted_run():
    """README.md's demo numbers are experiments/demo_results.py's output for the quoted run's
    results.json (committed beside the reproduction page); the slow test reruns the demo."""
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "experiments" / "demo_results.py"),
            str(QUOTED.parent),
            "--check",
            str(REPO / "README.md"),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    quoted = json.loads(QUOTED.read_text())
    harmful = [r["layer"] for r in quoted["layers"]["mlp_zero"]["layers"] if r["verdict"] == "harmful"]
    assert quoted["plant"]["layers"] == harmful == quoted["fix"]["layers"]
    assert quoted["world_model"]["navigation"]["routes"]["valid"] >= 0.90
