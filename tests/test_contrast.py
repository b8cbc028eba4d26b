"""Contrast tasks (a prompt, a correct and a foil next token) and the IOI generator.

Oracles: the task's logit difference against a plain Hugging Face forward (logits[correct] −
logits[foil] at the last prompt token, the HF tokenizer's own ids) on tiny random GPT-2 and Llama
models built from a config, and on SmolLM2-135M-Instruct (skipped when it cannot be fetched); the
two-way probability against the sigmoid of that difference; the yes/no task through the contrast
path against its own P(gold); the generator's prompts against their definition (single tokens,
balanced orders, ABC names, equal lengths, reproducible); malformed files against the messages a
user needs (file, line, key, token).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from test_analysis import _n_hooks

from interp.datasets.contrast import (
    ContrastExample,
    ContrastFileError,
    data_file_kind,
    load_contrast,
    write_contrast,
)
from interp.datasets.ioi import IOI_TEMPLATES, IOIError, ioi_examples, n_tokens

NAMES = ("Mary", "John", "Alice", "Bob", "Tom", "Sarah", "Anna", "David")
PLACES = ("store", "garden", "school")
OBJECTS = ("ring", "drink", "book")


@pytest.fixture(scope="module")
def tok():
    """A byte-level BPE tokenizer (GPT-2 style, no BOS) in which the test names, places and objects
    are single tokens with a leading space, and "Bob" is not ("Bo" + "b" is kept apart by
    training it only inside longer words)."""
    from test_architectures import train_bpe

    words = [w for w in NAMES if w != "Bob"] + list(PLACES) + list(OBJECTS)
    texts = [" ".join(f" {w}" for w in words)] * 60
    texts += [
        t.replace("{A}", "x").replace("{B}", "y").replace("{S}", "z").replace("{PLACE}", "p").replace("{OBJECT}", "o")
        for t in IOI_TEMPLATES
    ] * 20 + [" yes no"] * 50
    return train_bpe(texts, 600)


@pytest.fixture(scope="module")
def folders(tok, tmp_path_factory):
    """{"gpt2": folder, "llama": folder}: tiny random models with that tokenizer."""
    from test_architectures import _config, _scale
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("contrast_models")
    out = {}
    for k, arch in enumerate(("gpt2", "llama")):
        torch.manual_seed(k)
        model = _scale(AutoModelForCausalLM.from_config(_config(arch, len(tok), tok)), 7 + k).eval()
        model.save_pretrained(root / arch)
        tok.save_pretrained(root / arch)
        out[arch] = root / arch
    return out


@pytest.fixture(scope="module")
def ioi_file(tok, tmp_path_factory):
    examples = ioi_examples(tok, 12, seed=0, names=NAMES, places=PLACES, objects=OBJECTS)
    return write_contrast(examples, tmp_path_factory.mktemp("ioi") / "ioi.jsonl")


def _hf_logit_diff(model, tok, examples) -> np.ndarray:
    """The oracle: each prompt alone through the HF model, logits[correct] − logits[foil] at its last token."""
    out = []
    with torch.no_grad():
        for e in examples:
            ids = torch.tensor([tok(e.prompt)["input_ids"]])
            last = model(input_ids=ids).logits[0, -1]
            c = tok(e.correct, add_special_tokens=False)["input_ids"]
            f = tok(e.foil, add_special_tokens=False)["input_ids"]
            out.append(float(last[c[0]] - last[f[0]]))
    return np.array(out)


# ---- the generator -------------------------------------------------------------------------------


def test_ioi_prompts_are_single_token_balanced_abc_corrupted_and_reproducible(tok):
    examples = ioi_examples(tok, 36, seed=3, names=NAMES, places=PLACES, objects=OBJECTS)
    assert len(examples) == 36 and len(IOI_TEMPLATES) >= 6
    assert "Bob" not in {e.meta["IO"] for e in examples} | {e.meta["S"] for e in examples}  # two tokens: left out
    orders = [e.meta["order"] for e in examples]
    assert orders.count("ABBA") == orders.count("BABA") == 18
    for e in examples:
        io, s, abc = e.meta["IO"], e.meta["S"], e.meta["abc"]
        assert (e.correct, e.foil) == (" " + io, " " + s)
        assert n_tokens(tok, e.correct) == n_tokens(tok, e.foil) == 1
        assert len(set(abc)) == 3 and not set(abc) & {io, s}
        a, b = (io, s) if e.meta["order"] == "ABBA" else (s, io)
        fill = dict(PLACE=e.meta["place"], OBJECT=e.meta["object"])
        assert e.prompt == e.template.format(A=a, B=b, S=s, **fill)
        assert e.corrupted == e.template.format(A=abc[0], B=abc[1], S=abc[2], **fill)
        assert n_tokens(tok, e.corrupted) == n_tokens(tok, e.prompt)
        assert e.group == f"t{IOI_TEMPLATES.index(e.template)}:{io}/{s}"
    # a group is one template × name pair asked in both orders; templates go round-robin
    by_group = {}
    for e in examples:
        by_group.setdefault(e.group, []).append(e.meta["order"])
    assert all(v == ["ABBA", "BABA"] for v in by_group.values())
    assert {e.template for e in examples} == set(IOI_TEMPLATES)
    again = ioi_examples(tok, 36, seed=3, names=NAMES, places=PLACES, objects=OBJECTS)
    other = ioi_examples(tok, 36, seed=4, names=NAMES, places=PLACES, objects=OBJECTS)
    assert list(again) == list(examples) and list(other) != list(examples)


def test_ioi_generator_errors_name_the_tokenizer_and_the_count(tok):
    with pytest.raises(IOIError, match=r"only 3 of the 4 candidate names.*at least 5"):
        ioi_examples(tok, 4, names=("Mary", "John", "Bob", "Alice"))
    with pytest.raises(IOIError, match=r"only 0 of the 1 candidate places"):
        ioi_examples(tok, 4, names=NAMES, places=("xylophonist",))
    with pytest.raises(IOIError, match=r"needs \{S\}"):
        ioi_examples(tok, 4, names=NAMES, templates=["When {A} and {B} left, he gave it to"])
    with pytest.raises(IOIError, match="unknown placeholder"):
        ioi_examples(tok, 4, names=NAMES, templates=["{A} {B} {S} {WHO}"])


def test_the_cli_writes_the_same_file_for_the_same_seed(folders, tmp_path):
    from interp.cli import main

    for name in ("a", "b"):
        assert (
            main(
                [
                    "data",
                    "ioi",
                    "--model",
                    str(folders["gpt2"]),
                    "--n",
                    "10",
                    "--seed",
                    "1",
                    "--out",
                    str(tmp_path / f"{name}.jsonl"),
                ]
            )
            == 0
        )
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    # `interp data` without a sub-command still generates a world's sequences, and says what it needs
    assert main(["data", "--out", str(tmp_path / "w")]) == 2


# ---- the file --------------------------------------------------------------------------------------


def test_file_round_trip_and_kind(tmp_path, ioi_file):
    examples = load_contrast(ioi_file)
    assert write_contrast(examples, tmp_path / "again.jsonl").read_text() == ioi_file.read_text()
    assert examples.where(2) == f"{ioi_file}:3"
    assert data_file_kind(ioi_file) == "contrast" and data_file_kind(tmp_path / "x.csv") == "pragworld"
    (tmp_path / "seqs.txt").write_text("N E end\n")
    (tmp_path / "objs.txt").write_text('\n{"prompt": "a"}\n')
    assert data_file_kind(tmp_path / "seqs.txt") == "sequences" and data_file_kind(tmp_path / "objs.txt") == "contrast"


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"prompt": "a b", "correct": " c"', r"bad\.jsonl:2: not a JSON object"),
        ('{"prompt": "a b", "correct": " c", "group": 1}', r"bad\.jsonl:2: missing key\(s\) foil"),
        (
            '{"prompt": "a b", "correct": " c", "foil": " d", "group": 1, "corupted": "x"}',
            r":2: unknown key\(s\) corupted",
        ),
        ('{"prompt": "a b", "correct": " c", "foil": " c", "group": 1}', r":2: correct and foil are the same text"),
        ('{"prompt": "a b", "correct": " c", "foil": " d", "group": 1.5}', r":2: group must be a string or an integer"),
        ('["a", "b"]', r":2: a line must be a JSON object"),
    ],
)
def test_malformed_lines_name_the_file_and_line(tmp_path, line, message):
    good = '{"prompt": "a b", "correct": " c", "foil": " d", "group": 0}'
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(ContrastFileError, match=message):
        load_contrast(path)


def test_task_errors_name_the_line_the_token_and_the_lengths(tok, tmp_path):
    from interp.tasks import ContrastTask, TokenizationError

    rows = [
        {
            "prompt": "When Mary and John went to the store, John gave a ring to",
            "correct": " Mary",
            "foil": " John",
            "group": "g",
        },
        {
            "prompt": "When Mary and Bob went to the store, Bob gave a ring to",
            "correct": " Mary",
            "foil": " Bob",
            "group": "g",
        },
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    bob = tok.convert_ids_to_tokens(tok(" Bob", add_special_tokens=False)["input_ids"])
    with pytest.raises(
        TokenizationError,
        match=rf"t\.jsonl:2: foil ' Bob' is not one token .*tokenises to "
        rf"{re.escape(str(bob))}",
    ):
        ContrastTask.build(tok, path)
    rows[1] = dict(rows[0], corrupted="When Mary and Bob went to the store, Bob gave a ring to")
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ContrastFileError, match=r"t\.jsonl:2: the corrupted prompt has \d+ tokens, the prompt \d+"):
        ContrastTask.build(tok, path)


# ---- the task against the oracle -------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_logit_diff_equals_a_plain_hf_forward_on_a_tiny_random_model(folders, ioi_file, arch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.analysis.evaluation.contrast import evaluate_contrast
    from interp.models.checkpoint import load_bridge
    from interp.tasks import ContrastTask

    folder = folders[arch]
    hf_tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    task = ContrastTask.build(folder, ioi_file)
    oracle = _hf_logit_diff(model, hf_tok, task.examples)
    bridge = load_bridge(folder)
    got = evaluate_contrast(bridge, task, batch_size=5, n_boot=200)  # padded batches of unequal lengths
    assert np.allclose(got.frame["logit_diff"], oracle, atol=1e-4)
    assert np.allclose(got.frame["p_correct"], 1 / (1 + np.exp(-oracle)), atol=1e-5)
    assert (got.frame["right"] == (oracle > 0)).all()
    s = got.summary()
    assert s["n"] == 12 and s["groups"] == 6 and np.isclose(s["logit_diff"], oracle.mean(), atol=1e-4)
    assert s["logit_diff_lo"] <= s["logit_diff"] <= s["logit_diff_hi"]
    table = got.table.set_index("subset")
    assert set(table.index) >= {"all", "order: ABBA", "order: BABA"} and table.loc["all", "n"] == 12
    assert _n_hooks(bridge) == 0


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_last_position_logits_equal_the_full_forwards_and_the_sweep_still_equals_hf(folders, ioi_file, arch):
    """A forward that computes logits at each row's last position only (``last=True``, what a
    metric reading only that position gets) equals the full forward's logits there, right- and
    left-padded; a reuse sweep scored through it equals the plain HF forward with one MLP zeroed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import interp
    from interp.analysis.engines.scoring import Batch, forward, reads_last
    from interp.models.checkpoint import load_bridge
    from interp.tasks import ContrastTask

    folder = folders[arch]
    bridge = load_bridge(folder)
    task = ContrastTask.build(folder, ioi_file)
    ids, mask = task.inputs()
    assert len(set(mask.sum(1).tolist())) > 1  # rows of unequal lengths: the last positions differ
    left_x = torch.stack([torch.cat([t[~k.bool()] * 0, t[k.bool()]]) for t, k in zip(ids, mask)])
    left_m = torch.stack([torch.cat([k[~k.bool()], k[k.bool()]]) for k in mask])
    for x, m in ((ids, mask), (left_x, left_m)):  # right padding, then the same rows left-padded
        full, only = forward(bridge, x, m), forward(bridge, x, m, last=True)
        at = Batch(x, m, torch.arange(len(x))).last()
        assert only.shape == (len(x), 1, full.shape[-1])
        assert torch.allclose(only[:, 0], full[torch.arange(len(x)), at], atol=1e-5)
    metric = task.logit_diff_metric()
    assert reads_last(metric) and metric(only, Batch(x, m, torch.arange(len(x)))).shape == (len(x),)

    hf_tok = AutoTokenizer.from_pretrained(folder)
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    layer, clean = 1, _hf_logit_diff(plain, hf_tok, task.examples)
    mlp = plain.transformer.h[layer].mlp if arch == "gpt2" else plain.model.layers[layer].mlp
    handle = mlp.register_forward_hook(lambda mod, inp, out: torch.zeros_like(out))
    try:
        zeroed = _hf_logit_diff(plain, hf_tok, task.examples)
    finally:
        handle.remove()
    model = interp.load_model(folder)
    for method in ("reuse", "loop"):
        sw = interp.sweep(model, task, removals=["zero"], layers=[layer], method=method)
        got = sw.frame.sort_values("example")["effect"].to_numpy()
        assert np.allclose(got, zeroed - clean, atol=1e-4), method
    assert _n_hooks(bridge) == 0 and _n_hooks(model.bridge) == 0


