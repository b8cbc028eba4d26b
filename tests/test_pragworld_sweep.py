"""``interp sweep`` on a PragWorld file: MLP zero-out with per-category breakdown and the paper's
raw accuracy rule; direct-effect patching on (original, alteration) pairs, with the reference's
pair filter counted. Activation patching of the pairs, and ``--prepend-bos``, against a raw HF
model with PyTorch hooks: ``tests/test_pragworld_patching.py``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import liven

from interp.datasets.pragworld import label_prompt, load_pragworld, write_pragworld_csv

CTX = [
    "A: did you put the apples in the box\nB: I did",
    "A: where is Bob\nB: he went to the garden",
    "A: are all the pears in the basket\nB: some are",
]


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory):
    rows = []
    for g, ctx in enumerate(CTX):
        rows.append(
            dict(
                context=ctx, question="is it yes?", gold=g % 2, altered=False, target="none", category=None, effect=None
            )
        )
        rows.append(
            dict(
                context=ctx + " not",
                question="is it yes?",
                gold=1 - g % 2,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            )
        )
        rows.append(
            dict(
                context=ctx.replace("A:", "C:"),
                question="is it yes?",
                gold=g % 2,
                altered=True,
                target="context",
                category="variable_substitution",
                effect="invariant",
            )
        )
    return write_pragworld_csv(pd.DataFrame(rows), tmp_path_factory.mktemp("pws") / "tiny.csv")


@pytest.fixture(scope="module")
def model_dir(data_csv, tmp_path_factory):
    from interp.models import ModelConfig, build_gpt2
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    data = load_pragworld(data_csv)
    words = {"yes", "no"}
    for c, q in zip(data.rows["context"], data.rows["question"]):
        words |= set(label_prompt(c, q).split())
    vocab = Vocab.for_tokens(sorted(words))
    folder = tmp_path_factory.mktemp("pws_model") / "best"
    liven(build_gpt2(vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=64, seed=0)), 3).save_pretrained(folder)
    _word_level_tokenizer(vocab).save_pretrained(folder)
    return folder


def test_mlp_zero_on_pragworld_rows(model_dir, data_csv, tmp_path):
    from interp.analysis.engines.scoring import Batch, two_way_prob
    from interp.jobs.sweep import run_sweep
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    run = run_sweep(model_dir, data=data_csv, kind="mlp-zero", out=tmp_path / "s", n_boot=200)
    assert run.info["n_examples"] == 9
    by_cat = run.verdicts.by_category
    assert set(by_cat.columns) == {"original", "negation", "variable_substitution"}
    # oracle: a hand-written zero hook per layer gives the same P(gold)
    bridge = load_bridge(model_dir).eval()
    rows = load_pragworld(data_csv).rows
    task = YesNoTask.pragworld(model_dir, rows)
    ids, mask = task.inputs()
    metric = two_way_prob(task.yes_id, task.no_id, rows["gold"].tolist())
    kw = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)}
    for layer in (0, 1):
        with torch.no_grad():
            logits = bridge.run_with_hooks(
                ids, fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", lambda a, hook: a * 0)], **kw
            )
        want = metric(logits, Batch(ids, mask, torch.arange(9))).numpy()
        got = run.sweep.frame[run.sweep.frame.layer == layer].sort_values("example")["ablated"].to_numpy()
        np.testing.assert_allclose(got, want, atol=1e-5)
    # the paper's raw rule is on accuracy (P(gold) > 0.5)
    f = run.verdicts.frame
    clean = run.sweep.frame[run.sweep.frame.layer == 0]["clean"].to_numpy()
    assert f["a_0"].iloc[0] == pytest.approx(float((clean > 0.5).mean()))
    saved = json.loads((tmp_path / "s" / "verdicts.json").read_text())
    assert "by_category" in saved and (tmp_path / "s" / "by_category.csv").is_file()


def test_direct_effect_patches_the_pairs_the_reference_would(model_dir, data_csv, tmp_path):
    """Gold answers set to the model's own answers on the alterations: every alteration is answered
    correctly, so exactly those whose answer differs from their original's are patched."""
    from interp.analysis.engines.scoring import forward
    from interp.jobs.sweep import run_sweep
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    rows = load_pragworld(data_csv).rows
    bridge = load_bridge(model_dir).eval()
    task = YesNoTask.pragworld(model_dir, rows)
    ids, mask = task.inputs()
    yes_id, no_id = task.yes_no_ids
    logits = forward(bridge, ids, mask)
    last = logits[torch.arange(len(rows)), mask.sum(1) - 1]
    answer = (last[:, yes_id] > last[:, no_id]).long().numpy()
    rows = rows.assign(gold=answer, answer=np.where(answer == 1, "yes", "no"))
    csv = write_pragworld_csv(rows, tmp_path / "own.csv")
    alts = [i for i in range(len(rows)) if rows["altered"].iloc[i]]
    differ = sum(answer[i] != answer[3 * (i // 3)] for i in alts)
    assert 0 < differ < len(alts), "pick model weights where some answers change and some do not"
    run = run_sweep(model_dir, data=csv, kind="direct-effect", out=tmp_path / "d", n_boot=200)
    assert run.info["n_pairs"] == differ
    assert run.info["skipped"] == {
        "no original in group": 0,
        "alteration answered wrongly": 0,
        "answer unchanged": len(alts) - differ,
    }
    assert set(run.sweep.frame["category"]) <= {"negation", "variable_substitution"}
    assert len(run.sweep.frame) == differ * 2  # one row per pair × layer


def test_bad_kind_and_activation_patching_without_equal_length_pairs(model_dir, data_csv, tmp_path):
    """Every sweep kind runs on a PragWorld file; activation patching needs (original, alteration)
    pairs of equal token length and says so, with the counts, when the reference's filter leaves
    none (here the one pair whose answer changes is a negation, one word longer)."""
    from interp.analysis.engines.scoring import forward
    from interp.jobs.sweep import run_pragworld_sweep, run_sweep
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    with pytest.raises(ValueError, match="mlp-zero, direct-effect, activation-patching"):
        run_pragworld_sweep(model_dir, data_csv, kind="activation")
    with pytest.raises(ValueError, match="--layers does not apply"):
        run_pragworld_sweep(model_dir, data_csv, kind="activation-patching", layers=[0])
    rows = load_pragworld(data_csv).rows
    task = YesNoTask.pragworld(model_dir, rows)
    ids, mask = task.inputs()
    last = forward(load_bridge(model_dir).eval(), ids, mask)[torch.arange(len(rows)), mask.sum(1) - 1]
    answer = (last[:, task.yes_id] > last[:, task.no_id]).long().numpy()
    changed = [(o, i) for o, i in task.pairs()[0] if answer[o] != answer[i]]
    assert changed and all(len(task.ids[o]) != len(task.ids[i]) for o, i in changed), "fixture weights changed?"
    csv = write_pragworld_csv(rows.assign(gold=answer, answer=np.where(answer == 1, "yes", "no")), tmp_path / "own.csv")
    with pytest.raises(ValueError, match=f"none of the {len(changed)} .* equal token length .*'answer unchanged'"):
        run_sweep(model_dir, data=csv, kind="activation-patching", out=tmp_path / "ap")


def test_the_pragworld_job_runs_every_stage_end_to_end(data_csv, model_dir, tmp_path):
    """``interp run`` with a ``job = "pragworld"`` config on a tiny model: (a) Table 1, (b) the
    sweeps and the layers chosen, (c) every objective fine-tuned and scored again; results.json and
    the before / after table written, the report drawn."""
    from interp.config import PragWorldJobConfig, load_toml
    from interp.jobs.pragworld import run_pragworld_job

    toml = tmp_path / "job.toml"
    toml.write_text(
        f'job = "pragworld"\nname = "tiny"\nmodel = "{model_dir}"\nmanual = "{data_csv}"\nsynthetic = "{data_csv}"\n'
        "[eval]\nrows = 9\nafter_rows = 6\nn_boot = 50\nbenchmark_chat_template = false\nmax_new_tokens = 3\n[layers]\nrows = 9\nafter_rows = 6\nmax_pairs = 2\nn_boot = 50\n"
        '[finetune]\nobjectives = ["plain", "hls", "ula"]\nseeds = [0]\nsteps = 2\nbatch_size = 2\nlr = 1e-3\n'
        "warmup_steps = 1\nn_train = 6\n[finetune.lora]\nenabled = false\n"
    )
    cfg = load_toml(PragWorldJobConfig, toml)
    said: list[str] = []
    final = run_pragworld_job(cfg, tmp_path / "run", progress=False, log=said.append)
    res = final["pragworld"]
    assert res["rows"]["eval"] == 9 and len(res["table1"]) >= 1
    assert len(res["layers"]["mlp_zero"]["layers"]) == 2  # both layers of the tiny model judged
    assert set(res["finetune"]["objectives"]) | set(res["finetune"]["skipped"]) == {"plain", "hls", "ula"}
    assert "plain" in res["finetune"]["objectives"] and res["before_after"]
    for name in ("results.json", "before_after.md", "before_after.csv", "table1.md", "run.json"):
        assert (tmp_path / "run" / name).is_file(), name
    assert any("before / after" in line for line in said)
