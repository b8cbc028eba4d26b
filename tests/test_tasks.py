"""``interp.tasks``: one way to ask a row, whichever module asks it.

The BOS rule, the chat-template rule and the yes/no tokens on GPT-2-style (no BOS) and Llama-style
(BOS) byte-level tokenizers; a PragWorld row tokenized identically by the sweep, the evaluation and
fine-tuning (each caught at the model's forward); fine-tuning's loss on the answer token against a
hand-computed cross-entropy; dialogue-world probes encoded as the world's models read them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from interp.datasets.pragworld import label_prompt, load_pragworld, write_pragworld_csv

CTX = ["A: did you put the apples in the box\nB: I did", "A: where is Bob\nB: he went to the garden"]


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    rows = []
    for g, ctx in enumerate(CTX):
        rows.append(
            dict(
                context=ctx,
                question="is it in the box?",
                gold=g % 2,
                altered=False,
                target="none",
                category=None,
                effect=None,
            )
        )
        rows.append(
            dict(
                context=ctx + " not",
                question="is it in the box?",
                gold=1 - g % 2,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            )
        )
    return write_pragworld_csv(pd.DataFrame(rows), tmp_path_factory.mktemp("tasks") / "rows.csv")


@pytest.fixture(scope="module")
def folders(data_csv, tmp_path_factory):
    """{"gpt2": folder, "llama": folder}: tiny models with BPE tokenizers that add no BOS / a BOS."""
    from test_architectures import _config, _scale, _tokenizer
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM

    rows = load_pragworld(data_csv).rows
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    texts = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    core.train_from_iterator(
        texts * 3 + [" yes no"] * 50,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<|endoftext|>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    root = tmp_path_factory.mktemp("task_models")
    out = {}
    for k, arch in enumerate(("gpt2", "llama")):
        tok = _tokenizer(core, arch == "llama")
        torch.manual_seed(k)
        model = _scale(AutoModelForCausalLM.from_config(_config(arch, len(tok), tok)), k).eval()
        model.save_pretrained(root / arch)
        tok.save_pretrained(root / arch)
        out[arch] = root / arch
    return out


def test_bos_rule(folders):
    from transformers import AutoTokenizer

    from interp.tasks import Tokenization, TokenizationError, adds_bos

    text = "A: where is Bob"
    for arch, bos_added in (("gpt2", False), ("llama", True)):
        tok = AutoTokenizer.from_pretrained(folders[arch])
        plain = list(tok(text, add_special_tokens=False)["input_ids"])
        bos = tok.bos_token_id
        assert adds_bos(tok) is bos_added
        assert Tokenization(tok).encode([text]) == [list(tok(text)["input_ids"])]  # the tokenizer's own
        assert Tokenization(tok).encode([text])[0] == ([bos] if bos_added else []) + plain
        assert Tokenization(tok, prepend_bos=True).encode([text]) == [[bos] + plain]
        assert Tokenization(tok, prepend_bos=False).encode([text]) == [plain]
    tok = AutoTokenizer.from_pretrained(folders["gpt2"])
    tok.bos_token = None
    with pytest.raises(TokenizationError, match="no BOS token"):
        Tokenization(tok, prepend_bos=True).encode([text])


def test_chat_template_rule(folders):
    from transformers import AutoTokenizer

    from interp.tasks import Tokenization, TokenizationError

    tok = AutoTokenizer.from_pretrained(folders["llama"])
    with pytest.raises(TokenizationError, match="no chat template"):
        Tokenization(tok, chat_template=True).encode(["x"])
    tok.chat_template = "{{ bos_token }}{% for m in messages %}A: {{ m['content'] }} B:{% endfor %}"
    body = list(tok("A: where is Bob B:", add_special_tokens=False)["input_ids"])
    # the templated text holds the BOS once: special tokens are not added again
    assert Tokenization(tok, chat_template=None).encode(["where is Bob"]) == [[tok.bos_token_id] + body]
    assert Tokenization(tok, chat_template=None, prepend_bos=False).encode(["where is Bob"]) == [body]
    assert Tokenization(tok, chat_template=False).encode(["where is Bob"]) == [list(tok("where is Bob")["input_ids"])]


def test_own_tokenizer_is_not_the_bridges(folders):
    """TransformerLens 4.3's bridge tokenizer prepends a BOS; the task reloads the model's own."""
    from interp.models import load_bridge
    from interp.tasks import own_tokenizer

    bridge = load_bridge(folders["gpt2"])
    text = "A: where is Bob"
    bos = bridge.tokenizer.bos_token_id
    assert bridge.tokenizer(text)["input_ids"][0] == bos
    own = own_tokenizer(bridge)
    assert own(text)["input_ids"][0] != bos
    assert own(text)["input_ids"] == own_tokenizer(folders["gpt2"])(text)["input_ids"]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_sweep_eval_and_finetune_ask_a_row_identically(arch, folders, data_csv, tmp_path, monkeypatch):
    """Caught where each module calls the model: the sweep's ids, the label evaluation's ids and the
    fine-tuning rows (up to the appended answer) are the HF tokenizer's own ids, row for row."""
    from transformers import AutoTokenizer

    import interp.analysis.engines.sweeps as sweeps
    import interp.metrics.pragworld_eval as ev
    import interp.models.packing as packing
    from interp.config import FinetuneData
    from interp.jobs.sweep import run_sweep
    from interp.models import load_bridge
    from interp.train.finetune_data import load_task

    folder = folders[arch]
    rows = load_pragworld(data_csv).rows
    tok = AutoTokenizer.from_pretrained(folder)
    want = [list(tok(label_prompt(c, q))["input_ids"]) for c, q in zip(rows["context"], rows["question"])]
    assert all((w[0] == tok.bos_token_id) == (arch == "llama") for w in want)

    def real(ids, mask):
        return [ids[i][mask[i].bool()].tolist() for i in range(len(ids))]

    seen: dict[str, list[list[int]]] = {}
    real_sweep, real_logits, real_plan = sweeps.mlp_removal_sweep, ev.model_logits, packing.plan

    def spy_sweep(bridge, ids, metric, mask, *a, **k):
        seen["sweep"] = real(ids, mask)
        return real_sweep(bridge, ids, metric, mask, *a, **k)

    def spy_logits(model, ids, mask):
        seen.setdefault("eval", []).extend(real(ids, mask))
        return real_logits(model, ids, mask)

    def spy_plan(seqs, *a, **k):  # label scoring shares prefixes by default: the rows it packs
        seen.setdefault("eval", []).extend(list(map(list, seqs)))
        return real_plan(seqs, *a, **k)

    monkeypatch.setattr(sweeps, "mlp_removal_sweep", spy_sweep)
    monkeypatch.setattr(ev, "model_logits", spy_logits)
    monkeypatch.setattr(packing, "plan", spy_plan)
    run_sweep(folder, data=data_csv, kind="mlp-zero", out=tmp_path / "s", n_boot=20)
    ev.evaluate_model(
        load_bridge(folder), load_pragworld(data_csv), tmp_path / "e.jsonl", prompt="label", progress=False
    )
    task = load_task(folder, FinetuneData(kind="pragworld", train=str(data_csv), test=str(data_csv), n_eval=0))
    yes, no = tok.convert_tokens_to_ids(["Ġyes", "Ġno"])
    n = (task.train_ids != task.pad_id).sum(1)
    train = [task.train_ids[i, : n[i]].tolist() for i in range(len(n))]
    assert seen["sweep"] == want
    assert seen["eval"] == want
    assert [t[: int(task.loss_from[i])] for i, t in enumerate(train)] == want
    assert [t[-1] for t in train] == [yes if g == 1 else no for g in rows["gold"]]
    assert [len(t) for t in train] == [len(w) + 1 for w in want]
    eval_n = (task.eval_ids != task.pad_id).sum(1)
    assert [task.eval_ids[i, : eval_n[i]].tolist() for i in range(len(eval_n))] == want


