"""Fused attention (:mod:`interp.models.attention`) equals the bridge's eager attention.

On tiny random-init models of the architecture matrix (GPT-2, GPT-NeoX, Llama, Qwen2, Phi-3,
Gemma-2 without softcapping, Mistral, OLMo-2; grouped-query heads on five of them), with the
Hugging Face masks of both implementations (``sdpa``: boolean 4-D masks or none; ``eager``:
additive float masks), unpadded, left-padded and tree-packed (:mod:`interp.models.packing`):
the logits and every hook point's value equal eager's within 1e-5 (float32), every hook point
but the pattern's fires, and the logits equal a plain Hugging Face forward's (the independent
oracle). A pattern hook is refused (``fused``) or served eagerly (``auto``); softcapped Gemma-2 is
refused by name; hooks that edit q / v / z act the same; gradients agree; nothing is left behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

VOCAB = 97
ARCHS = ("gpt2", "gpt_neox", "llama", "qwen2", "phi3", "gemma2", "mistral", "olmo2")
TOL = dict(atol=1e-5, rtol=1e-5)
#: where the models run: the CPU, or ``cuda`` under ``bench/gpu_check.sh`` (``INTERP_TEST_DEVICE``)
DEVICE = os.environ.get("INTERP_TEST_DEVICE", "cpu")


def _tokens(shape: tuple[int, int], seed: int) -> torch.Tensor:
    return torch.randint(1, VOCAB, shape, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def _hf(arch: str, impl: str = "sdpa", seed: int = 0, **over):
    import transformers as T

    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
    )
    cfg = {
        "gpt2": lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=256, n_inner=64),
        "gpt_neox": lambda: T.GPTNeoXConfig(**common, rotary_pct=0.5),
        "llama": lambda: T.LlamaConfig(**common, num_key_value_heads=2),
        "qwen2": lambda: T.Qwen2Config(**common, num_key_value_heads=2),
        "phi3": lambda: T.Phi3Config(**common, num_key_value_heads=4, pad_token_id=0),
        "gemma2": lambda: T.Gemma2Config(
            **common, num_key_value_heads=2, head_dim=8, sliding_window=64, attn_logit_softcapping=None
        ),
        "mistral": lambda: T.MistralConfig(**common, num_key_value_heads=2, sliding_window=None),
        "olmo2": lambda: T.Olmo2Config(**common, num_key_value_heads=4),
    }[arch]()
    for k, v in over.items():
        setattr(cfg, k, v)
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    gen = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():  # weights large enough that the answer depends on the input
        for name, p in model.named_parameters():
            gain = p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight")
            p.copy_(torch.randn(p.shape, generator=gen) * 0.15 + (1.0 if gain else 0.0))
    model.set_attn_implementation(impl)  # what the bridge's mask arrives as: bool (sdpa) / additive (eager)
    return model.to(DEVICE)


def _bridge(model):
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    bridge = build_bridge_from_module(model, architecture=type(model).__name__, hf_config=model.config).eval()
    bridge(torch.tensor([[1, 2, 3]], device=DEVICE))  # a first forward may add the bridge's own hooks
    return bridge


def _n_hooks(bridge) -> int:
    return sum(len(h._forward_hooks) + len(h._forward_pre_hooks) for h in bridge.hook_dict.values())


def _classes(bridge) -> list[str]:
    from interp.models.attention import attention_modules

    return [type(m).__name__ for m in attention_modules(bridge)]


def _inputs(kind: str):
    """(tokens, kwargs of the forward, rows to compare): three rows of 20 tokens; ``padded`` left-pads
    the second by 5; ``packed`` is a trie of three rows sharing a 12-token prefix (one pack)."""
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(1, VOCAB, (3, 20), generator=gen)
    if kind == "plain":
        return tokens.to(DEVICE), {}
    if kind == "padded":
        mask = torch.ones(3, 20, dtype=torch.long)
        mask[1, :5] = 0
        kw = {"attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
        return tokens.to(DEVICE), {k: v.to(DEVICE) for k, v in kw.items()}
    from interp.models.packing import plan

    base = tokens[0, :12].tolist()
    rows = [base + tokens[1, :5].tolist(), base + tokens[2, :8].tolist(), base[:9]]
    (pb,) = plan(rows, None, batch_tokens=64, pack_tokens=64).batches
    return pb.tokens.to(DEVICE), {"attention_mask": pb.mask.to(DEVICE), "position_ids": pb.positions.to(DEVICE)}


def _not_pattern(name: str) -> bool:
    return not name.endswith(("hook_pattern", "hook_attn_scores"))


#: (architecture, HF attention implementation): Gemma-2 has no ``sdpa`` in transformers
MATRIX = [(a, impl) for a in ARCHS for impl in ("sdpa", "eager") if (a, impl) != ("gemma2", "sdpa")]


@pytest.mark.parametrize(("arch", "impl"), MATRIX)
def test_fused_equals_eager_at_every_hook(arch, impl):
    from interp.models.attention import attention, attention_mode

    model = _hf(arch, impl)
    bridge = _bridge(model)
    before = _n_hooks(bridge), _classes(bridge)
    for kind in ("plain", "padded", "packed"):
        tokens, kw = _inputs(kind)
        with torch.no_grad():
            eager_logits, eager = bridge.run_with_cache(tokens, names_filter=_not_pattern, **kw)
            with attention(bridge, "fused") as got:
                assert got == "fused" and attention_mode(bridge) == "fused"
                fused_logits, fused = bridge.run_with_cache(tokens, names_filter=_not_pattern, **kw)
            hf = model(input_ids=tokens, **kw).logits
        assert set(fused.keys()) == set(eager.keys()), f"{arch}/{kind}: hooks that fire differ"
        assert any(".attn.hook_z" in k or "o.hook_in" in k for k in fused.keys())
        for name in eager.keys():
            torch.testing.assert_close(
                fused[name], eager[name], **TOL, msg=lambda m, n=name, k=kind: f"{arch}/{k} {n}: {m}"
            )
        torch.testing.assert_close(fused_logits, eager_logits, **TOL)
        if kind != "packed":  # the oracle: a plain HF forward (packed rows: the next test, row by row)
            real = kw["attention_mask"].bool() if kind == "padded" else torch.ones_like(tokens, dtype=torch.bool)
            torch.testing.assert_close(fused_logits[real], hf[real], **TOL)
    assert (_n_hooks(bridge), _classes(bridge)) == before
    assert attention_mode(bridge) == "eager"


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_packed_rows_equal_each_row_alone(arch):
    """The prefix sweep's packed forward (ancestor masks, depth positions) under fused attention:
    each row's last-token logits equal the row alone through the plain HF model."""
    from interp.models.attention import attention
    from interp.models.packing import packed_logits, plan

    model = _hf(arch, "eager")
    bridge = _bridge(model)
    gen = torch.Generator().manual_seed(3)
    base = torch.randint(1, VOCAB, (30,), generator=gen).tolist()
    rows = [base[:20] + torch.randint(1, VOCAB, (n,), generator=gen).tolist() for n in (3, 7, 1)] + [base[:25], [5]]
    with torch.no_grad():
        ref = torch.stack([model(input_ids=torch.tensor([r], device=DEVICE)).logits[0, -1] for r in rows])
        out = torch.zeros_like(ref)
        with attention(bridge, "fused"):
            for pb in plan(rows, bridge, batch_tokens=48, pack_tokens=64).batches:
                out[pb.rows] = packed_logits(bridge, pb)
    torch.testing.assert_close(out, ref, **TOL)


