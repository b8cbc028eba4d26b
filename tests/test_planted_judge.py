"""A planting judged against the unplanted model's verdicts (interp/analysis/planted/judge.py), on
hand-built verdict frames whose answers are worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from interp.analysis.planted.judge import detection_scores, verdict_changes
from interp.analysis.verdicts.layers import LayerVerdicts


def _verdicts(verdicts, effects, raw, metric="logit_diff"):
    n = len(verdicts)
    frame = pd.DataFrame(
        {
            "layer": range(n),
            "verdict": verdicts,
            "mean_effect": effects,
            "ci_low": [e - 0.1 for e in effects],
            "ci_high": [e + 0.1 for e in effects],
            "raw_verdict": raw,
        }
    )
    return LayerVerdicts(frame, None, {"metric": metric, "higher_is_better": True})


BEFORE = _verdicts(
    ["useful", "negligible", "harmful", "negligible", "useful"],
    [-2.0, 0.0, 0.5, 0.05, -1.0],
    ["useful", "negligible", "harmful", "useful", "useful"],
)


def test_a_planted_layer_that_becomes_harmful_and_ranks_first_is_found():
    # layer 3 planted (Δ +1.95), layer 1 (upstream, Δ +0.3) also changes; layer 2 stays harmful
    after = _verdicts(
        ["useful", "harmful", "harmful", "harmful", "useful"],
        [-2.0, 0.3, 0.6, 2.0, -0.9],
        ["useful", "harmful", "harmful", "harmful", "useful"],
    )
    ch = verdict_changes(BEFORE, after, [3])
    assert list(ch.changed) == [False, True, False, True, False]
    assert list(ch.became_harmful) == [False, True, False, True, False]
    assert ch.set_index("layer")["rank"][3] == 1 and ch.set_index("layer")["rank"][1] == 2
    assert math.isnan(ch.set_index("layer")["rank"][0])
    assert ch.set_index("layer")["delta_effect"][3] == pytest.approx(1.95)
    d = detection_scores(ch)
    assert d["found"] and d["planted_harmful"] and d["planted_top"]
    assert d["newly_harmful"] == [1, 3] and d["precision"] == 0.5 and d["recall"] == 1.0
    assert d["raw_newly_harmful"] == [1, 3] and d["other_changed"] == [1]


def test_a_planted_layer_outranked_by_another_change_is_not_found():
    after = _verdicts(
        ["inconclusive", "negligible", "harmful", "harmful", "useful"],
        [0.8, 0.0, 0.5, 0.3, -1.0],
        ["harmful", "negligible", "harmful", "harmful", "useful"],
    )
    d = detection_scores(verdict_changes(BEFORE, after, [3]))
    assert d["planted_harmful"] and not d["planted_top"] and not d["found"]  # removing layer 0 helps more (0.8)
    assert d["raw_newly_harmful"] == [0, 3] and d["raw_precision"] == 0.5


def test_useful_layers_that_lose_less_do_not_outrank_the_planted_one():
    """A planting lowers the clean metric, so a useful layer's removal costs less (a large
    delta_effect, here +1.6 for layer 0) without doing harm: the rank reads the planted model's effect."""
    after = _verdicts(
        ["inconclusive", "negligible", "harmful", "harmful", "useful"],
        [-0.4, 0.0, 0.5, 0.9, -1.0],
        ["useful", "negligible", "harmful", "harmful", "useful"],
    )
    ch = verdict_changes(BEFORE, after, [3])
    assert ch.set_index("layer")["delta_effect"][0] > ch.set_index("layer")["delta_effect"][3]
    assert detection_scores(ch)["found"]


def test_a_control_has_no_recall_and_zero_precision_only_when_it_calls_a_layer():
    d = detection_scores(verdict_changes(BEFORE, BEFORE, []))
    assert d["newly_harmful"] == [] and math.isnan(d["precision"]) and math.isnan(d["recall"]) and not d["found"]


def test_verdicts_of_another_metric_are_refused():
    other = _verdicts(["useful"] * 5, [0.0] * 5, ["useful"] * 5, metric="two_way_prob")
    with pytest.raises(ValueError, match="metric 'two_way_prob'"):
        verdict_changes(BEFORE, other, [1])


def _sweep(effects):
    """A SweepResult of per-example effects ``[example][layer]``, two examples per group."""
    from interp.analysis.engines.sweeps import SweepResult

    rows = [
        {"example": i, "layer": j, "clean": 0.0, "ablated": e, "effect": e, "group": f"g{i // 2}"}
        for i, row in enumerate(effects)
        for j, e in enumerate(row)
    ]
    return SweepResult(pd.DataFrame(rows), {})


def test_a_layer_already_harmful_whose_harm_grows_is_reported_beside_the_verdicts():
    """Layer 2 is harmful before (0.5) and after; its effect rises by exactly 1.0 on every prompt
    (worked by hand: rise 1.0, band [1.0, 1.0] > margin 0.1). Layer 4 moves by ±0.3 alternately
    within each group (mean 0): no rise. The rise is reported; the verdicts' change is not altered."""
    import numpy as np

    rng = np.random.default_rng(0)
    before = rng.normal(0, 0.05, size=(12, 5)) + np.array([-2.0, 0.0, 0.5, 0.05, -1.0])
    after = before.copy()
    after[:, 2] += 1.0
    after[:, 4] += np.where(np.arange(12) % 2 == 0, 0.3, -0.3)
    from interp.analysis.planted.judge import harm_rise

    rise = harm_rise(_sweep(before), _sweep(after), min_effect=0.1, n_boot=200)
    r = rise.set_index("layer")
    assert r.loc[2, "rise"] == pytest.approx(1.0) and r.loc[2, "rise_low"] == pytest.approx(1.0)
    assert list(rise["rose"]) == [False, False, True, False, False]
    planted_v = _verdicts(
        ["useful", "negligible", "harmful", "negligible", "useful"],
        [-2.0, 0.0, 1.5, 0.05, -1.0],
        ["useful", "negligible", "harmful", "useful", "useful"],
    )
    ch = verdict_changes(BEFORE, planted_v, [2], rise=rise)
    by = ch.set_index("layer")
    assert by.loc[2, "harm_rose"] and not by.loc[2, "changed"] and not by.loc[2, "became_harmful"]
    assert list(ch["harm_rose"]) == [False, False, True, False, False]
    d = detection_scores(ch)
    assert d["harm_rose"] == [2] and d["newly_harmful"] == [] and not d["found"]
    assert detection_scores(verdict_changes(BEFORE, planted_v, [2]))["harm_rose"] == []
    with pytest.raises(ValueError, match="same examples"):
        harm_rise(_sweep(before), _sweep(after[:10]), min_effect=0.1)
