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
    assert set(res["finetune"]["scores"]) == {"none", "plain", "hls", "hls_random", "ula"}
    assert all(len(v) == 1 for v in res["finetune"]["scores"].values())
    assert set(res["finetune"]["boundary"]) == set(res["finetune"]["scores"])  # Myhill–Nerode before / after
    assert all(0 <= b[0]["compression"]["value"] <= 1 for b in res["finetune"]["boundary"].values())
    assert "hls - plain" in res["finetune"]["differences"] and "hls - hls_random" in res["finetune"]["differences"]
    assert res["layers"]["verdicts"] and ("top_heads" in res["layers"] or res["layers"]["patch_skipped"])
    for stem in ("baseline", "layers", "finetune"):
        assert (out / f"{stem}_tiny-llama.md").read_text().startswith("# ")
    # the recorded baseline is the library's score of the same evaluation split
    import interp
    from interp.analysis.evaluation.dialogue import evaluate_dialogue

    model = interp.load_model(folder)
    data = mod.splits(model, mod.QUICK)
    again = evaluate_dialogue(model, interp.contrast(model, data["eval"]), n_boot=mod.QUICK.n_boot)
    assert res["baseline"]["bare"]["summary"]["robust"] == again.summary()["robust"]
    assert res["baseline"]["bare"]["table"][0]["accuracy"] == pytest.approx(again.row("all")["accuracy"])


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_paper_rule_pools_flip_and_invariant_by_rows_and_keeps_positive_effects(tmp_path):
    import pandas as pd

    rule = _script("pragworld_paper_rule")
    for eff, rows in (("flip", [(0, 1.0, 10), (1, -2.0, 10), (2, 0.5, 10)]), ("invariant", [(0, -0.5, 30), (1, 1.0, 30), (2, -1.0, 30)])):  # fmt: skip
        (tmp_path / f"sweep_{eff}").mkdir()
        pd.DataFrame(rows, columns=["layer", "mean_effect", "n"]).to_csv(tmp_path / f"sweep_{eff}" / "sweep_layers.csv")
    frame = rule.paper_rule_layers(tmp_path, k=2).set_index("layer")
    # by hand: layer 0 (10·1 − 30·0.5)/40 = −0.125; layer 1 (−20 + 30)/40 = 0.25; layer 2 (5 − 30)/40 = −0.625
    assert frame["pooled_effect"].to_dict() == pytest.approx({0: -0.125, 1: 0.25, 2: -0.625})
    assert list(frame.index[frame["chosen"]]) == [1]  # k = 2, but only one effect is positive
