"""One result protocol (:class:`interp.results.Result`): ``frame``, ``summary() -> dict``,
``save(folder) -> Path``, for every analysis and metric result.

Two checks: every class in ``interp`` that has a ``summary`` or ``save`` either follows the
protocol (``summary`` a method, ``save`` taking a folder and returning a Path, a ``frame``) or is
named below as not a result, with the reason; and on real results, ``save(folder)`` returns the
folder and writes ``<stem>.json`` holding ``summary()`` and ``<stem>.csv`` equal to ``frame``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import pkgutil

import numpy as np
import pandas as pd
import pytest

import interp
from interp.results import Result

#: classes with a ``summary`` / ``save`` that are not analysis results, and why
NOT_RESULTS = {
    "interp.jobs.run_records.SweepRun": "a record of a run whose files are already written (it holds a SweepResult)",
    "interp.jobs.run_records.PatchingRun": "a record of a run whose files are already written (it holds PatchingMaps)",
    "interp.datasets.pragworld.data.PragWorldData": "a data set (summary() describes the rows)",
    "interp.hooks.interventions.ActiveInterventions": "live hooks on a model (summary() lists them)",
    "interp.train.regularisers.ULAHeads": "model weights (save writes safetensors)",
    "interp.worlds.streets.traversals.TraversalBatch": "a batch of generated world data (summary() is a text line)",
    "interp.analysis.engines.unitstore.UnitRunner": "writes a sweep's finished units as it runs (save stores one unit)",
    "interp.analysis.engines.unitstore.MapUnits": "writes a patching run's finished chunks as it runs (summary() counts them)",
    "interp.api.results.SavedResult": "the base of the API's results (save copies their folder; each has frame)",
}


def _classes():
    for info in pkgutil.walk_packages(interp.__path__, "interp."):
        if info.name.startswith("interp.cli"):
            continue
        module = importlib.import_module(info.name)
        for name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and cls.__module__ == module.__name__
                and ("summary" in vars(cls) or "save" in vars(cls))
            ):
                yield f"{module.__name__}.{name}", cls


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()


def test_every_result_class_follows_the_protocol():
    checked, problems = [], []
    for qual, cls in _classes():
        if qual in NOT_RESULTS:
            continue
        checked.append(qual)
        summary, save = vars(cls).get("summary"), getattr(cls, "save", None)
        if not inspect.isfunction(summary):
            problems.append(f"{qual}.summary is not a method ({type(summary).__name__})")
        elif "dict" not in str(inspect.signature(summary).return_annotation):
            problems.append(f"{qual}.summary() is not annotated -> dict")
        if save is None or not inspect.isfunction(save):
            problems.append(f"{qual} has no save(folder) method")
        else:
            sig = inspect.signature(save)
            params = list(sig.parameters)
            if params[1:2] != ["folder"] or sig.return_annotation not in ("Path", "pathlib.Path"):
                problems.append(f"{qual}.save{sig} is not save(folder, ...) -> Path")
        if not (isinstance(getattr(cls, "frame", None), property) or "frame" in _fields(cls)):
            problems.append(f"{qual} has no frame")
    assert not problems, "\n".join(problems)
    for name in (
        "interp.analysis.engines.sweeps.SweepResult",
        "interp.analysis.verdicts.layers.LayerVerdicts",
        "interp.metrics.pragworld.PragWorldScore",
        "interp.metrics.next_token.NextTokenResult",
        "interp.metrics.probes.ProbeResult",
        "interp.metrics.navigation.routes.RouteResult",
    ):
        assert name in checked


def _sweep():
    from interp.analysis.engines.sweeps import SweepResult

    rng = np.random.default_rng(0)
    rows = [
        {"example": e, "layer": layer, "clean": 0.5, "ablated": 0.5 + d, "effect": d}
        for layer in range(3)
        for e, d in enumerate(rng.normal(-0.1 * layer, 0.05, 12))
    ]
    return SweepResult(pd.DataFrame(rows), {"kind": "mlp-zero", "metric": "two_way_prob", "higher_is_better": True})


def _check_saved(result, folder, stem):
    assert isinstance(result, Result)
    summary = result.summary()
    assert isinstance(summary, dict)
    assert result.save(folder) == folder
    saved = json.loads((folder / f"{stem}.json").read_text())
    want = json.loads(json.dumps(summary))
    assert {k: saved.get(k) for k in want} == want  # the file holds the summary (and may add settings)
    back = pd.read_csv(folder / f"{stem}.csv")
    assert len(back) == len(result.frame) and list(back.columns) == [str(c) for c in result.frame.columns]
    return summary


def test_sweep_result_summary_is_the_per_layer_rows(tmp_path):
    sweep = _sweep()
    summary = _check_saved(sweep, tmp_path, "sweep")
    # oracle: the per-layer mean effect and its standard error by hand
    for row, layer in zip(summary["summary"], range(3)):
        eff = sweep.frame.loc[sweep.frame.layer == layer, "effect"].to_numpy()
        assert row["layer"] == layer and row["n"] == 12
        assert row["mean_effect"] == pytest.approx(eff.mean())
        assert row["se"] == pytest.approx(eff.std(ddof=1) / np.sqrt(12))
    assert summary["kind"] == "mlp-zero"
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "sweep_layers.csv"), sweep.per_layer(), check_dtype=False)


def test_verdicts_save_into_a_folder_and_load_back(tmp_path):
    from interp.analysis.verdicts.layers import layer_verdicts, load_verdicts

    v = layer_verdicts(_sweep(), n_boot=200, seed=0)
    assert v.save(tmp_path) == tmp_path
    assert json.loads((tmp_path / "verdicts.json").read_text()) == json.loads(json.dumps(v.summary()))
    for path in (tmp_path, tmp_path / "verdicts.json"):
        back = load_verdicts(path)
        assert back.useful == v.useful and back.harmful == v.harmful and back.layer_rows() == v.layer_rows()
    assert v.save(tmp_path / "x", stem="probe_verdicts") == tmp_path / "x"
    assert (tmp_path / "x" / "probe_verdicts.json").is_file()


def test_pragworld_score_follows_the_protocol(tmp_path):
    from interp.metrics.pragworld import score_pragworld

    rows = pd.DataFrame(
        {
            "group": [0, 0, 1, 1],
            "altered": [False, True, False, True],
            "gold": [1, 0, 1, 1],
            "effect": [None, "flip", None, "invariant"],
            "category": [None, "negation", None, "negation"],
            "length_bucket": ["short", "short", "long", "long"],
        }
    )
    score = score_pragworld(rows, ["yes", "no", "yes", "no"], n_boot=100, seed=0)
    summary = _check_saved(score, tmp_path, "pragworld")
    # oracle: group 0 all right, group 1 not; 3 of 4 rows right
    assert summary["robust"] == pytest.approx(50.0) and summary["total"] == pytest.approx(75.0)
    assert score["robust"] == summary["robust"] and score.frame is score.per_example
    summary["robust"] = -1.0  # a copy: editing it leaves the score alone
    assert score.summary()["robust"] == pytest.approx(50.0)


def test_proportion_interval_is_wilson_and_stays_inside_0_1():
    """Wilson's interval (hand-worked: 50/100 → [0.4038, 0.5962]; 0/20 → [0, 0.1611]), the effective
    sample size p(1 − p)/se² from a standard error, and the demo report's case that ±1.96 SE sent
    above 1 (compression precision 0.96, se 0.028 → 0.96 ± 0.055 = [0.905, 1.015])."""
    import math

    from interp.stats import interval, proportion_interval

    lo, hi = proportion_interval(0.5, n=100)
    assert math.isclose(lo, 0.40383, abs_tol=1e-4) and math.isclose(hi, 0.59617, abs_tol=1e-4)
    assert proportion_interval(0.5, se=0.05) == proportion_interval(0.5, n=100)  # n_eff = 0.25 / 0.0025
    lo, hi = proportion_interval(0.0, n=20)
    assert lo == 0.0 and math.isclose(hi, 3.8415 / 23.8415, rel_tol=1e-4)  # z²/(n + z²)
    lo, hi = proportion_interval(0.96, se=0.028)
    assert 0.0 <= lo < 0.96 < hi <= 1.0 and 0.96 + 1.96 * 0.028 > 1.0
    assert proportion_interval(1.0, se=0.0, n=50)[1] == 1.0
    assert all(math.isnan(x) for x in proportion_interval(0.7))  # no se, no n: no interval
    with pytest.raises(ValueError, match="share"):
        proportion_interval(1.2, se=0.1)
    import pandas as pd

    row = pd.Series(
        {
            "metric": "mn_compression_precision",
            "value": 0.96,
            "se": 0.028,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "n": 40,
        }
    )
    _, lo, hi = interval(row)
    assert (lo, hi) == proportion_interval(0.96, 0.028, 40) and hi <= 1.0
    loss = pd.Series(
        {"metric": "heldout_loss", "value": 0.96, "se": 0.028, "ci_low": math.nan, "ci_high": math.nan, "n": 40}
    )
    assert interval(loss)[2] == pytest.approx(0.96 + 1.96 * 0.028)  # not a share: ±1.96 SE


def test_rank_auc_equals_the_share_of_correctly_ordered_pairs():
    """Oracle: every (positive, negative) pair enumerated, ties counting one half."""
    import itertools

    import numpy as np

    from interp.stats import rank_auc

    rng = np.random.default_rng(3)
    for _ in range(20):
        y = rng.integers(0, 2, size=17)
        x = rng.integers(0, 5, size=17).astype(float)  # many ties
        pairs = [
            1.0 if a > b else 0.5 if a == b else 0.0
            for (a, ya), (b, yb) in itertools.product(zip(x, y), repeat=2)
            if ya == 1 and yb == 0
        ]
        want = float(np.mean(pairs)) if pairs else float("nan")
        got = rank_auc(x, y)
        assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want)
    assert rank_auc([0.1, 0.9], [0, 1]) == 1.0 and rank_auc([0.9, 0.1], [0, 1]) == 0.0
    assert np.isnan(rank_auc([0.1, 0.2], [1, 1]))
    with pytest.raises(ValueError, match="shape"):
        rank_auc([0.1, 0.2], [1])


@pytest.mark.parametrize(
    "n, want",  # the 97.5 % quantile of Student's t with n − 1 degrees of freedom, from printed tables
    [(2, 12.7062047), (3, 4.3026527), (6, 2.5705818), (11, 2.2281389), (31, 2.0422725), (1001, 1.9623390)],
)
def test_t_quantile_equals_the_printed_table_without_scipy(n, want):
    from interp.stats import t_cdf, t_quantile

    assert t_quantile(n) == pytest.approx(want, abs=2e-6)
    assert t_cdf(t_quantile(n), n - 1) == pytest.approx(0.975, abs=1e-10)
    assert t_cdf(0.0, n - 1) == pytest.approx(0.5)
    assert math.isnan(t_quantile(1))
