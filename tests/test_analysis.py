"""Analysis: MLP zero-out sweeps equal a hand-written hook loop (and the batched fast path equals
the loop), direct-effect patching oracles (identical inputs → 0, own activations → own metric),
no leaked hooks, metric helpers, verdicts on synthetic effects, verdict files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import save_gpt2_and_llama, warm_bridges

from interp.analysis import (
    Batch,
    LayerVerdicts,
    ModelMismatchError,
    PatchPair,
    SweepResult,
    direct_effect_patching,
    layer_verdicts,
    load_verdicts,
    logit_diff,
    mlp_zero_sweep,
    model_fingerprint,
    token_loss,
    two_way_prob,
)
from interp.analysis.engines.scoring import forward
from interp.hooks import Site, Source, intervene, patch


@pytest.fixture(scope="module")
def bridges(tmp_path_factory, tiny_city, tiny_model_config):
    return warm_bridges(
        save_gpt2_and_llama(tmp_path_factory.mktemp("analysis"), tiny_city, tiny_model_config, llama_layers=3)
    )


@pytest.fixture(scope="module")
def data(tiny_city):
    """5 examples of 7 tokens, the last two right-padded (1 = real token)."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, len(tiny_city.vocab), (5, 7), generator=gen)
    mask = torch.ones_like(ids)
    mask[3, 5:] = 0
    mask[4, 4:] = 0
    ids = ids.masked_fill(mask == 0, tiny_city.vocab.pad_id)
    return ids, mask


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(
        len(hp._forward_hooks)
        + len(hp._forward_pre_hooks)
        + len(hp._backward_hooks)
        + len(hp.fwd_hooks)
        + len(hp.bwd_hooks)
        for hp in points
    )


def _metric():
    return two_way_prob(5, 6, [1, 0, 1, 1, 0])


# ---- metric helpers ---------------------------------------------------------------------------------


def test_metric_helpers_by_hand(data):
    ids, mask = data
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 7, 11, generator=gen)
    batch = Batch(ids % 11, mask, torch.arange(5))
    last = torch.tensor([6, 6, 6, 4, 3])
    ld = logit_diff(2, torch.tensor([3, 4, 5, 6, 7]))(logits, batch)
    want = torch.stack([logits[i, last[i], 2] - logits[i, last[i], 3 + i] for i in range(5)])
    torch.testing.assert_close(ld, want)
    p = two_way_prob(5, 6, [1, 0, 1, 1, 0])(logits, batch)
    for i, g in enumerate([1, 0, 1, 1, 0]):
        pair = torch.softmax(logits[i, last[i], [5, 6]], dim=-1)
        torch.testing.assert_close(p[i], pair[0] if g else pair[1])
    loss = token_loss(logits, batch)
    for i in range(5):
        n = int(mask[i].sum())
        want = torch.nn.functional.cross_entropy(logits[i, : n - 1], (ids[i] % 11)[1:n])
        torch.testing.assert_close(loss[i], want)
    # a chunk of rows looks its per-example data up by index
    sub = Batch(batch.tokens[[3, 4]], mask[[3, 4]], torch.tensor([3, 4]))
    torch.testing.assert_close(two_way_prob(5, 6, [1, 0, 1, 1, 0])(logits[[3, 4]], sub), p[[3, 4]])


# ---- MLP zero-out sweep -----------------------------------------------------------------------------


def test_sweep_equals_hand_written_loop(bridge, data):
    ids, mask = data
    metric = _metric()
    res = mlp_zero_sweep(bridge, ids, metric, attention_mask=mask)
    batch = Batch(ids, mask, torch.arange(5))
    kw = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}
    with torch.no_grad():
        clean = metric(bridge(ids, **kw), batch)
    n_layers = int(bridge.cfg.n_layers)
    assert res.layers == list(range(n_layers))
    for layer in range(n_layers):

        def zero_hook(act, hook):
            return torch.zeros_like(act)

        with torch.no_grad():
            logits = bridge.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", zero_hook)], **kw)
        ablated = metric(logits, batch)
        got = res.frame[res.frame.layer == layer].sort_values("example")
        torch.testing.assert_close(torch.tensor(got["clean"].to_numpy(), dtype=torch.float32), clean)
        torch.testing.assert_close(torch.tensor(got["ablated"].to_numpy(), dtype=torch.float32), ablated)
        torch.testing.assert_close(torch.tensor(got["effect"].to_numpy(), dtype=torch.float32), ablated - clean)
        # zeroing an MLP changes the metric
        assert (got["effect"].abs() > 1e-6).any(), f"zeroing mlp_out:{layer} changed nothing"
    assert set(res.per_layer().columns) >= {"layer", "mean_effect", "se", "n"}
    assert list(res.per_layer()["n"]) == [5] * n_layers


