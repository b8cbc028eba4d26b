"""Path-restricted MLP removals (:mod:`interp.analysis.engines.path_removal`) against plain PyTorch hooks on the raw
HF model: an MLP's output subtracted from the input of a later MLP's norm, or of the final norm."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import save_gpt2_and_llama, warm_bridges

from interp.analysis import logit_diff, mlp_path_removal, mlp_zero_sweep


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_city, tiny_model_config):
    from dataclasses import replace

    cfg = replace(tiny_model_config, n_layer=3)
    return save_gpt2_and_llama(tmp_path_factory.mktemp("paths"), tiny_city, cfg, llama_layers=3)


@pytest.fixture(scope="module")
def bridges(paths):
    out = warm_bridges(paths)
    for b in out.values():
        b.eval()
    return out


@pytest.fixture(scope="module")
def data(tiny_city):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(5, len(tiny_city.vocab), (5, 7), generator=gen)
    mask = torch.ones_like(ids)
    mask[4, 5:] = 0
    return ids.masked_fill(mask == 0, tiny_city.vocab.pad_id), mask


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(len(hp._forward_hooks) + len(hp._forward_pre_hooks) + len(hp.fwd_hooks) for hp in points)


def _raw_modules(model, arch: str):
    """(mlps, pre-MLP norms, final norm) of a raw HF model."""
    if arch == "gpt2":
        h = model.transformer.h
        return [b.mlp for b in h], [b.ln_2 for b in h], model.transformer.ln_f
    layers = model.model.layers
    return [b.mlp for b in layers], [b.post_attention_layernorm for b in layers], model.model.norm


def _oracle(model, arch, ids, mask, source, into):
    """Logit differences (token 5 − 6 at each row's last real position) of the raw model with the
    source MLP's output subtracted from the target norm's input, by plain PyTorch hooks."""
    mlps, norms, final = _raw_modules(model, arch)
    kept = {}
    h1 = mlps[source].register_forward_hook(lambda m, a, out: kept.__setitem__("out", out))
    target = final if into == "logits" else norms[int(into.split(":")[1])]
    h2 = target.register_forward_pre_hook(lambda m, args: (args[0] - kept["out"],) + tuple(args[1:]))
    try:
        with torch.no_grad():
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            logits = model(ids, attention_mask=mask, position_ids=pos).logits
    finally:
        h1.remove()
        h2.remove()
    last = mask.sum(1) - 1
    rows = torch.arange(len(ids))
    return (logits[rows, last, 5] - logits[rows, last, 6]).numpy()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_path_removal_equals_raw_hooks(arch, paths, bridges, data):
    from interp.models import load_hf_model

    ids, mask = data
    bridge = bridges[arch]
    raw = load_hf_model(paths[arch]).eval()
    before = _n_hooks(bridge)
    for into, sources in (("mlp:2", [0, 1]), ("logits", [0, 1, 2])):
        res = mlp_path_removal(bridge, ids, logit_diff(5, 6), sources, into, attention_mask=mask, batch_size=3)
        assert res.meta["kind"] == "mlp_path_zero" and res.meta["into"] == into
        for j in sources:
            got = res.frame[res.frame.layer == j].sort_values("example")["ablated"].to_numpy()
            np.testing.assert_allclose(got, _oracle(raw, arch, ids, mask, j, into), atol=1e-4, rtol=1e-4)
    assert _n_hooks(bridge) == before


def test_direct_path_of_the_last_layer_is_its_total_effect(bridges, data):
    """Nothing reads the last MLP's output before the final norm: both removals agree; earlier
    layers' direct and total effects differ (later layers read them)."""
    ids, mask = data
    bridge = bridges["llama"]
    metric = logit_diff(5, 6)
    total = mlp_zero_sweep(bridge, ids, metric, attention_mask=mask).per_layer().set_index("layer")["mean_effect"]
    direct = mlp_path_removal(bridge, ids, metric, [0, 2], "logits", attention_mask=mask).per_layer()
    direct = direct.set_index("layer")["mean_effect"]
    assert direct[2] == pytest.approx(total[2], abs=1e-4)
    assert abs(direct[0] - total[0]) > 1e-3


def test_path_removal_errors_name_the_problem(bridges, data):
    ids, mask = data
    bridge = bridges["llama"]
    with pytest.raises(ValueError, match="below the target MLP's layer 1"):
        mlp_path_removal(bridge, ids, logit_diff(5, 6), [1], "mlp:1")
    with pytest.raises(ValueError, match="'logits' or 'mlp:K'"):
        mlp_path_removal(bridge, ids, logit_diff(5, 6), [0], "attn:2")
    with pytest.raises(ValueError, match="layer 9 is out of range"):
        mlp_path_removal(bridge, ids, logit_diff(5, 6), [0], "mlp:9")
