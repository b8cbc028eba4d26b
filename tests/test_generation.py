"""KV-cached greedy generation (interp.models.generate) against the full-recompute loop and against
a plain Hugging Face greedy loop with PyTorch hooks: identical token ids, with and without an
intervention, on GPT-2 and Llama, for right-padded batches of unequal length."""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import liven, save_gpt2_and_llama

from interp.hooks import intervene, zero
from interp.models.generate import greedy_generate, sliding_window

LENGTHS = (5, 11, 3, 8, 14)


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tiny_city):
    from interp.models import ModelConfig

    return save_gpt2_and_llama(
        tmp_path_factory.mktemp("gen"), tiny_city, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=32, seed=0)
    )


@pytest.fixture(scope="module")
def bridges(ckpts):
    from conftest import warm_bridges

    return warm_bridges(ckpts)


@pytest.fixture(scope="module")
def prompts(tiny_city):
    gen = torch.Generator().manual_seed(0)
    n = len(tiny_city.vocab)
    return [torch.randint(3, n, (k,), generator=gen).tolist() for k in LENGTHS]


def _hooks_left(bridge) -> int:
    return sum(len(h._forward_hooks) + len(h._forward_pre_hooks) for h in bridge.hook_dict.values())


def _hf_greedy(hf, prompts, n_new, zero_mlp: int | None = None) -> list[list[int]]:
    """The oracle: each prompt alone (no padding, no cache) through the raw HF model, greedy, with a
    PyTorch forward hook zeroing one block's MLP output when asked."""
    blocks = hf.transformer.h if hasattr(hf, "transformer") else hf.model.layers
    handle = None
    if zero_mlp is not None:
        handle = blocks[zero_mlp].mlp.register_forward_hook(lambda m, i, o: torch.zeros_like(o))
    try:
        out = []
        for p in prompts:
            ids = list(p)
            with torch.no_grad():
                for _ in range(n_new):
                    ids.append(int(hf(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
            out.append(ids[len(p) :])
        return out
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_cached_equals_full_loop_and_hf_oracle(arch, bridges, ckpts, prompts):
    from interp.models import load_hf_model

    bridge = bridges[arch]
    hf = load_hf_model(ckpts[arch], attn_implementation="eager").eval()
    n_new = 10
    results = {}
    for ablate in (False, True):
        ivs = [zero("mlp_out:1")] if ablate else []
        with intervene(bridge, ivs):
            cached = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=n_new, use_cache=True)
            full = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=n_new, use_cache=False)
        oracle = _hf_greedy(hf, prompts, n_new, zero_mlp=1 if ablate else None)
        assert cached == full == oracle, (arch, ablate)
        assert all(len(r) == n_new for r in cached)
        results[ablate] = cached
        assert _hooks_left(bridge) == 0
    # the intervention is not a silent no-op on the generated tokens
    assert results[True] != results[False]


def test_every_generated_token_goes_through_the_hooks(bridges, prompts):
    """A hook on the bridge runs in the prompt forward and in every cached step (one new position
    per row each time); stopping rows early (EOS) gives the same tokens in both paths."""
    bridge = bridges["gpt2"]
    seen: list[tuple[int, ...]] = []

    def spy(x, hook):
        seen.append(tuple(x.shape[:2]))

    full_first = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=6, use_cache=False)
    eos = {full_first[0][2]}  # a token the first row emits: rows stop at different steps
    with bridge.hooks(fwd_hooks=[("blocks.0.hook_mlp_out", spy)]):
        cached = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=6, eos_ids=eos, use_cache=True)
    full = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=6, eos_ids=eos, use_cache=False)
    assert cached == full
    assert len({len(r) for r in cached}) > 1 and not any(t in eos for r in cached for t in r)
    assert seen[0] == (len(prompts), max(LENGTHS))
    assert set(seen[1:]) == {(len(prompts), 1)} and len(seen) == max(map(len, cached)) + (
        0 if max(map(len, cached)) == 6 else 1
    )
    assert _hooks_left(bridge) == 0


def test_stop_callback_and_batches(bridges, prompts):
    bridge = bridges["llama"]

    def stop(new):
        return len(new) >= 2 and new[-1] == new[-2]

    a = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=8, stop=stop, use_cache=True)
    b = [greedy_generate(bridge, [p], pad_id=0, max_new_tokens=8, stop=stop, use_cache=False)[0] for p in prompts]
    assert a == b


