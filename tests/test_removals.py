"""Removal sweeps (zero, mean, resample, scale): the reuse engine, the intervention loop and the
batched path equal each other and a plain PyTorch forward-hook computation on the raw Hugging Face
model (GPT-2 and Llama), with the mean and the resample sources recomputed by hand; the draws obey
their rules; bad settings fail clearly; no hook remains."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import save_gpt2_and_llama, warm_bridges

from interp.analysis import token_loss, two_way_prob
from interp.analysis.engines.removals import Removal, parse_ablations, parse_scales, resample_sources
from interp.analysis.engines.scoring import Batch
from interp.analysis.engines.sweeps import mlp_removal_sweep, mlp_zero_sweep


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_city, tiny_model_config):
    from transformers import AutoModelForCausalLM

    paths = save_gpt2_and_llama(tmp_path_factory.mktemp("removals"), tiny_city, tiny_model_config, llama_layers=3)
    bridges = warm_bridges(paths)
    hf = {k: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval() for k, p in paths.items()}
    return bridges, hf


@pytest.fixture(scope="module")
def data(tiny_city):
    """6 right-padded rows of 9, 9, 8, 6, 5, 9 tokens; rows 0 and 1 share a group."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(tiny_city.vocab), (6, 9), generator=gen)
    lengths = [9, 9, 8, 6, 5, 9]
    mask = (torch.arange(9)[None] < torch.tensor(lengths)[:, None]).long()
    return ids.masked_fill(mask == 0, tiny_city.vocab.pad_id), mask, [0, 0, 1, 2, 3, 4]


def _mlps(hf):
    return list(hf.transformer.h) if hasattr(hf, "transformer") else list(hf.model.layers)


def _hf_logits(hf, ids, mask, layer=None, fn=None):
    """A plain HF forward, with ``fn(output) -> output`` on layer's MLP module when given."""
    mlp = None if layer is None else _mlps(hf)[layer].mlp
    handle = mlp.register_forward_hook(lambda m, a, o: fn(o)) if mlp is not None else None
    try:
        with torch.no_grad():
            return hf(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    finally:
        if handle is not None:
            handle.remove()


def _hf_outputs(hf, ids, mask, layer):
    got = {}
    handle = _mlps(hf)[layer].mlp.register_forward_hook(lambda m, a, o: got.__setitem__("o", o.detach()))
    try:
        _hf_logits(hf, ids, mask)
    finally:
        handle.remove()
    return got["o"]


def _oracle(hf, ids, mask, groups, removal, metric):
    """[layers, rows] metric under the removal, every step by hand on the raw HF model."""
    batch = Batch(ids, mask, torch.arange(len(ids)))
    n_layers = len(_mlps(hf))
    out = np.zeros((n_layers, len(ids)))
    lengths = mask.sum(1).numpy()
    sources = (
        resample_sources(lengths, removal.draws, removal.seed, None, groups)[0] if removal.kind == "resample" else None
    )
    for layer in range(n_layers):
        if removal.kind in ("zero", "scale"):
            alpha = 0.0 if removal.kind == "zero" else removal.factor
            out[layer] = metric(_hf_logits(hf, ids, mask, layer, lambda o, alpha=alpha: o * alpha), batch).numpy()
        elif removal.kind == "mean":
            o = _hf_outputs(hf, ids, mask, layer).double()
            first = o[:, 0].mean(0)
            later = torch.stack([o[i, t] for i in range(len(ids)) for t in range(1, int(lengths[i]))]).mean(0)
            rep = later.expand_as(o).clone()
            rep[:, 0] = first
            out[layer] = metric(_hf_logits(hf, ids, mask, layer, lambda o, rep=rep: rep.to(o.dtype)), batch).numpy()
        else:
            for d in range(removal.draws):
                src = torch.as_tensor(sources[:, d])
                o = _hf_outputs(hf, ids[src], mask[src], layer)  # full width: a source is as long as its row
                out[layer] += metric(_hf_logits(hf, ids, mask, layer, lambda _, o=o: o), batch).numpy() / removal.draws
    return out


REMOVALS = [
    Removal("zero"),
    Removal("scale", factor=0.5),
    Removal("scale", factor=1.0),
    Removal("mean"),
    Removal("resample", draws=2, seed=3),
]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("removal", REMOVALS, ids=lambda r: r.name)
def test_every_method_equals_raw_hf_hooks(models, data, arch, removal):
    bridges, hf = models
    bridge, model = bridges[arch], hf[arch]
    ids, mask, groups = data
    metric = token_loss
    want = _oracle(model, ids, mask, groups, removal, metric)
    clean = metric(_hf_logits(model, ids, mask), Batch(ids, mask, torch.arange(6))).numpy()
    results = {
        m: mlp_removal_sweep(
            bridge, ids, metric, mask, ablation=removal, groups=groups, method=m, batch_size=4, higher_is_better=False
        )
        for m in ("reuse", "loop", "batched")
    }
    for method, res in results.items():
        f = res.frame.sort_values(["layer", "example"])
        got = f.pivot(index="layer", columns="example", values="ablated").to_numpy()
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=f"{method} vs HF hooks")
        np.testing.assert_allclose(f[f.layer == 0]["clean"].to_numpy(), clean, atol=1e-5, rtol=0)
        assert res.meta["ablation"]["kind"] == removal.kind
    if removal.kind == "scale" and removal.factor == 1.0:  # α = 1 is the model itself
        assert np.abs(results["reuse"].frame["effect"]).max() < 1e-5
    elif removal.kind != "zero":
        assert np.abs(results["reuse"].frame["effect"]).max() > 1e-3  # the removal does something
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    assert sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points) == 0


