"""Bias vs mechanism (:mod:`interp.analysis.verdicts.prior_shift`) and confirmation on held-out groups
(:mod:`interp.analysis.verdicts.confirmation`), on synthetic sweeps whose truth is planted: a layer whose
removal only adds a constant to the yes − no logit (a prior shift) is flagged, a layer whose
removal destroys what separates yes from no (a mechanism) is not; a real effect is confirmed on
the held-out half, a winner's-curse selection on pure noise is confirmed at most at the nominal
rate."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from interp.analysis.engines.sweeps import SweepResult


def _yesno_sweep(seed: int = 0, G: int = 40, m: int = 5, metric: str = "logit_diff") -> SweepResult:
    """A 'no'-biased model (yes-score = ±1.5 + noise − 1): layer 0's removal adds +1 to every
    yes-score (prior shift towards yes), layer 1's shrinks the signal and adds noise (mechanism
    lost), layer 2's does nothing (±0.01)."""
    rng = np.random.default_rng(seed)
    n = G * m
    group = np.repeat(np.arange(G), m)
    gold = rng.integers(0, 2, n)
    y = np.where(gold == 1, 1.5, -1.5) + rng.normal(0, 1.5, n) - 1.0
    ablated = {0: y + 1.0, 1: 0.2 * y - 0.8 + rng.normal(0, 1.5, n), 2: y + rng.normal(0, 0.01, n)}
    o = np.where(gold == 1, 1.0, -1.0)

    def score(v):  # the metric, oriented to gold
        return o * v if metric == "logit_diff" else 1 / (1 + np.exp(-o * v))

    rows = [
        dict(
            example=i,
            layer=k,
            clean=score(y)[i],
            ablated=score(a)[i],
            effect=score(a)[i] - score(y)[i],
            group=group[i],
            gold=gold[i],
        )
        for k, a in ablated.items()
        for i in range(n)
    ]
    return SweepResult(pd.DataFrame(rows), {"metric": metric, "higher_is_better": True, "kind": "mlp_zero"})


@pytest.mark.parametrize("metric", ["logit_diff", "two_way_prob"])
def test_prior_shift_is_flagged_and_a_mechanism_is_not(metric):
    from interp.analysis.verdicts.prior_shift import prior_shift

    frame, meta = prior_shift(_yesno_sweep(metric=metric), n_boot=500)
    by = frame.set_index("layer")
    assert by.loc[0, "bias"] and "opposite class effects" in by.loc[0, "bias_reason"]
    assert by.loc[0, "yes_verdict"] == "harmful" and by.loc[0, "no_verdict"] == "useful"
    assert by.loc[0, "towards"] == "yes"
    assert by.loc[0, "recentred_effect"] == 0.0  # a constant shift leaves the re-centred answers unchanged
    assert not by.loc[1, "bias"] and by.loc[1, "yes_verdict"] == by.loc[1, "no_verdict"] == "useful"
    assert by.loc[1, "recentred_high"] < 0  # the mechanism's accuracy loss stays after re-centring
    assert not by.loc[2, "bias"]
    assert meta["layers"] == [0]
    assert meta["words"][0].startswith(
        "Layer 0 shifts the yes/no prior (opposite class effects): removing it moves "
        "answers towards yes (the layer pushes towards no)"
    )