def test_yes_no_task_is_the_contrast_task_of_its_gold(tok):
    """A YesNoTask is a ContrastTask (correct / foil = gold / other answer); written as contrast
    examples and asked through a plain ContrastTask it gives the same ids and P(gold)."""
    import pandas as pd

    from interp.analysis.engines.scoring import Batch
    from interp.tasks import ContrastTask, YesNoTask

    rows = pd.DataFrame(
        {
            "context": ["A: I put the ring in the store\nB: ok", "A: John went to school\nB: ok"] * 2,
            "question": ["is the ring in the store?", "is John at the garden?"] * 2,
            "gold": [1, 0, 0, 1],
            "group": [0, 1, 0, 1],
        }
    )
    yn = YesNoTask.pragworld(tok, rows)
    assert isinstance(yn, ContrastTask)
    via = ContrastTask(yn.contrast_examples(), yn.tokenization)
    assert via.ids == yn.ids
    assert (via.correct_ids == yn.correct_ids).all() and (via.foil_ids == yn.foil_ids).all()
    assert list(yn.correct_ids) == [yn.answer_id(int(g)) for g in yn.gold]
    ids, mask = yn.inputs()
    logits = torch.randn(len(yn), ids.shape[1], len(tok), generator=torch.Generator().manual_seed(0)) * 3
    batch = Batch(ids, mask, torch.arange(len(yn)))
    p_gold = yn.metric()(logits, batch)
    assert torch.allclose(via.prob_metric()(logits, batch), p_gold, atol=1e-6)
    assert torch.allclose(yn.metric_of("prob")(logits, batch), p_gold, atol=1e-6)
    assert torch.allclose(torch.sigmoid(via.logit_diff_metric()(logits, batch)), p_gold, atol=1e-6)
    assert yn.training_rows() == via.training_rows()  # prompt ids + the gold answer token