def test_pattern_hook_refused_under_fused_and_served_under_auto():
    from interp.models.attention import AttentionError, attention

    bridge = _bridge(_hf("llama"))
    tokens = _tokens((2, 9), 0)
    before = _n_hooks(bridge), _classes(bridge)
    with torch.no_grad():
        _, eager = bridge.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
        with pytest.raises(AttentionError, match=r"blocks\.0\.attn\.hook_pattern.*--attention eager"):
            with attention(bridge, "fused"):
                bridge.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
        assert (_n_hooks(bridge), _classes(bridge)) == before  # nothing left behind, also on error
        with attention(bridge, "auto") as got:
            assert got == "auto"
            _, auto = bridge.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_pattern"))
    assert set(auto.keys()) == set(eager.keys()) and len(auto.keys()) == 2
    for name in eager.keys():
        torch.testing.assert_close(auto[name], eager[name])
    assert (_n_hooks(bridge), _classes(bridge)) == before


def test_unsupported_architecture_is_refused_by_name():
    """Gemma-2's tanh softcapping of the scores has no fused kernel: ``fused`` refuses naming it,
    ``auto`` stays eager (the logits unchanged)."""
    from interp.models.attention import AttentionError, attention, fused_support, set_attention

    bridge = _bridge(_hf("gemma2", "eager", attn_logit_softcapping=50.0))
    assert "softcapping (Gemma-2)" in (fused_support(bridge) or "")
    with pytest.raises(AttentionError, match="Gemma2ForCausalLM cannot run fused attention.*softcapping"):
        set_attention(bridge, "fused")
    assert _classes(bridge) == ["PositionEmbeddingsAttentionBridge"] * 2
    with attention(bridge, "auto") as got:
        assert got == "eager"
    with pytest.raises(AttentionError, match="--attention must be one of auto, eager, fused, got 'flash'"):
        set_attention(bridge, "flash")


