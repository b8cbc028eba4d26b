"""The stacked patching engine (interp.analysis.engines.stacked_patching) against its peers: TransformerLens's
own ``get_act_patch_resid_pre`` / ``get_act_patch_attn_head_out_all_pos`` on the same bridge and
inputs (within 1e-5), and plain PyTorch pre-hooks on the raw Hugging Face modules (a decoder
layer's input for ``resid_pre``, ``o_proj``'s input for a head's output) — on a tiny random Llama
with grouped-query attention (3 query heads, 1 key-value head, as SmolLM2's 9 / 3) in float64; the
real-model check (float32, SmolLM2 on IOI prompts) is in tests/test_ioi_real_model.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import liven

from interp.analysis.engines.activation_patching import activation_patching
from interp.analysis.engines.scoring import logit_diff
from interp.analysis.engines.stacked_patching import stacked_patching

N_HEADS, D_HEAD = 3, 16


@pytest.fixture(scope="module")
def gqa(tmp_path_factory, tiny_city):
    """(bridge, raw HF model) of a lively 3-layer Llama with 3 query heads sharing 1 key-value head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interp.models import load_bridge, load_hf_model, save_checkpoint

    vocab = tiny_city.vocab
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=N_HEADS * D_HEAD,
            intermediate_size=96,
            num_hidden_layers=3,
            num_attention_heads=N_HEADS,
            num_key_value_heads=1,
            max_position_embeddings=32,
            pad_token_id=vocab.pad_id,
            bos_token_id=vocab.bos_id,
            eos_token_id=vocab.bos_id,
        )
    )
    folder = save_checkpoint(liven(model, 2), tiny_city, tmp_path_factory.mktemp("gqa") / "llama")
    # float64: the stacked forwards have other batch shapes than TransformerLens's, so in float32 the
    # two differ by rounding (~1e-6 of these random logits of size ~50); in float64 only the method can
    bridge = load_bridge(folder, dtype=torch.float64)
    bridge(torch.tensor([[1, 5, 6]]))  # a bridge may add hooks of its own on its first forward
    return bridge, load_hf_model(folder).double().eval()


@pytest.fixture(scope="module")
def inputs(tiny_city):
    """Four clean rows of 7 tokens; corrupted rows differ at positions 2 and 4; per-row answer ids."""
    gen = torch.Generator().manual_seed(3)
    v = len(tiny_city.vocab)
    clean = torch.randint(5, v, (4, 7), generator=gen)
    corrupted = clean.clone()
    corrupted[:, [2, 4]] = 5 + (clean[:, [2, 4]] - 5 + 3) % (v - 5)
    good, bad = torch.randint(5, v, (4,), generator=gen), torch.randint(5, v, (4,), generator=gen)
    return clean, corrupted, logit_diff(good, bad)


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points)


@pytest.mark.parametrize("component", ["resid_pre", "heads"])
def test_equals_transformer_lens(gqa, inputs, component):
    bridge, _ = gqa
    clean, corrupted, metric = inputs
    before = _n_hooks(bridge)
    ours = stacked_patching(bridge, clean, corrupted, metric, component, max_rows=5)  # chunks cut variants
    peer = activation_patching(bridge, clean, corrupted, metric, component)
    assert _n_hooks(bridge) == before
    axis = "head" if component == "heads" else "pos"
    assert ours.axis == peer.axis == axis
    assert ours.mean().shape == (3, N_HEADS if component == "heads" else 7)
    for col in ("value", "effect", "recovered"):
        np.testing.assert_allclose(ours.frame[col].to_numpy(), peer.frame[col].to_numpy(), rtol=0, atol=1e-5)
    assert ours.meta["clean_mean"] == pytest.approx(peer.meta["clean_mean"], abs=1e-6)
    assert ours.meta["corrupted_mean"] == pytest.approx(peer.meta["corrupted_mean"], abs=1e-6)
    assert (ours.frame["effect"].abs() > 1e-3).any()  # the patches act: not a silent no-op
    if component == "resid_pre":  # patching every differing position at layer 0 is the clean run
        f = ours.frame
        assert (f[f.pos.isin([0, 1])]["effect"] == 0).all()  # before the first edit nothing differs


def _capture_inputs(module, run):
    """The positional input of ``module`` during ``run()`` (a plain PyTorch pre-hook)."""
    got = {}

    def keep(m, args, kwargs) -> None:
        got["x"] = (args[0] if args else kwargs["hidden_states"]).clone()

    handle = module.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return got["x"]


def _patched(module, run, edit):
    def pre(m, args, kwargs):
        if args:
            return (edit(args[0].clone()), *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": edit(kwargs["hidden_states"].clone())}

    handle = module.register_forward_pre_hook(pre, with_kwargs=True)
    try:
        return run()
    finally:
        handle.remove()


def test_cells_equal_pre_hooks_on_the_raw_hf_model(gqa, inputs):
    """A head's ``hook_z`` slice is its slice of ``o_proj``'s input on the raw model (no
    ``set_use_attn_result`` needed); ``resid_pre`` is the decoder layer's input."""
    bridge, hf = gqa
    clean, corrupted, metric = inputs
    heads = stacked_patching(bridge, clean, corrupted, metric, "heads")
    resid = stacked_patching(bridge, clean, corrupted, metric, "resid_pre", layers=[1, 2])
    from interp.analysis.engines.scoring import Batch

    batch = Batch(corrupted, None, torch.arange(4))
    with torch.no_grad():
        for layer, head in [(0, 0), (1, 2), (2, 1)]:
            o_proj = hf.model.layers[layer].self_attn.o_proj
            src = _capture_inputs(o_proj, lambda: hf(clean))
            cols = slice(head * D_HEAD, (head + 1) * D_HEAD)

            def edit(x, src=src, cols=cols):
                x[..., cols] = src[..., cols]
                return x

            want = metric(_patched(o_proj, lambda: hf(corrupted).logits, edit), batch).numpy()
            got = heads.frame[(heads.frame.layer == layer) & (heads.frame["head"] == head)].sort_values("example")
            np.testing.assert_allclose(got["value"].to_numpy(), want, rtol=0, atol=1e-5)
        for layer, pos in [(1, 2), (2, 4), (2, 6)]:
            block = hf.model.layers[layer]
            src = _capture_inputs(block, lambda: hf(clean))

            def edit(x, src=src, pos=pos):
                x[:, pos] = src[:, pos]
                return x

            want = metric(_patched(block, lambda: hf(corrupted).logits, edit), batch).numpy()
            got = resid.frame[(resid.frame.layer == layer) & (resid.frame.pos == pos)].sort_values("example")
            np.testing.assert_allclose(got["value"].to_numpy(), want, rtol=0, atol=1e-5)
    assert not hf.model.layers[1].self_attn.o_proj._forward_pre_hooks


def test_bad_input_fails_clearly(gqa, inputs):
    bridge, _ = gqa
    clean, corrupted, metric = inputs
    with pytest.raises(ValueError, match="component must be one of resid_pre, heads"):
        stacked_patching(bridge, clean, corrupted, metric, "mlp_out")
    with pytest.raises((ValueError, TypeError)):  # jaxtyping under pytest, our ValueError without it
        stacked_patching(bridge, clean, corrupted[:, :5], metric)
    with pytest.raises(ValueError, match="layers must be a non-empty subset of 0..2"):
        stacked_patching(bridge, clean, corrupted, metric, layers=[3])