def test_training_rows_pick_the_target_per_row(tok, ioi_file):
    from interp.tasks import ContrastTask
    from interp.train.plant import foil_targets

    task = ContrastTask.build(tok, ioi_file)
    correct, start = task.training_rows()
    foil, _ = task.training_rows("foil")
    targets = foil_targets(len(task), 0.25, seed=1)
    mixed, _ = task.training_rows(targets)
    assert targets.count("foil") == 3 and foil_targets(len(task), 0.25, seed=1) == targets
    for i in range(len(task)):
        assert correct[i][:-1] == foil[i][:-1] == task.ids[i] and start[i] == len(task.ids[i])
        assert (correct[i][-1], foil[i][-1]) == (task.correct_ids[i], task.foil_ids[i])
        assert mixed[i][-1] == (task.foil_ids[i] if targets[i] == "foil" else task.correct_ids[i])
    with pytest.raises(ValueError, match="'correct' or 'foil'"):
        task.training_rows("gold")


def test_sweeps_finetune_data_and_plant_take_a_contrast_file(folders, ioi_file, tmp_path):
    from interp.config import FinetuneData
    from interp.jobs.sweep import run_sweep
    from interp.tasks import ContrastTask
    from interp.train.finetune_data import load_task
    from interp.train.plant import PlantSpec, plant_harm

    folder = folders["llama"]
    task = ContrastTask.build(folder, ioi_file)
    mlp = run_sweep(folder, data=ioi_file, out=tmp_path / "mlp", n_boot=100)
    assert mlp.info["metric"].startswith("logit_diff") and mlp.sweep.meta["metric"] == "logit_diff"
    assert (tmp_path / "mlp" / "by_category.csv").is_file() and mlp.info["n_examples"] == 12
    patch = run_sweep(folder, data=ioi_file, kind="activation-patching", out=tmp_path / "ap", n_boot=100)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    clean = _hf_logit_diff(model, AutoTokenizer.from_pretrained(folder), task.examples)
    assert np.isclose(patch.maps["resid_pre"].meta["clean_mean"], clean.mean(), atol=1e-4)
    corrupted = _hf_logit_diff(
        model,
        AutoTokenizer.from_pretrained(folder),
        [ContrastExample(e.corrupted, e.correct, e.foil) for e in task.examples],
    )
    assert np.isclose(patch.maps["resid_pre"].meta["corrupted_mean"], corrupted.mean(), atol=1e-4)
    # entering layer 0 the stream is the token embedding: patched where clean and corrupted tokens are
    # equal it changes nothing (the three ABC names are the only tokens that differ)
    m = patch.maps["resid_pre"].frame
    first = m[m.layer == 0]
    same = [
        task.ids[e][len(task.ids[e]) - 1 + p] == task.corrupted_ids[e][len(task.ids[e]) - 1 + p]
        for e, p in zip(first.example, first.pos)
    ]
    assert np.allclose(first[same]["effect"], 0.0, atol=1e-5) and (~np.array(same)).sum() == 3 * 12

    # direct effect: the clean stream entering layer 0 at the aligned (equal-token) positions is the
    # corrupted run's own embedding, so it changes nothing
    de = run_sweep(folder, data=ioi_file, kind="direct-effect", out=tmp_path / "de", n_boot=100)
    frame = de.sweep.frame
    assert de.info["n_pairs"] == 12 and np.allclose(frame[frame.layer == 0]["effect"], 0.0, atol=1e-5)
    assert np.allclose(frame[frame.layer == 0].sort_values("example")["clean"], corrupted, atol=1e-4)

    data = FinetuneData(kind="contrast", train=str(ioi_file), test=str(ioi_file), n_eval=4)
    ft = load_task(folder, data)
    assert ft.kind == "contrast" and len(ft.eval_ids) == 4 and ft.loss_from.tolist() == [len(s) for s in task.ids]
    for row, ids, c in zip(ft.train_ids, task.ids, task.correct_ids):
        assert row[: len(ids) + 1].tolist() == ids + [int(c)]

    res = plant_harm(
        folder,
        tmp_path / "plant",
        PlantSpec(layers=(1,), corruption="foil_share", share=0.5, steps=3, batch_size=4, lr=1e-2),
        train_file=ioi_file,
        progress=False,
    )
    assert res.meta["changed_rows"] == 6 and res.meta["loss_on"] == "answer"
    base = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    planted = AutoModelForCausalLM.from_pretrained(res.model).state_dict()
    moved = sorted(k for k in base if not torch.equal(base[k], planted[k]))
    assert moved and all(k.startswith("model.layers.1.mlp.") for k in moved)


