"""Probes of "where is the object now" on dialogue items (interp.analysis.dialogue_probes): the
residuals read equal a plain Hugging Face forward's hidden states; a label planted in the last
token's embedding is decoded perfectly there; the split keeps every conversation on one side; bad
input is named; no hook remains."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from test_analysis import _n_hooks
from test_dialogue_natural import ALL_PLACES, _bpe

import interp
from interp.analysis.dialogue_probes import dialogue_probes, example_label, last_token_residuals
from interp.worlds.dialogue import render
from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from test_architectures import _config, _scale
    from transformers import AutoModelForCausalLM

    words = list(ALL_PLACES) + list(render.WORDS["train"].objects) + list(render.WORDS["train"].people)
    tok = _bpe(words, "tiny-dialogue-bpe")
    root = tmp_path_factory.mktemp("probe_model") / "tiny-llama"
    torch.manual_seed(0)
    hf = _scale(AutoModelForCausalLM.from_config(_config("llama", len(tok), tok)), 3).eval()
    hf.save_pretrained(root)
    tok.save_pretrained(root)
    return interp.load_model(root), hf, root


@pytest.fixture(scope="module")
def examples(model):
    return list(dialogue_examples(model[0].tokenizer, DialogueConfig(groups=12, seed=0)).examples)


def test_residuals_equal_a_plain_hf_forward(model, examples):
    m, hf, _ = model
    n = int(m.bridge.cfg.n_layers)
    ids = [m.tokenizer(e.prompt)["input_ids"] for e in examples[:5]]
    before = _n_hooks(m.bridge)
    got = last_token_residuals(m, ids, [-1, 0, n], pad_id=0, batch_size=2)  # padded batches of unequal rows
    assert _n_hooks(m.bridge) == before
    with torch.no_grad():
        for i, row in enumerate(ids):  # one prompt at a time, no padding
            hs = hf(torch.tensor([row]), output_hidden_states=True).hidden_states
            # hidden_states[0]: the embeddings; [1]: after block 0; [-1]: after the final norm
            for li, want in enumerate((hs[0], hs[1], hs[-1])):
                torch.testing.assert_close(got[li, i], want[0, -1].float(), atol=2e-5, rtol=1e-4)


def test_a_label_planted_in_the_last_token_is_decoded_at_the_embeddings(model, examples):
    m = model[0]
    # the prompt now ends with the gold place itself: the embedding at the last token *is* the label
    planted = [replace(e, prompt=f"{e.prompt} {e.meta['gold_place']}") for e in examples]
    res = dialogue_probes(m, planted, labels=["gold_place"], layers=[-1], seed=0)["gold_place"]
    row = res.layers.iloc[0]
    seen = row["n_test"] - row["unseen"]
    assert seen > 0
    assert row["accuracy"] == pytest.approx(seen / row["n_test"])  # every test row whose place was trained on
    # the unplanted prompts all end in the same token: the embedding carries nothing of the place
    plain = dialogue_probes(m, examples, labels=["gold_place"], layers=[-1], seed=0)["gold_place"]
    assert plain.layers.iloc[0]["accuracy"] <= plain.layers.iloc[0]["baseline"] + 1e-9


def test_split_by_group_and_labels(model, examples):
    m = model[0]
    res = dialogue_probes(m, examples, layers=[0], test_share=0.25, seed=3)
    assert set(res) == {"gold_place", "initial", "recent"}
    r = res["initial"]
    assert (r.settings["train_groups"], r.settings["test_groups"]) == (9, 3)
    assert r.train_sequences == 9 and r.test_sequences == 3  # groups are the clustered units
    e = examples[0]
    assert example_label(e, "recent") == e.meta["mentions"][-1]
    assert example_label(e, "initial") == e.meta["initial"]


def test_bad_input_is_named(model, examples):
    m = model[0]
    with pytest.raises(ValueError, match="unknown probe label 'where'"):
        dialogue_probes(m, examples, labels=["where"])
    with pytest.raises(ValueError, match="test_share must be in"):
        dialogue_probes(m, examples, test_share=1.0)
    with pytest.raises(ValueError, match="out of range"):
        dialogue_probes(m, examples, layers=[99])
    with pytest.raises(ValueError, match="at least 2 groups"):
        dialogue_probes(m, [e for e in examples if e.group == examples[0].group])


def test_the_experiment_script_writes_its_tables(model, tmp_path):
    import importlib.util

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("dialogue_probes_script", REPO / "experiments" / "dialogue_probes.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--out", str(tmp_path), "--models", str(model[2]), "--groups", "4", "--layers=-1,0"]) == 0
    record = json.loads((tmp_path / "probes.json").read_text())
    got = record["models"][str(model[2])]
    assert set(got) == {"gold_place", "initial", "recent"}
    assert [r["index"] for r in got["gold_place"]["per_layer"]] == [-1, 0]
    assert "| block 0 |" in (tmp_path / "probes.md").read_text()