def test_zero_removal_is_the_zero_sweep(models, data):
    bridges, _ = models
    ids, mask, _ = data
    metric = two_way_prob(5, 6, [1, 0, 1, 1, 0, 1])
    a = mlp_zero_sweep(bridges["gpt2"], ids, metric, mask)
    b = mlp_removal_sweep(bridges["gpt2"], ids, metric, mask, ablation="zero")
    np.testing.assert_array_equal(a.frame["ablated"].to_numpy(), b.frame["ablated"].to_numpy())
    assert a.meta["kind"] == "mlp_zero" and b.meta["ablation"]["kind"] == "zero"


def test_scored_rows_against_the_whole_reference_equal_the_full_sweep(models, data):
    """A shard (``rows``) is measured against the whole reference: its rows equal the full sweep's."""
    bridges, _ = models
    ids, mask, groups = data
    for removal in (Removal("mean"), Removal("resample", draws=2)):
        full = mlp_removal_sweep(bridges["llama"], ids, token_loss, mask, ablation=removal, groups=groups)
        part = mlp_removal_sweep(
            bridges["llama"], ids, token_loss, mask, ablation=removal, groups=groups, rows=[3, 4, 5]
        )
        want = full.frame[full.frame.example.isin([3, 4, 5])].sort_values(["layer", "example"])["ablated"].to_numpy()
        got = part.frame.sort_values(["layer", "example"])["ablated"].to_numpy()
        np.testing.assert_allclose(got, want, atol=1e-6)
        assert sorted(part.frame.example.unique()) == [0, 1, 2]


def test_resample_draws_follow_their_rules():
    lengths = [9, 9, 8, 6, 5, 9, 3]
    groups = [0, 0, 1, 2, 3, 4, 5]
    src, skipped = resample_sources(lengths, 4, seed=7, groups=groups)
    again, _ = resample_sources(lengths, 4, seed=7, groups=groups)
    np.testing.assert_array_equal(src, again)  # seeded
    assert not resample_sources(lengths, 4, seed=8, groups=groups)[0].tolist() == src.tolist()
    for i in range(len(lengths)):
        if skipped[i]:
            continue
        for s in src[i]:
            assert s != i and groups[s] != groups[i] and lengths[s] >= lengths[i]
    assert not skipped.any()
    # the only 9-token rows share a group: no source for them, counted as skipped
    src, skipped = resample_sources([9, 9, 5], 2, seed=0, groups=[0, 0, 1])
    assert skipped.tolist() == [True, True, False] and set(src[2]) <= {0, 1}
    # a reference subset: sources only from it
    src, _ = resample_sources([5] * 6, 3, seed=0, reference=[0, 1])
    assert set(src[2:].ravel()) <= {0, 1}


