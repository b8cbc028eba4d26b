"""One config for ``interp finetune`` and ``interp run`` / ``train`` (issue 38 item 4), as
tests/test_sweep_job.py checks it for ``interp sweep``: each command's flags are dataclass fields
(:class:`~interp.config.FinetuneConfig`'s placement, :mod:`interp.config.runs`' run control) with
one help text, flags → config → JSON → config is the same config, a bad value is one sentence
before any model loads, the four unknown-key refusers say one sentence shape, and a finished run
folder gives back the config that reruns it to the same numbers."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from interp.config import ConfigError, FinetuneConfig, PragWorldJobConfig
from interp.config.flags import dest
from interp.config.runs import FinetuneRun, MainRun
from tests.conftest import REPO

#: the flags that are not settings but the file the settings are read from
FILE_FLAGS = {"config"}
#: FinetuneConfig's fields that are flags (the rest are the TOML file's alone)
FINETUNE_FLAGS = {"device", "dtype", "device_map", "n_devices"}


def _subparser(command: str) -> argparse.ArgumentParser:
    from interp.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _parse(*argv: str) -> argparse.Namespace:
    from interp.cli import build_parser

    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("command", "configs"),
    [("finetune", (FinetuneRun, FinetuneConfig)), ("run", (MainRun,)), ("train", (MainRun,))],
)
def test_every_flag_is_a_field_with_the_same_help(command, configs):
    parser = _subparser(command)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    by_field = {name: (dest(name, how), how) for cls in configs for name, how, _ in cls.flags()}
    assert set(actions) == {d for d, _ in by_field.values()} | FILE_FLAGS  # every flag a field, but the file
    for flag_dest, how in by_field.values():
        assert actions[flag_dest].help == how.help  # one text: the field's
        assert actions[flag_dest].help  # the docs build needs it
    control = configs[0]
    assert set(by_field) >= {f for f in control.__dataclass_fields__}  # every run-control field is a flag
    if FinetuneConfig in configs:
        assert {name for name, _, _ in FinetuneConfig.flags()} == FINETUNE_FLAGS


def _finetune_toml(path: Path, checkpoint: str = "no/such/checkpoint", extra: str = "") -> Path:
    path.write_text(
        f'name = "t"\ncheckpoint = "{checkpoint}"\nout = "{path.parent / "out"}"\nobjectives = ["plain", "hls"]\n'
        f'seeds = [0, 1]\ndevice = "cpu"\n{extra}'
        "[train]\nsteps = 3\nbatch_size = 8\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 1\n"
        "[regulariser]\nharmful = [1]\nbeta = 0.5\n[eval]\nmn = false\nsweep_layers = [0, 1]\n"
    )
    return path


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), {"device": "cpu", "dtype": "float32", "device_map": None, "n_devices": None}),  # the file's
        (("--dtype", "bfloat16", "--n-devices", "2"), {"device": "cpu", "dtype": "bfloat16", "n_devices": 2}),
        (("--device", "cuda:1", "--device-map", "auto"), {"device": "cuda:1", "device_map": "auto"}),
    ],
)
def test_finetune_flags_to_config_to_json_and_back(tmp_path, flags, expected):
    toml = _finetune_toml(tmp_path / "ft.toml")
    cfg = FinetuneConfig.from_args(_parse("finetune", "--config", str(toml), *flags))
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert cfg.objectives == ("plain", "hls") and cfg.seeds == (0, 1) and cfg.train.steps == 3  # the file's
    assert cfg.regulariser.harmful == (1,) and cfg.eval.sweep_layers == (0, 1) and cfg.eval.mn is False
    again = FinetuneConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize(
    ("command", "flags", "expected"),
    [
        ("finetune", (), FinetuneRun()),
        (
            "finetune",
            ("--processes", "3", "--fresh", "--no-progress"),
            FinetuneRun(processes=3, fresh=True, no_progress=True),
        ),
        ("run", (), MainRun()),
        ("run", ("--retrain", "--fresh"), MainRun(retrain=True, fresh=True)),
        ("train", ("--no-progress",), MainRun(no_progress=True)),
    ],
)
def test_run_control_flags_to_config_to_json_and_back(command, flags, expected):
    config = ("--config", "x.toml") if command != "run" else ()
    cls = type(expected)
    got = cls.from_args(_parse(command, *config, *flags))
    assert got == expected
    assert cls.from_dict(json.loads(json.dumps(got.to_dict()))) == got


def test_the_job_configs_round_trip_through_json():
    from interp.jobs.experiment import ExperimentConfig, load_experiment

    tiny, _ = load_experiment(REPO / "experiments/configs/tiny.toml")
    for cfg in (ExperimentConfig(), tiny, PragWorldJobConfig(), FinetuneConfig()):
        assert type(cfg).from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize(
    ("argv", "sentence"),
    [
        (("--device", "tpu"), "device must be one of auto, cpu, cuda, mps or cuda:N, got 'tpu'"),
        (("--n-devices", "0"), "n_devices must be >= 1, got 0"),
        (("--processes", "0"), "--processes must be ≥ 1, got 0"),
        (("--processes", "2", "--dtype", "bfloat16"), "--processes 2 reads the settings from the config file"),
        (("--device-map", "{nope"), "device map '{nope' is not valid JSON"),
    ],
)
def test_a_bad_finetune_value_is_one_sentence_before_any_model_loads(tmp_path, capsys, argv, sentence):
    from interp.cli import main

    toml = _finetune_toml(tmp_path / "ft.toml")  # its checkpoint does not exist: loading it would fail otherwise
    assert main(["finetune", "--config", str(toml), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("interp finetune: error: ") and sentence in err and err.count("\n") == 0
    assert not (tmp_path / "out").exists()


def test_a_bad_key_in_a_run_or_finetune_file_is_named_with_the_allowed_ones(tmp_path, capsys):
    from interp.cli import main

    toml = _finetune_toml(tmp_path / "ft.toml", extra="seed = 3\n")
    assert main(["finetune", "--config", str(toml)]) == 2
    assert f"{toml}: unknown key 'seed'; allowed: name, checkpoint, out, objectives, seeds," in capsys.readouterr().err
    bad = tmp_path / "run.toml"
    bad.write_text('name = "x"\n[train]\nstepz = 3\n')
    assert main(["run", str(bad)]) == 2
    assert f"{bad}.train: unknown key 'stepz'; allowed: steps, batch_size," in capsys.readouterr().err


# ---- the four unknown-key refusers: one helper, one sentence ------------------------------------


@dataclass(frozen=True)
class _Two:
    a: int = 0
    b: int = 1


def test_one_sentence_names_the_unknown_keys_and_the_allowed_ones():
    from interp.config import from_dict, merge_options, refuse_unknown

    with pytest.raises(ConfigError) as e:
        from_dict(_Two, {"d": 1, "c": 2, "a": 3}, "f.toml")
    assert str(e.value) == "f.toml: unknown keys 'c', 'd'; allowed: a, b"
    with pytest.raises(TypeError) as t:
        merge_options(_Two, None, {"c": 1}, "f")
    assert str(t.value) == "f(): unknown _Two setting 'c'; allowed: a, b"
    refuse_unknown(["a"], ["a", "b"], "key")  # nothing unknown: nothing said


def test_the_sweep_refusers_say_the_same_sentence():
    from interp.analysis.config.sweep_config import ConfigError as SweepConfigError
    from interp.analysis.config.sweep_config import SweepConfig, VerdictRule, known_keys
    from interp.analysis.config.sweep_job import SweepJob

    with pytest.raises(TypeError, match=r"^unknown sweep setting 'n_bot'; allowed: ablation, batch_size, "):
        SweepJob.of(n_bot=3)
    with pytest.raises(SweepConfigError, match=r"^unknown sweep-job setting 'layer'; allowed: grouping, n, kind, "):
        SweepJob.from_dict({"layer": [0]})
    with pytest.raises(SweepConfigError) as e:
        known_keys(VerdictRule, {"nboot": 5, "conf": 0.9}, "verdict-rule setting")
    assert str(e.value) == (
        "unknown verdict-rule settings 'conf', 'nboot'; allowed: n_boot, confidence, per_layer, min_effect, resample"
    )
    with pytest.raises(SweepConfigError, match=r"^unknown sweep setting 'layer'; allowed: removals, "):
        SweepConfig.from_dict({"layer": [0]})


# ---- a run folder's recorded config reruns the run ----------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tiny_city, tiny_model_config):
    """A tiny GPT-2 checkpoint on the tiny city with its run's data/train.txt and test.txt."""
    import numpy as np

    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds.io import write_sequences
    from tests.conftest import liven

    run = tmp_path_factory.mktemp("ckpt")
    seqs = tiny_city.generate(60, np.random.default_rng(0))
    write_sequences(run / "data" / "train.txt", seqs[:48])
    write_sequences(run / "data" / "test.txt", seqs[48:])
    return save_checkpoint(liven(build_gpt2(tiny_city.vocab, tiny_model_config), 0), tiny_city, run / "best")


