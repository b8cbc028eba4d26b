"""Checkpoints: HF folder + world; reloaded through TransformerBridge.boot_transformers."""

from __future__ import annotations

import json

import pytest
import torch

from interp.models import CheckpointError, build_gpt2, load_checkpoint, save_checkpoint
from interp.worlds.encoding import encode_sequences


def test_checkpoint_reloads_through_bridge_with_identical_logits(tmp_path, tiny_city, tiny_model_config):
    model = build_gpt2(tiny_city.vocab, tiny_model_config).eval()
    save_checkpoint(model, tiny_city, tmp_path / "ckpt")
    ckpt = load_checkpoint(tmp_path / "ckpt")
    assert type(ckpt.bridge).__name__ == "TransformerBridge"
    assert ckpt.world.tokens == tiny_city.tokens
    import numpy as np

    ids = encode_sequences(tiny_city.generate(8, np.random.default_rng(0)), tiny_city.vocab)
    with torch.no_grad():
        torch.testing.assert_close(ckpt.bridge(ids), model(ids).logits, atol=1e-5, rtol=1e-5)


def test_checkpoint_files_are_safetensors_and_json(tmp_path, tiny_city, tiny_model_config):
    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "interp.json", "tokenizer.json"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pkl")) for n in names)
    meta = json.loads((tmp_path / "interp.json").read_text())
    assert meta["vocab"] == list(tiny_city.vocab.tokens)


def test_vocabulary_mismatch_is_a_clear_error(tmp_path, tiny_city, tiny_model_config):
    from interp.worlds import parse_world

    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, tmp_path)
    with pytest.raises(CheckpointError, match="vocabulary does not match"):
        load_checkpoint(tmp_path, world=parse_world("connect4"))


def test_saving_with_the_wrong_world_is_refused(tmp_path, tiny_city, tiny_model_config):
    from interp.worlds import parse_world

    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    with pytest.raises(CheckpointError, match="vocabulary"):
        save_checkpoint(model, parse_world("connect4"), tmp_path)


def test_missing_or_plain_folders(tmp_path, tiny_city, tiny_model_config):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_checkpoint(tmp_path / "empty")
    # A plain HF folder (a user's model) carries no world: it needs one, then loads.
    build_gpt2(tiny_city.vocab, tiny_model_config).save_pretrained(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="carries no world"):
        load_checkpoint(tmp_path / "plain")
    assert load_checkpoint(tmp_path / "plain", world=tiny_city).world is tiny_city


def test_build_is_seeded(tiny_city, tiny_model_config):
    a = build_gpt2(tiny_city.vocab, tiny_model_config)
    b = build_gpt2(tiny_city.vocab, tiny_model_config)
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    assert a.config.resid_pdrop == 0.0 and a.config.vocab_size == len(tiny_city.vocab)


def test_position_ids_count_real_tokens_left_and_right_padded(tiny_city, tiny_model_config):
    """Hand-worked: each real token's index among its row's real tokens; padding takes the last
    real token's (0 before the first). Oracle: a left- or right-padded row under these positions
    gives the unpadded row's logits at its real tokens."""
    from interp.models.positions import position_ids

    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 0, 1, 1]])
    want = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 2, 2], [0, 1, 2, 3, 4], [0, 0, 0, 1, 2]])
    assert torch.equal(position_ids(mask), want)
    assert torch.equal(position_ids(mask.bool()), want) and position_ids(mask.bool()).dtype == torch.int64

    model = build_gpt2(tiny_city.vocab, tiny_model_config).eval()
    row, pad = torch.tensor([7, 8, 9]), tiny_city.vocab.pad_id
    ids = torch.tensor([[pad, pad, *row], [*row, pad, pad]])
    m = mask[:2]
    with torch.no_grad():
        alone = model(row[None]).logits[0]
        padded = model(ids, attention_mask=m, position_ids=position_ids(m)).logits
    torch.testing.assert_close(padded[0, 2:], alone, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(padded[1, :3], alone, rtol=1e-4, atol=1e-4)
