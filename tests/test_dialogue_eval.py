"""The dialogue scoring (interp.analysis.evaluation.dialogue) against a hand-worked example: two groups,
three rows each, every accuracy, robust accuracy, heuristic column and paired difference worked
out by hand below; the headline numbers equal score_pragworld's on the same rightness."""

from __future__ import annotations

import pytest

from interp.analysis.evaluation.dialogue import paired_difference, score_dialogue
from interp.datasets.contrast import ContrastExample


def _ex(group, category, effect, correct, foil, mentions, initial):
    meta = {"category": category, "effect": effect, "form": "cloze", "mentions": mentions, "initial": initial}
    return ContrastExample(prompt="x", correct=correct, foil=foil, group=group, template=category, meta=meta)


#: group a: the negation flips the answer (box → bag) and the model misses it; group b: the
#: negation is invariant (right) and the paraphrase is missed
EXAMPLES = [
    _ex("a", "Original", None, " box", " bag", ["bag", "box"], "bag"),
    _ex("a", "Negation", "Flip", " bag", " box", ["bag", "box"], "bag"),
    _ex("a", "Paraphrase", "Invariant", " box", " bag", ["bag", "box"], "bag"),
    _ex("b", "Original", None, " cup", " tin", ["tin", "cup"], "tin"),
    _ex("b", "Negation", "Invariant", " cup", " tin", ["tin", "cup"], "tin"),
    _ex("b", "Paraphrase", "Invariant", " cup", " tin", ["tin", "cup"], "tin"),
]
LOGIT_DIFF = [1.0, -0.5, 2.0, 0.5, 1.5, -1.0]


@pytest.fixture(scope="module")
def score():
    return score_dialogue(EXAMPLES, LOGIT_DIFF, n_boot=200)


def test_accuracy_logit_difference_and_robust_by_hand(score):
    r = score.row("all")
    assert (r["n"], r["groups"]) == (6, 2)
    assert r["accuracy"] == pytest.approx(4 / 6)
    assert r["logit_diff"] == pytest.approx(3.5 / 6)
    assert r["robust"] == 0.0  # each group has a wrong row
    assert score.row("Original")["robust"] == 1.0 and score.row("Original")["accuracy"] == 1.0
    neg = score.row("Negation")
    assert (neg["accuracy"], neg["robust"], neg["flip"], neg["invariant"]) == (0.5, 0.5, 0.0, 1.0)
    para = score.row("Paraphrase")
    assert (para["accuracy"], para["robust"]) == (0.5, 0.5)  # a: original and paraphrase right; b: paraphrase wrong
    flip, inv = score.row("flip"), score.row("invariant")
    assert (flip["n"], flip["accuracy"], flip["robust"]) == (1, 0.0, 0.0)
    assert inv["accuracy"] == pytest.approx(2 / 3) and inv["robust"] == 0.5
    assert list(score.table["subset"]) == ["all", "Original", "Negation", "Paraphrase", "flip", "invariant"]


def test_intervals_are_group_resamples(score):
    orig = score.row("Original")
    assert (orig["accuracy_lo"], orig["accuracy_hi"]) == (1.0, 1.0)  # every resample has only right originals
    r = score.row("all")
    assert 0 <= r["accuracy_lo"] <= r["accuracy"] <= r["accuracy_hi"] <= 1
    assert (r["robust_lo"], r["robust_hi"]) == (0.0, 0.0)
    assert score.row("flip")["robust_lo"] != score.row("flip")["robust_lo"]  # one group: no interval (NaN)


def test_heuristic_columns_by_hand(score):
    r = score.row("all")
    # recent: right except on a's flipped negation; first / initial: right only there
    assert r["recent_accuracy"] == pytest.approx(5 / 6) and r["recent_robust"] == 0.5
    assert r["first_accuracy"] == pytest.approx(1 / 6) and r["initial_accuracy"] == pytest.approx(1 / 6)
    assert score.row("flip")["recent_accuracy"] == 0.0 and score.row("flip")["initial_accuracy"] == 1.0
    assert "recent" in score.markdown() and "| all | 6 | 2 |" in score.markdown()


def test_summary_is_score_pragworld_on_the_same_rightness(score):
    s = score.summary()
    assert s["robust"] == 0.0 and s["groups"] == 2 and s["rows"] == 6
    assert s["flip"] == 0.0 and s["invariant"] == pytest.approx(200 / 3) and s["original"] == 100.0


def test_paired_difference_by_group():
    base = score_dialogue(EXAMPLES, LOGIT_DIFF, n_boot=100)
    better = score_dialogue(EXAMPLES, [1.0] * 6, n_boot=100)
    d = paired_difference(better, base)
    assert (d["diff"], d["lo"], d["hi"], d["a"], d["b"]) == (1.0, 1.0, 1.0, 1.0, 0.0)
    acc = paired_difference([better, base], base, "accuracy")  # seeds averaged per group: a 2/3 → 5/6, b 2/3 → 5/6
    assert acc["diff"] == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="quantity must be"):
        paired_difference(better, base, "auc")


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="one logit difference per example"):
        score_dialogue(EXAMPLES, [1.0])


def test_verdict_says_cannot_below_chance(score):
    assert score.verdict().startswith("cannot do the task as measured: accuracy 67%")


def test_control_layers_are_near_the_harmful_ones_and_never_harmful_or_useful():
    from interp.analysis.evaluation.dialogue import control_layers

    for seed in range(20):
        got = control_layers([10, 20], [9, 11], 30, seed=seed)
        assert len(got) == 2 and not set(got) & {9, 10, 11, 20}
        assert 7 <= min(got) <= 13 and 17 <= max(got) <= 23
    assert len(control_layers([], [], 30)) == 2  # none harmful: two layers around the thirds
    assert control_layers([0], [1], 2) == [1]  # a two-layer model: only a useful layer is left