@pytest.mark.parametrize("loss_on", ["answer", "all"])
def test_finetune_loss_on_the_answer_or_every_token(folders, data_csv, loss_on):
    """One step with every row in the batch: the logged loss is the cross-entropy of the initial
    model on the answer tokens only (``answer``) or on every real token (``all``), by hand."""
    from transformers import AutoModelForCausalLM

    from interp.config import FinetuneData, TrainConfig
    from interp.train import train
    from interp.train.finetune_data import load_task

    folder = folders["llama"]
    task = load_task(
        folder, FinetuneData(kind="pragworld", train=str(data_csv), test=str(data_csv), n_eval=0, loss_on=loss_on)
    )
    assert (task.loss_from is None) == (loss_on == "all")
    ids = task.train_ids
    n = (ids != task.pad_id).sum(1)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits.double(), -1)
    terms = []
    for i in range(len(ids)):
        first = int(n[i]) - 1 if loss_on == "answer" else 1  # the answer is each row's last token
        terms += [-float(logp[i, p - 1, ids[i, p]]) for p in range(first, int(n[i]))]
    want = float(np.mean(terms))
    cfg = TrainConfig(
        steps=1, batch_size=len(ids), lr=1e-3, min_lr=1e-3, warmup_steps=0, eval_every=0, checkpoint_every=0, seed=0
    )
    hist = train(
        AutoModelForCausalLM.from_pretrained(folder),
        ids,
        None,
        cfg,
        labels=task.labels,
        pad_id=task.pad_id,
        loss_from=task.loss_from,
        progress=False,
    ).history
    assert hist.iloc[-1]["next_token_loss"] == pytest.approx(want, rel=1e-4)


