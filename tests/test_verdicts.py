"""The verdict rule (interp.layer_verdicts/2) against hand-worked answers, exact enumeration and
simulated sweeps with known truth.

- the four verdicts of an interval against ±δ, edge cases included (hand-worked table);
- the cluster bootstrap: the estimate and CR1 standard error by hand; every one of the 27
  resamples of 3 groups enumerated and recomputed row by row (the studentized band must equal
  the one built from that enumeration); the resample counts are multinomial; the design effect of
  identical rows in groups is exactly √((mG − 1)/(G − 1));
- verdict files: /2 round trip, a hand-written /1 file read with ``neutral`` → ``inconclusive``;
- calibration: on simulated null sweeps (30 layers, 40 groups of 5 sharing most of their
  variation) the shipped rule's family-wise error stays near 5 %, and the rules it replaces
  (rows resampled; one marginal interval per layer; the /1 rule) fail the same bound.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.verdicts.bands import cluster_band, group_index, group_sums, replicates, resample_counts
from interp.analysis.verdicts.layers import (
    FORMAT,
    VERDICTS,
    classify,
    layer_verdicts,
    legacy_verdicts,
    load_verdicts,
    map_verdicts,
    outcome,
)

# ---- the classification ----------------------------------------------------------------------


def test_outcome_and_verdicts_of_hand_made_intervals():
    cases = [
        ((0.2, 0.5), "above"),
        ((-0.5, -0.2), "below"),
        ((-0.05, 0.08), "negligible"),
        ((0.05, 0.3), "inconclusive"),
        ((-0.3, 0.05), "inconclusive"),
        ((-0.1, 0.1), "negligible"),
        ((0.1, 0.3), "inconclusive"),  # low = +δ does not clear the margin
        ((-0.3, 0.3), "inconclusive"),
        ((math.nan, math.nan), "inconclusive"),
        ((0.4, 0.4), "above"),
    ]
    lo, hi = np.array([c[0][0] for c in cases]), np.array([c[0][1] for c in cases])
    assert list(outcome(lo, hi, 0.1)) == [c[1] for c in cases]
    # a removal's benefit above +δ is harmful; a block's change below −δ is harmful (probes)
    names = {"above": "harmful", "below": "useful", "negligible": "negligible", "inconclusive": "inconclusive"}
    assert list(classify(lo, hi, 0.1)) == [names[c[1]] for c in cases]
    flipped = {"above": "useful", "below": "harmful", "negligible": "negligible", "inconclusive": "inconclusive"}
    assert list(classify(lo, hi, 0.1, harmful="below")) == [flipped[c[1]] for c in cases]
    assert set(classify(lo, hi, 0.1)) <= set(VERDICTS)
    # δ = 0: only the sign; a point at 0 is negligible
    assert list(outcome([0.0, 0.01, -0.2], [0.0, 0.3, 0.1], 0.0)) == ["negligible", "above", "inconclusive"]
    with pytest.raises(ValueError, match="margin"):
        outcome([0.0], [1.0], -0.1)


# ---- the cluster bootstrap -------------------------------------------------------------------

#: three groups of 2, 1 and 3 rows; two sites (columns)
VALUES = np.array([[1.0, 0.0], [3.0, 2.0], [2.0, 1.0], [6.0, -1.0], [6.0, 0.5], [9.0, 3.0]])
GROUPS = np.array(["a", "a", "b", "c", "c", "c"])


def _cr1(values: np.ndarray, groups: list) -> tuple[float, float]:
    """Mean and CR1 standard error written out for one column and a list of clusters (each a list
    of row values), the textbook way."""
    rows = [v for cl in groups for v in cl]
    mean = sum(rows) / len(rows)
    g = len(groups)
    ss = sum((sum(cl) - len(cl) * mean) ** 2 for cl in groups)
    return mean, math.sqrt(g / (g - 1) * ss) / len(rows)


def test_estimate_and_cr1_standard_error_by_hand():
    band = cluster_band(VALUES, GROUPS, n_boot=50)
    # site 0: sums 4, 2, 21 over 2, 1, 3 rows → mean 27/6 = 4.5; residual sums −5, −2.5, 7.5
    assert band.estimate[0] == pytest.approx(4.5)
    assert band.se[0] == pytest.approx(math.sqrt(1.5 * (25 + 6.25 + 56.25)) / 6)
    assert band.n.tolist() == [6, 6] and band.n_groups == 3


def test_group_bootstrap_equals_the_enumeration_of_every_resample():
    index, g = group_index(GROUPS, len(VALUES))
    clusters = [[VALUES[index == k, j].tolist() for k in range(g)] for j in range(2)]
    draws = list(itertools.product(range(g), repeat=g))  # all 27 ordered draws of 3 groups
    counts = np.array([np.bincount(d, minlength=g) for d in draws])
    # each resample written out: the drawn clusters (a repeated cluster counts twice), mean and CR1 SE
    t = np.zeros((len(draws), 2))
    for b, d in enumerate(draws):
        for j in range(2):
            theta = _cr1(VALUES[:, j], clusters[j])[0]
            mean, se = _cr1(VALUES[:, j], [clusters[j][k] for k in d])
            dev = mean - theta
            t[b, j] = 0.0 if abs(dev) < 1e-12 else (math.inf if se < 1e-12 else abs(dev) / se)
    s, m = group_sums(VALUES, index, g)
    est, se, dev, se_star = replicates(s, m, counts)
    finite = np.isfinite(t) & (t > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ours = np.abs(dev) / se_star
    np.testing.assert_allclose(ours[finite], t[finite], rtol=1e-10)
    assert (np.isinf(t) == (np.abs(dev) > 1e-12) & (se_star < 1e-12)).all()  # one group drawn 3 times
    for conf in (0.8, 0.9):
        band = cluster_band(VALUES, GROUPS, counts=counts, confidence=conf)
        c_site = [np.quantile(t[:, j], conf, method="higher") for j in range(2)]
        c_max = np.quantile(t.max(axis=1), conf, method="higher")
        ses = [_cr1(VALUES[:, j], clusters[j])[1] for j in range(2)]
        for j in range(2):
            assert band.marginal_low[j] == pytest.approx(band.estimate[j] - c_site[j] * ses[j])
            assert band.marginal_high[j] == pytest.approx(band.estimate[j] + c_site[j] * ses[j])
            assert band.low[j] == pytest.approx(band.estimate[j] - c_max * ses[j])
        assert band.critical == pytest.approx(c_max)


def test_resample_counts_are_multinomial():
    counts = resample_counts(3, 27_000, np.random.default_rng(0))
    assert (counts.sum(1) == 3).all()
    patterns = pd.Series([tuple(sorted(c)) for c in counts.tolist()]).value_counts(normalize=True)
    # sorted count patterns of 3 draws from 3 groups: (0,0,3) 3/27, (0,1,2) 18/27, (1,1,1) 6/27
    assert patterns[(0, 0, 3)] == pytest.approx(3 / 27, abs=0.01)
    assert patterns[(0, 1, 2)] == pytest.approx(18 / 27, abs=0.01)
    assert patterns[(1, 1, 1)] == pytest.approx(6 / 27, abs=0.01)


def test_design_effect_of_identical_rows_in_groups():
    rng = np.random.default_rng(1)
    g, m = 40, 5
    values = np.repeat(rng.normal(size=(g, 3)), m, axis=0)  # ICC = 1: a group's rows are identical
    groups = np.repeat(np.arange(g), m)
    by_group = cluster_band(values, groups, n_boot=200)
    by_row = cluster_band(values, groups, n_boot=200, resample="rows")
    np.testing.assert_allclose(by_group.se / by_row.se, math.sqrt((m * g - 1) / (g - 1)))
    assert by_row.n_groups == g * m and by_group.n_groups == g


def test_band_edge_cases():
    values = np.array([[1.0, 2.0], [1.0, np.nan], [1.0, 4.0], [1.0, 6.0]])
    band = cluster_band(values, n_boot=200)
    assert band.se[0] == 0 and band.low[0] == band.high[0] == 1.0  # no variation: a point
    assert band.n.tolist() == [4, 3] and band.estimate[1] == pytest.approx(4.0)
    # two groups: half the resamples draw one group twice (ŝe* = 0): no finite band, no verdict
    two = cluster_band(np.array([[1.0], [2.0], [3.0]]), np.array([0, 0, 1]), n_boot=50)
    assert np.isinf(two.high).all() and list(outcome(two.low, two.high, 0.1)) == ["inconclusive"]
    alone = cluster_band(np.array([[1.0, 2.0], [3.0, 4.0]]), np.zeros(2), n_boot=10)  # one group
    assert alone.estimate.tolist() == [2.0, 3.0] and np.isnan(alone.low).all() and alone.n_groups == 1
    with pytest.raises(ValueError, match="one group id per row"):
        cluster_band(np.ones((3, 2)), np.zeros(2), n_boot=10)
    with pytest.raises(ValueError, match="confidence"):
        cluster_band(np.ones((3, 2)), confidence=1.0)


# ---- layer verdicts on sweeps ------------------------------------------------------------------


def _sweep(
    effects: np.ndarray, groups: np.ndarray | None, metric: str = "token_loss", higher_is_better: bool = False
) -> SweepResult:
    n, n_l = effects.shape
    frame = pd.DataFrame(
        {
            "example": np.tile(np.arange(n), n_l),
            "layer": np.repeat(np.arange(n_l), n),
            "clean": 1.0,
            "ablated": 1.0 + effects.T.ravel(),
            "effect": effects.T.ravel(),
        }
    )
    if groups is not None:
        frame["group"] = np.tile(groups, n_l)
    return SweepResult(frame, {"metric": metric, "higher_is_better": higher_is_better, "groups": "test groups"})


def test_layer_verdicts_resample_the_groups_and_apply_the_margin():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(30), 4)
    shared = np.repeat(rng.normal(size=(30, 1)), 4, axis=0)
    # a loss: layer 0 raises it a lot (useful), layer 1 lowers it (harmful), layer 2 moves it 0.001 nats
    effects = np.hstack([0.5 + 0.05 * shared, -0.3 + 0.05 * shared, 0.001 + 0.002 * shared]) + 0.01 * rng.normal(
        size=(120, 3)
    )
    v = layer_verdicts(_sweep(effects, groups), n_boot=500)
    assert v.meta["min_effect"] == 0.01 and "perplexity" in v.meta["min_effect_reason"]
    assert v.meta["resample"] == "groups" and v.meta["n_groups"] == 30 and v.meta["groups"] == "test groups"
    assert v.useful == [0] and v.harmful == [1] and v.layers("negligible") == [2]
    assert (v.frame.n_groups == 30).all() and "simultaneous over the 3 layers" in v.meta["family"]
    rows = layer_verdicts(_sweep(effects, groups), n_boot=500, resample="rows")
    assert rows.meta["n_groups"] == 120
    assert (rows.frame.se[:2] < v.frame.se[:2]).all()  # rows that share a group look more precise than they are
    marginal = layer_verdicts(_sweep(effects, groups), n_boot=500, per_layer=True)
    np.testing.assert_allclose(marginal.frame.ci_low, v.frame.marginal_low)
    assert marginal.meta["critical_value"] is None and marginal.meta["per_layer"]
    # no group column: every example alone
    alone = layer_verdicts(_sweep(effects, None), n_boot=500)
    assert alone.meta["n_groups"] == 120 and "no group column" in alone.meta["groups"]
    # a margin larger than every effect: everything is negligible or inconclusive
    wide = layer_verdicts(_sweep(effects, groups), n_boot=500, min_effect=1.0)
    assert set(wide.frame.verdict) == {"negligible"}
    with pytest.raises(ValueError, match="min_effect"):
        layer_verdicts(_sweep(effects, groups), min_effect=-1.0)
    bad = _sweep(effects, groups)
    bad.frame.loc[bad.frame.index[-1], "group"] = 99
    with pytest.raises(ValueError, match="more than one group"):
        layer_verdicts(bad)


def test_legacy_rule_reproduces_the_v1_code():
    """The /1 rule kept for comparison equals the /1 code (its 2,000 row draws and nanmean) written
    out here."""
    rng = np.random.default_rng(3)
    effects = rng.normal(0.02, 0.1, size=(50, 3))
    v = legacy_verdicts(_sweep(effects, None), n_boot=300, seed=7)
    benefit = -effects
    draws = np.random.default_rng(7).integers(0, 50, size=(300, 50))
    boot = np.stack([np.nanmean(benefit[d], axis=0) for d in draws])
    np.testing.assert_allclose(v.frame.ci_low, np.nanquantile(boot, 0.025, axis=0))
    np.testing.assert_allclose(v.frame.ci_high, np.nanquantile(boot, 0.975, axis=0))
    expect = [
        "useful" if h < 0 else "harmful" if lo > 0 else "inconclusive" for lo, h in zip(v.frame.ci_low, v.frame.ci_high)
    ]
    assert list(v.frame.verdict) == expect


def test_verdict_files_round_trip_and_v1_files_still_load(tmp_path):
    rng = np.random.default_rng(4)
    effects = np.hstack([0.4 + 0.05 * rng.normal(size=(40, 1)), 0.001 * rng.normal(size=(40, 1))])
    v = layer_verdicts(_sweep(effects, np.repeat(np.arange(10), 4)), n_boot=300)
    data = json.loads((v.save(tmp_path) / "verdicts.json").read_text())
    assert data["format"] == FORMAT and data["useful"] == [0] and data["negligible"] == [1]
    assert data["inconclusive"] == [] and data["resample"] == "groups" and data["min_effect"] == 0.01
    back = load_verdicts(tmp_path)
    pd.testing.assert_frame_equal(back.frame, v.frame, check_dtype=False)
    assert back.useful == [0] and back.layers("negligible") == [1]
    # a file of the /1 era, as it wrote them
    old = {
        "format": "interp.layer_verdicts/1",
        "metric": "token_loss",
        "higher_is_better": False,
        "n_boot": 2000,
        "confidence": 0.95,
        "useful": [0],
        "harmful": [3],
        "neutral": [1, 2],
        "layers": [
            {
                "layer": k,
                "n": 200,
                "mean_effect": e,
                "mean_benefit": -e,
                "ci_low": -e - 0.01,
                "ci_high": -e + 0.01,
                "verdict": verdict,
                "a_0": 1.0,
                "a_layer": 1.0 + e,
                "raw_verdict": raw,
            }
            for k, e, verdict, raw in (
                (0, 0.5, "useful", "useful"),
                (1, 0.0, "neutral", "neutral"),
                (2, 0.003, "neutral", "useful"),
                (3, -0.4, "harmful", "harmful"),
            )
        ],
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    got = load_verdicts(tmp_path / "old.json")
    assert got.useful == [0] and got.harmful == [3] and got.layers("inconclusive") == [1, 2]
    assert got.layers("negligible") == [] and got.frame.raw_verdict.tolist()[1] == "negligible"
    assert got.meta["read_from"] == "interp.layer_verdicts/1" and got.meta["resample"] == "rows"
    assert got.min_effect == 0.0
    old["layers"][1]["verdict"] = "maybe"
    (tmp_path / "bad.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="maybe"):
        load_verdicts(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"format": "something/1"}))
    with pytest.raises(ValueError, match="not a layer-verdict file"):
        load_verdicts(tmp_path / "other.json")


def test_map_verdicts_on_a_planted_map():
    from interp.analysis.engines.activation_patching import PatchingMap

    rng = np.random.default_rng(5)
    rows = []
    for ex in range(24):
        for layer in range(3):
            for pos in range(4):
                if layer == 2 and pos == 3 and ex % 2:  # a cell half the examples lack
                    continue
                effect = 0.3 if (layer, pos) == (1, 2) else -0.2 if (layer, pos) == (0, 0) else 0.0
                rows.append(
                    {
                        "layer": layer,
                        "pos": pos,
                        "example": ex,
                        "value": 0.0,
                        "effect": effect + 0.003 * rng.normal(),
                        "recovered": 0.0,
                        "group": ex // 3,
                    }
                )
    pmap = PatchingMap(pd.DataFrame(rows), {"axis": "pos", "metric": "legal_mass", "component": "resid_pre"})
    mv = map_verdicts(pmap, n_boot=400)
    assert mv.cells("above") == [(1, 2)] and mv.cells("below") == [(0, 0)]
    assert mv.meta["cells"] == 12 and mv.meta["n_groups"] == 8 and mv.meta["min_effect"] == 0.01
    cell = mv.frame.set_index(["layer", "pos"]).loc[(2, 3)]
    assert cell["n"] == 12 and cell["outcome"] == "negligible"
    assert mv.summary()["outcomes"] == {"above": 1, "below": 1, "negligible": 10, "inconclusive": 0}


# ---- calibration on simulated sweeps ---------------------------------------------------------


def _null_sweeps(reps: int, seed: int = 0, g: int = 40, m: int = 5, n_layers: int = 30, rho: float = 0.6):
    """Sweeps with no effect anywhere: rows in groups of m sharing a share ρ of their variation,
    half of each part common to every layer."""
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(g), m)
    for _ in range(reps):
        a = np.sqrt(0.5) * rng.normal(size=(g, 1)) + np.sqrt(0.5) * rng.normal(size=(g, n_layers))
        e = np.sqrt(0.5) * rng.normal(size=(g * m, 1)) + np.sqrt(0.5) * rng.normal(size=(g * m, n_layers))
        yield _sweep(np.sqrt(rho) * a[groups] + np.sqrt(1 - rho) * e, groups, metric="sim", higher_is_better=True)


RULES = {
    "shipped": lambda s, seed: layer_verdicts(s, n_boot=500, seed=seed, min_effect=0.0),
    "rows resampled": lambda s, seed: layer_verdicts(s, n_boot=500, seed=seed, min_effect=0.0, resample="rows"),
    "per layer": lambda s, seed: layer_verdicts(s, n_boot=500, seed=seed, min_effect=0.0, per_layer=True),
    "the /1 rule": lambda s, seed: legacy_verdicts(s, n_boot=500, seed=seed),
}
REPS, BOUND = 80, 0.15  # P(Binomial(80, 0.05) > 12) ≈ 0.002: a calibrated rule passes


def _fwer(rule: str) -> float:
    """The share of null sweeps in which the rule called any layer useful or harmful (margin 0:
    every such call is false)."""
    calls = 0
    for r, sweep in enumerate(_null_sweeps(REPS)):
        calls += bool(set(RULES[rule](sweep, r).frame.verdict) & {"useful", "harmful"})
    return calls / REPS


def test_shipped_rule_keeps_the_familywise_error_on_grouped_null_sweeps():
    assert _fwer("shipped") <= BOUND


@pytest.mark.parametrize("rule", ["rows resampled", "per layer", "the /1 rule"])
def test_the_bound_fails_the_rules_it_replaces(rule):
    """The calibration bound can fail: each broken rule (measured FWER ≈ 0.5–1) exceeds it."""
    assert _fwer(rule) > 2 * BOUND
