"""Direct beside total effect (:mod:`interp.analysis.verdicts.direct_effects`): the logit lens of each MLP output on
the correct − foil direction, the final norm's scale frozen. Oracles: for the last layer the direct
effect equals the total (zero-out) effect measured by a forward whose final norm scale is frozen to
the clean run's; on every layer it equals a hand computation from the raw Hugging Face model
(its MLP outputs caught by PyTorch hooks, its norm weight and output embedding)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import liven, save_gpt2_and_llama, warm_bridges


@pytest.fixture(scope="module")
def bridges(tiny_city, tiny_model_config, tmp_path_factory):
    return warm_bridges(save_gpt2_and_llama(tmp_path_factory.mktemp("direct"), tiny_city, tiny_model_config))


def _inputs(vocab_size: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (6, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0  # right padding: the scored position is each row's last real token
    mask[4, 4:] = 0
    correct = torch.randint(3, vocab_size, (6,), generator=g).numpy()
    foil = (correct + 1 - 3) % (vocab_size - 3) + 3
    return ids, mask, correct, foil


def _hooks(bridge) -> int:
    return sum(
        len(h.fwd_hooks) + len(getattr(h, "bwd_hooks", []))
        for h in bridge.hook_dict.values()
        if hasattr(h, "fwd_hooks")
    )


def _logit_diff(logits, mask, correct, foil):
    last = mask.sum(1) - 1
    rows = torch.arange(len(last))
    out = logits[rows, last].double()
    return (out[rows, torch.as_tensor(correct)] - out[rows, torch.as_tensor(foil)]).numpy()


def test_last_layer_direct_equals_total_with_the_norm_scale_frozen(bridge):
    _check_last_layer(bridge)


def test_last_layer_direct_on_gemma3_reads_the_offset_norm(tiny_city, tmp_path):
    """Gemma's RMSNorm multiplies by (1 + weight), not weight (TransformerLens:
    ``cfg.rmsnorm_uses_offset``): the direct effect must read the final norm's gain so. A tiny
    random Gemma 3 (GQA with one key-value head, q/k norms, a sliding layer, norm weights near 1,
    so 1 + w ≈ 2 and the plain weight would halve the effect) against the same frozen-scale oracle."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from interp.models import save_checkpoint

    vocab = tiny_city.vocab
    torch.manual_seed(0)
    config = Gemma3TextConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=8,
        sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=32,
        pad_token_id=vocab.pad_id,
        bos_token_id=vocab.bos_id,
        eos_token_id=vocab.bos_id,
    )
    folder = save_checkpoint(liven(Gemma3ForCausalLM(config), 2), tiny_city, tmp_path / "gemma3")
    bridge = warm_bridges({"gemma3": folder})["gemma3"]
    assert bridge.cfg.rmsnorm_uses_offset
    _check_last_layer(bridge)


def _check_last_layer(bridge) -> None:
    from interp.analysis.verdicts.direct_effects import direct_effects

    ids, mask, correct, foil = _inputs(int(bridge.cfg.d_vocab))
    last = int(bridge.cfg.n_layers) - 1
    before = _hooks(bridge)
    direct = direct_effects(bridge, ids, correct, foil, mask, batch_size=4)
    assert _hooks(bridge) == before
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    scale = {}

    def keep(act, hook):
        scale["clean"] = act.detach().clone()

    def freeze(act, hook):
        return scale["clean"]

    def zero(act, hook):
        return torch.zeros_like(act)

    with torch.no_grad():
        clean = bridge.run_with_hooks(
            ids, attention_mask=mask, position_ids=pos, fwd_hooks=[("ln_final.hook_scale", keep)]
        )
        frozen = bridge.run_with_hooks(
            ids,
            attention_mask=mask,
            position_ids=pos,
            fwd_hooks=[(f"blocks.{last}.hook_mlp_out", zero), ("ln_final.hook_scale", freeze)],
        )
        free = bridge.run_with_hooks(
            ids, attention_mask=mask, position_ids=pos, fwd_hooks=[(f"blocks.{last}.hook_mlp_out", zero)]
        )
    total_frozen = _logit_diff(frozen, mask, correct, foil) - _logit_diff(clean, mask, correct, foil)
    total_free = _logit_diff(free, mask, correct, foil) - _logit_diff(clean, mask, correct, foil)
    np.testing.assert_allclose(direct[:, last], total_frozen, atol=2e-4, rtol=1e-4)
    assert (
        np.abs(total_free - total_frozen).max() > 1e-3
    )  # the real norm rescales: freezing it is what makes them equal
    assert _hooks(bridge) == before


def test_direct_effect_is_the_hand_computed_logit_lens(bridge):
    """Every layer: −(N(mlp_out) / σ) · (w ⊙ (W_U[correct] − W_U[foil])) at the last real position,
    from the raw HF model's own modules (PyTorch forward hooks on each block's MLP), in float64."""
    from interp.analysis.verdicts.direct_effects import direct_effects
    from interp.hooks.sites import hf_blocks, hf_model

    ids, mask, correct, foil = _inputs(int(bridge.cfg.d_vocab), seed=1)
    hf = hf_model(bridge)
    blocks, _ = hf_blocks(hf)
    outs = {}
    handles = [
        b.mlp.register_forward_hook(lambda m, i, o, j=j: outs.__setitem__(j, o.detach().double()))
        for j, b in enumerate(blocks)
    ]
    try:
        with torch.no_grad():
            res = hf(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    finally:
        for h in handles:
            h.remove()
    final_norm = hf.transformer.ln_f if hasattr(hf, "transformer") else hf.model.norm
    centred = hasattr(hf, "transformer")
    eps = final_norm.eps if centred else final_norm.variance_epsilon
    w = final_norm.weight.detach().double()
    w_u = hf.get_output_embeddings().weight.detach().double()
    rows = torch.arange(len(ids))
    last = mask.sum(1) - 1
    assert res.logits.shape[0] == len(ids)
    pre = {}  # the final residual: the input of the final norm
    h = final_norm.register_forward_hook(lambda m, i, o: pre.__setitem__("x", i[0].detach().double()))
    try:
        with torch.no_grad():
            hf(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    finally:
        h.remove()
    xf = pre["x"][rows, last]
    xc = xf - xf.mean(-1, keepdim=True) if centred else xf
    sigma = torch.sqrt((xc**2).mean(-1, keepdim=True) + eps)
    u = w * (w_u[torch.as_tensor(correct)] - w_u[torch.as_tensor(foil)])
    hand = np.zeros((len(ids), len(blocks)))
    for j in range(len(blocks)):
        m = outs[j][rows, last]
        m = m - m.mean(-1, keepdim=True) if centred else m
        hand[:, j] = (-(m / sigma * u).sum(-1)).numpy()
    got = direct_effects(bridge, ids, correct, foil, mask)
    np.testing.assert_allclose(got, hand, atol=1e-4, rtol=1e-4)
    assert np.abs(hand).max() > 0.05  # the lively weights give effects worth comparing
