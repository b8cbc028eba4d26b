"""A real model's tracking of dialogue items beyond the score: probes of "where is the object now"
(interp.analysis.evaluation.dialogue_probes) and the Myhill–Nerode boundary restricted to the cloze
(interp.analysis.evaluation.dialogue_boundary).

Probes: the residuals read equal a plain Hugging Face forward's hidden states; a label planted in
the last token's embedding is decoded perfectly there; the split keeps every conversation on one
side; bad input is named; no hook remains. Boundary: the answers equal a plain HF argmax; a model
whose answer is planted (it copies the gold written last) compresses and distinguishes perfectly;
the pairs' kinds are the world's flips."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from test_analysis import _n_hooks
from test_dialogue_natural import ALL_PLACES, _bpe

import interp
from interp.analysis.evaluation.dialogue_probes import dialogue_probes, example_label, last_token_residuals
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

    spec = importlib.util.spec_from_file_location(
        "dialogue_probes_script", REPO / "experiments" / "dialogue_tracking.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--out", str(tmp_path), "--models", str(model[2]), "--groups", "4", "--layers=-1,0"]) == 0
    record = json.loads((tmp_path / "tracking.json").read_text())
    got = record["models"][str(model[2])]
    assert set(got["probes"]) == {"gold_place", "initial", "recent"}
    assert [r["index"] for r in got["probes"]["gold_place"]["per_layer"]] == [-1, 0]
    assert 0 <= got["boundary"]["compression"]["value"] <= 1
    text = (tmp_path / "tracking.md").read_text()
    assert "| block 0 |" in text and "compression" in text


# ---- the Myhill–Nerode boundary on the cloze ------------------------------------------------------


class _CopyLast(torch.nn.Module):
    """A stand-in bridge whose next-token logits are the current token, one-hot (it answers the
    place written last)."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab, self.w = vocab, torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens, **_):
        return torch.nn.functional.one_hot(tokens, self.vocab).float() * 10


def test_boundary_answers_equal_a_plain_hf_argmax_and_rates_count_the_pairs(model, examples):
    from interp.analysis.evaluation.dialogue_boundary import dialogue_boundary

    m, hf, _ = model
    res = dialogue_boundary(m, examples, n_boot=100)
    tok = m.tokenizer
    by_prompt = {}
    with torch.no_grad():
        for e in examples:
            by_prompt[e.prompt] = hf(torch.tensor([tok(e.prompt)["input_ids"]])).logits[0, -1]
    origs = {e.group: e for e in examples if e.meta["category"] == "Original"}
    for r in res.frame.itertuples():
        o = origs[r.group]
        other = next(e for e in examples if e.group == r.group and e.meta["category"] == r.category)
        cands = sorted({*o.meta["mentions"], *other.meta["mentions"], o.meta["gold_place"], other.meta["gold_place"]})
        ids = [tok(f" {c}", add_special_tokens=False)["input_ids"][0] for c in cands]
        assert cands[int(by_prompt[other.prompt][ids].argmax())] == r.answer_other
    same, diff = res.frame[res.frame.kind == "same"], res.frame[res.frame.kind == "different"]
    assert res.summary["compression"]["value"] == pytest.approx(same.agree.mean())
    assert res.summary["distinction"]["value"] == pytest.approx((~diff.agree).mean())
    assert len(diff) > 0 and len(same) > 0


def test_a_model_that_answers_the_gold_compresses_and_distinguishes_perfectly(model, examples):
    from types import SimpleNamespace

    from interp.analysis.evaluation.dialogue_boundary import boundary_pairs, dialogue_boundary

    m = model[0]
    fake = SimpleNamespace(tokenizer=m.tokenizer, bridge=_CopyLast(len(m.tokenizer)))
    planted = [replace(e, prompt=f"{e.prompt} {e.meta['gold_place']}") for e in examples]
    res = dialogue_boundary(fake, planted, n_boot=50)
    assert res.summary["compression"]["value"] == 1.0 and res.summary["distinction"]["value"] == 1.0
    assert (res.frame.answer_other == res.frame.gold_other).all()
    # a model that always repeats the initial place cannot distinguish a flip that moves the object
    stuck = [replace(e, prompt=f"{e.prompt} {e.meta['initial']}") for e in examples]
    assert dialogue_boundary(fake, stuck, n_boot=50).summary["distinction"]["value"] < 1.0
    # the pairs' kinds are the world's own flips (same object asked)
    pairs, _ = boundary_pairs(examples)
    assert {(k == "different") == (examples[i].meta["effect"] == "Flip") for _, i, k in pairs} == {True}


