"""One answer to "where is layer ℓ's MLP": ``Site(ℓ, "mlp_out")`` names the bridge hook the sweeps
use and the HF module the regularisers hook; the module's output is the hook's activation.

Oracle: TransformerLens's own ``run_with_cache`` of ``blocks.ℓ.hook_mlp_out`` on the bridge, against
a plain PyTorch forward hook on the module :meth:`Site.module` returns, on the raw HF model and on
the bridge, for the eight architectures of ``tests/test_architectures.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_architectures import ARCHS, N_LAYERS, _config

from interp.hooks import HookNames, Site, SiteError

#: the attribute path of layer 1's mlp_out module in each raw HF model, written out by hand
PATHS = {
    "gpt2": "transformer.h.1.mlp",
    "gpt_neox": "gpt_neox.layers.1.mlp",
    "gemma2": "model.layers.1.post_feedforward_layernorm",
    "olmo2": "model.layers.1.post_feedforward_layernorm",
}


def _tiny(arch: str, folder):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        _config(arch, 64, SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=3))
    ).eval()
    with torch.no_grad():  # weights large enough that the MLP outputs differ by layer and input
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    _tokenizer().save_pretrained(folder)  # the bridge boots a model's tokenizer with it
    return model


def _tokenizer():
    """A 64-word word-level tokenizer (ids 1, 2, 3: BOS, EOS, padding)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3, **{f"w{i}": i for i in range(4, 64)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def _hooked(model, module, ids):
    outs = []
    handle = module.register_forward_hook(lambda m, a, o: outs.append(o[0] if isinstance(o, tuple) else o))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        handle.remove()
    (out,) = outs
    return out


def _n_hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("arch", ARCHS)
def test_site_module_output_is_the_bridge_hook_mlp_out(arch, tmp_path):
    from interp.models import load_bridge

    hf = _tiny(arch, tmp_path)
    bridge = load_bridge(tmp_path)
    ids = torch.tensor([[5, 9, 4, 17, 33, 8], [1, 40, 22, 6, 6, 50]])
    bridge(ids)
    n_hooks = _n_hooks(bridge)  # the bridge keeps hooks of its own (some registered on its first forward)
    names = [Site(layer, "mlp_out").hook_name for layer in range(N_LAYERS)]
    _, cache = bridge.run_with_cache(ids, names_filter=lambda n: n in names or n.endswith("mlp.hook_out"))
    for layer in range(N_LAYERS):
        site = Site(layer, "mlp_out")
        want = cache[site.hook_name] if site.hook_name in cache else cache[f"blocks.{layer}.mlp.hook_out"]
        assert (
            site.module_path(hf)
            == site.module_path(bridge)
            == PATHS.get(arch, "model.layers.1.mlp").replace(".1.", f".{layer}.")
        )
        torch.testing.assert_close(_hooked(hf, site.module(hf), ids), want, atol=1e-5, rtol=1e-4)
        # on the bridge: the bridge component that owns the hook (named by TL's alias → canonical
        # name), hooked during the bridge's own forward
        module = site.module(bridge)
        owner = HookNames(bridge).canonical(site.hook_name).removesuffix(".hook_out")
        assert module is bridge.get_submodule(owner)
        assert type(module.original_component) is type(site.module(hf))
        torch.testing.assert_close(_hooked(bridge, module, ids), want, atol=1e-5, rtol=1e-4)
    assert Site(0, "mlp_out").module(hf) is not Site(1, "mlp_out").module(hf)
    assert not any(m._forward_hooks for m in hf.modules())
    assert _n_hooks(bridge) == n_hooks


def test_site_module_refuses_what_has_no_module(tmp_path):
    hf = _tiny("gpt2", tmp_path)
    with pytest.raises(SiteError, match="only mlp_out"):
        Site(0, "attn_out").module(hf)
    with pytest.raises(SiteError, match=f"layer {N_LAYERS} is out of range; this model has {N_LAYERS}"):
        Site(N_LAYERS, "mlp_out").module(hf)
    with pytest.raises(SiteError, match="cannot find the decoder blocks of a Linear"):
        Site(0, "mlp_out").module(torch.nn.Linear(2, 2))