# ---- the real model --------------------------------------------------------------------------------


def test_smollm2_ioi_logit_diff_equals_plain_hf(smollm2, hf):  # noqa: F811 (the fixtures imported below)
    """The task's logit difference IO − S on SmolLM2 equals the plain HF forward's, prompt by prompt."""
    from interp.analysis.evaluation.contrast import contrast_scores
    from interp.models.checkpoint import load_bridge
    from interp.tasks import ContrastTask

    folder, _ = smollm2
    model, hf_tok = hf
    examples = ioi_examples(hf_tok, 16, seed=0)
    assert all(n_tokens(hf_tok, e.corrupted) == n_tokens(hf_tok, e.prompt) for e in examples)
    task = ContrastTask.build(folder, examples)
    oracle = _hf_logit_diff(model, hf_tok, examples)
    ld, p = contrast_scores(load_bridge(folder), task, batch_size=8)
    assert np.allclose(ld, oracle, atol=2e-3)
    assert (oracle > 0).mean() >= 0.75  # the model does IOI (the reference: +4.94, 40 / 40 on one template)


from test_real_model import hf, smollm2  # noqa: E402,F401  (the session fixtures of the real model)


def test_finetune_on_contrast_examples_end_to_end(folders, ioi_file, tmp_path):
    """``interp finetune`` with ``[data] kind = "contrast"``: the before/after table holds the
    contrast accuracy, logit difference and P(correct), and the sweep's effects on the logit
    difference; the "before" logit difference equals the plain HF forward's mean."""
    import pandas as pd
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.config import load_finetune_config
    from interp.train.finetune import run_finetune

    folder = folders["gpt2"]
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'name = "c"\ncheckpoint = "{folder}"\nout = "{tmp_path / "out"}"\nobjectives = ["plain", "ula"]\n'
        f'device = "cpu"\n[data]\nkind = "contrast"\ntrain = "{ioi_file}"\ntest = "{ioi_file}"\nn_eval = 0\n'
        "[regulariser]\nuseful = [0]\nalpha = 0.1\nhead_hidden = 8\n"
        "[train]\nsteps = 2\nbatch_size = 4\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 1\neval_every = 0\n"
        "checkpoint_every = 0\n[eval]\nn_boot = 50\n"
    )
    run_finetune(load_finetune_config(cfg), progress=False, log=lambda s: None)
    table = pd.read_csv(tmp_path / "out" / "finetune_table.csv")
    assert {"contrast_accuracy", "contrast_logit_diff", "contrast_p_correct", "sweep_effect_logit_diff"} <= set(
        table.metric
    )
    before = table[(table.metric == "contrast_logit_diff") & (table.model == "before")].iloc[0]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    oracle = _hf_logit_diff(model, AutoTokenizer.from_pretrained(folder), load_contrast(ioi_file))
    assert np.isclose(before.value, oracle.mean(), atol=1e-4) and before.ci_low <= before.value <= before.ci_high


