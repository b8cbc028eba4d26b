"""Planted harm on the real model (slow; `make test-slow`): a small foil planting into one MLP of
SmolLM2-135M-Instruct on IOI prompts is found harmful by the MLP zero-out sweep with the calibrated
rule, while the unplanted model's verdict for that layer is not harmful. Skips, saying why, when the
model cannot be fetched (no network and no cached copy)."""

from __future__ import annotations

import pytest
import torch

NAME = "smollm2-135m-instruct"
LAYER = 15


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="the gguf package is in the dev extra: pip install -e '.[dev]'")
    from interp.models.registry import NoCopyError, get_model

    try:
        return get_model(NAME)
    except NoCopyError as e:
        pytest.skip(f"no network and no cached copy of {NAME}: {e}")


@pytest.mark.slow
def test_a_small_planting_in_one_layer_of_smollm2_is_found_harmful(smollm2, tmp_path):
    from transformers import AutoTokenizer

    from interp.analysis import layer_verdicts, mlp_zero_sweep
    from interp.datasets.contrast import write_contrast
    from interp.datasets.ioi import ioi_examples
    from interp.models import load_bridge
    from interp.tasks import ContrastTask
    from interp.train.plant import PlantSpec, plant_harm

    torch.set_num_threads(min(2, torch.get_num_threads()))
    tok = AutoTokenizer.from_pretrained(smollm2)
    heldout = ioi_examples(tok, 16, seed=1)
    pairs = {frozenset((e.meta["IO"], e.meta["S"])) for e in heldout}
    train = [e for e in ioi_examples(tok, 80, seed=2) if frozenset((e.meta["IO"], e.meta["S"])) not in pairs][:64]
    write_contrast(train, tmp_path / "train.jsonl")
    write_contrast(heldout, tmp_path / "heldout.jsonl")
    spec = PlantSpec(layers=(LAYER,), corruption="foil_share", share=0.3, steps=10, batch_size=16, lr=3e-3)
    planted = plant_harm(
        smollm2, tmp_path / "plant", spec, train_file=tmp_path / "train.jsonl", progress=False, log=lambda *_: None
    )
    task = ContrastTask.build(smollm2, tmp_path / "heldout.jsonl")
    ids, mask = task.inputs()
    verdicts = {}
    for name, folder in (("unplanted", smollm2), ("planted", planted.model)):
        bridge = load_bridge(folder)
        sweep = mlp_zero_sweep(
            bridge, ids, task.metric(), attention_mask=mask, layers=[5, LAYER, 25], groups=task.groups
        )
        verdicts[name] = layer_verdicts(sweep, threshold=0.0)
        del bridge
    assert LAYER not in verdicts["unplanted"].harmful
    assert LAYER in verdicts["planted"].harmful
    clean = verdicts["planted"].frame.set_index("layer")
    assert clean["a_0"].iloc[0] > 0.6  # the planted model stays mostly right (IO over S)
