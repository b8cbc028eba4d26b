"""Activation patching sweeps (layer × position, layer × head) on transformer_lens.patching, with
oracle checks: cells before the edit are exactly 0, patching the edited token's embedding restores
the clean run, a cell equals a hand-written hook, no hooks remain."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import save_gpt2_and_llama, warm_bridges

from interp.analysis.engines.activation_patching import activation_patching, legal_mass
from interp.analysis.engines.scoring import Batch


@pytest.fixture(scope="module")
def bridges(tmp_path_factory, tiny_city, tiny_model_config):
    out = warm_bridges(save_gpt2_and_llama(tmp_path_factory.mktemp("patching"), tiny_city, tiny_model_config))
    for b in out.values():
        b.eval()
    return out


@pytest.fixture(scope="module")
def pair(tiny_city):
    """Three clean rows of 6 tokens; the corrupted rows differ at position 3 only."""
    gen = torch.Generator().manual_seed(1)
    clean = torch.randint(5, len(tiny_city.vocab), (3, 6), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 3] = 5 + (clean[:, 3] - 5 + 1) % (len(tiny_city.vocab) - 5)
    legal = torch.zeros(3, len(tiny_city.vocab), dtype=torch.bool)
    legal[:, 5:9] = True
    return clean, corrupted, legal


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points)


def test_layer_by_position_oracles(bridge, pair):
    clean, corrupted, legal = pair
    before = _n_hooks(bridge)
    res = activation_patching(bridge, clean, corrupted, legal_mass(legal), "resid_pre")
    n_layers = int(bridge.cfg.n_layers)
    assert res.mean().shape == (n_layers, 6)
    f = res.frame
    # positions before the edit see identical activations: patching them changes nothing
    assert (f[f.pos < 3]["effect"].abs() == 0).all()
    # patching the edited token's embedding (layer 0, pos 3) turns the corrupted run into the clean one
    cell = f[(f.layer == 0) & (f.pos == 3)].sort_values("example")
    np.testing.assert_allclose(cell["recovered"], 1.0, atol=1e-4)
    assert res.meta["clean_mean"] != pytest.approx(res.meta["corrupted_mean"])
    assert _n_hooks(bridge) == before


def test_a_cell_equals_a_hand_written_hook(bridge, pair):
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    res = activation_patching(bridge, clean, corrupted, metric, "resid_pre")
    _, cache = bridge.run_with_cache(clean)
    layer, pos = 1, 4

    def patch(act, hook):
        act = act.clone()
        act[:, pos] = cache[f"blocks.{layer}.hook_resid_pre"][:, pos]
        return act

    with torch.no_grad():
        logits = bridge.run_with_hooks(corrupted, fwd_hooks=[(f"blocks.{layer}.hook_resid_pre", patch)])
    want = metric(logits, Batch(corrupted, None, torch.arange(3)))
    got = res.frame[(res.frame.layer == layer) & (res.frame.pos == pos)].sort_values("example")["value"]
    np.testing.assert_allclose(got.to_numpy(), want.numpy(), atol=1e-5)


def test_heads_and_bad_input(bridges, pair, tmp_path):
    bridge = bridges["gpt2"]
    clean, corrupted, legal = pair
    res = activation_patching(bridge, clean, corrupted, legal_mass(legal), "heads")
    assert res.axis == "head" and res.mean().shape == (int(bridge.cfg.n_layers), int(bridge.cfg.n_heads))
    assert (res.frame["effect"].abs() > 0).any()
    res.save(tmp_path)
    assert (tmp_path / "patching.csv").exists() and (tmp_path / "patching_mean.csv").exists()
    with pytest.raises(ValueError, match="component must be one of"):
        activation_patching(bridge, clean, corrupted, legal_mass(legal), "resid_middle")
    with pytest.raises((ValueError, TypeError)):  # jaxtyping's check under pytest, our ValueError without it
        activation_patching(bridge, clean, corrupted[:, :5], legal_mass(legal))