def test_accuracy_that_vanishes_when_recentred_is_flagged():
    """A removal that rescales the yes-score monotonically (same ranking) and shifts it: the fixed
    threshold's accuracy moves, the re-centred one cannot — flagged by the second check."""
    from interp.analysis.verdicts.prior_shift import prior_shift, recentred_correct

    sw = _yesno_sweep()
    f = sw.frame
    gold = f["gold"].to_numpy()
    o = np.where(gold == 1, 1.0, -1.0)
    y = o * f["clean"].to_numpy()
    sel = f["layer"] == 2
    new = 0.3 * y - 0.7
    f.loc[sel, "ablated"] = (o * new)[sel]
    f.loc[sel, "effect"] = f.loc[sel, "ablated"] - f.loc[sel, "clean"]
    frame, _ = prior_shift(sw, n_boot=500)
    r = frame.set_index("layer").loc[2]
    assert r["acc_verdict"] == "useful" and r["recentred_effect"] == 0.0
    assert r["bias"] and "vanishes when re-centred" in r["bias_reason"]
    # re-centring: the threshold of each half is the other half's quantile at its gold yes share
    score = np.array([0.1, 0.2, 0.3, 0.4, 0.9, 0.8, 0.7, 0.6])
    g = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    correct, tau = recentred_correct(score, g, np.array([0, 0, 0, 0, 1, 1, 1, 1]), seed=0)
    assert set(np.round(tau, 6)) == {np.quantile(score[:4], 0.5), np.quantile(score[4:], 0.5)}
    assert correct.shape == (8,)


def _noise_sweep(rng, G=30, m=3, L=16, effects=None) -> SweepResult:
    n = G * m
    group = np.repeat(np.arange(G), m)
    u = 0.7 * rng.normal(0, 1, (G, L))[group] + rng.normal(0, 1, (n, L))
    for layer, e in (effects or {}).items():
        u[:, layer] += e
    rows = [
        dict(example=i, layer=k, clean=0.0, ablated=u[i, k], effect=u[i, k], group=group[i])
        for i in range(n)
        for k in range(L)
    ]
    return SweepResult(pd.DataFrame(rows), {"metric": "synthetic", "higher_is_better": True})


def test_a_real_effect_is_confirmed_and_noise_selected_by_the_winners_curse_is_not():
    """Discovery with the marginal per-layer rule (the winner's curse: on 15 null layers about half
    the sweeps select one) and confirmation on the held-out half: the selected null layers are
    confirmed at most at the nominal rate (≤ 5 % + 2 Monte Carlo SE); the planted layer (+0.9)
    is confirmed in most rounds."""
    from interp.analysis.verdicts.confirmation import confirm_verdicts
    from interp.analysis.verdicts.layers import layer_verdicts

    rng = np.random.default_rng(7)
    null_sel = null_conf = true_sel = true_conf = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rep in range(80):
            sw = _noise_sweep(rng, effects={3: 0.9})
            rule = dict(n_boot=400, min_effect=0.0, per_layer=True)
            v = confirm_verdicts(layer_verdicts(sw, **rule), sw, 2, seed=rep, **rule)
            f = v.frame
            chosen = f["discovery_verdict"].isin(["harmful", "useful"]).to_numpy()
            planted = (f["layer"] == 3).to_numpy()
            null_sel += int((chosen & ~planted).sum())
            null_conf += int((f["confirmed"].to_numpy() & ~planted).sum())
            true_sel += int((chosen & planted).sum())
            true_conf += int((f["confirmed"].to_numpy() & planted).sum())
    assert null_sel >= 40  # the winner's curse did select noise
    rate = null_conf / null_sel
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / null_sel), (null_conf, null_sel)
    assert true_sel >= 70 and true_conf / true_sel >= 0.8, (true_conf, true_sel)
    assert v.meta["confirmation"]["words"][0].startswith("Confirmation (2 folds of the groups, seed 79)")