@pytest.mark.parametrize("method", ["batched", "reuse"])
def test_fast_paths_equal_loop(bridge, data, method):
    ids, mask = data
    blocks = list(bridge.blocks)
    for metric in (_metric(), token_loss):
        loop = mlp_zero_sweep(bridge, ids, metric, attention_mask=mask, method="loop")
        fast = mlp_zero_sweep(bridge, ids, metric, attention_mask=mask, method=method, batch_size=2)
        for col in ("clean", "ablated", "effect"):
            np.testing.assert_allclose(fast.frame[col].to_numpy(), loop.frame[col].to_numpy(), atol=1e-5, rtol=0)
    if method == "reuse":  # GPT-2 and Llama blocks add their MLP output: every layer resumed after its block
        assert fast.meta["resumed_after_block"] == list(range(int(bridge.cfg.n_layers)))
    assert list(bridge.blocks) == blocks  # the skipped blocks are back


@pytest.mark.parametrize("kind", ["zero", "mean", "resample", "scale"])
def test_reuse_falls_back_to_rerunning_a_non_additive_block(bridge, data, kind):
    """Where ``resid_post ≠ resid_pre + attn_out + mlp_out`` the variant restarts at block ℓ with the
    loop's intervention; forced here for every layer, it still equals the loop, for every removal."""
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.sweeps import _Replacements, _Reuse, mlp_removal_sweep

    ids, mask = data
    layers = list(range(int(bridge.cfg.n_layers)))
    removal = Removal(kind, factor=0.5 if kind == "scale" else None, draws=2)
    reuse = _Reuse(bridge, layers, _Replacements(bridge, ids, mask, layers, removal, None, None, None))
    batch = Batch(ids, mask, torch.arange(5))
    idx = np.arange(5)
    reuse(token_loss, batch, idx)  # first chunk: the check runs
    reuse.additive = dict.fromkeys(layers, False)
    clean, ablated = reuse(token_loss, batch, idx)
    loop = mlp_removal_sweep(
        bridge, ids, token_loss, attention_mask=mask, ablation=removal, method="loop", batch_size=None
    )
    keep = sorted(loop.frame.example.unique())  # resample leaves out rows without a source
    np.testing.assert_allclose(
        ablated[:, keep].ravel(), loop.frame.sort_values(["layer", "example"])["ablated"], atol=1e-5
    )