def test_a_finetune_folder_gives_back_the_config_that_reruns_it(tiny_checkpoint, tmp_path):
    import pandas as pd

    from interp.config import FinetuneData, FinetuneEval, TrainConfig
    from interp.train.finetune import run_finetune

    cfg = FinetuneConfig(
        name="t",
        checkpoint=str(tiny_checkpoint),
        out=str(tmp_path / "first"),
        objectives=("plain", "hls"),
        device="cpu",
        data=FinetuneData(n_eval=8),
        train=TrainConfig(
            steps=2, batch_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=1, eval_every=0, checkpoint_every=0
        ),
        eval=FinetuneEval(mlp_sq=True, sweep=False, mn=False, qa=False, pragworld=False),
        regulariser=replace(FinetuneConfig().regulariser, harmful=(1,), beta=0.5),
    )
    run_finetune(cfg, progress=False, log=lambda _: None)
    recorded = FinetuneConfig.from_run(tmp_path / "first")
    assert recorded == cfg
    # rerun into another folder: the same numbers (what the config decides), not read back from the first
    run_finetune(replace(recorded, out=str(tmp_path / "again")), progress=False, log=lambda _: None)
    first, again = (pd.read_csv(tmp_path / d / "finetune_table.csv") for d in ("first", "again"))
    pd.testing.assert_frame_equal(first, again)
    assert {"plain", "hls"} <= set(first.model)
    with pytest.raises(ConfigError, match="records no config"):
        FinetuneConfig.from_run(tmp_path)