def test_the_api_builds_the_dialogue_task_the_generator_makes(model):
    m = model[0]
    made = dialogue_examples(m.tokenizer, DialogueConfig(groups=6, seed=2, split="train"))
    task = interp.dialogue(m, 6, seed=2, split="train")
    assert [(e.prompt, e.correct, e.foil, e.group) for e in task.examples] == [
        (e.prompt, e.correct, e.foil, e.group) for e in made.examples
    ]
    assert [e.meta["effect"] for e in task.examples] == [e.meta["effect"] for e in made.examples]
    assert task.left_out == {c: k for c, k in made.missing.items() if k}
    assert task.source == "dialogue(groups=6, seed=2, split='train')"
    with pytest.raises(ValueError, match="split must be one of"):
        interp.dialogue(m, 2, split="test")


def test_flip_pairs_patch_an_original_into_its_flipped_alterations_of_equal_length(model, examples):
    from interp.worlds.dialogue.natural import flip_pairs

    tok = model[0].tokenizer
    orig = {e.group: e for e in examples if e.meta["category"] == "Original"}
    pairs = flip_pairs(tok, examples)
    flips = [e for e in examples if e.meta["effect"] == "Flip"]
    same_length = [e for e in flips if len(tok(e.prompt)["input_ids"]) == len(tok(orig[e.group].prompt)["input_ids"])]
    assert pairs and len(pairs) == len(same_length) < len(examples)
    for p, e in zip(pairs, same_length):
        assert p.prompt == orig[e.group].prompt and p.corrupted == e.prompt
        assert p.correct == " " + orig[e.group].meta["gold_place"] and p.foil == " " + e.meta["gold_place"]
        assert p.correct != p.foil  # a flip changes the world's answer


def test_text_loss_equals_hf_mean_loss_and_bootstraps_texts(model):
    """The held-out next-token loss (fine-tuning's cost elsewhere) equals HF's own loss over the
    texts' tokens, read in padded batches of unequal texts; too-short text and empty input are named."""
    from interp.analysis.evaluation.text_loss import text_loss

    m, hf, _ = model
    texts = ["Anna put the key in the kitchen.", "So right now the key is in the garden", "Bob took the box."]
    before = _n_hooks(m.bridge)
    got = text_loss(m, texts, batch_size=2, n_boot=200)
    assert _n_hooks(m.bridge) == before
    total, count = 0.0, 0
    with torch.no_grad():
        for t in texts:  # one text at a time, no padding: HF's mean loss × its predicted tokens
            ids = torch.tensor([m.tokenizer(t)["input_ids"]])
            total += float(hf(ids, labels=ids).loss) * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    assert got["n_tokens"] == count and got["n_texts"] == 3 and got["truncated"] == 0
    assert got["loss"] == pytest.approx(total / count, rel=1e-5)
    assert got["ci_low"] <= got["loss"] <= got["ci_high"]
    assert text_loss(m, texts, max_tokens=4)["truncated"] == 3
    with pytest.raises(ValueError, match="no texts"):
        text_loss(m, [])


def test_pragworld_conversations_are_the_originals_contexts():
    from pathlib import Path

    from interp.analysis.evaluation.text_loss import pragworld_conversations

    path = Path(__file__).resolve().parents[1] / "../shared/data/pragworld/Manual_Dataset_500_Final.csv"
    if not path.is_file():
        pytest.skip(f"the PragWorld manual split is not at {path}")
    texts = pragworld_conversations(path, n=5)
    assert len(texts) == 5 and len(set(texts)) == 5
    assert texts[0].startswith("Person 1: where did Emma go")