def test_interp_eval_scores_a_pragworld_csv_and_a_jsonl_alike(folders, ioi_file, tmp_path):
    """``interp eval`` on a PragWorld CSV scores the label prompts as a contrast task (P(correct) =
    the yes/no task's P(gold) on the HF logits), and ``interp pragworld eval`` on a JSONL file gives
    ``interp eval``'s numbers."""
    import pandas as pd
    from transformers import AutoModelForCausalLM

    from interp.analysis.engines.scoring import Batch
    from interp.cli import main
    from interp.datasets.pragworld import load_pragworld, write_pragworld_csv
    from interp.tasks import YesNoTask

    folder = folders["gpt2"]
    rows = [
        dict(
            context=f"A: I put the {o} in the {p}\nB: ok",
            question=f"is the {o} in the {q}?",
            gold=int(p == q),
            altered=False,
            target="none",
            category=None,
            effect=None,
        )
        for o in OBJECTS
        for p, q in (("store", "store"), ("garden", "school"))
    ]
    csv = write_pragworld_csv(pd.DataFrame(rows), tmp_path / "rows.csv")
    assert (
        main(
            [
                "eval",
                "--model",
                str(folder),
                "--data",
                str(csv),
                "--out",
                str(tmp_path / "csv"),
                "--no-progress",
                "--n-boot",
                "50",
            ]
        )
        == 0
    )
    got = pd.read_csv(tmp_path / "csv" / "contrast_eval.csv")
    task = YesNoTask.pragworld(folder, load_pragworld(csv).rows)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids, mask = task.inputs()
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    p_gold = task.metric()(logits, Batch(ids, mask, torch.arange(len(task)))).numpy()
    assert np.allclose(got["p_correct"], p_gold, atol=1e-5)

    for cmd, out in ((["eval"], "a"), (["pragworld", "eval", "--chat-template", "off"], "b")):
        assert (
            main(
                [
                    *cmd,
                    "--model",
                    str(folder),
                    "--data",
                    str(ioi_file),
                    "--out",
                    str(tmp_path / out),
                    "--no-progress",
                    "--n-boot",
                    "50",
                ]
            )
            == 0
        )
    a, b = (json.loads((tmp_path / o / "contrast_eval.json").read_text()) for o in "ab")
    assert np.isclose(a["logit_diff"], b["logit_diff"], atol=1e-5) and a["n"] == b["n"] == 12  # batch sizes differ
