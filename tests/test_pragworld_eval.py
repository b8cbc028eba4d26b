"""PragWorld model evaluation on tiny local checkpoints (no downloads): the yes/no scoring core,
token-id resolution (word-level and a locally trained byte-level BPE), batching with padding,
greedy generation, chat templates, and resumable output."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import liven

from interp.cli import main
from interp.datasets.pragworld import (
    benchmark_prompt,
    label_prompt,
    load_pragworld,
    write_pragworld_csv,
)
from interp.metrics import pragworld_eval as ev

CTX1 = "A: did you put the apples in the box\nB: I did\nA: and the pears\nB: they are in the basket"
CTX2 = "A: where is Bob\nB: he went to the garden\nA: did he take the dog\nB: no he did not"


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    rows = pd.DataFrame(
        [
            dict(
                context=CTX1,
                question="are the apples in the box?",
                gold=1,
                altered=False,
                target="none",
                category=None,
                effect=None,
            ),
            dict(
                context=CTX1.replace("I did", "I did not"),
                question="are the apples in the box?",
                gold=0,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            ),
            dict(
                context=CTX1,
                question="are the pears in the box?",
                gold=0,
                altered=True,
                target="question",
                category="variable_substitution",
                effect="flip",
            ),
            dict(
                context=CTX2,
                question="did Bob take the dog?",
                gold=0,
                altered=False,
                target="none",
                category=None,
                effect=None,
            ),
            dict(
                context=CTX2.replace("garden", "kitchen"),
                question="did Bob take the dog?",
                gold=0,
                altered=True,
                target="context",
                category="variable_substitution",
                effect="invariant",
            ),
        ]
    )
    return write_pragworld_csv(rows, tmp_path_factory.mktemp("pw") / "tiny.csv")


@pytest.fixture(scope="module")
def data(data_csv):
    return load_pragworld(data_csv)


def _words(data) -> list[str]:
    words = {"yes", "no", "(yes)", "(no)", "<user>", "<assistant>"}
    for c, q in zip(data.rows["context"], data.rows["question"]):
        words |= set(benchmark_prompt(c, q).split()) | set(label_prompt(c, q).split())
    return sorted(words)


@pytest.fixture(scope="module")
def word_ckpt(data, tmp_path_factory):
    """A lively 2-layer GPT-2 over the prompts' words with interp's word-level tokenizer."""
    from interp.models import ModelConfig, build_gpt2
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    vocab = Vocab.for_tokens(_words(data))
    folder = tmp_path_factory.mktemp("word_ckpt")
    liven(build_gpt2(vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=160, seed=0)), 0).save_pretrained(folder)
    _word_level_tokenizer(vocab).save_pretrained(folder)
    return folder, vocab


@pytest.fixture(scope="module")
def word_bridge(word_ckpt):
    from interp.models import load_bridge

    return load_bridge(word_ckpt[0])


@pytest.fixture(scope="module")
def bpe_ckpt(data, tmp_path_factory):
    """A byte-level BPE tokenizer trained here on the prompts (GPT-2 style: ' yes' → 'Ġyes') and a
    tiny GPT-2 over it, saved as a plain Hugging Face folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    texts = [label_prompt(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts * 3 + [" yes no"] * 50,
        trainers.BpeTrainer(
            vocab_size=420, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = liven(
        GPT2LMHeadModel(
            GPT2Config(
                vocab_size=len(tok), n_positions=512, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
            )
        ),
        1,
    ).eval()
    folder = tmp_path_factory.mktemp("bpe_ckpt")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok


# ---- the pure scoring core ----------------------------------------------------------------------


def test_margin_and_p_yes_read_the_last_real_position():
    logits = torch.zeros(2, 3, 5)
    logits[0, 2, 1], logits[0, 2, 2] = 2.0, 0.5  # row 0: length 3 → position 2
    logits[1, 1, 1], logits[1, 1, 2] = -1.0, 1.0  # row 1: length 2 → position 1 (position 2 is padding)
    logits[1, 2, 1] = 100.0  # padding must be ignored
    lengths = torch.tensor([3, 2])
    m = ev.yes_no_margin(logits, lengths, yes_id=1, no_id=2)
    assert torch.allclose(m, torch.tensor([1.5, -2.0]))
    p = ev.p_yes_from_logits(logits, lengths, 1, 2)
    assert torch.allclose(p, torch.softmax(torch.tensor([[2.0, 0.5], [-1.0, 1.0]]), dim=-1)[:, 0])
    # left padding: the last position is the last real token
    assert torch.allclose(ev.yes_no_margin(logits, lengths, 1, 2, padding_side="left"), torch.tensor([1.5, 100.0]))
    with pytest.raises(ValueError, match="lengths must be in"):
        ev.yes_no_margin(logits, torch.tensor([4, 1]), 1, 2)


def test_yes_no_ids_word_level_and_missing(word_bridge, word_ckpt):
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    vocab = word_ckpt[1]
    # WhitespaceSplit drops the space: ' yes' is the word 'yes'
    assert ev.yes_no_token_ids(word_bridge.tokenizer) == (vocab.id("yes"), vocab.id("no"))
    no_yes = _word_level_tokenizer(Vocab.for_tokens(["no", "maybe"]))
    with pytest.raises(ValueError, match="no single token for 'yes'"):
        ev.yes_no_token_ids(no_yes)  # 'yes' would be <unk>


def test_label_scores_batched_equal_one_at_a_time(word_bridge, data):
    """Scored on the model's own tokenizer's ids: interp's word-level tokenizer adds no BOS, while the
    bridge's tokenizer (booted with add_bos_token=True) would prepend one."""
    from interp.tasks import own_tokenizer

    prompts = [label_prompt(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    tok = own_tokenizer(word_bridge)
    bos = tok.bos_token_id
    assert word_bridge.tokenizer(prompts[0])["input_ids"][0] == bos  # the TransformerLens 4.3 trap
    assert tok(prompts[0])["input_ids"][0] != bos
    yes_id, no_id = ev.yes_no_token_ids(tok)
    batched = ev.score_label_prompts(word_bridge, prompts, batch_size=3)
    lengths = {len(tok(p)["input_ids"]) for p in prompts}
    assert len(lengths) > 1  # the batches really are padded
    for p, got in zip(prompts, batched):
        with torch.no_grad():
            last = word_bridge(torch.tensor([tok(p)["input_ids"]]), return_type="logits")[0, -1]
        assert got == pytest.approx(torch.softmax(last[[yes_id, no_id]], dim=-1)[0].item(), abs=1e-5)
    assert ((batched > 0) & (batched < 1)).all()


def test_label_scores_shared_prefix_equal_unshared_in_input_order(word_bridge, data):
    """Packed (each distinct prefix once) and length-bucketed unshared reading agree row for row, in
    the input order; the shared reading reads fewer tokens, and falls back while a hook is on."""
    from interp.hooks import Site

    prompts = [label_prompt(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    prompts = prompts[::-1] + prompts[:2]  # not sorted by length; a duplicate row or two
    shared, alone = {}, {}
    a = ev.score_label_prompts(word_bridge, prompts, batch_size=3, stats=shared)
    b = ev.score_label_prompts(word_bridge, prompts, batch_size=3, share_prefix=False, stats=alone)
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
    assert shared["unique_tokens"] < alone["unique_tokens"] == alone["row_tokens"]
    hooked: dict = {}
    with word_bridge.hooks(fwd_hooks=[(Site(0, "mlp_out").hook_name, lambda act, hook: act)]):
        c = ev.score_label_prompts(word_bridge, prompts, batch_size=3, stats=hooked)
    np.testing.assert_allclose(c, b, atol=1e-5, rtol=0)
    assert hooked["unique_tokens"] == hooked["row_tokens"]  # read unshared: a hook may be tied to positions


def test_length_buckets_and_group_blocks():
    buckets = ev.length_buckets([5, 1, 9, 1, 5, 3], 2)
    assert [b.tolist() for b in buckets] == [[1, 3], [5, 0], [4, 2]]
    assert list(ev._group_blocks(np.array([0, 0, 0, 1, 1, 2, 2, 2, 3]), 2)) == [(0, 3), (3, 5), (5, 8), (8, 9)]
    assert list(ev._group_blocks(np.array([0, 0, 0, 0]), 2)) == [(0, 4)]


def test_bpe_tokenizer_bridge_and_hf_model_agree(bpe_ckpt, data):
    from interp.models import load_bridge

    folder, model, tok = bpe_ckpt
    yes_id, no_id = ev.yes_no_token_ids(tok)
    assert tok.convert_ids_to_tokens([yes_id, no_id]) == ["Ġyes", "Ġno"]
    prompts = [label_prompt(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    hf = ev.score_label_prompts(model, prompts, tok, batch_size=2)
    bridge = load_bridge(folder)
    via_bridge = ev.score_label_prompts(bridge, prompts, batch_size=5)
    assert via_bridge == pytest.approx(hf, abs=1e-5)


def test_generation_batched_equals_one_at_a_time(word_bridge, data):
    prompts = [benchmark_prompt(c, q) for c, q in zip(data.rows["context"], data.rows["question"])]
    a = ev.generate_responses(word_bridge, prompts, max_new_tokens=3, batch_size=5)
    b = ev.generate_responses(word_bridge, prompts, max_new_tokens=3, batch_size=1)
    assert a == b and all(len(r.split()) == 3 for r in a)


def test_chat_template_is_used_when_the_tokenizer_has_one(word_bridge, word_ckpt):
    from interp.models.checkpoint import _word_level_tokenizer

    vocab = word_ckpt[1]
    tok = _word_level_tokenizer(vocab)
    plain = ev.encode_prompts(tok, ["did Bob take the dog?"])
    tok.chat_template = "{% for m in messages %}<user> {{ m['content'] }} <assistant>{% endfor %}"
    wrapped = ev.encode_prompts(tok, ["did Bob take the dog?"])
    assert wrapped[0][0] == vocab.id("<user>") and wrapped[0][-1] == vocab.id("<assistant>")
    assert wrapped[0][1:-1] == [i for i in plain[0] if i != vocab.bos_id]
    assert ev.encode_prompts(tok, ["did Bob take the dog?"], chat_template=False) == plain
    p = ev.score_label_prompts(word_bridge, [label_prompt(CTX2, "did Bob take the dog?")], tok)
    assert 0 < p[0] < 1
    with pytest.raises(ValueError, match="no chat template"):
        ev.encode_prompts(_word_level_tokenizer(vocab), ["x"], chat_template=True)


def test_too_long_prompt_is_a_clear_error(word_bridge):
    with pytest.raises(ValueError, match="prompt 0 has .* tokens, more than the model's context n_ctx=160"):
        ev.score_label_prompts(word_bridge, ["yes " * 200])


# ---- resumable evaluation -----------------------------------------------------------------------


def _spy(monkeypatch, name):
    seen: list[str] = []
    real = getattr(ev, name)

    def wrapped(model, prompts, *a, **k):
        seen.extend(prompts)
        return real(model, prompts, *a, **k)

    monkeypatch.setattr(ev, name, wrapped)
    return seen


def _same_records(a: str, b: str) -> bool:
    """The same records, P(yes) within float error (the rows of a group are read together, packed:
    a resumed run reads another set of rows in a forward, which moves the last bits)."""
    ra, rb = [json.loads(x) for x in a.splitlines()], [json.loads(x) for x in b.splitlines()]
    strip = [{k: v for k, v in r.items() if k != "p_yes"} for r in ra + rb]
    close = all(abs(x.get("p_yes", 0.0) - y.get("p_yes", 0.0)) < 1e-5 for x, y in zip(ra, rb))
    return len(ra) == len(rb) and strip[: len(ra)] == strip[len(ra) :] and close


@pytest.mark.parametrize("prompt", ["benchmark", "label"])
def test_interrupted_run_resumes_without_recomputing(word_bridge, data, tmp_path, monkeypatch, prompt):
    full = ev.evaluate_model(
        word_bridge, data, tmp_path / "full.jsonl", prompt=prompt, batch_size=2, max_new_tokens=3, progress=False
    )
    assert full.computed == 5 and full.reused == 0
    want = (tmp_path / "full.jsonl").read_text()
    recs = [json.loads(x) for x in want.splitlines()]
    assert [r["row"] for r in recs] == list(range(5)) and all(r["prompt_kind"] == prompt for r in recs)
    if prompt == "label":
        assert all(r["response"] == ("yes" if r["p_yes"] > 0.5 else "no") == r["parsed"] for r in recs)

    # an interruption after k = 2 rows, in the middle of writing row 3
    part = tmp_path / "part.jsonl"
    lines = want.splitlines(keepends=True)
    part.write_text(lines[0] + lines[1] + lines[2][:25])
    seen = _spy(monkeypatch, "score_label_prompts" if prompt == "label" else "generate_responses")
    again = ev.evaluate_model(word_bridge, data, part, prompt=prompt, batch_size=2, max_new_tokens=3, progress=False)
    assert (again.reused, again.computed, again.discarded_partial_line) == (2, 3, True)
    assert len(seen) == 3 and seen[0] == recs[2]["prompt"]
    assert _same_records(part.read_text(), want)

    # a finished run recomputes nothing; a run with --limit first, then the rest
    seen.clear()
    assert (
        ev.evaluate_model(
            word_bridge, data, part, prompt=prompt, batch_size=2, max_new_tokens=3, progress=False
        ).computed
        == 0
        and not seen
    )
    lim = tmp_path / "lim.jsonl"
    ev.evaluate_model(word_bridge, data, lim, prompt=prompt, batch_size=2, max_new_tokens=3, limit=3, progress=False)
    assert (
        ev.evaluate_model(word_bridge, data, lim, prompt=prompt, batch_size=2, max_new_tokens=3, progress=False).reused
        == 3
    )
    assert _same_records(lim.read_text(), want)


def test_resuming_with_other_settings_is_an_error(word_bridge, data, tmp_path):
    out = tmp_path / "r.jsonl"
    ev.evaluate_model(word_bridge, data, out, prompt="benchmark", max_new_tokens=2, limit=2, progress=False)
    with pytest.raises(ValueError, match="other settings.*max_new_tokens"):
        ev.evaluate_model(word_bridge, data, out, prompt="benchmark", max_new_tokens=3, progress=False)
    out.with_name("r.meta.json").unlink()  # without the settings file the records themselves are checked
    with pytest.raises(ValueError, match="not row 0 of the current data and label prompt"):
        ev.evaluate_model(word_bridge, data, out, prompt="label", progress=False)
    run = ev.evaluate_model(word_bridge, data, out, prompt="label", fresh=True, progress=False)
    assert run.computed == 5


def test_cli_eval_writes_scores_and_resumes(word_ckpt, data_csv, tmp_path, capsys):
    args = [
        "pragworld",
        "eval",
        "--model",
        str(word_ckpt[0]),
        "--data",
        str(data_csv),
        "--prompt",
        "label",
        "--out",
        str(tmp_path / "o"),
        "--batch-size",
        "2",
        "--no-progress",
        "--json",
    ]
    assert main(args) == 0
    cap = capsys.readouterr()
    summary = json.loads(cap.out.strip().splitlines()[-1])
    assert summary["rows"] == 5 and summary["groups"] == 2 and summary["unparseable"] == 0.0
    assert "0 rows reused" in cap.err and "'yes' (id" in cap.err
    assert len((tmp_path / "o" / "responses.jsonl").read_text().splitlines()) == 5
    assert (tmp_path / "o" / "pragworld.json").exists()
    assert main(args) == 0
    assert "5 rows reused" in capsys.readouterr().err
    # the responses file is a valid input of `pragworld score`
    assert (
        main(["pragworld", "score", str(data_csv), "--responses", str(tmp_path / "o" / "responses.jsonl"), "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["robust"] == summary["robust"]
