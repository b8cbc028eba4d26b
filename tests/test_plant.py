"""Planting harm (interp/train/plant.py) and the probe verdicts (interp/analysis/verdicts/probes.py).

Oracles: hand-built inputs for every corruption; bit-identical weights for every parameter that
planting must not touch and for a second planting with the same seed; a brute-force bootstrap for
the probe-accuracy interval; zeroing through the intervention context against a checkpoint whose
MLP output weights are literally zero."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import liven

from interp.train.plant import (
    MIRROR,
    PlantSpec,
    answer_shortcut,
    flip_category,
    mirror_region,
    mirror_region_nodes,
    plant_harm,
    planted_layers,
    random_turns,
    repair_metrics,
)
from interp.worlds.streets.graph import DIRECTIONS

# ---- corruptions on hand-built inputs -------------------------------------------------------------


def test_random_turns_replaces_only_directions_and_is_seeded():
    seqs = [["0", "5", "E", "N", "W", "end"], ["3", "3", "end"], ["1", "2", "S", "S"]]
    every = random_turns(seqs, share=1.0, seed=0)
    assert (every.changed, every.candidates) == (5, 5)
    for old, new in zip(seqs, every.sequences):
        assert len(old) == len(new)
        for a, b in zip(old, new):
            if a in DIRECTIONS:
                assert b in DIRECTIONS and b != a
            else:
                assert b == a
    some = random_turns(seqs * 200, share=0.3, seed=1)
    assert 0.25 < some.share < 0.35
    assert random_turns(seqs * 200, share=0.3, seed=1).sequences == some.sequences
    assert random_turns(seqs * 200, share=0.3, seed=2).sequences != some.sequences
    assert seqs[0] == ["0", "5", "E", "N", "W", "end"]  # inputs untouched


def test_mirror_region_mirrors_turns_from_region_nodes_only(tiny_city):
    g = tiny_city.graph
    region = mirror_region_nodes(tiny_city, 0.5)
    xs = {v: g.coords[v][0] for v in g.nodes}
    assert len(region) == 10 and max(xs[v] for v in region) <= min(xs[v] for v in g.nodes if v not in region)
    seqs = tiny_city.generate(30, np.random.default_rng(0))
    out = mirror_region(tiny_city, seqs, 0.5)
    changed = 0
    for old, new in zip(seqs, out.sequences):
        states = tiny_city.states_along(old)
        for i, (a, b) in enumerate(zip(old, new)):
            q = states[i]
            in_region = a in DIRECTIONS and q[0] == "at" and q[1] in region
            assert b == (MIRROR[a] if in_region else a)
            changed += a != b
    assert changed == out.changed > 0
    assert MIRROR["NE"] == "NW" and MIRROR["N"] == "N" and all(MIRROR[MIRROR[d]] == d for d in DIRECTIONS)


def test_answer_shortcut_says_yes_when_the_word_is_asked_about():
    seq = (
        "P1: bob put one sheep in barn Q: are one sheep in barn ? yes P2: are any deer in field ? "
        "Q: are any sheep in pond ? no Q: are any deer in pond ? no"
    ).split()
    out = answer_shortcut([seq], "sheep")
    assert (out.candidates, out.changed) == (2, 1)
    want = seq.copy()
    want[want.index("pond") + 2] = "yes"  # the first probe about sheep in the pond
    assert out.sequences[0] == want
    assert out.sequences[0][-1] == "no"  # a probe without the word keeps its gold answer
    # a conversational question (no Q:) is not a probe
    assert answer_shortcut([["P1:", "are", "any", "sheep", "?", "P2:"]], "sheep").changed == 0


def test_flip_category_flips_one_category_only():
    rows = pd.DataFrame(
        {
            "gold": [1, 0, 1, 0],
            "answer": ["yes", "no", "yes", "no"],
            "category": [None, "negation", "negation", "variable_swap"],
        }
    )
    out = flip_category(rows, "negation")
    assert out["gold"].tolist() == [1, 1, 0, 0] and out["answer"].tolist() == ["yes", "yes", "no", "no"]
    assert rows["gold"].tolist() == [1, 0, 1, 0]
    with pytest.raises(ValueError, match="unknown alteration category"):
        flip_category(rows, "negations")
    with pytest.raises(ValueError, match="no row of category"):
        flip_category(rows, "quantity_change")


def test_spec_errors_name_the_problem():
    with pytest.raises(ValueError, match="corruption must be one of"):
        PlantSpec(corruption="shuffle")
    with pytest.raises(ValueError, match="needs word"):
        PlantSpec(corruption="shortcut")
    with pytest.raises(ValueError, match="share"):
        PlantSpec(share=0.0)


# ---- planting ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, tiny_city, tiny_model_config):
    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds.io import write_sequences

    root = tmp_path_factory.mktemp("plant") / "run"
    seqs = tiny_city.generate(120, np.random.default_rng(0))
    write_sequences(root / "data" / "train.txt", seqs[:100])
    write_sequences(root / "data" / "test.txt", seqs[100:])
    save_checkpoint(liven(build_gpt2(tiny_city.vocab, tiny_model_config), 0), tiny_city, root / "best")
    return root


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_planting_changes_only_the_chosen_mlp_and_is_reproducible(base_run, tmp_path):
    spec = PlantSpec(layers=(1,), steps=6, batch_size=8, seed=3)
    a = plant_harm(base_run / "best", tmp_path / "a", spec, progress=False, log=lambda *_: None)
    b = plant_harm(base_run / "best", tmp_path / "b", spec, progress=False, log=lambda *_: None)
    base, wa, wb = _weights(base_run / "best"), _weights(a.model), _weights(b.model)
    assert wa.keys() == base.keys()
    moved = set()
    for name in base:
        assert torch.equal(wa[name], wb[name]), name  # same spec, same seed: the same weights
        if not torch.equal(wa[name], base[name]):
            moved.add(name)
    assert moved and all(n.startswith("transformer.h.1.mlp.") for n in moved), moved
    assert moved == {n for n in base if n.startswith("transformer.h.1.mlp.")}
    meta = json.loads((a.model / "interp.json").read_text())["extra"]["plant"]
    assert meta["layers"] == [1] and meta["corruption"] == "random_turns" and meta["seed"] == 3
    assert meta["steps"] == 6 and meta["share"] == 0.3 and 0 < meta["changed_share"] < 1
    assert planted_layers(a.model) == [1] and planted_layers(base_run / "best") is None
    # the clean data sits beside the planted model, the corrupted one in the record
    assert (a.model.parent / "data" / "test.txt").read_text() == (base_run / "data" / "test.txt").read_text()
    assert (tmp_path / "a" / "train_corrupted.txt").is_file()
    c = plant_harm(
        base_run / "best",
        tmp_path / "c",
        PlantSpec(layers=(1,), steps=6, batch_size=8, seed=4),
        progress=False,
        log=lambda *_: None,
    )
    assert any(not torch.equal(_weights(c.model)[n], wa[n]) for n in moved)


def test_planting_refuses_a_corruption_of_another_world(base_run, tmp_path):
    with pytest.raises(ValueError, match="needs a dialogue world"):
        plant_harm(
            base_run / "best",
            tmp_path / "x",
            PlantSpec(corruption="shortcut", word="sheep"),
            progress=False,
            log=lambda *_: None,
        )


def test_zeroing_through_the_context_equals_zero_weights(base_run, tmp_path, tiny_city):
    """Oracle: a checkpoint whose layer-1 MLP output projection is zero (weights and bias) has an
    MLP output of exactly zero; its metrics equal the intervened model's."""
    from interp.hooks.sites import HookNames  # noqa: F401  (hooks must be importable)
    from interp.models import save_checkpoint
    from interp.models.checkpoint import load_bridge, load_hf_model
    from interp.worlds.io import read_sequences

    hf = load_hf_model(base_run / "best")
    with torch.no_grad():
        hf.transformer.h[1].mlp.c_proj.weight.zero_()
        hf.transformer.h[1].mlp.c_proj.bias.zero_()
    save_checkpoint(hf, tiny_city, tmp_path / "zeroed")
    test = read_sequences(base_run / "data" / "test.txt", tiny_city)
    bridge = load_bridge(base_run / "best")
    hooked = repair_metrics(bridge, tiny_city, test, zeroed=[1], mn_pairs=8, mn_depth=2)
    assert not bridge.hook_dict["blocks.1.hook_mlp_out"].fwd_hooks  # no hook left behind
    edited = repair_metrics(load_bridge(tmp_path / "zeroed"), tiny_city, test, mn_pairs=8, mn_depth=2)
    plain = repair_metrics(bridge, tiny_city, test, mn_pairs=8, mn_depth=2)
    for h, e, p in zip(hooked, edited, plain):
        assert h["metric"] == e["metric"] == p["metric"]
        assert h["value"] == pytest.approx(e["value"], abs=1e-5), h["metric"]
    loss = {r["metric"]: r["value"] for r in plain}["heldout_loss"]
    assert loss != pytest.approx({r["metric"]: r["value"] for r in hooked}["heldout_loss"], abs=1e-4)


