"""A config whose files are missing or malformed fails before any data or model is loaded, naming
the file (issue 33, item 6): :func:`interp.config.check_files` and the loaders that run it."""

from __future__ import annotations

import pytest

from interp.config import (
    ConfigError,
    FinetuneConfig,
    FinetuneData,
    RegulariserConfig,
    check_files,
    config_paths,
    load_finetune_config,
)


def _forbid_loading(monkeypatch):
    """Any attempt to read training rows or build a model fails the test loudly."""
    import interp.models.checkpoint as checkpoint
    import interp.train.finetune as finetune

    def boom(*args, **kwargs):
        raise AssertionError("data or a model was loaded before the config's files were checked")

    for module, name in (
        (finetune, "load_task"),
        (checkpoint, "load_bridge"),
        (checkpoint, "load_hf_model"),
        (checkpoint, "local_model"),
    ):
        monkeypatch.setattr(module, name, boom)


def test_config_paths_lists_the_set_file_fields():
    cfg = FinetuneConfig(
        data=FinetuneData(kind="pragworld", train="a.csv"), regulariser=RegulariserConfig(verdicts="v.json")
    )
    assert config_paths(cfg) == [("data.train", "a.csv", "file"), ("regulariser.verdicts", "v.json", "file")]
    assert config_paths(FinetuneConfig()) == []


@pytest.mark.parametrize(
    "name,text,why",
    [
        ("v.json", '{"format": "interp.layer_verdicts/2", "layers": [', "invalid JSON"),
        ("rows.csv", 'context,question\n"a,b\n', "invalid CSV"),
        ("rows.csv", "context,question\na,b,c\n", "line 2 has 3 fields"),
        ("c.toml", "x = [1,\n", "invalid TOML"),
    ],
)
def test_a_malformed_file_is_named_with_its_key(tmp_path, name, text, why):
    path = tmp_path / name
    path.write_text(text)
    cfg = FinetuneConfig(regulariser=RegulariserConfig(verdicts=str(path)))
    with pytest.raises(ConfigError, match=why) as err:
        check_files(cfg, "ft.toml")
    assert "ft.toml: regulariser.verdicts" in str(err.value) and str(path) in str(err.value)


def test_relative_paths_start_from_base_and_a_missing_file_is_named(tmp_path):
    (tmp_path / "rows.csv").write_text("context,question\na,b\n")
    cfg = FinetuneConfig(data=FinetuneData(kind="pragworld", train="rows.csv", test="held_out.csv"))
    with pytest.raises(ConfigError, match=r"data\.test = 'held_out.csv': no file .*held_out\.csv"):
        check_files(cfg, "ft.toml", base=tmp_path)
    (tmp_path / "held_out.csv").write_text("context,question\nc,d\n")
    check_files(cfg, "ft.toml", base=tmp_path)  # both exist and parse
    with pytest.raises(ConfigError, match="no file"):
        check_files(cfg, "ft.toml", base=tmp_path / "elsewhere")


def test_finetune_with_broken_verdicts_fails_naming_the_file_before_loading(tmp_path, monkeypatch, capsys):
    from interp.cli import main

    verdicts = tmp_path / "verdicts.json"
    verdicts.write_text('{"format": "interp.layer_verdicts/2", "layers": [{"layer": 0,')  # cut short
    config = tmp_path / "ft.toml"
    config.write_text(
        f'checkpoint = "{tmp_path / "no_model_needed"}"\nobjectives = ["hls"]\n[regulariser]\nverdicts = "{verdicts}"\n'
    )
    _forbid_loading(monkeypatch)
    assert main(["finetune", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}: regulariser.verdicts" in err and str(verdicts) in err and "invalid JSON" in err
    with pytest.raises(ConfigError, match="invalid JSON"):
        load_finetune_config(config)
    verdicts.unlink()
    with pytest.raises(ConfigError, match=f"regulariser.verdicts = '{verdicts}': no file"):
        load_finetune_config(config)


def test_a_verdict_file_read_directly_names_itself_on_broken_json(tmp_path):
    from interp.analysis.verdicts.layers import load_verdicts

    path = tmp_path / "verdicts.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=f"{path}: not a layer-verdict file \\(invalid JSON"):
        load_verdicts(path)


def test_pragworld_job_config_checks_its_csvs(tmp_path):
    from interp.jobs.pragworld import load_job_config

    manual = tmp_path / "manual.csv"
    manual.write_text("context,question,answer\nc,q,yes\n")
    config = tmp_path / "job.toml"
    config.write_text(f'job = "pragworld"\nmanual = "{manual}"\nsynthetic = "{tmp_path / "missing.csv"}"\n')
    with pytest.raises(ConfigError, match=r"synthetic = .*missing\.csv'?: no file"):
        load_job_config(config)
    (tmp_path / "missing.csv").write_text("context,question,answer\nc,q,no\n")
    assert load_job_config(config).manual == str(manual)


def test_experiment_data_dir_is_checked_from_the_config_folder(tmp_path):
    from interp.jobs.experiment import load_experiment

    config = tmp_path / "exp.toml"
    config.write_text('[data]\ndir = "data"\n')
    with pytest.raises(ConfigError, match=r"data\.dir = 'data': no folder"):
        load_experiment(config)
    (tmp_path / "data").mkdir()
    cfg, base = load_experiment(config)
    assert cfg.data.dir == "data" and base == tmp_path.resolve()
