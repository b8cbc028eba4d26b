"""experiments/pragworld_real.py --quick end to end on a tiny random model folder: every step runs
(splits, baseline, sweeps, head map, the fine-tuning arms, IOI cost) and writes results.json and the
Markdown tables; the baseline it records equals the library's score of the same examples."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from test_architectures import _config, _scale, train_bpe
    from transformers import AutoModelForCausalLM

    from interp.datasets.ioi import IOI_TEMPLATES, NAMES, OBJECTS, PLACES
    from interp.worlds.dialogue import render

    words = list(NAMES) + list(PLACES) + list(OBJECTS) + ["yes", "no"]
    for split in render.SPLITS:
        w = render.WORDS[split]
        words += list(w.places) + list(w.objects) + list(w.people)
    texts = [" ".join(f" {w}" for w in words)] * 80 + [
        t.replace("{", " ").replace("}", " ") for t in IOI_TEMPLATES
    ] * 30
    tok = train_bpe(texts, 1500)
    root = tmp_path_factory.mktemp("pw_real_model") / "tiny-llama"
    torch.manual_seed(0)
    cfg = _config("llama", len(tok), tok)
    cfg.max_position_embeddings = 2048
    _scale(AutoModelForCausalLM.from_config(cfg), 7).eval().save_pretrained(root)
    tok.save_pretrained(root)
    return root


@pytest.mark.slow
def test_quick_run_writes_every_arm(folder, tmp_path):
    spec = importlib.util.spec_from_file_location("pragworld_real", ROOT / "experiments" / "pragworld_real.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pragworld_real"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    out = tmp_path / "run"
    assert mod.main(["--quick", "--out", str(out), "--models", str(folder)]) == 0
    res = json.loads((out / "results.json").read_text())["models"][str(folder)]
    assert set(res["finetune"]["scores"]) == {"none", "plain", "hls", "hls_paper", "hls_random", "ula"}
    assert all(len(v) == 1 for v in res["finetune"]["scores"].values())
    measured = res["finetune"]["measured"]
    assert set(measured) == set(res["finetune"]["scores"])  # Myhill–Nerode, text loss, probe before / after
    assert all(0 <= m[0]["boundary"]["compression"]["value"] <= 1 for m in measured.values())
    assert all(m[0]["text_loss"]["loss"] > 0 and "probe" in m[0] for m in measured.values())
    best = res["finetune"]["best_checkpoint"]
    assert best["arm"] in res["finetune"]["scores"] and (Path(best["folder"]) / "config.json").is_file()
    import interp

    assert interp.load_model(best["folder"]).n_layers == interp.load_model(folder).n_layers  # a loadable HF folder
    assert {"removal", "category", "layer", "mean_effect"} <= set(res["layers"]["alterations"][0])
    assert {"band_low", "band_high", "verdict"} <= set(res["layers"]["alteration_verdicts"][0])
    assert "hls - plain" in res["finetune"]["differences"] and "hls - hls_random" in res["finetune"]["differences"]
    assert res["layers"]["verdicts"] and ("top_heads" in res["layers"] or res["layers"]["patch_skipped"])
    if "top_heads" in res["layers"]:  # the exact head map beside AtP's estimate of it
        exact = res["layers"]["exact_heads"]
        assert len(exact["top_heads"]) == 6 and -1 <= exact["atp_vs_exact"]["spearman"] <= 1
    for stem in ("baseline", "layers", "finetune"):
        assert (out / f"{stem}_tiny-llama.md").read_text().startswith("# ")
    # the recorded baseline is the library's score of the same evaluation split
    from interp.analysis.evaluation.dialogue import evaluate_dialogue

    model = interp.load_model(folder)
    from interp.studies.pragworld_real import QUICK, splits

    data = splits(model, QUICK)
    again = evaluate_dialogue(model, interp.contrast(model, data["eval"]), n_boot=QUICK.n_boot)
    assert res["baseline"]["bare"]["summary"]["robust"] == again.summary()["robust"]
    assert res["baseline"]["bare"]["table"][0]["accuracy"] == pytest.approx(again.row("all")["accuracy"])


def test_the_paper_rule_pools_flip_and_invariant_by_rows_and_keeps_positive_effects():
    import pandas as pd

    from interp.analysis.evaluation.dialogue import paper_rule_layers

    flip = [(layer, e) for layer, e in ((0, 1.0), (1, -2.0), (2, 0.5)) for _ in range(10)]
    inv = [(layer, e) for layer, e in ((0, -0.5), (1, 1.0), (2, -1.0)) for _ in range(30)]
    frame = paper_rule_layers(pd.DataFrame(flip + inv, columns=["layer", "effect"]), k=2).set_index("layer")
    # by hand: layer 0 (10·1 − 30·0.5)/40 = −0.125; layer 1 (−20 + 30)/40 = 0.25; layer 2 (5 − 30)/40 = −0.625
    assert frame["pooled_effect"].to_dict() == pytest.approx({0: -0.125, 1: 0.25, 2: -0.625})
    assert frame["n"].tolist() == [40, 40, 40]
    assert list(frame.index[frame["chosen"]]) == [1]  # k = 2, but only one effect is positive
    with pytest.raises(ValueError, match="effect"):
        paper_rule_layers(pd.DataFrame({"layer": [0]}))


def test_alteration_effects_are_group_means_per_category_and_layer():
    import pandas as pd

    from interp.analysis.evaluation.dialogue import alteration_effects

    rows = pd.DataFrame(
        {
            "removal": ["zero"] * 6,
            "layer": [0, 0, 0, 0, 1, 1],
            "category": ["Negation", "Negation", "Negation", "Paraphrase", "Negation", "Negation"],
            "group": [0, 1, 2, 0, 0, 1],
            "effect": [1.0, 2.0, 3.0, -1.0, 0.5, 0.5],
        }
    )
    f = alteration_effects(rows, n_boot=200).set_index(["category", "layer"])
    assert f.loc[("Negation", 0), "mean_effect"] == pytest.approx(2.0) and f.loc[("Negation", 0), "groups"] == 3
    assert 1.0 <= f.loc[("Negation", 0), "ci_low"] <= 2.0 <= f.loc[("Negation", 0), "ci_high"] <= 3.0
    assert f.loc[("Negation", 1), "ci_low"] == f.loc[("Negation", 1), "ci_high"] == pytest.approx(0.5)
    assert f.loc[("Paraphrase", 0), "n"] == 1
    with pytest.raises(ValueError, match="sweep's frame"):
        alteration_effects(rows.drop(columns="category"))


def test_alteration_verdicts_find_a_planted_cell_and_are_wider_than_per_cell_intervals():
    """A cell planted with a large effect (removing layer 1 helps Negation by 2 logits in every
    group) is the one cell called harmful; no other cell is harmful or useful; each band is the
    cluster band of that removal's (category, layer) matrix and at least as wide as the per-cell
    interval of :func:`alteration_effects` (it is simultaneous over all 3 × 2 cells)."""
    import numpy as np
    import pandas as pd

    from interp.analysis.evaluation.dialogue import alteration_effects, alteration_verdicts
    from interp.analysis.verdicts.bands import cluster_band

    rng = np.random.default_rng(0)
    rows, example = [], 0
    for g in range(14):
        for cat in ("Negation", "Paraphrase", "Variable Swap"):
            for _ in range(2):
                for layer in (0, 1):
                    planted = 2.0 if (cat, layer) == ("Negation", 1) else 0.0
                    rows.append({"removal": "zero", "example": example, "layer": layer, "category": cat,
                                 "group": f"g{g}", "effect": planted + rng.normal(0, 0.3)})  # fmt: skip
                example += 1
    rows = pd.DataFrame(rows)
    v = alteration_verdicts(rows, n_boot=400).set_index(["category", "layer"])
    assert v.loc[("Negation", 1), "verdict"] == "harmful"
    assert set(v.drop(index=[("Negation", 1)])["verdict"]) <= {"negligible", "inconclusive"}
    assert (v["n"] == 28).all() and (v["groups"] == 14).all()
    # the oracle: the same band from the hand-built matrix (NaN outside each row's own alteration)
    cells = list(v.index)
    m = np.full((example, len(cells)), np.nan)
    for r in rows.itertuples():
        m[r.example, cells.index((r.category, r.layer))] = r.effect
    groups = rows.groupby("example")["group"].first().to_numpy()
    band = cluster_band(m, groups, n_boot=400)
    np.testing.assert_allclose(v["band_low"], band.low)
    np.testing.assert_allclose(v["mean_effect"], band.estimate)
    per_cell = alteration_effects(rows.drop(columns="example"), n_boot=400).set_index(["category", "layer"])
    assert (
        (v["band_high"] - v["band_low"]) >= (per_cell["ci_high"] - per_cell["ci_low"]).reindex(v.index) - 1e-9
    ).all()
    with pytest.raises(ValueError, match="example"):
        alteration_verdicts(rows.drop(columns="example"))


def test_a_run_keeps_the_models_it_finished_and_refuses_another_config(tmp_path, monkeypatch):
    """``run`` over a folder whose ``results.json`` has a model finished with the same config and
    seeds keeps it (not rerun) and adds the others; a key an older run did not record counts as its
    default; a folder of another config is refused, naming the difference, and left as it was."""
    from dataclasses import asdict, replace

    from interp.studies import pragworld_real as pw

    old_config = {k: v for k, v in asdict(pw.QUICK).items() if k != "removals"}  # an older run, without the key
    (tmp_path / "results.json").write_text(
        json.dumps(
            {
                "config": old_config,
                "seeds": [0],
                "provenance": {"git_commit": "abc"},
                "models": {"a": {"baseline": {"bare": 1}}},
            }
        )  # fmt: skip
    )
    assert pw.finished_models(tmp_path, pw.QUICK, [0]) == {
        "a": {"provenance": {"git_commit": "abc"}, "baseline": {"bare": 1}}
    }
    ran = []
    monkeypatch.setattr(pw, "machine", lambda: {"cpu": "test"})  # no matmul peak measured here
    monkeypatch.setattr(pw, "run_model", lambda name, c, seeds, out: ran.append(name) or {"baseline": {"bare": 2}})
    res = pw.run(["a", "b"], pw.QUICK, [0], tmp_path)
    assert (
        ran == ["b"] and res["models"]["a"]["baseline"] == {"bare": 1} and res["models"]["b"]["baseline"] == {"bare": 2}
    )
    assert res["models"]["b"]["provenance"]["git_commit"] == res["provenance"]["git_commit"]
    assert set(json.loads((tmp_path / "results.json").read_text())["models"]) == {"a", "b"}
    before = (tmp_path / "results.json").read_text()
    with pytest.raises(ValueError, match=r"another config .*'steps': \(2, 5\)"):
        pw.run(["a"], replace(pw.QUICK, steps=5), [0], tmp_path)
    with pytest.raises(ValueError, match=r"'seeds': \(\[0\], \[0, 1\]\)"):
        pw.finished_models(tmp_path, pw.QUICK, [0, 1])
    assert (tmp_path / "results.json").read_text() == before and ran == ["b"]