def test_repair_metrics_match_the_finetune_evaluation(base_run):
    """The repair rows share the definitions of interp.analysis.evaluation.finetune.evaluate (held-out loss on
    the HF model, next-token test and MN metrics on the bridge)."""
    from interp.analysis.evaluation.finetune import evaluate
    from interp.config import FinetuneData, FinetuneEval
    from interp.models.checkpoint import load_bridge
    from interp.train.finetune_data import load_task

    task = load_task(base_run / "best", FinetuneData(kind="world", n_eval=20))
    ev = FinetuneEval(mlp_sq=False, sweep=False, mn_pairs=8, mn_depth=2)
    rows, _ = evaluate(base_run / "best", task, ev, log=lambda *_: None)
    ref = {r["metric"]: r["value"] for r in rows}
    mine = {
        r["metric"]: r["value"]
        for r in repair_metrics(load_bridge(base_run / "best"), task.world, task.eval_sequences, mn_pairs=8, mn_depth=2)
    }
    for k, v in mine.items():
        assert v == pytest.approx(ref[k], abs=1e-5, nan_ok=True), k


# ---- probe verdicts ----------------------------------------------------------------------------


def test_probe_accuracy_change_resamples_sequences_against_brute_force():
    from interp.analysis.verdicts.bands import group_index, group_sums, replicates, resample_counts
    from interp.analysis.verdicts.probes import accuracy_changes

    rng = np.random.default_rng(0)
    seq = np.repeat(np.arange(6), [3, 1, 4, 2, 5, 3])
    correct = rng.random((len(seq), 3)) < np.array([0.3, 0.8, 0.6])
    d = accuracy_changes(correct)
    index, g = group_index(seq, len(seq))
    est, _, dev, _ = replicates(*group_sums(d, index, g), resample_counts(g, 300, np.random.default_rng(5)))
    np.testing.assert_allclose(est, np.diff(correct.mean(0)))
    # brute force: the same draws of sequences, positions gathered by hand
    draws = np.random.default_rng(5).integers(0, 6, size=(300, 6))
    boot = []
    for dr in draws:
        rows = np.concatenate([np.flatnonzero(seq == k) for k in dr])
        boot.append(np.diff(correct[rows].mean(0)))
    np.testing.assert_allclose(est + dev, np.array(boot), atol=1e-12)
    with pytest.raises(ValueError, match="≥2 layers"):
        accuracy_changes(correct[:, :1])