def test_resume_forward_from_own_residual_is_the_clean_forward(bridge, data):
    from interp.analysis.engines.resume import resume_forward

    ids, mask = data
    n = int(bridge.cfg.n_layers)
    clean, cache = bridge.run_with_cache(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    for layer in (1, n):
        resid = cache[f"blocks.{layer}.hook_resid_pre"] if layer < n else cache[f"blocks.{n - 1}.hook_resid_post"]
        torch.testing.assert_close(
            resume_forward(bridge, layer, resid, ids, mask), clean.detach(), atol=1e-5, rtol=1e-5
        )
    with pytest.raises(ValueError, match="layer must be in"):
        resume_forward(bridge, n + 1, resid, ids, mask)
    blocks = list(bridge.blocks)

    def boom(act, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), bridge.hooks(fwd_hooks=[(f"blocks.{n - 1}.hook_mlp_out", boom)]):
        resume_forward(bridge, 1, cache["blocks.1.hook_resid_pre"], ids, mask)  # raises inside the forward
    assert list(bridge.blocks) == blocks


def test_sweep_chunks_layers_and_categories(bridges, data):
    bridge = bridges["gpt2"]
    ids, mask = data
    whole = mlp_zero_sweep(bridge, ids, logit_diff(5, 6), attention_mask=mask, layers=[1])
    chunked = mlp_zero_sweep(
        bridge, ids, logit_diff(5, 6), attention_mask=mask, layers=[1], batch_size=2, categories=list("aabba")
    )
    np.testing.assert_allclose(chunked.frame["effect"], whole.frame["effect"], atol=1e-5)
    assert list(chunked.frame["category"]) == list("aabba") and whole.layers == [1]
    with pytest.raises(ValueError, match="layers"):
        mlp_zero_sweep(bridge, ids, logit_diff(5, 6), layers=[7])


def test_sweep_save(bridges, data, tmp_path):
    ids, mask = data
    res = mlp_zero_sweep(bridges["gpt2"], ids, _metric(), attention_mask=mask)
    res.save(tmp_path, "s")
    meta = json.loads((tmp_path / "s.json").read_text())
    assert meta["kind"] == "mlp_zero" and meta["model"]["n_layers"] == 2 and len(meta["summary"]) == 2
    assert len(pd.read_csv(tmp_path / "s.csv")) == 10


# ---- direct-effect patching -------------------------------------------------------------------------


def test_patching_identical_inputs_is_exactly_zero(bridge, data):
    ids, _ = data
    pairs = [(ids[i].tolist(), ids[i].tolist()) for i in range(3)]
    res = direct_effect_patching(bridge, pairs, two_way_prob(5, 6, [1, 0, 1]))
    assert len(res.frame) == 3 * int(bridge.cfg.n_layers)
    assert (res.frame["effect"] == 0).all()


def test_patching_own_activations_returns_own_metric(bridge, data):
    ids, mask = data
    metric = _metric()
    batch = Batch(ids, mask, torch.arange(5))
    clean = metric(forward(bridge, ids, mask), batch)
    for layer in range(int(bridge.cfg.n_layers)):
        iv = patch(Site(layer, "resid_pre"), "self")
        with intervene(
            bridge, [iv], sources={"self": Source(tokens=ids, attention_mask=mask)}, attention_mask=mask
        ) as active:
            got = metric(forward(bridge, ids, mask), batch)
        assert active.calls == [1]
        torch.testing.assert_close(got, clean)


def test_patching_altered_pair_moves_metric(bridge):
    orig = [1, 5, 6, 7, 8, 9, 10]
    alt = [1, 5, 6, 11, 7, 8, 9, 10]  # one inserted token: 7 aligned positions
    res = direct_effect_patching(bridge, [PatchPair(orig, alt)], logit_diff(5, 6), categories=["insert"])
    assert (res.frame["n_aligned"] == 7).all()
    assert (res.frame["effect"].abs() > 1e-6).any()
    assert res.frame["category"].tolist() == ["insert"] * int(bridge.cfg.n_layers)


def test_patching_a_substitution_at_layer_0_changes_nothing(bridge):
    """Aligned positions hold equal tokens, so their embeddings (resid_pre:0) are equal: patching
    them is exactly a no-op, also next to repeated tokens (where a bare difflib match shifts)."""
    orig = [1, 5, 6, 9, 9, 7, 7]
    alt = [1, 5, 6, 9, 9, 8, 7]
    res = direct_effect_patching(bridge, [PatchPair(orig, alt)], logit_diff(5, 6))
    row = res.frame[res.frame.layer == 0].iloc[0]
    assert row["n_aligned"] == 6 and row["effect"] == 0.0
    assert (res.frame[res.frame.layer > 0]["effect"].abs() > 1e-7).any()


# ---- hooks never leak -------------------------------------------------------------------------------


def test_no_hooks_remain_after_sweeps_and_errors(bridge, data):
    ids, mask = data
    before = _n_hooks(bridge)
    mlp_zero_sweep(bridge, ids, _metric(), attention_mask=mask)
    mlp_zero_sweep(bridge, ids, _metric(), attention_mask=mask, method="batched")
    mlp_zero_sweep(bridge, ids, _metric(), attention_mask=mask, method="reuse")
    direct_effect_patching(bridge, [(ids[0].tolist(), ids[1].tolist())], logit_diff(5, 6))
    assert _n_hooks(bridge) == before

    calls = []

    def bad_metric(logits, batch):
        calls.append(1)
        if len(calls) > 1:  # the clean run passes, the first ablated run raises
            raise RuntimeError("boom")
        return logits[:, -1, 0]

    blocks = list(bridge.blocks)
    for method in ("loop", "batched", "reuse"):
        calls.clear()
        with pytest.raises(RuntimeError, match="boom"):
            mlp_zero_sweep(bridge, ids, bad_metric, method=method)
        assert _n_hooks(bridge) == before
        assert list(bridge.blocks) == blocks
    calls.clear()
    with pytest.raises(RuntimeError, match="boom"):
        direct_effect_patching(bridge, [(ids[0].tolist(), ids[1].tolist())], bad_metric)
    assert _n_hooks(bridge) == before


# ---- verdicts ---------------------------------------------------------------------------------------


def _synthetic(effects: dict[int, np.ndarray], categories=None, higher_is_better=True) -> SweepResult:
    rows = []
    for layer, eff in effects.items():
        for i, e in enumerate(eff):
            row = {"example": i, "layer": layer, "clean": 0.6, "ablated": 0.6 + e, "effect": e}
            if categories is not None:
                row["category"] = categories[i]
            rows.append(row)
    return SweepResult(
        pd.DataFrame(rows),
        {
            "metric": "synthetic",
            "higher_is_better": higher_is_better,
            "model": {"config_hash": "x", "n_layers": 3, "path": None},
        },
    )


def test_verdicts_on_synthetic_effects():
    rng = np.random.default_rng(0)
    n = 60
    noise = rng.normal(0, 0.2, n)
    noise -= noise.mean()  # exactly zero-mean noise
    sweep = _synthetic({0: -0.3 + rng.normal(0, 0.05, n), 1: 0.3 + rng.normal(0, 0.05, n), 2: noise})
    v = layer_verdicts(sweep, threshold=0.5, min_effect=0.1)
    assert list(v.frame["verdict"]) == ["useful", "harmful", "negligible"]
    assert v.useful == [0] and v.harmful == [1] and v.layers("negligible") == [2]
    row = v.frame.set_index("layer")
    assert -0.1 <= row.loc[2, "ci_low"] < 0 < row.loc[2, "ci_high"] <= 0.1
    # the simultaneous interval contains the layer's own (marginal) one
    assert (v.frame.ci_low <= v.frame.marginal_low).all() and (v.frame.ci_high >= v.frame.marginal_high).all()
    # the raw rule: accuracy at 0.5 (clean 0.6 → correct); −0.3 drops every example below 0.5
    assert row.loc[0, "raw_verdict"] == "useful" and row.loc[0, "a_layer"] == 0.0 and row.loc[0, "a_0"] == 1.0
    # the same effects of a loss (lower = better) swap useful and harmful
    flipped = layer_verdicts(_synthetic({0: -0.3 + rng.normal(0, 0.05, n)}, higher_is_better=False), min_effect=0.1)
    assert flipped.harmful == [0]
    # seeded: the same seed gives the same interval
    again = layer_verdicts(sweep, threshold=0.5, min_effect=0.1)
    pd.testing.assert_frame_equal(v.frame, again.frame)
    # a metric with no default margin: δ = 0, said with a warning (no layer can then be negligible)
    with pytest.warns(UserWarning, match="no default margin"):
        bare = layer_verdicts(sweep)
    assert bare.min_effect == 0 and bare.layers("inconclusive") == [2]


def test_verdict_turns_inconclusive_when_signal_drowns_in_noise():
    rng = np.random.default_rng(1)
    n = 30
    strong = layer_verdicts(_synthetic({0: -0.2 + rng.normal(0, 0.05, n)}), min_effect=0.05)
    weak = layer_verdicts(_synthetic({0: -0.02 + rng.normal(0, 1.0, n)}), min_effect=0.05)
    assert strong.useful == [0] and weak.layers("inconclusive") == [0]


def test_verdicts_by_category():
    n = 40
    cats = ["connective" if i % 2 else "swap" for i in range(n)]
    eff = np.array([0.4 if c == "connective" else 0.0 for c in cats])
    v = layer_verdicts(_synthetic({0: eff, 1: -eff}, categories=cats), min_effect=0.01)
    assert v.by_category.loc[0, "connective"] == pytest.approx(0.4)
    assert v.by_category.loc[1, "swap"] == pytest.approx(0.0)


def test_verdict_file_round_trip_and_model_check(bridges, data, tmp_path):
    ids, mask = data
    gpt2, llama = bridges["gpt2"], bridges["llama"]
    sweep = mlp_zero_sweep(gpt2, ids, _metric(), attention_mask=mask, categories=list("aabba"))
    v = layer_verdicts(sweep, n_boot=200, threshold=0.5)
    path = v.save(tmp_path) / "verdicts.json"
    back = load_verdicts(path, bridge=gpt2)
    assert isinstance(back, LayerVerdicts)
    pd.testing.assert_frame_equal(back.frame, v.frame, check_dtype=False)
    pd.testing.assert_frame_equal(back.by_category, v.by_category, check_dtype=False, check_names=False)
    assert back.meta["model"] == model_fingerprint(gpt2) and back.meta["model"]["n_layers"] == 2
    assert back.useful == v.useful and back.harmful == v.harmful
    with pytest.raises(ModelMismatchError, match="layers"):
        load_verdicts(path, bridge=llama)
    with pytest.raises(ModelMismatchError):
        back.check_model(llama)
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a layer-verdict file"):
        load_verdicts(bad)
