"""IOI on the real model SmolLM2-135M-Instruct against peers that share no code with interp's
analysis: TransformerLens's own ``transformer_lens.patching`` functions (the layer × position and
layer × head maps, within 1e-5, float32) and plain PyTorch forward hooks on the raw Hugging Face
model (the MLP zero-out sweep's logit difference IO − S, on prompts of two templates, so padded).
Few prompts and layers, to stay cheap; skipped, saying why, when the model cannot be fetched."""

from __future__ import annotations

import numpy as np
import pytest
import torch

NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="the gguf package is in the dev extra: pip install -e '.[dev]'")
    from interp.models import load_bridge
    from interp.models.registry import NoCopyError, get_model
    from interp.tasks import own_tokenizer

    try:
        folder = get_model(NAME)
    except NoCopyError as e:
        pytest.skip(f"no network and no cached copy of {NAME}: {e}")
    return folder, load_bridge(folder), own_tokenizer(folder)


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points)


def test_maps_equal_transformer_lens_patching(smollm2):
    from interp.analysis.engines.stacked_patching import stacked_patching, transformer_lens_check
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.tasks.contrast import ContrastTask

    _, bridge, tok = smollm2
    task = ContrastTask.build(bridge, ioi_examples(tok, 2, seed=5, templates=[IOI_TEMPLATES[0]]), tokenizer=tok)
    clean, corrupted = torch.tensor(task.ids), torch.tensor(task.corrupted_ids)
    before = _n_hooks(bridge)
    for comp, layers in (("heads", [0, 23, 29]), ("resid_pre", [0, 29])):
        ours = stacked_patching(bridge, clean, corrupted, task.metric(), comp, layers=layers)
        chk = transformer_lens_check(bridge, clean, corrupted, task.metric(), ours)
        assert chk["n_cells"] == len(layers) * (9 if comp == "heads" else clean.shape[1])
        assert chk["max_abs_diff"] <= 1e-5 and chk["max_abs_diff_baseline"] <= 1e-5, chk
        assert ours.meta["clean_mean"] > 2 and ours.meta["clean_mean"] - ours.meta["corrupted_mean"] > 2
        assert ours.frame["effect"].abs().max() > 0.1  # patching real heads / positions moves the logit difference
    assert _n_hooks(bridge) == before


def test_mlp_sweep_on_ioi_equals_forward_hooks_on_the_raw_model(smollm2):
    """The sweep (padded batch of two templates, resumed forwards) against one plain HF forward per
    prompt with ``model.model.layers[ℓ].mlp``'s output zeroed by a PyTorch forward hook."""
    from transformers import AutoModelForCausalLM

    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.tasks.contrast import ContrastTask

    folder, bridge, tok = smollm2
    examples = ioi_examples(tok, 4, seed=7, templates=[IOI_TEMPLATES[0], IOI_TEMPLATES[2]])
    task = ContrastTask.build(bridge, examples, tokenizer=tok)
    assert len({len(s) for s in task.ids}) == 2  # two lengths: the sweep pads
    ids, mask = task.inputs()
    layers = [0, 15, 29]
    sweep = mlp_zero_sweep(bridge, ids, task.metric(), mask, layers=layers, groups=task.groups)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for i, e in enumerate(examples):
        x = torch.tensor([tok(e.prompt, add_special_tokens=False)["input_ids"]])
        io, s = (tok(w, add_special_tokens=False)["input_ids"] for w in (e.correct, e.foil))
        assert len(io) == len(s) == 1
        for layer in (None, *layers):
            handle = (
                model.model.layers[layer].mlp.register_forward_hook(lambda m, a, o: o * 0)
                if layer is not None
                else None
            )
            try:
                with torch.no_grad():
                    last = model(x).logits[0, -1]
            finally:
                if handle is not None:
                    handle.remove()
            want = float(last[io[0]] - last[s[0]])
            row = sweep.frame[(sweep.frame.example == i) & (sweep.frame.layer == (layer if layer is not None else 0))]
            got = float(row["clean" if layer is None else "ablated"].iloc[0])
            assert got == pytest.approx(want, abs=1e-4), (i, layer)
    assert not model.model.layers[0].mlp._forward_hooks
    assert np.all(sweep.frame["clean"] > 0)  # the model gets these right
    assert (sweep.frame["effect"].abs() > 0.05).any()