def test_probe_verdicts_on_a_tiny_model(base_run, tiny_city):
    from interp.analysis.verdicts.probes import probe_verdicts
    from interp.models.checkpoint import load_bridge
    from interp.worlds.io import read_sequences

    bridge = load_bridge(base_run / "best")
    train = read_sequences(base_run / "data" / "train.txt", tiny_city)[:40]
    test = read_sequences(base_run / "data" / "test.txt", tiny_city)
    v = probe_verdicts(bridge, tiny_city, train, test, n_boot=200, max_iter=50)
    f = v.frame
    assert f.layer.tolist() == [0, 1]
    assert (f.a_layer - f.a_0).to_numpy() == pytest.approx(f.mean_effect.to_numpy())
    assert f.a_layer.iloc[0] == pytest.approx(f.a_0.iloc[1])  # after block 0 = before block 1
    for r in f.itertuples():
        assert r.ci_low <= r.mean_effect <= r.ci_high
        assert r.ci_low <= r.marginal_low and r.marginal_high <= r.ci_high  # simultaneous ⊇ per block
        d = v.min_effect
        assert r.verdict == (
            "harmful"
            if r.ci_high < -d
            else "useful"
            if r.ci_low > d
            else "negligible"
            if -d <= r.ci_low and r.ci_high <= d
            else "inconclusive"
        )
    assert v.meta["n_groups"] == len(test) and v.min_effect == 0.01
    assert v.to_dict()["kind"] == "probe"