def test_folds_split_groups_not_rows_and_bad_folds_are_refused():
    from interp.analysis.verdicts.confirmation import fold_groups
    from interp.jobs.sweep import check_folds

    groups = np.repeat(np.arange(12), 3)
    fold = fold_groups(groups, 3, seed=1)
    for g in range(12):
        assert len(set(fold[groups == g])) == 1  # a group never straddles folds
    assert sorted(np.bincount(fold) // 3) == [4, 4, 4]
    assert not np.array_equal(fold, fold_groups(groups, 3, seed=2))
    with pytest.raises(ValueError, match="at least 8 groups"):
        fold_groups(np.arange(5), 4)
    with pytest.raises(ValueError, match="--folds must be an integer ≥ 2"):
        check_folds(1)


@pytest.fixture(scope="module")
def planted_bias(tmp_path_factory):
    """A tiny word-level GPT-2 (2 layers) on 16 PragWorld-style groups, with a prior shift planted
    in layer 1: its MLP's output weights zeroed and its output bias set along the direction the
    final norm and unembedding read as yes − no, so layer 1 adds the same push towards "yes" at
    every position and nothing else."""
    import torch
    from conftest import liven

    from interp.datasets.pragworld import label_prompt, load_pragworld, write_pragworld_csv
    from interp.models import ModelConfig, build_gpt2
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    rng = np.random.default_rng(3)
    names = ["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal"]
    things = ["apples", "pears", "keys", "books"]
    rows = []
    for g in range(16):
        ctx = f"A: did {names[g % 8]} put the {things[g % 4]} in the box\nB: {'yes' if g % 2 else 'no'} she did"
        for k, alt in enumerate(("", " not", " today")):
            rows.append(
                dict(
                    context=ctx + alt,
                    question=f"is it {things[(g + k) % 4]}?",
                    gold=int(rng.integers(0, 2)),
                    altered=k > 0,
                    target="none" if k == 0 else "context",
                    category=None if k == 0 else "negation",
                    effect=None if k == 0 else "flip",
                )
            )
    root = tmp_path_factory.mktemp("planted_bias")
    csv = write_pragworld_csv(pd.DataFrame(rows), root / "rows.csv")
    data = load_pragworld(csv)
    words = {"yes", "no"}
    for c, q in zip(data.rows["context"], data.rows["question"]):
        words |= set(label_prompt(c, q).split())
    vocab = Vocab.for_tokens(sorted(words))
    model = liven(build_gpt2(vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=96, seed=0)), 3)
    with torch.no_grad():
        w_u = model.get_output_embeddings().weight
        d = model.transformer.ln_f.weight * (w_u[vocab.id("yes")] - w_u[vocab.id("no")])
        d = d - d.mean()
        mlp = model.transformer.h[1].mlp
        mlp.c_proj.weight.zero_()
        mlp.c_proj.bias.copy_(4.0 * d / d.norm())
    folder = root / "best"
    model.save_pretrained(folder)
    _word_level_tokenizer(vocab).save_pretrained(folder)
    return folder, csv


def test_a_planted_prior_shift_is_flagged_end_to_end(planted_bias, tmp_path):
    """``interp sweep`` on the planted model: layer 1 is flagged (its removal moves answers towards
    no), with both metrics; the report's words and the per-class columns are in verdicts.json; the
    logit-diff run also writes the direct beside the total effect and its figure."""
    import json

    from interp.jobs.sweep import run_sweep

    model, csv = planted_bias
    for metric in ("p-gold", "logit-diff"):
        run = run_sweep(model, data=csv, kind="mlp-zero", out=tmp_path / metric, n_boot=300, metric=metric)
        f = run.verdicts.frame.set_index("layer")
        assert f.loc[1, "bias"], f[["yes_effect", "no_effect", "yes_verdict", "no_verdict", "bias_reason"]]
        assert f.loc[1, "towards"] == "no" and f.loc[1, "yes_verdict"] == "useful"
        saved = json.loads((tmp_path / metric / "verdicts.json").read_text())
        assert 1 in saved["prior_shift"]["layers"]
        assert any(w.startswith("Layer 1 shifts the yes/no prior") for w in saved["prior_shift"]["words"])
        assert {"yes_effect", "no_effect", "bias", "recentred_effect"} <= set(saved["layers"][0])
        assert "Layer 1 shifts the yes/no prior" in run.table()
        assert set(run.sweep.frame["gold"]) == {0, 1}
    assert (tmp_path / "logit-diff" / "direct_total.png").is_file()
    assert "direct_effect" in f.columns and "Direct beside total" in run.table()
    from interp.viz.report import render_report

    page = render_report(tmp_path / "logit-diff", model=False)
    findings = page[page.index('<section id="s-findings">') : page.index("<nav>")]
    assert "Layer 1 shifts the yes/no prior" in findings and "prior shift" in findings
    assert "yes-rows: effect" in findings and "direct effect [band]" in findings