def test_plain_hf_model_needs_the_full_loop(ckpts, prompts):
    from interp.models import load_hf_model

    hf = load_hf_model(ckpts["gpt2"]).eval()
    with pytest.raises(ValueError, match="needs a TransformerBridge"):
        greedy_generate(hf, prompts, pad_id=0, max_new_tokens=2, use_cache=True)
    assert greedy_generate(hf, prompts, pad_id=0, max_new_tokens=3) == _hf_greedy(hf, prompts, 3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(hf, prompts, pad_id=0, max_new_tokens=0)


def test_sliding_window_model_falls_back_to_the_exact_loop(tmp_path, prompts, tiny_city):
    """A Mistral with a 4-token window: the cached path cannot apply it, so the default runs the
    full loop (with a warning) and use_cache=True is an error naming the window."""
    from transformers import MistralConfig, MistralForCausalLM

    from interp.models import load_bridge
    from interp.models.checkpoint import save_checkpoint

    torch.manual_seed(0)
    model = liven(
        MistralForCausalLM(
            MistralConfig(
                vocab_size=len(tiny_city.vocab),
                hidden_size=32,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                max_position_embeddings=32,
                sliding_window=4,
                pad_token_id=0,
                bos_token_id=1,
                eos_token_id=1,
            )
        ),
        2,
    )
    bridge = load_bridge(save_checkpoint(model, tiny_city, tmp_path / "mistral"))
    assert sliding_window(bridge) == 4
    with pytest.raises(ValueError, match="sliding window of 4"):
        greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=4, use_cache=True)
    with pytest.warns(UserWarning, match="without the cache"):
        auto = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=4)
    assert auto == greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=4, use_cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # short enough for the window: cached, no warning
        short = greedy_generate(bridge, [[5], [6, 7]], pad_id=0, max_new_tokens=2)
    assert short == greedy_generate(bridge, [[5], [6, 7]], pad_id=0, max_new_tokens=2, use_cache=False)


def _bpe_gpt2(folder, texts, seed: int, newline_gain: float = 1.0):
    """A byte-level BPE trained here on ``texts`` and a lively 2-layer GPT-2 over it; the newline
    token's (tied) embedding row is scaled by ``newline_gain`` so that some rows end a line."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=core.get_vocab_size(),
            n_positions=256,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    liven(model, seed)
    with torch.no_grad():
        model.lm_head.weight[tok("\n")["input_ids"][0]] *= newline_gain
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_generate_responses_cached_equals_full_on_text(tmp_path):
    """The PragWorld entry point on a byte-level BPE: decoded text, newline stopping and EOS, both
    paths alike, under an intervention."""
    from interp.datasets.pragworld.prompts import benchmark_prompt
    from interp.metrics.pragworld_eval import generate_responses
    from interp.models import load_bridge

    ctx = "A: did you take the dog to the garden\nB: yes I did\nA: and the cat\nB: no"
    prompts = [
        benchmark_prompt(ctx, "did B take the dog?"),
        benchmark_prompt(ctx[:30], "is the cat here?"),
        "A: yes\nB:",
    ]
    bridge = load_bridge(_bpe_gpt2(tmp_path, prompts * 3 + ["(yes)\n(no)\n"], 4, newline_gain=4.0))
    out = {}
    with intervene(bridge, [zero("mlp_out:0")]):
        for stop in (True, False):
            a = generate_responses(bridge, prompts, max_new_tokens=8, batch_size=3, stop_at_newline=stop)
            b = generate_responses(
                bridge, prompts, max_new_tokens=8, batch_size=3, stop_at_newline=stop, use_cache=False
            )
            assert a == b and all(a)
            out[stop] = a
    # newline stopping is exercised: a row ends its first line early, the same row runs on without it
    assert out[True] != out[False] and any(r.endswith("\n") and len(r) < len(f) for r, f in zip(*out.values()))
    assert _hooks_left(bridge) == 0


ARCHS = {  # tiny configs of the other architectures a user brings (all through the same bridge path)
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict()),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(num_key_value_heads=2, head_dim=8)),
}


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_cached_equals_full_loop_on_other_architectures(arch, tmp_path, tiny_city, prompts):
    import transformers

    from interp.models import load_bridge
    from interp.models.checkpoint import save_checkpoint

    config_cls, model_cls, extra = ARCHS[arch]
    config = getattr(transformers, config_cls)(
        vocab_size=len(tiny_city.vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
        **extra,
    )
    torch.manual_seed(0)
    model = liven(getattr(transformers, model_cls)(config), 7)
    bridge = load_bridge(save_checkpoint(model, tiny_city, tmp_path / arch))
    runs = []
    for ivs in ([], [zero("mlp_out:1")]):
        with intervene(bridge, ivs):
            cached = greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=6, use_cache=True)
            assert cached == greedy_generate(bridge, prompts, pad_id=0, max_new_tokens=6, use_cache=False), arch
        runs.append(cached)
    assert runs[0] != runs[1]  # the intervention reaches the generated tokens
    assert _hooks_left(bridge) == 0