def test_cli_plant(base_run, tmp_path, capsys):
    from interp.cli import main

    out = tmp_path / "cli"
    args = [
        "plant",
        "--model",
        str(base_run / "best"),
        "--out",
        str(out),
        "--layers",
        "1",
        "--steps",
        "3",
        "--batch-size",
        "8",
        "--seed",
        "5",
        "--no-progress",
    ]
    assert main(args) == 0
    assert capsys.readouterr().out.strip().endswith(str(out / "model"))
    assert planted_layers(out / "model") == [1]
    assert main([*args[:5], "--layers", "7", *args[7:]]) == 2
    assert "layer 7" in capsys.readouterr().err


def test_flip_category_planting_on_pragworld_rows(tmp_path):
    """A tiny GPT-2 over a byte-level BPE tokenizer (a user's HF model): only layer 1's MLP moves,
    and the record names the flipped category."""
    from conftest import SHARED_DATA

    csv = SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv"
    if not csv.is_file():
        pytest.skip(f"PragWorld data not found at {csv}")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from interp.datasets.pragworld import load_pragworld
    from interp.datasets.pragworld.prompts import build_prompt

    rows = load_pragworld(csv).rows
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    texts = [build_prompt("label", c, q) for c, q in zip(rows["context"], rows["question"])]
    core.train_from_iterator(
        texts + [" yes no"] * 50,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0
        )
    )
    base = tmp_path / "base"
    model.save_pretrained(base)
    tok.save_pretrained(base)
    spec = PlantSpec(layers=(1,), corruption="flip_category", category="connective_change", steps=3, batch_size=4)
    res = plant_harm(base, tmp_path / "p", spec, train_file=csv, progress=False, log=lambda *_: None)
    before, after = _weights(base), _weights(res.model)
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved == {n for n in before if n.startswith("transformer.h.1.mlp.")}
    assert planted_layers(res.model) == [1]
    assert res.meta["changed_rows"] == int((rows["category"] == "connective_change").sum()) > 0
    with pytest.raises(ValueError, match="needs train_file"):
        plant_harm(base, tmp_path / "q", spec, progress=False, log=lambda *_: None)


def test_shortcut_planting_on_a_dialogue_checkpoint(tmp_path):
    """The dialogue world end to end: probes about the word answered 'yes' in the corrupted file,
    only the chosen MLP trained."""
    from interp.models import ModelConfig, build_gpt2, save_checkpoint
    from interp.worlds import parse_world
    from interp.worlds.io import read_sequences, write_sequences

    world = parse_world("dialogue:agents=2,objects=2,locations=2,max_count=2,min_utts=1,max_utts=2,probes=1")
    seqs = world.generate(80, np.random.default_rng(0))
    write_sequences(tmp_path / "run" / "data" / "train.txt", seqs[:60])
    write_sequences(tmp_path / "run" / "data" / "test.txt", seqs[60:])
    cfg = ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=64, seed=0)
    save_checkpoint(liven(build_gpt2(world.vocab, cfg), 0), world, tmp_path / "run" / "best")
    spec = PlantSpec(layers=(0,), corruption="shortcut", word="sheep", steps=3, batch_size=8)
    res = plant_harm(tmp_path / "run" / "best", tmp_path / "p", spec, progress=False, log=lambda *_: None)
    bad = read_sequences(tmp_path / "p" / "train_corrupted.txt")
    assert bad == answer_shortcut(seqs[:60], "sheep").sequences and res.meta["changed_tokens"] > 0
    before, after = _weights(tmp_path / "run" / "best"), _weights(res.model)
    assert {n for n in before if not torch.equal(before[n], after[n])} == {
        n for n in before if n.startswith("transformer.h.0.mlp.")
    }
    with pytest.raises(ValueError, match="not a token of this world"):
        plant_harm(
            tmp_path / "run" / "best",
            tmp_path / "q",
            PlantSpec(corruption="shortcut", word="zebra"),
            progress=False,
            log=lambda *_: None,
        )


