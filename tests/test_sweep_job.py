"""The sweep job as one config (:class:`interp.analysis.config.sweep_job.SweepJob`): the ``interp sweep``
flags are its fields and nothing else, flags → job → JSON → job is the same job, old keyword calls
keep working, and a bad setting is refused before any model loads."""

from __future__ import annotations

import pytest

from interp.analysis.config.sweep_config import ConfigError, VerdictRule
from interp.analysis.config.sweep_job import SweepJob, dest

#: ``interp sweep`` flags that are not settings of the sweep but of one run of it (where it runs,
#: what it reads and writes, how it reports); ``--confirm`` is ``--folds 2``
RUN_FLAGS = {
    "model",
    "world",
    "data",
    "out",
    "max_memory",
    "overwrite",
    "quiet",
    "json",
    "device",
    "dtype",
    "attention",
    "device_map",
    "n_devices",
    "confirm",
}


def _sweep_parser():
    import argparse

    from interp.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["sweep"]


def _args(*flags: str):
    from interp.cli import build_parser

    return build_parser().parse_args(["sweep", "--model", "m", *flags])


def test_every_job_field_is_a_flag_and_every_setting_flag_a_field():
    parser = _sweep_parser()
    flag_dests = {a.dest for a in parser._actions if a.dest != "help"}
    by_field = {name: dest(name, how) for name, how, _ in SweepJob.flags()}
    fields = {f for f in SweepJob.settings() if f not in ("rule", "ablation")}  # rule: its fields; ablation: an alias
    assert set(by_field) == fields
    assert set(by_field.values()) <= flag_dests
    assert flag_dests - set(by_field.values()) == RUN_FLAGS
    helps = {a.dest: a.help for a in parser._actions}
    for name, how, _ in SweepJob.flags():
        assert helps[by_field[name]] == how.help


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--kind", "direct-effect", "--method", "loop", "--layers", "0,2", "--seed", "3", "--batch-size", "8"),
        ("--ablation", "zero,scale", "--scales", "1,0.5,0", "--confirm", "--per-layer", "--min-effect", "0.05"),
        ("--ablation", "resample", "--draws", "2", "--folds", "3", "--resample", "rows", "--n-boot", "50"),
        ("--kind", "activation-patching", "--length", "8", "--edit-at", "2", "--confidence", "0.9"),
        ("--method", "attribution", "--verify-top", "3", "--limit", "7"),
        ("--data", "rows.csv", "--metric", "logit-diff", "--grouping", "reference", "--prepend-bos", "on"),
        ("--data", "ioi.jsonl", "--chat-template", "auto", "--prepend-bos", "off"),
    ],
)
def test_flags_to_job_to_json_and_back_is_the_same_job(flags):
    import json

    job = SweepJob.from_args(_args(*flags))
    again = SweepJob.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again == job and again.to_dict() == job.to_dict()


def test_flags_mean_what_the_old_keywords_meant():
    assert SweepJob.from_args(_args()) == SweepJob()  # no flag: every default, 200 sequences
    assert SweepJob().n == 200 and SweepJob.from_args(_args("--data", "rows.csv")).n is None  # task file: every row
    job = SweepJob.from_args(
        _args("--ablation", "zero,mean", "--confirm", "--layers", "1,0", "--n-boot", "10", "--prepend-bos", "auto")
    )
    assert job == SweepJob.of(ablation="zero,mean", folds=2, layers=[1, 0], n_boot=10)
    assert job.removals == ("zero", "mean") and job.layers == (1, 0) and job.prepend_bos is None
    assert job.rule == VerdictRule(n_boot=10) and job.rule_kwargs["n_boot"] == 10
    assert [r.name for r in job.removal_set()] == ["zero", "mean"]
    scaled = SweepJob.of(ablation="scale", scales="1,0.5,0")
    assert [r.name for r in scaled.removal_set()] == ["scale0.5", "scale0"]  # α = 1 is the model itself
    assert SweepJob.of(SweepJob.of(n_boot=10), seed=4).rule.n_boot == 10  # a change keeps the rest


@pytest.mark.parametrize(
    ("settings", "sentence"),
    [
        ({"kind": "mlp"}, "--kind must be one of mlp-zero, direct-effect, activation-patching, got 'mlp'"),
        ({"method": "fast"}, "--method must be one of reuse, loop, batched, prefix, attribution"),
        ({"n_boot": 0}, "--n-boot must be ≥ 1, got 0"),
        ({"confidence": 1.5}, r"--confidence must be in \(0, 1\), got 1.5"),
        ({"resample": "pairs"}, "--resample must be one of groups, rows"),
        ({"folds": 1}, "--folds must be an integer ≥ 2"),
        ({"verify_top": 3}, "--verify-top needs --method attribution"),
        ({"n": 0}, "--n must be ≥ 1, got 0"),
        ({"ablation": "mean", "kind": "direct-effect"}, "--ablation mean applies to the MLP sweep"),
        ({"kind": "activation-patching", "layers": [0]}, "--layers does not apply to --kind activation-patching"),
        ({"kind": "activation-patching", "folds": 2}, "activation-patching maps have cell verdicts"),
        ({"layers": [-1]}, "--layers must be non-negative integers"),
    ],
)
def test_a_bad_setting_is_one_sentence_before_any_model_loads(tmp_path, settings, sentence):
    from interp.jobs.sweep import run_sweep

    with pytest.raises(ValueError, match=sentence):
        run_sweep(tmp_path / "no_such_checkpoint", **settings)  # the model would fail to load: it never does


def test_unknown_keyword_and_key_are_named_with_the_allowed_ones():
    from interp.jobs.sweep import run_sweep

    with pytest.raises(TypeError, match=r"unknown sweep setting 'n_bot'; allowed: .*n_boot"):
        run_sweep("unused", n_bot=10)
    with pytest.raises(TypeError, match="not both"):
        SweepJob.of(ablation="zero", removals=["zero"])
    with pytest.raises(ConfigError, match=r"unknown sweep-job setting 'layer'; allowed: .*layers"):
        SweepJob.from_dict({"layer": [0]})
    with pytest.raises(ConfigError, match=r"unknown verdict-rule setting 'nboot'; allowed: .*n_boot"):
        SweepJob.from_dict({"rule": {"nboot": 5}})


def test_the_layer_sweep_part_is_the_api_config():
    from interp.analysis.config.sweep_config import SweepConfig

    config = SweepConfig(removals=("zero", "scale"), scales=(0.5,), layers=(1,), folds=2, seed=3, batch_size=4)
    job = SweepJob.of_config(config)
    assert job.method == "reuse" and job.removals == ("zero", "scale") and job.scales == (0.5,)
    assert SweepConfig.from_dict(job.config().to_dict()) == config.with_(method="reuse")  # "auto", resolved
