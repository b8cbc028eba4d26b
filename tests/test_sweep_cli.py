"""``interp sweep``: the command on a tiny checkpoint, its files, and agreement with the library."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_city, tiny_model_config):
    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds.io import write_sequences

    root = tmp_path_factory.mktemp("sweep_run")
    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, root / "best")
    write_sequences(root / "data" / "test.txt", tiny_city.generate(12, np.random.default_rng(3)))
    return root


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "interp.cli", "sweep", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def test_mlp_zero_sweep_command(run_dir, tiny_model_config):
    from interp.analysis import mlp_zero_sweep, token_loss
    from interp.models import load_checkpoint
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    res = _cli("--model", str(run_dir / "best"), "--json", "--n", "10", "--method", "batched")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    rows = summary["layers"]
    assert [r["layer"] for r in rows] == list(range(tiny_model_config.n_layer))
    for r in rows:
        assert r["verdict"] in {"useful", "harmful", "negligible", "inconclusive"}
        assert r["ci"][0] <= r["effect"] + 1e-9 and r["effect"] <= r["ci"][1] + 1e-9
    out = run_dir / "sweep_mlp-zero"
    for name in ("sweep.csv", "sweep_layers.csv", "sweep.json", "verdicts.json"):
        assert (out / name).is_file(), name
    assert (out / "layers.png").stat().st_size > 0
    assert (out / "layers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert [r["layer"] for r in verdicts["layers"]] == [r["layer"] for r in rows]

    ckpt = load_checkpoint(run_dir / "best")
    seqs = read_sequences(run_dir / "data" / "test.txt", ckpt.world)[:10]
    ids = encode_sequences(seqs, ckpt.world.vocab, ckpt.bridge.cfg.n_ctx)
    mask = (ids != ckpt.world.vocab.pad_id).long()
    direct = mlp_zero_sweep(ckpt.bridge.eval(), ids, token_loss, mask, method="loop", higher_is_better=False)
    want = direct.per_layer()["mean_effect"].to_numpy()
    got = np.array([r["effect"] for r in rows])
    assert np.allclose(got, want, atol=1e-5), (got, want)


def test_direct_effect_sweep_command(run_dir, tmp_path, tiny_city):
    from interp.analysis.engines.edit_pairs import state_change_pairs
    from interp.worlds.io import read_sequences

    seqs = read_sequences(run_dir / "data" / "test.txt", tiny_city)
    pairs = state_change_pairs(tiny_city, seqs, seed=0)
    assert len(pairs.originals) + pairs.failed == len(seqs)
    for o, a, i in zip(pairs.originals, pairs.altered, pairs.edit_at):
        assert len(o) == len(a) and len(o) >= i + 2
        assert [k for k in range(len(o)) if o[k] != a[k]] == [i]
        assert tiny_city.run(o[: i + 1]) != tiny_city.run(a[: i + 1])
        tiny_city.run(o), tiny_city.run(a)  # both legal

    res = _cli(
        "--model", str(run_dir / "best"), "--kind", "direct-effect", "--n", "6", "--out", str(tmp_path / "de"), "--json"
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["n_pairs"] + summary["n_failed"] == 6
    assert all(r["verdict"] in {"useful", "harmful", "negligible", "inconclusive"} for r in summary["layers"])
    assert (tmp_path / "de" / "verdicts.json").is_file() and (tmp_path / "de" / "layers.png").stat().st_size > 0


def test_layer_out_of_range_exits_2(run_dir, tmp_path):
    res = _cli("--model", str(run_dir / "best"), "--layers", "0,7", "--out", str(tmp_path / "x"))
    assert res.returncode == 2
    assert "layer 7 is out of range" in res.stderr and "2 layers" in res.stderr
    assert not (tmp_path / "x").exists()


def test_route_contrast_examples_separate_the_two_states_and_build_a_task(run_dir, tiny_city):
    import interp
    from interp.analysis.engines.edit_pairs import aligned_edit_pairs, route_contrast
    from interp.worlds.base import IllegalTokenError

    seqs = tiny_city.generate(200, np.random.default_rng(5))
    examples, skipped = route_contrast(tiny_city, seqs, length=6, edit_at=2, seed=0)
    assert examples and len(examples) + skipped == len(seqs)
    assert len(aligned_edit_pairs(tiny_city, seqs, 6, 2, seed=0).originals) >= len(examples)

    def steps(prompt: str, token: str) -> bool:  # the oracle: does the world take one more step?
        try:
            tiny_city.run([*prompt.split()[1:], token])
        except IllegalTokenError:
            return False
        return True

    for e in examples:
        assert e.prompt.split()[0] == "<bos>" and len(e.prompt.split()) == len(e.corrupted.split()) == 7
        correct, foil = e.correct.strip(), e.foil.strip()
        assert steps(e.prompt, correct) and not steps(e.corrupted, correct), e
        assert steps(e.corrupted, foil) and not steps(e.prompt, foil), e
    task = interp.contrast(interp.load_model(run_dir / "best"), examples)
    vocab = tiny_city.vocab
    assert [list(r) for r in task.ids] == [[vocab.id(t) for t in e.prompt.split()] for e in examples]
    assert list(task.correct_ids) == [vocab.id(e.correct.strip()) for e in examples]


def test_activation_patching_sweep_command(run_dir, tmp_path, tiny_city):
    from interp.analysis.engines.edit_pairs import aligned_edit_pairs
    from interp.worlds.io import read_sequences

    seqs = read_sequences(run_dir / "data" / "test.txt", tiny_city)
    pairs = aligned_edit_pairs(tiny_city, seqs, length=6, edit_at=2, seed=0)
    assert len(pairs.originals) + pairs.failed == len(seqs) and pairs.originals
    for o, a in zip(pairs.originals, pairs.altered):
        assert len(o) == len(a) == 6 and [k for k in range(6) if o[k] != a[k]] == [2]
        tiny_city.run(o), tiny_city.run(a)  # both legal to the end

    res = _cli(
        "--model",
        str(run_dir / "best"),
        "--kind",
        "activation-patching",
        "--length",
        "6",
        "--edit-at",
        "2",
        "--out",
        str(tmp_path / "ap"),
        "--json",
    )
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["n_pairs"] == len(pairs.originals) and summary["n_failed"] == pairs.failed
    grid = np.array(summary["resid_pre"]["restored"])  # layers × (<bos> + 6 tokens)
    assert grid.shape == (2, 7)
    # before the edit nothing differs; the edited token's embedding restores the clean run
    assert np.allclose(grid[:, :3], 0) and np.isclose(grid[0, 3], 1.0, atol=1e-4)
    for name in ("patching_resid_pre.csv", "patching_heads_mean.csv", "patching_resid_pre.png", "run.json"):
        assert (tmp_path / "ap" / name).is_file(), name
    bad = _cli("--model", str(run_dir / "best"), "--kind", "activation-patching", "--edit-at", "11")
    assert bad.returncode == 2 and "--edit-at must be in" in bad.stderr


def test_sweep_under_accelerate_launch_two_processes_equals_one(run_dir, tmp_path):
    """`accelerate launch` with 2 CPU processes (gloo) shards the examples and gathers them back:
    the same per-example rows and verdicts as one process."""
    import shutil

    import pandas as pd

    launcher = shutil.which("accelerate", path=os.path.dirname(sys.executable))
    if launcher is None:
        pytest.skip("the accelerate launcher is not installed next to this Python")
    one = _cli("--model", str(run_dir / "best"), "--n", "9", "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [
            launcher,
            "launch",
            "--multi_gpu",
            "--num_processes",
            "2",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "interp.cli",
            "sweep",
            "--model",
            str(run_dir / "best"),
            "--n",
            "9",
            "--out",
            str(tmp_path / "two"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=240,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    summary = json.loads(two.stdout.strip().splitlines()[-1])
    assert summary["processes"] == 2
    a, b = pd.read_csv(tmp_path / "one" / "sweep.csv"), pd.read_csv(tmp_path / "two" / "sweep.csv")
    assert list(a["example"]) == list(b["example"]) and list(a["layer"]) == list(b["layer"])
    np.testing.assert_allclose(b["effect"], a["effect"], atol=1e-5)
    va = json.loads((tmp_path / "one" / "verdicts.json").read_text())["layers"]
    vb = json.loads((tmp_path / "two" / "verdicts.json").read_text())["layers"]
    assert [r["verdict"] for r in va] == [r["verdict"] for r in vb]


def test_several_removals_write_verdicts_agreement_and_dose_response(run_dir, tmp_path):
    """``--ablation zero,mean,resample,scale``: one verdict file per removal (each equal to the
    library's sweep of that removal), the agreement table, the dose-response table and figure; the
    regulariser reads the removal it names and refuses another's file."""
    from interp.analysis import token_loss
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.sweeps import mlp_removal_sweep
    from interp.models import load_checkpoint
    from interp.train.regularisers import layers_from_verdicts
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    out = tmp_path / "sweep"
    res = _cli(
        "--model",
        str(run_dir / "best"),
        "--json",
        "--n",
        "10",
        "--ablation",
        "zero,mean,resample,scale",
        "--scales",
        "1,0.5,0",
        "--draws",
        "2",
        "--n-boot",
        "200",
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    assert "verdicts by removal" in res.stderr + res.stdout
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["ablation"] == ["zero", "mean", "resample", "scale0.5", "scale0"]
    for name in summary["ablation"]:
        v = json.loads((out / f"verdicts_{name}.json").read_text())
        assert v["ablation"]["name"] == name
    assert json.loads((out / "verdicts.json").read_text())["ablation"]["name"] == "zero"  # the first removal
    agree = pd.read_csv(out / "agreement.csv")
    assert list(agree.columns[:6]) == ["layer", "zero", "mean", "resample", "scale0.5", "scale0"]
    assert set(agree["dose_response"]) <= {"rising", "falling", "flat", "non-monotone"}
    assert (agree["zero"] == agree["scale0"]).all()  # α = 0 is zero-out
    dose = pd.read_csv(out / "dose_response.csv")
    assert sorted(dose["alpha"].unique()) == [0.0, 0.5]
    assert (out / "dose_response.png").read_bytes()[:4] == b"\x89PNG" and (out / "agreement.md").is_file()

    ckpt = load_checkpoint(run_dir / "best")
    seqs = read_sequences(run_dir / "data" / "test.txt", ckpt.world)[:10]
    ids = encode_sequences(seqs, ckpt.world.vocab, ckpt.bridge.cfg.n_ctx)
    mask = (ids != ckpt.world.vocab.pad_id).long()
    mean = (
        mlp_removal_sweep(
            ckpt.bridge.eval(), ids, token_loss, mask, ablation=Removal("mean"), method="loop", higher_is_better=False
        )
        .per_layer()["mean_effect"]
        .to_numpy()
    )
    got = [r["mean_effect"] for r in json.loads((out / "verdicts_mean.json").read_text())["layers"]]
    assert np.allclose(got, mean, atol=1e-5)

    n = int(ckpt.bridge.cfg.n_layers)
    for which in ("harmful", "useful"):
        assert (
            layers_from_verdicts(out, which, n_layers=n, ablation="mean")
            == json.loads((out / "verdicts_mean.json").read_text())[which]
        )
    with pytest.raises(ValueError, match="holds the verdicts of the 'zero' removal"):
        layers_from_verdicts(out / "verdicts.json", "harmful", n_layers=n, ablation="mean")
    bad = _cli(
        "--model", str(run_dir / "best"), "--kind", "direct-effect", "--ablation", "mean", "--out", str(tmp_path / "x")
    )
    assert bad.returncode != 0 and "applies to the MLP sweep" in bad.stderr


def test_run_json_records_the_job_and_its_rerun_is_the_same_sweep(run_dir, tmp_path):
    """``run.json["job"]`` is the job the flags made; rerunning it from Python gives the same
    per-example effects and verdicts as the command did."""
    import io

    from interp.analysis.config.sweep_job import SweepJob
    from interp.cli import build_parser
    from interp.jobs.sweep import run_sweep

    flags = ["--model", str(run_dir / "best"), "--n", "6", "--layers", "0,1", "--ablation", "zero,mean"]
    flags += ["--n-boot", "50", "--seed", "2", "--batch-size", "4"]
    res = _cli(*flags, "--out", str(tmp_path / "cli"))
    assert res.returncode == 0, res.stderr
    job = SweepJob.from_run(tmp_path / "cli")
    assert job == SweepJob.from_args(build_parser().parse_args(["sweep", *flags]))
    assert job.removals == ("zero", "mean") and job.rule.n_boot == 50 and job.n == 6
    again = run_sweep(run_dir / "best", job, out=tmp_path / "py", log=io.StringIO())
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "cli" / "sweep.csv"), pd.read_csv(tmp_path / "py" / "sweep.csv"), atol=1e-6
    )
    verdicts = [json.loads((tmp_path / d / "verdicts.json").read_text())["layers"] for d in ("cli", "py")]
    assert [r["verdict"] for r in verdicts[0]] == [r["verdict"] for r in verdicts[1]]
    assert json.loads((tmp_path / "py" / "run.json").read_text())["job"] == again.info["job"] == job.to_dict()
