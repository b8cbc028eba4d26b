"""The short-sequences-first curriculum of ``interp train`` / ``interp run`` ([curriculum])."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import interp.train.trainer as trainer
from interp.config import ConfigError, from_dict
from interp.jobs.experiment import CurriculumConfig, ExperimentConfig, train_curriculum
from interp.models.gpt2 import ModelConfig, build_gpt2
from interp.train import TrainConfig
from interp.worlds import parse_world
from interp.worlds.encoding import encode_sequences


@pytest.fixture(scope="module")
def world_and_data():
    world = parse_world("streets:tiny")
    seqs = world.generate(300, np.random.default_rng(0))
    return world, seqs


def _cfg(max_tokens, steps, tmp_path):
    return replace(
        ExperimentConfig(),
        runs_dir=str(tmp_path),
        model=ModelConfig(n_layer=1, d_model=16, n_head=2, n_ctx=128),
        train=TrainConfig(steps=3, batch_size=8, warmup_steps=0, eval_every=0, checkpoint_every=0),
        curriculum=CurriculumConfig(max_tokens=max_tokens, steps=steps),
    )


def test_each_stage_trains_only_on_short_sequences_with_its_own_steps(world_and_data, tmp_path, monkeypatch):
    world, seqs = world_and_data
    cfg = _cfg((6, 10), (2, 4), tmp_path)
    seen = []
    real = trainer.train

    def spy(model, ids, eval_ids, tcfg, out_dir, **kw):
        seen.append(((ids != world.vocab.pad_id).sum(dim=1) - 1, tcfg.steps, out_dir))  # minus <bos>
        return real(model, ids, eval_ids, tcfg, out_dir, **kw)

    monkeypatch.setattr(trainer, "train", spy)
    model = build_gpt2(world.vocab, cfg.model)
    before = [p.detach().clone() for p in model.parameters()]
    test_ids = encode_sequences(seqs[:20], world.vocab, 128)
    records = train_curriculum(
        model,
        encode_sequences(seqs, world.vocab, 128),
        test_ids,
        cfg.curriculum,
        cfg.train,
        world.vocab.pad_id,
        tmp_path,
        progress=False,
        log=lambda *_: None,
    )
    assert [r["sequences"] for r in records] == [sum(len(s) <= 6 for s in seqs), sum(len(s) <= 10 for s in seqs)]
    assert records[0]["sequences"] < records[1]["sequences"] < len(seqs)  # the material really differs
    for (lengths, steps, out_dir), limit, want_steps, rec in zip(seen, (6, 10), (2, 4), records):
        assert int(lengths.max()) <= limit and len(lengths) == rec["sequences"]
        assert steps == want_steps == rec["steps"] and (out_dir / "last").is_dir()
    assert any(not (a == p).all() for a, p in zip(before, model.parameters()))  # trained in place


def test_a_stage_without_short_sequences_is_skipped_and_said(world_and_data, tmp_path):
    world, seqs = world_and_data
    cfg = _cfg((2,), (5,), tmp_path)
    lines = []
    model = build_gpt2(world.vocab, cfg.model)
    before = [p.detach().clone() for p in model.parameters()]
    records = train_curriculum(
        model,
        encode_sequences(seqs, world.vocab, 128),
        None,
        cfg.curriculum,
        cfg.train,
        world.vocab.pad_id,
        tmp_path,
        progress=False,
        log=lines.append,
    )
    assert records == [{"max_tokens": 2, "steps": 5, "sequences": 0, "skipped": "no training sequence has ≤ 2 tokens"}]
    assert "skipped" in lines[0] and "shortest" in lines[0]
    assert all((a == p).all() for a, p in zip(before, model.parameters()))


def test_curriculum_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="curriculum.max_tokens has 2 entries"):
        from_dict(ExperimentConfig, {"curriculum": {"max_tokens": [5, 9], "steps": [10]}})
    with pytest.raises(ConfigError, match="must be ≥ 1"):
        from_dict(ExperimentConfig, {"curriculum": {"max_tokens": [0], "steps": [10]}})
    off = from_dict(ExperimentConfig, {"curriculum": {"max_tokens": [], "steps": []}})
    assert off.curriculum.steps == ()