def test_a_train_folder_gives_back_the_config_base_and_retrain_that_rerun_it(tmp_path, capsys):
    from interp.cli import main
    from interp.jobs.experiment import ExperimentConfig, load_experiment, load_run, run_experiment

    city = REPO / "experiments/configs/city_tiny.toml"
    toml = tmp_path / "tiny.toml"
    toml.write_text(
        f'name = "tiny"\nworld = "streets:{city.name}"\nruns_dir = "{tmp_path / "runs"}"\neval_sequences = 20\n'
        "[data]\nn_sequences = 200\n[model]\nn_layer = 1\nd_model = 32\nn_head = 2\nn_ctx = 32\n"
        "[train]\nsteps = 3\nbatch_size = 16\nwarmup_steps = 1\neval_every = 0\ncheckpoint_every = 0\n"
        "[curriculum]\nmax_tokens = [8]\nsteps = [2]\n"
    )
    (tmp_path / city.name).write_text(city.read_text())  # the world's file beside the config: base matters
    assert main(["train", "--config", str(toml), "--no-progress", "--retrain"]) == 0
    folder = tmp_path / "runs" / "tiny"
    assert capsys.readouterr().out.strip().endswith(str(folder))
    recorded = load_run(folder)
    assert (recorded.config, recorded.base) == load_experiment(toml)  # the file's config, from its folder
    assert recorded.base == toml.resolve().parent and recorded.retrain is True
    first = json.loads((folder / "results.json").read_text())
    again = run_experiment(
        replace(recorded.config, runs_dir=str(tmp_path / "again")),
        recorded.base,
        progress=False,
        log=lambda _: None,
        retrain=recorded.retrain,
    )
    again = json.loads(json.dumps(again, default=str))
    for key in ("world", "data", "next_token"):
        assert again[key] == first[key], key
    assert again["train"]["final_train_loss"] == first["train"]["final_train_loss"]
    assert again["train"]["best_eval_loss"] == first["train"]["best_eval_loss"]
    (folder / "run.json").unlink()  # a folder written before run.json: its results.json's config
    assert ExperimentConfig.from_run(folder) == recorded.config