def test_loss_on_is_checked(tmp_path):
    from interp.config import ConfigError, FinetuneData, load_finetune_config

    bad = tmp_path / "bad.toml"
    bad.write_text('[data]\nkind = "pragworld"\nloss_on = "prompt"\n')
    with pytest.raises(ConfigError, match="loss_on"):
        load_finetune_config(bad)
    bad.write_text('[data]\nloss_on = "answer"\n')
    with pytest.raises(ConfigError, match="needs pragworld or contrast data"):
        load_finetune_config(bad)
    with pytest.raises(ValueError, match="needs pragworld or contrast data"):
        FinetuneData(kind="world", loss_on="answer")


def test_dialogue_probes_are_asked_as_the_world_reads_them(tmp_path):
    """A dialogue-world benchmark row through the task: ``<bos>`` + the row's tokens with the
    checkpoint's word-level tokenizer, exactly ``Vocab.encode``; P(yes) equals ``qa.p_yes``."""
    from conftest import liven

    from interp.analysis.engines.scoring import Batch, forward
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.dialogue_qa import p_yes
    from interp.models import ModelConfig, build_gpt2, load_bridge, save_checkpoint
    from interp.tasks import YesNoTask
    from interp.worlds.dialogue import DialogueWorld
    from interp.worlds.dialogue.export import prompt_tokens, write_benchmark

    world = DialogueWorld(agents=2, objects=2, locations=2, max_count=2, max_utts=4)
    folder = save_checkpoint(
        liven(build_gpt2(world.vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=128, seed=0)), 0),
        world,
        tmp_path / "m",
    )
    rows = load_pragworld(write_benchmark(world, tmp_path / "b.csv", n_groups=3, seed=0)).rows
    task = YesNoTask.dialogue(folder, rows)
    prompts = [prompt_tokens(c, q) for c, q in zip(rows["context"], rows["question"])]
    assert task.ids == [world.vocab.encode(p) for p in prompts]
    assert (task.yes_id, task.no_id) == (world.vocab.id("yes"), world.vocab.id("no"))
    bridge = load_bridge(folder)
    ids, mask = task.inputs()
    p_gold = task.metric()(forward(bridge, ids, mask), Batch(ids, mask, torch.arange(len(ids)))).numpy()
    want = p_yes(bridge, world, prompts)
    np.testing.assert_allclose(p_gold, np.where(task.gold == 1, want, 1 - want), atol=1e-5)


def test_task_errors_name_the_problem(folders, data_csv):
    from interp.tasks import YesNoTask

    rows = load_pragworld(data_csv).rows
    with pytest.raises(ValueError, match="prompt must be one of"):
        YesNoTask.pragworld(folders["gpt2"], rows, prompt="chat")
    with pytest.raises(ValueError, match="missing \\['gold'\\]"):
        YesNoTask.pragworld(folders["gpt2"], rows.drop(columns=["gold"]))
    task = YesNoTask.pragworld(folders["gpt2"], rows)
    with pytest.raises(ValueError, match="more than the model's context n_ctx=5"):
        task.check_fits(5)
    pairs, unpaired = task.pairs()
    assert pairs == [(0, 1), (2, 3)] and unpaired == 0
    assert task.categories == ["original", "negation", "original", "negation"]


def test_cli_eval_prepend_bos_switch(folders, data_csv, tmp_path):
    """``interp pragworld eval --prompt label --prepend-bos on|off`` records the setting and scores
    the ids it names: off drops the Llama-style tokenizer's BOS, on keeps it (its own rule here)."""
    import json

    from interp.cli import main
    from interp.tasks import YesNoTask

    folder = folders["llama"]
    p = {}
    for switch in ("on", "off"):
        out = tmp_path / switch
        assert (
            main(
                [
                    "pragworld",
                    "eval",
                    "--model",
                    str(folder),
                    "--data",
                    str(data_csv),
                    "--prompt",
                    "label",
                    "--prepend-bos",
                    switch,
                    "--out",
                    str(out),
                    "--no-progress",
                ]
            )
            == 0
        )
        assert json.loads((out / "responses.meta.json").read_text())["prepend_bos"] is (switch == "on")
        p[switch] = [json.loads(line)["p_yes"] for line in (out / "responses.jsonl").read_text().splitlines()]
    rows = load_pragworld(data_csv).rows
    assert YesNoTask.pragworld(folder, rows, prepend_bos=True).ids == YesNoTask.pragworld(folder, rows).ids
    assert max(abs(a - b) for a, b in zip(p["on"], p["off"])) > 1e-4  # the BOS changes the input