@pytest.mark.parametrize("arch", ["llama", "gpt_neox", "gpt2"])
def test_interventions_act_the_same(arch):
    """Interventions at hook_z (a head zeroed) and hook_attn_out (scaled) change the output, and
    the same under fused attention as under eager; an intervention on the pattern is refused."""
    from interp.hooks import intervene, scale, zero
    from interp.models.attention import AttentionError, attention

    bridge = _bridge(_hf(arch))
    tokens = _tokens((2, 11), 1)
    edits = [zero("z:1.1"), scale("attn_out:0", 1.7)]
    with torch.no_grad():
        clean = bridge(tokens)
        with intervene(bridge, edits):
            eager = bridge(tokens)
        with attention(bridge, "fused"), intervene(bridge, edits) as active:
            fused = bridge(tokens)
        assert all(n > 0 for n in active.calls)
        with pytest.raises(AttentionError, match="hook_pattern"):
            with attention(bridge, "fused"), intervene(bridge, [zero("pattern:1.0")]):
                bridge(tokens)
    assert (eager - clean).abs().max() > 1e-2  # the edits do something
    torch.testing.assert_close(fused, eager, **TOL)
    assert _n_hooks(bridge) == 0


def test_gradients_equal_eager():
    """A training step's gradients (fine-tuning through the bridge) equal eager's."""
    from interp.models.attention import attention

    bridge = _bridge(_hf("qwen2"))
    tokens = _tokens((2, 13), 2)

    def grads():
        bridge.zero_grad()
        logits = bridge(tokens)
        torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()).backward()
        return {n: p.grad.clone() for n, p in bridge.named_parameters() if p.grad is not None}

    eager = grads()
    with attention(bridge, "fused"):
        fused = grads()
    assert eager.keys() == fused.keys() and len(eager) > 10
    for name in eager:
        torch.testing.assert_close(fused[name], eager[name], **TOL)


def test_placement_sets_the_attention_of_a_loaded_bridge(tmp_path, tiny_city, tiny_model_config):
    """``load_bridge`` applies :attr:`Placement.attention` (default ``eager``: the library's bridge
    unchanged); ``--attention`` is checked like every placement option, ``interp sweep`` defaults to
    ``auto``."""
    from conftest import save_gpt2_and_llama

    from interp.models import load_bridge
    from interp.models.attention import AttentionError, attention_mode
    from interp.models.device import Placement

    folder = save_gpt2_and_llama(tmp_path, tiny_city, tiny_model_config)["llama"]
    from interp.cli import build_parser

    assert attention_mode(load_bridge(folder)) == "eager"
    assert attention_mode(load_bridge(folder, placement=Placement.resolve("cpu", attention="auto"))) == "auto"
    eager = load_bridge(folder, placement=Placement.resolve("cpu", attention="eager"))
    fused = load_bridge(folder, placement=Placement.resolve("cpu", attention="fused"))
    assert attention_mode(eager) == "eager" and attention_mode(fused) == "fused"
    tokens = torch.randint(1, len(tiny_city.vocab), (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(fused(tokens), eager(tokens), **TOL)
    with pytest.raises(AttentionError, match="got 'sdpa'"):
        Placement.resolve("cpu", attention="sdpa")
    parser = build_parser()
    assert parser.parse_args(["sweep", "--model", "m"]).attention == "auto"
    assert parser.parse_args(["next-token", "--model", str(folder)]).attention == "eager"


SMOL = Path("/root/.cache/interp/models/smollm2-135m-instruct")


@pytest.mark.slow
@pytest.mark.skipif(not SMOL.is_dir(), reason="needs SmolLM2 (interp models get smollm2-135m-instruct)")
def test_smollm2_fused_equals_eager_packed_and_padded():
    """SmolLM2-135M (30 layers, 9 query heads on 3 key/value heads): logits and the residual
    stream equal eager's within 1e-5 relative, padded and packed."""
    from interp.models import load_bridge
    from interp.models.attention import attention
    from interp.models.device import Placement

    bridge = load_bridge(SMOL, placement=Placement.resolve(DEVICE, attention="eager"))
    for kind in ("padded", "packed"):
        tokens, kw = _inputs(kind)
        names = lambda n: n.endswith(("hook_resid_post", "attn.hook_z", "hook_attn_out"))  # noqa: E731
        with torch.no_grad():
            eager_logits, eager = bridge.run_with_cache(tokens, names_filter=names, **kw)
            with attention(bridge, "fused"):
                fused_logits, fused = bridge.run_with_cache(tokens, names_filter=names, **kw)
        real = kw["attention_mask"].bool() if kind == "padded" else torch.ones_like(tokens, dtype=torch.bool)
        torch.testing.assert_close(fused_logits[real], eager_logits[real], atol=1e-4, rtol=1e-5)
        for name in eager.keys():
            scale = eager[name][real].abs().max()
            assert (fused[name][real] - eager[name][real]).abs().max() <= 1e-5 * scale, name
    assert _n_hooks(bridge) == 0
