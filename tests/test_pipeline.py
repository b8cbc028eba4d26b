"""The main job (`interp run`) on a tiny config: every stage writes its part, the oracle row of the
world-model table is 1.0, harm planted in the last layer is found by the sweep and exactly that
layer is suppressed, HLS acts on it, and two fresh runs into two folders give the same numbers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

from interp.config import AnalysisConfig, FixConfig
from interp.jobs.experiment import load_experiment
from interp.jobs.pipeline import choose_hls_layers, run_main_job


def _numbers(results: dict, runs_dir: str | None = None) -> dict:
    """results.json without what legitimately differs between runs (timings, throughput, the machine
    and its measured matmul peak, the free RAM a batch budget was taken from, the stages and units
    read back by a resumed run); NaN as
    None so that equal files compare equal; with ``runs_dir``, that folder's path written as
    ``<runs>`` (so runs in two folders compare)."""

    def clean(x):
        if isinstance(x, dict):
            # a batch plan's budget is a share of the RAM free at that moment (interp.analysis.engines.budget)
            free_ram = ("budget", "source") if "per_row" in x else ()
            return {
                k: clean(v)
                for k, v in x.items()
                if k
                not in (
                    "seconds",
                    "read_back",
                    "units",  # how many units a sweep ran or read back: what happened, not what it found
                    "sweep_seconds",
                    "elapsed_s",
                    "tokens_per_s",
                    "tokens_per_second",
                    "machine",
                )
                and k not in free_ram
            }
        if isinstance(x, list):
            return [clean(v) for v in x]
        if isinstance(x, str) and runs_dir:
            return x.replace(runs_dir, "<runs>")
        return None if isinstance(x, float) and x != x else x

    return clean(json.loads(json.dumps({k: v for k, v in results.items() if k != "run_dir"})))


@pytest.fixture(scope="module")
def tiny_job(tmp_path_factory):
    cfg, base = load_experiment(REPO / "experiments/configs/tiny.toml")
    cfg = replace(
        cfg,
        runs_dir=str(tmp_path_factory.mktemp("runs")),
        eval_sequences=100,
        analysis=AnalysisConfig(
            mn_pairs=20,
            mn_depth=3,
            probe_train=60,
            probe_test=30,
            sweep_n=40,
            patch_n=80,
            patching_length=8,
            patching_edit_at=3,
        ),
        fix=FixConfig(steps=20, n_eval=40, mn_pairs=20, beta=0.1),
    )
    results = run_main_job(cfg, base, progress=False, log=lambda *_: None)
    return cfg, base, results


def test_every_stage_writes_its_part(tiny_job):
    _, _, results = tiny_job
    run = Path(results["run_dir"])
    table = {r["model"]: r for r in results["world_model"]["table"]}
    assert set(table) == {"untrained transformer", "trained model", "ideal predictor", "true world model"}
    assert "ideal predictor" in results["world_model"]["summaries"]
    nav = results["world_model"]["navigation"]
    assert nav["ideal_routes"]["valid"] > 0.9 and set(nav["end_at_destination"]) == {"trained model", "ideal predictor"}
    oracle = table["true world model"]
    assert [
        oracle[k] for k in ("next_token", "compression_precision", "distinction_precision", "distinction_recall")
    ] == [1.0, 1.0, 1.0, 1.0]
    assert table["trained model"]["next_token"] > table["untrained transformer"]["next_token"]
    assert len(results["layers"]["mlp_zero"]["layers"]) == 2
    assert results["layers"]["activation_patching"]["n_pairs"] > 0
    # planted vs found: the sweep of the planted model calls exactly the planted layer harmful,
    # the unplanted control none, and the fix suppresses what the sweep found
    plant = results["plant"]
    assert plant["layers"] == [1] and plant["corruption"] == "random_turns"
    assert json.loads((run / "planted" / "interp.json").read_text())["extra"]["plant"]["layers"] == [1]
    found = [r["layer"] for r in results["layers"]["mlp_zero"]["layers"] if r["verdict"] == "harmful"]
    assert found == plant["layers"]
    assert plant["unplanted_sweep"]["harmful"] == []
    fix = results["fix"]
    assert fix["layers"] == found and fix["found"] == found and "harmful" in fix["why"]
    assert results["layers"]["mlp_zero"]["model"].endswith("planted")
    # the repair table: the planted model, zeroing, plain, HLS and the unplanted reference
    comp = {r["metric"]: r for r in fix["comparison"]}
    loss = comp["heldout_loss"]
    assert {"before", "plain", "hls", "zeroed", "unplanted"} <= set(loss)
    assert loss["zeroed"] < loss["before"]  # removing the planted harm helps at once
    routes = comp["routes_illegal_turn"]  # greedy routes, scored for every model, fine-tunings too
    assert {"before", "zeroed", "unplanted", "plain", "hls"} <= set(routes)
    assert all(0 <= routes[m] <= 1 for m in ("before", "zeroed", "unplanted", "plain", "hls"))
    assert set(fix["closest"]) >= {"heldout_loss", "mn_compression_precision"}
    assert all(
        set(c["closest"]) <= {"before", "plain", "hls", "zeroed"} and c["closest"] for c in fix["closest"].values()
    )
    # HLS (beta 0.1) lowers the suppressed layer's mean squared MLP output below plain fine-tuning's
    rows = [r for r in fix["table"] if r["metric"] == "mlp_out_sq" and r["layer"] == fix["layers"][0]]
    value = {r["model"]: r["value"] for r in rows}
    assert value["hls"] < value["plain"]
    for name in (
        "results.json",
        "table1.md",
        "table1.png",
        "sweep_mlp-zero/verdicts.json",
        "plant/plant.json",
        "plant/sweep_unplanted/verdicts.json",
        "finetune/repair_table.md",
        "sweep_direct-effect/layers.png",
        "sweep_activation-patching/patching_resid_pre.png",
        "finetune/finetune_table.md",
        "report.html",
    ):
        assert (run / name).is_file(), name
    assert _numbers(json.loads((run / "results.json").read_text())) == _numbers(results)


def test_a_rerun_gives_the_same_numbers(tiny_job, tmp_path_factory):
    """Two fresh runs of the same config, each into its own empty folder (nothing cached to read
    back), give the same numbers and the same tables."""
    cfg, base, results = tiny_job
    again = run_main_job(
        replace(cfg, runs_dir=str(tmp_path_factory.mktemp("runs_again"))), base, progress=False, log=lambda *_: None
    )
    first, second = Path(results["run_dir"]), Path(again["run_dir"])
    assert first != second and not second.is_relative_to(first.parent)
    assert _numbers(again, str(second.parent)) == _numbers(results, str(first.parent))
    for name in ("table1.csv", "sweep_mlp-zero/sweep.csv", "finetune/repair_table.md"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_a_rerun_into_the_same_folder_reads_the_finished_stages_back(tiny_job):
    """``interp run`` again into the same run folder: every finished stage is read back (said, and
    listed in ``results.json["read_back"]``) with the same numbers; a stage whose record is missing
    — what Ctrl-C or SIGKILL inside it leaves — runs again, and so ends with the same files."""
    cfg, base, results = tiny_job
    run = Path(results["run_dir"])
    said: list[str] = []
    again = run_main_job(cfg, base, progress=False, log=said.append)
    assert again["read_back"] == ["world_model", "plant", "layers", "fix"]
    assert sum("read back from" in s for s in said) == 4
    assert _numbers(again) == _numbers(results)
    before = {name: (run / name).read_bytes() for name in ("sweep_mlp-zero/sweep.csv", "finetune/repair_table.md")}
    for name in ("layers", "fix"):  # interrupted inside the layer stage: neither record was written
        (run / "stages" / f"{name}.json").unlink()
    resumed = run_main_job(cfg, base, progress=False, log=lambda *_: None)
    assert resumed["read_back"] == ["world_model", "plant"]
    assert _numbers(resumed) == _numbers(results)
    for name, data in before.items():
        assert (run / name).read_bytes() == data, name


def test_stage_records_rerun_a_stage_whose_inputs_changed_or_whose_record_is_broken(tmp_path):
    from interp.jobs.stages import StageRecords

    said: list[str] = []
    records = StageRecords(tmp_path, said.append)
    calls = []

    def stage(value):
        calls.append(value)
        return {"value": np.float64(value), "layers": (1, 2)}

    first = records.run("fix", {"steps": 20, "weights": "abc"}, lambda: stage(1.5))
    assert first == {"value": 1.5, "layers": [1, 2]}  # as a rerun reads it back: plain JSON
    assert records.run("fix", {"steps": 20, "weights": "abc"}, lambda: stage(9.0)) == first
    assert calls == [1.5] and records.read_back == ["fix"]
    assert records.run("fix", {"steps": 30, "weights": "abc"}, lambda: stage(2.0))["value"] == 2.0
    assert "steps: 20 in the folder, 30 now" in said[-1] and calls == [1.5, 2.0]
    (tmp_path / "stages" / "fix.json").write_text('{"format": 1, "key": {"steps": 30')  # cut short
    assert records.run("fix", {"steps": 30, "weights": "abc"}, lambda: stage(3.0))["value"] == 3.0
    assert "unreadable" in said[-1]
    assert not list((tmp_path / "stages").glob(".*tmp*"))  # written whole, then renamed


def test_no_harmful_layer_means_nothing_to_suppress():
    rows = [{"layer": 0, "effect": 1.3, "verdict": "useful"}, {"layer": 1, "effect": -0.002, "verdict": "inconclusive"}]
    layers, why = choose_hls_layers((), rows)
    assert layers == [] and "no harmful layer" in why and "skipped" in why
    rows[1]["verdict"] = "harmful"
    assert choose_hls_layers((), rows)[0] == [1]
    assert choose_hls_layers((0,), rows) == ([0], "given in the config")


def test_fix_stage_skips_hls_when_the_sweep_finds_no_harmful_layer(tmp_path):
    from interp.jobs.pipeline import fix_stage

    said = []
    rows = [{"layer": 0, "effect": 1.3, "verdict": "useful"}, {"layer": 1, "effect": 0.01, "verdict": "inconclusive"}]
    out = fix_stage(tmp_path, FixConfig(), {"layers": rows}, False, said.append)
    assert out["skipped"] and out["layers"] == [] and out["found"] == []
    assert any("nothing to suppress" in s for s in said)
    assert not (tmp_path / "finetune").exists()


def test_closest_repair_is_worked_out_by_hand_and_ties_count_for_each():
    from interp.jobs.pipeline import closest_to_reference

    rows = [
        {
            "metric": "heldout_loss",
            "layer": None,
            "before": 2.0,
            "plain": 1.5,
            "hls": 1.45,
            "zeroed": 1.55,
            "unplanted": 1.5,
        },
        {
            "metric": "mn_compression_precision",
            "layer": None,
            "before": 0.1,
            "plain": 0.3,
            "hls": 0.22,
            "zeroed": 0.22,
            "unplanted": 0.21,
        },
        {"metric": "mlp_out_sq", "layer": 3, "before": 500.0, "plain": 60.0, "hls": 7.0},
    ]
    out = closest_to_reference(rows, ["plain", "hls", "zeroed", "unplanted"])
    assert set(out) == {"heldout_loss", "mn_compression_precision"}
    assert out["heldout_loss"]["closest"] == ["plain"]
    assert out["heldout_loss"]["gap"] == {
        "before": 0.5,
        "plain": 0.0,
        "hls": pytest.approx(-0.05),
        "zeroed": pytest.approx(0.05),
    }
    assert out["mn_compression_precision"]["closest"] == ["hls", "zeroed"]