def test_skipped_rows_are_counted_not_scored(models, data):
    bridges, _ = models
    ids, mask, _ = data
    groups = [0, 0, 1, 2, 3, 0]  # every 9-token row in group 0: no source for them
    res = mlp_removal_sweep(
        bridges["gpt2"], ids, token_loss, mask, ablation=Removal("resample", draws=1), groups=groups
    )
    assert sorted(res.frame.example.unique()) == [2, 3, 4]
    assert list(res.meta["skipped"].values()) == [3]


def test_bad_settings_fail_clearly(models, data):
    bridges, _ = models
    ids, mask, _ = data
    with pytest.raises(ValueError, match="unknown ablation"):
        Removal("median")
    with pytest.raises(ValueError, match="scale needs a finite factor"):
        Removal("scale")
    with pytest.raises(ValueError, match="right-padded"):
        mlp_removal_sweep(bridges["gpt2"], ids, token_loss, mask.flip(1), ablation="mean")
    with pytest.raises(ValueError, match="unknown kind 'median'"):
        parse_ablations("zero,median")
    with pytest.raises(ValueError, match="names a kind twice"):
        parse_ablations("zero,zero")
    assert parse_ablations(None) == ["zero"] and parse_ablations("mean, resample") == ["mean", "resample"]
    assert parse_scales(None) == [1.0, 0.75, 0.5, 0.25, 0.0]
    with pytest.raises(ValueError, match="--scales"):
        parse_scales("1,half")


# ---- one definition: a Removal is a view of interp.hooks.Intervention ------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("removal", REMOVALS[:4], ids=lambda r: r.name)
def test_the_removals_intervention_reproduces_the_hand_worked_removal(models, data, arch, removal):
    """``intervene`` with :meth:`Removal.intervention` (mean: ``over="first/later"`` from the
    reference rows) gives, layer by layer, the raw-HF oracle's numbers: the hooks' definition is the
    sweep's. (resample is the sweep's draw design over the hooks' kind: not one intervention.)"""
    from interp.hooks import Source, intervene

    bridges, hf = models
    bridge, ids, (mask, groups) = bridges[arch], data[0], data[1:]
    want = _oracle(hf[arch], ids, mask, groups, removal, token_loss)
    batch = Batch(ids, mask, torch.arange(len(ids)))
    for layer in range(want.shape[0]):
        iv = removal.intervention(layer)
        assert str(iv.site) == f"mlp_out:{layer}" and iv.kind == removal.kind
        with (
            torch.no_grad(),
            intervene(
                bridge, [iv], sources={"reference": Source(tokens=ids, attention_mask=mask)}, attention_mask=mask
            ),
        ):
            got = token_loss(bridge(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)), batch)
        np.testing.assert_allclose(got.numpy(), want[layer], atol=1e-5, rtol=0, err_msg=f"layer {layer}")


def test_removals_round_trip_through_dicts_and_json(models, data):
    import json

    for r in [*REMOVALS, Removal("resample", draws=5, seed=7), Removal("scale", factor=0.0)]:
        assert Removal.from_dict(r.to_dict()) == r
        assert Removal.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert Removal("mean").to_dict()["over"] == "first/later"
    assert Removal("mean", seed=4) == Removal("mean")  # draws and seed are resample's
    # a sweep's meta["ablation"] (the record in run.json) reads back as its removal
    bridges, _ = models
    ids, mask, groups = data
    res = mlp_removal_sweep(bridges["gpt2"], ids, token_loss, mask, ablation="mean", groups=groups, layers=[0])
    assert Removal.from_dict(json.loads(json.dumps(res.meta["ablation"]))) == Removal("mean")
    with pytest.raises(ValueError, match=r"unknown ablation 'median'; expected one of zero, mean, resample, scale$"):
        Removal.from_dict({"kind": "median"})
    with pytest.raises(ValueError, match="patch needs a source run"):
        Removal("patch")
    with pytest.raises(ValueError, match="factor is only for scale"):
        Removal("zero", factor=0.5)
    with pytest.raises(ValueError, match=r"unknown removal keys \['layers'\]"):
        Removal.from_dict({"kind": "zero", "layers": [1]})
    with pytest.raises(ValueError, match="name 'scale0.5' does not match"):
        Removal.from_dict({"kind": "scale", "factor": 0.25, "name": "scale0.5"})
