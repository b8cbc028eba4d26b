"""The command line: fast help, world listing, data files, configs with clear errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "interp.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_help_does_not_import_torch_or_transformer_lens():
    code = (
        "import sys, contextlib, io\n"
        "from interp.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "heavy = [m for m in ('torch', 'transformer_lens', 'transformers', 'numpy') if m in sys.modules]\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_help_lists_the_subcommands():
    out = _cli("--help")
    assert out.returncode == 0
    for cmd in ("worlds", "data", "train", "run", "next-token"):
        assert cmd in out.stdout


def test_worlds_lists_every_world():
    out = _cli("worlds")
    assert out.returncode == 0
    assert [line.split()[0] for line in out.stdout.strip().splitlines()] == [
        "dfa",
        "connect4",
        "streets",
        "othello",
        "dialogue",
    ]


def test_data_writes_legal_split_files(tmp_path):
    out = _cli("data", "--world", "connect4:n=3", "--n", "200", "--seed", "1", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences

    world = parse_world("connect4:n=3")
    train = read_sequences(tmp_path / "train.txt", world)
    test = read_sequences(tmp_path / "test.txt", world)
    assert len(train) + len(test) == 200 and test
    again = tmp_path / "again"
    _cli("data", "--world", "connect4:n=3", "--n", "200", "--seed", "1", "--out", str(again))
    assert (again / "train.txt").read_text() == (tmp_path / "train.txt").read_text()


def test_unknown_world_and_bad_config_are_clear_errors(tmp_path):
    out = _cli("data", "--world", "chess", "--n", "5", "--out", str(tmp_path))
    assert out.returncode == 2 and "unknown world 'chess'" in out.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[train]\nstepz = 3\n')
    out = _cli("train", "--config", str(bad))
    assert out.returncode == 2 and "unknown key 'stepz'" in out.stderr
    out = _cli("train", "--config", str(tmp_path / "missing.toml"))
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_malformed_sequence_file_names_the_line(tmp_path):
    from interp.worlds import WorldError, parse_world
    from interp.worlds.io import read_sequences

    f = tmp_path / "seqs.txt"
    world = parse_world("connect4:n=3")
    f.write_text("0 1 2\n0 0 7\n")
    with pytest.raises(WorldError, match=r"seqs.txt:2: unknown token '7'"):
        read_sequences(f, world)
    f.write_text("0 1 2\n0 0 0 0\n")  # a fourth disk in a column of at most 3
    with pytest.raises(WorldError, match=r"seqs.txt:2: token '0' is not legal .* at position 3"):
        read_sequences(f, world)


def test_config_types_are_checked():
    from interp.config import ConfigError, from_dict
    from interp.jobs.experiment import ExperimentConfig

    with pytest.raises(ConfigError, match="train.steps: expected int"):
        from_dict(ExperimentConfig, {"train": {"steps": "many"}})
    cfg = from_dict(ExperimentConfig, {"train": {"lr": 1}, "model": {"n_layer": 3}})
    assert cfg.train.lr == 1.0 and cfg.model.n_layer == 3 and cfg.model.d_model == 128