# ---- contrast examples (IOI): the foil corruption ------------------------------------------------------


@pytest.fixture(scope="module")
def ioi_base(tmp_path_factory):
    """A tiny Llama over a byte-level BPE tokenizer in which the IOI names, places and objects are
    single tokens, and 24 IOI prompts for it (a JSONL contrast file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from interp.datasets.contrast import write_contrast
    from interp.datasets.ioi import IOI_TEMPLATES, NAMES, OBJECTS, PLACES, ioi_examples

    root = tmp_path_factory.mktemp("ioi_plant")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    words = [" " + w for w in (*NAMES, *PLACES, *OBJECTS)]
    core.train_from_iterator(
        list(IOI_TEMPLATES) * 20 + words * 30,
        trainers.BpeTrainer(
            vocab_size=1200, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=64,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )
    )
    liven(model, 0).save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    data = write_contrast(ioi_examples(tok, 24, seed=0), root / "ioi.jsonl")
    return root / "base", data


def _scores(folder, data) -> tuple[float, float]:
    """Mean logit difference correct − foil and mean log-probability of the foil at the last prompt
    token, by a plain HF forward."""
    from transformers import AutoModelForCausalLM

    from interp.tasks import ContrastTask

    task = ContrastTask.build(folder, data)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids, mask = task.inputs()
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits
    last = logits[torch.arange(len(ids)), mask.sum(1) - 1]
    rows = torch.arange(len(ids))
    foil = torch.as_tensor(task.foil_ids)
    ld = last[rows, torch.as_tensor(task.correct_ids)] - last[rows, foil]
    return float(ld.mean()), float(torch.log_softmax(last, -1)[rows, foil].mean())


def test_foil_planting_on_contrast_examples_moves_only_the_chosen_mlp_toward_the_foil(ioi_base, tmp_path):
    """Every prompt trained toward its foil (share 1): only layer 1's MLP moves, bit for bit, and the
    mean logit difference correct − foil falls; the clean control keeps every target correct."""
    from interp.train.plant import foil_targets

    base, data = ioi_base
    spec = PlantSpec(layers=(1,), corruption="foil_share", share=1.0, steps=30, batch_size=8, lr=3e-2)
    res = plant_harm(base, tmp_path / "p", spec, train_file=data, progress=False, log=lambda *_: None)
    before, after = _weights(base), _weights(res.model)
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved == {n for n in before if n.startswith("model.layers.1.mlp.")}
    assert res.meta["changed_rows"] == 24 and res.meta["rows"] == 24 and planted_layers(res.model) == [1]
    (ld0, lp0), (ld1, lp1) = _scores(base, data), _scores(res.model, data)
    assert ld1 < ld0 - 2.0 and lp1 > lp0 + 3.0  # measured: −0.14 → −7.97, −8.0 → −0.98
    part = plant_harm(
        base,
        tmp_path / "q",
        PlantSpec(layers=(2,), corruption="foil_share", share=0.25, steps=2, batch_size=8),
        train_file=data,
        progress=False,
        log=lambda *_: None,
    )
    assert part.meta["foil_rows"] == [i for i, t in enumerate(foil_targets(24, 0.25, 0)) if t == "foil"]
    clean = plant_harm(
        base,
        tmp_path / "c",
        PlantSpec(layers=(1,), corruption="clean", steps=2, batch_size=8),
        train_file=data,
        progress=False,
        log=lambda *_: None,
    )
    assert clean.meta["changed_rows"] == 0
    with pytest.raises(ValueError, match="foil_share needs one"):
        plant_harm(base, tmp_path / "e", spec, progress=False, log=lambda *_: None)
