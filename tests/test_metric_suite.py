"""One metric suite (:mod:`interp.metrics.named_metrics`): the world-model table, the repair rows of a
planted model and the fix stage's evaluation report the same numbers under the same names.

Oracle: the metric functions called directly, as each consumer called them before the suite
(``next_token_test`` on the bridge, ``myhill_nerode`` on a ``BridgeLM``), and the true world model,
which scores 1.0 on every metric of the suite.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import save_gpt2_and_llama

from interp.metrics.named_metrics import METRICS, MYHILL_NERODE, NEXT_TOKEN, world_model_metrics

MN = dict(mn_pairs=15, mn_depth=3, seed=0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_city, tiny_model_config):
    from interp.models import load_checkpoint

    path = save_gpt2_and_llama(tmp_path_factory.mktemp("suite"), tiny_city, tiny_model_config)["gpt2"]
    return load_checkpoint(path), tiny_city.generate(30, np.random.default_rng(0))


def test_suite_equals_the_metric_functions(setup, tiny_city):
    from interp.metrics.myhill_nerode import myhill_nerode
    from interp.metrics.next_token import next_token_test
    from interp.models.lm import BridgeLM

    ckpt, seqs = setup
    ests, res = world_model_metrics(ckpt.bridge, tiny_city, seqs, **MN)
    assert list(ests) == list(METRICS)
    nt = next_token_test(ckpt.bridge, tiny_city, seqs)
    mn = myhill_nerode(tiny_city, BridgeLM(ckpt.bridge, tiny_city.vocab), pairs=15, depth=3, seed=0)
    want = {
        "next_token_position": nt.position_share.mean,
        "next_token_sequence": nt.sequence_share.mean,
        "mn_compression_precision": mn.compression_precision.mean,
        "mn_distinction_precision": mn.distinction_precision.mean,
        "mn_distinction_recall": mn.distinction_recall.mean,
    }
    assert {k: e.mean for k, e in ests.items()} == pytest.approx(want, nan_ok=True)
    assert ests["next_token_position"].n == ests["next_token_sequence"].n == len(seqs)
    assert 0 < ests["next_token_position"].mean < 1  # an untrained model: the check can fail
    assert res["next_token"].summary()["next_token_position"] == ests["next_token_position"].mean


def test_table_and_repair_rows_report_the_same_numbers(setup, tiny_city):
    from interp.metrics.table import SUITE_NAMES, evaluate_lm
    from interp.models.lm import BridgeLM
    from interp.train.plant import repair_metrics as repair_rows

    ckpt, seqs = setup
    cells, _ = evaluate_lm(
        BridgeLM(ckpt.bridge, tiny_city.vocab), tiny_city, seqs, pairs=15, depth=3, seed=0, max_nodes=4096
    )
    rows = {r["metric"]: r for r in repair_rows(ckpt.bridge, tiny_city, seqs, **MN)}
    assert set(NEXT_TOKEN + MYHILL_NERODE) <= set(rows)
    for column, name in SUITE_NAMES.items():
        assert cells["exact"][column].mean == pytest.approx(rows[name]["value"], nan_ok=True), column
        assert cells["exact"][column].se == pytest.approx(rows[name]["se"], nan_ok=True), column


def test_true_world_model_scores_one_and_names_are_checked(tiny_city):
    from interp.models.lm import WorldLM

    seqs = tiny_city.generate(20, np.random.default_rng(1))
    ests, _ = world_model_metrics(WorldLM(tiny_city), tiny_city, seqs, **MN)
    assert {k: e.mean for k, e in ests.items()} == {k: 1.0 for k in METRICS}
    with pytest.raises(ValueError, match="unknown metric.*next_token_positon"):
        world_model_metrics(WorldLM(tiny_city), tiny_city, seqs, ["next_token_positon"])
