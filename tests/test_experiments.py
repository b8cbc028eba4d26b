"""Experiment scripts stay thin, and the library logic moved out of them behaves as the scripts relied on.

The scripts in ``experiments/`` are a config (argparse) and calls of the package; ``bench/`` scripts
too import ``interp`` as installed. Checked on the source (:mod:`ast`): no ``sys.path`` edit, at most
:data:`MAX_LINES` lines per experiment (the exceptions listed with their reason), no ``_private`` name
imported from ``interp``. Then the pieces the scripts moved into the package, against independent
oracles (hand-worked values, a tiny Llama): ``ioi_planted.py`` (:mod:`interp.analysis.planted.ioi`,
:mod:`interp.viz.planted_tables`, :func:`interp.datasets.ioi.split_ioi_prompts`), ``demo_results.py``
(:mod:`interp.viz.demo_block`), ``planted_harm.py`` (:mod:`interp.analysis.planted.world`), ``table1.py``
(:func:`interp.worlds.split.sample_token_budget`, :func:`interp.viz.tables.detour_markdown`),
``dialogue_qa.py`` (:func:`interp.metrics.dialogue_qa.seen_context_share`) and ``ioi_smollm2.py``
(:func:`interp.analysis.engines.attribution.top_patching_sites`, :func:`~interp.analysis.engines.attribution.top_agreement`,
:func:`interp.tasks.tokens.token_strings`).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import REPO
from test_plant import ioi_base  # noqa: F401  (the tiny Llama and IOI prompts fixture)

MAX_LINES = 150
#: experiment scripts still over :data:`MAX_LINES`, each with why (shrink this as they move into the package)
OVER_LIMIT: dict[str, str] = {}
SCRIPTS = sorted((REPO / "experiments").glob("*.py")) + sorted((REPO / "bench").glob("*.py"))
#: bench scripts that time a private step of the package on purpose, with why
PRIVATE_OK = {
    "real_model.py": "times the LoRA wrapping step alone (interp.train.finetune._apply_lora)",
}


def _sys_path_edits(path: Path) -> list[int]:
    """Lines that change ``sys.path`` (``sys.path.insert/append/extend/…`` or assign to it)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                lines.append(node.lineno)
        elif target is not None and ast.unparse(target) == "sys.path":
            lines.append(node.lineno)
    return sorted(lines)


def _private_interp_imports(path: Path) -> list[str]:
    """``module.name`` of every ``_private`` name (or module) imported from ``interp``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "interp":
            parts = node.module.split(".") + [a.name for a in node.names]
            found += [f"{node.module}.{a.name}" for a in node.names if any(p.startswith("_") for p in parts)]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "interp" and "._" in a.name]
    return found


def test_the_checkers_catch_what_they_claim(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import sys\nsys.path.insert(0, '.')\nsys.path = ['x']\n"
        "from interp.models import _secret\nfrom interp._hidden import x\nimport interp._y\n"
    )
    assert _sys_path_edits(bad) == [2, 3]
    assert _private_interp_imports(bad) == ["interp.models._secret", "interp._hidden.x", "interp._y"]
    good = tmp_path / "good.py"
    good.write_text("import sys\nprint(sys.path)\nfrom interp import load_model\n")
    assert _sys_path_edits(good) == [] and _private_interp_imports(good) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_scripts_import_interp_as_installed(path):
    assert _sys_path_edits(path) == [], f"{path.name} edits sys.path: the package is installed (make setup)"
    if not (path.parent.name == "bench" and path.name in PRIVATE_OK):
        assert _private_interp_imports(path) == [], f"{path.name} imports private names of interp"


def test_experiment_scripts_are_thin():
    lines = {p.name: len(p.read_text().splitlines()) for p in (REPO / "experiments").glob("*.py")}
    over = {name for name, n in lines.items() if n > MAX_LINES}
    assert over <= set(OVER_LIMIT), f"over {MAX_LINES} lines: { {k: lines[k] for k in over - set(OVER_LIMIT)} }"
    stale = {k for k in OVER_LIMIT if k not in over}
    assert not stale, f"now within {MAX_LINES} lines (take them off OVER_LIMIT): {sorted(stale)}"


# ---- the pieces of experiments/ioi_planted.py ----------------------------------------------------------


def test_split_ioi_prompts_keeps_name_pairs_apart(ioi_base):  # noqa: F811
    from transformers import AutoTokenizer

    from interp.datasets.ioi import split_ioi_prompts

    tok = AutoTokenizer.from_pretrained(ioi_base[0])
    train, held, dropped = split_ioi_prompts(tok, 20, 8, seed=3)
    assert (len(train), len(held)) == (20, 8)
    pair = lambda e: frozenset((e.meta["IO"], e.meta["S"]))  # noqa: E731
    assert not {pair(e) for e in train} & {pair(e) for e in held}
    assert dropped >= 0
    again = split_ioi_prompts(tok, 20, 8, seed=3)
    assert [e.prompt for e in again[0]] == [e.prompt for e in train]  # seeded


def test_evaluate_hf_zeroing_equals_zero_weights_and_leaves_no_hook(ioi_base, tmp_path):  # noqa: F811
    """Zeroing layer 1's MLP output by a hook = a plain forward with its down projection zeroed (Llama's
    MLP has no bias); the logit difference is also checked against a hand-indexed forward."""
    from interp.analysis.planted.ioi import evaluate_hf, mean_sq
    from interp.models.checkpoint import load_hf_model
    from interp.tasks import ContrastTask

    base, data = ioi_base
    task = ContrastTask.build(base, data)
    model = load_hf_model(base)
    got = evaluate_hf(model, task, zeroed=(1,), batch_size=5)
    assert all(not m._forward_hooks for m in model.modules())
    ids, mask = task.inputs()
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.zero_()
        logits = model(ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    last = mask.sum(1) - 1
    want = [
        float(logits[i, last[i], task.correct_ids[i]] - logits[i, last[i], task.foil_ids[i]]) for i in range(len(ids))
    ]
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert mean_sq(model, task, [1]) == 0.0  # its MLP now outputs zeros
    assert all(not m._forward_hooks for m in model.modules())


def test_check_frozen_names_what_moved(ioi_base, tmp_path):  # noqa: F811
    from interp.analysis.planted.ioi import check_frozen
    from interp.models.checkpoint import load_hf_model

    base = ioi_base[0]
    model = load_hf_model(base)
    with torch.no_grad():
        for p in model.model.layers[2].mlp.parameters():
            p[0, 0] += 1.0
    model.save_pretrained(tmp_path / "m")
    names = [f"model.layers.2.mlp.{k}_proj.weight" for k in ("down", "gate", "up")]
    assert check_frozen(base, tmp_path / "m", [2]) == names
    with pytest.raises(AssertionError, match="expected exactly"):
        check_frozen(base, tmp_path / "m", [1])  # layer 2 moved, layer 1 did not
    with torch.no_grad():
        model.model.layers[0].self_attn.q_proj.weight[0, 0] += 1.0
    model.save_pretrained(tmp_path / "m")
    with pytest.raises(AssertionError, match="expected exactly"):
        check_frozen(base, tmp_path / "m", [2])  # an attention weight moved too


def test_repair_summary_and_tables_by_hand():
    from interp.analysis.planted.ioi import repair_summary
    from interp.viz.planted_tables import fmt_interval, repair_markdown

    rows = [
        {"planting": "L1", "model": "unplanted", "seed": None, "metric": "logit_diff", "value": 0.5},
        {"planting": "L1", "model": "plain", "seed": 0, "metric": "logit_diff", "value": 1.0},
        {"planting": "L1", "model": "plain", "seed": 1, "metric": "logit_diff", "value": 3.0},
    ]
    table = pd.DataFrame(rows).assign(ci_low=0.25, ci_high=0.75)
    s = repair_summary(table).set_index("model")
    assert (s.loc["unplanted", "lo"], s.loc["unplanted", "hi"]) == (0.25, 0.75)  # one value: its own interval
    # two seeds: mean 2, sd √2, so the half-width is t(0.975, 1 df) · √2 / √2 = 12.7062 (tables)
    assert s.loc["plain", "value"] == 2.0 and s.loc["plain", "gap_to_unplanted"] == 1.5
    half = s.loc["plain", "hi"] - 2.0
    assert math.isclose(half, 2.0 - s.loc["plain", "lo"]) and s.loc["plain", "seeds"] == 2
    assert math.isclose(half, 12.7062, rel_tol=1e-4)  # interp.stats.t_quantile needs no scipy
    assert fmt_interval(1.23456, 1.0, 1.5) == "1.23 [1, 1.5]"
    assert fmt_interval(2.0, math.nan, 1.0) == "2" and fmt_interval(math.nan) == "–"
    both = pd.concat([repair_summary(table), repair_summary(table.assign(metric="accuracy"))], ignore_index=True)
    assert "| L1 | plain | 2 |" in repair_markdown(both)


def test_parse_planting():
    from interp.jobs.ioi_planted import parse_planting

    assert parse_planting("8,20") == parse_planting("8+20") == (8, 20) and parse_planting("15") == (15,)


# ---- the pieces of experiments/demo_results.py ---------------------------------------------------------


def test_demo_block_by_hand_and_its_markers():
    from interp.viz.demo_block import BEGIN, END, current_block, demo_block, replace_block

    results = {
        "machine": {"date": "2026-12-01", "cpu": "CPU X", "cores": 2, "threads": 2, "matmul_peak_gflops": 150.0},
        "seconds": {"train": 0.0, "world_model": 61.4, "layer_sweep": 5.0},
        "train": {"shipped": True},
        "world_model": {
            "table": [{"model": "trained", "next_token": 0.987, "next_token_se": 0.0042, "probe": float("nan")}],
            "settings": {"estimator": "exact", "pairs": 50, "depth": 3},
        },
        "layers": {"mlp_zero": {"layers": [{"layer": 1, "verdict": "useful", "effect": 0.5, "ci": [0.4, 0.6]}]}},
    }
    text = demo_block(results)
    lines = text.splitlines()
    # stages after training: 61.4 + 5.0 = 66.4 s → "1 min 6 s"; each stage rounded to whole seconds
    assert lines[0] == (
        "`interp run` (`make demo`), 2026-12-01, CPU X (2 cores, 2 threads), fp32 matmul peak 150 GFLOP/s: "
        "model the shipped demo model; the stages after it 1 min 6 s (world model 61 s, layer sweep 5 s)."
    )
    # a value with its s.e.; NaN and absent cells as "—"
    assert "| trained | 0.99 ± 0.00 | — | — | — | — |" in lines
    assert "Myhill–Nerode: exact estimator, 50 state pairs, depth 3." in lines
    assert lines[-2:] == ["| then | result |", "|---|---|"]  # no navigation, plant or fix: no rows
    page = f"intro\n{BEGIN}\nold\nlines\n{END}\nafter\n"
    new = replace_block(page, text, "page.md")
    assert new.startswith("intro\n") and new.endswith(f"{END}\nafter\n") and current_block(new, "page.md") == text
    with pytest.raises(ValueError, match="nomark.md: no"):
        replace_block("no markers", text, "nomark.md")
    with pytest.raises(ValueError, match="nomark.md: no"):
        current_block("no markers", "nomark.md")


# ---- the pieces of experiments/planted_harm.py ---------------------------------------------------------


def test_source_scores_by_hand():
    from interp.analysis.planted.world import source_scores

    verdicts = {  # (model, control, planted layers): per source, the verdict of layers 0, 1, 2
        ("A", False, (1,)): {"zero": ["harmful", "harmful", "useful"], "probe": ["useful", "harmful", "useful"]},
        ("B", False, (2,)): {"zero": ["negligible"] * 3, "probe": ["useful", "useful", "harmful"]},
        ("C", True, ()): {"zero": ["useful", "harmful", "useful"], "probe": ["useful"] * 3},
    }
    rows = [
        {"model": m, "control": c, "source": s, "layer": layer, "planted": layer in p, "verdict": v}
        for (m, c, p), by in verdicts.items()
        for s, vs in by.items()
        for layer, v in enumerate(vs)
    ]
    got = source_scores(pd.DataFrame(rows), ["zero", "probe"]).set_index("source")
    # zero: A finds layer 1 and falsely calls layer 0; B misses layer 2; the control calls 1 of its 3 layers
    z = got.loc["zero"]
    assert (z["planted layers"], z["found"], z["false alarms"]) == (2, 1, 1)
    assert (z["precision"], z["recall"], z["exact plantings"]) == (0.5, 0.5, "0/2")
    assert math.isclose(z["control FPR"], 1 / 3) and z["control layers"] == 3
    p = got.loc["probe"]
    assert (p["found"], p["false alarms"], p["precision"], p["recall"], p["exact plantings"]) == (2, 0, 1.0, 1.0, "2/2")
    assert p["control FPR"] == 0.0
    none = source_scores(pd.DataFrame(rows), ["absent"]).iloc[0]  # no rows: NaN, not a division by zero
    assert math.isnan(none["precision"]) and math.isnan(none["control FPR"]) and none["exact plantings"] == "0/0"


def test_world_repair_summary_and_its_tables_by_hand():
    from interp.analysis.planted.world import repair_summary
    from interp.viz.planted_tables import frame_markdown, metric_columns_markdown

    nan = math.nan
    rows = [  # (model, seed, metric, layer, value, se, ci_low, ci_high)
        ("before", None, "heldout_loss", None, 2.0, 0.5, nan, nan),
        ("plain", 0, "heldout_loss", None, 1.0, 0.1, nan, nan),
        ("plain", 1, "heldout_loss", None, 3.0, 0.1, nan, nan),
        ("unplanted", None, "heldout_loss", None, 0.5, nan, 0.25, 0.75),
        ("plain", 0, "mlp_out_sq", 3, 0.2, nan, nan, nan),
        ("plain", 0, "mlp_out_sq", 1, 9.0, nan, nan, nan),  # not a harmful layer: dropped
        ("plain", 0, "other_metric", None, 9.0, nan, nan, nan),  # not asked for: dropped
    ]
    cols = ["model", "seed", "metric", "layer", "value", "se", "ci_low", "ci_high"]
    table = pd.DataFrame(rows, columns=cols).assign(planting="L3", n=10)
    s = repair_summary(table, harmful=[3], metrics=["heldout_loss"])
    assert list(dict.fromkeys(s.metric)) == ["heldout_loss", "mlp_out_sq L3"]
    h = s[s.metric == "heldout_loss"].set_index("model")
    assert list(h.index) == ["planted (before)", "plain", "unplanted"]
    # one value: ±1.96 SE, or its own interval; two seeds: mean 2 ± t(0.975, 1 df)·sd/√2 = 12.7062
    assert math.isclose(h.loc["planted (before)", "lo"], 2.0 - 1.96 * 0.5)
    assert (h.loc["unplanted", "lo"], h.loc["unplanted", "hi"]) == (0.25, 0.75)
    assert h.loc["plain", "value"] == 2.0 and h.loc["plain", "seeds"] == 2
    assert math.isclose(h.loc["plain", "hi"] - 2.0, 12.7062, rel_tol=1e-4)
    assert h.loc["planted (before)", "gap to unplanted"] == 1.5 == h.loc["plain", "gap to unplanted"]
    assert math.isnan(s[s.metric == "mlp_out_sq L3"].iloc[0]["gap to unplanted"])  # no unplanted value
    md = metric_columns_markdown(s).splitlines()
    assert md[0] == "| model | heldout_loss | mlp_out_sq L3 |"
    assert md[3].startswith("| plain | 2 [-10.7, 14.7] | 0.2 |")  # one seed of mlp_out_sq, no interval
    assert md[4] == "| unplanted | 0.5 [0.25, 0.75] | – |"  # a model without the metric
    assert frame_markdown(pd.DataFrame({"a": [1.23456, nan], "b": ["x", "y"]})).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| 1.235 | x |",
        "| – | y |",
    ]


# ---- the pieces of experiments/table1.py ---------------------------------------------------------------


def test_sample_token_budget_stops_at_the_sequence_that_crosses_it(tiny_city):
    from interp.worlds.split import sample_token_budget

    seqs = sample_token_budget(tiny_city, 3000, seed=4)
    total = sum(len(s) + 1 for s in seqs)  # each with its <bos>
    assert total >= 3000 and total - (len(seqs[-1]) + 1) < 3000
    # the same draws as the world's own seeded generator, 500 at a time (one batch covers this budget)
    assert seqs == tiny_city.generate(500, np.random.default_rng(4))[: len(seqs)]
    assert sample_token_budget(tiny_city, 3000, seed=4) == seqs
    more = sample_token_budget(tiny_city, 500 * 3 * 40, seed=4)  # past the first batch: a second is drawn
    assert sum(len(s) + 1 for s in more) >= 500 * 3 * 40 and more[: len(seqs)] == seqs


def test_detour_markdown_and_parse_curriculum_by_hand():
    from interp.jobs.table1 import parse_curriculum
    from interp.metrics.navigation import DetourResult
    from interp.viz.tables import detour_markdown

    t = pd.DataFrame({"kind": ["random", "random", "adversarial", "adversarial"], "p": [0.0, 0.1, 0.0, 0.1]})
    t["valid"] = [1.0, 0.875, 1.0, 0.5]
    lines = detour_markdown({"m": DetourResult(t.assign(se=0.0, n=8), {})}).splitlines()
    assert lines == [
        "| model | detour | p=0 | p=0.1 |",
        "|---|---|---|---|",
        "| m | random | 1.00 | 0.88 |",
        "| m | adversarial | 1.00 | 0.50 |",
    ]
    c = parse_curriculum("23:1000,43:500")
    assert (c.max_tokens, c.steps) == ((23, 43), (1000, 500)) and parse_curriculum("").steps == ()
    with pytest.raises(ValueError, match="MAX_TOKENS:STEPS"):
        parse_curriculum("23-1000")


# ---- the pieces of experiments/dialogue_qa.py ----------------------------------------------------------


def test_seen_context_share_counts_utterance_prefixes_by_hand():
    from interp.jobs.dialogue_qa import parse_stages
    from interp.metrics.dialogue_qa import seen_context_share
    from interp.worlds.dialogue import DialogueWorld

    world = DialogueWorld(agents=2, objects=2, locations=2, max_count=2, max_utts=5)
    # conversation P1: a b P2: c (its probe Q: x yes is not part of it): prefixes "", "P1: a b" and the whole
    train = [["P1:", "a", "b", "P2:", "c", "Q:", "x", "yes"]]
    rows = pd.DataFrame(
        {
            "context": ["P1: a b", "P1: a b P2: c", "P1: z", "P1: a", "P1: z"],
            "altered": [False, False, False, False, True],  # the altered row does not count
        }
    )
    # seen: the first two; "P1: z" is no prefix, "P1: a" cuts an utterance (not an utterance prefix)
    assert seen_context_share(train, world, rows) == 2 / 4
    assert seen_context_share(train, world, rows[rows.altered]) == 0.0  # no original: 0, not a division by zero
    assert parse_stages("1,2") == [1, 2] and parse_stages(" None ") == []
    with pytest.raises(ValueError, match="max_utts"):
        parse_stages("1;2")


# ---- the pieces of experiments/ioi_smollm2.py ----------------------------------------------------------


def test_top_patching_sites_and_top_agreement_by_hand():
    from interp.analysis.engines.activation_patching import PatchingMap
    from interp.analysis.engines.attribution import top_agreement, top_patching_sites

    # mean effects per (layer, head) over two examples: (0,0) 0.5, (0,1) −2, (1,0) 1, (1,1) 0.1
    means = {(0, 0): 0.5, (0, 1): -2.0, (1, 0): 1.0, (1, 1): 0.1}
    frame = pd.DataFrame(
        [
            {"layer": L, "head": h, "example": e, "effect": m + d}
            for (L, h), m in means.items()
            for e, d in ((0, 1), (1, -1))
        ]
    )
    exact = PatchingMap(frame, {"axis": "head", "clean_mean": 3.0, "corrupted_mean": -1.0})  # gap 4
    top = top_patching_sites(exact, 2)
    assert [(int(r.layer), int(r.head)) for r in top.itertuples()] == [(0, 1), (1, 0)]  # by |mean effect|
    assert list(top["mean_effect"]) == [-2.0, 1.0] and list(top["restored"]) == [-0.5, 0.25]
    assert list(top["rank"]) == [1, 2]
    # an attribution that orders the two largest exact sites the other way round
    atp_means = {(0, 0): 0.2, (0, 1): 1.5, (1, 0): 0.9, (1, 1): 0.1}
    atp = PatchingMap(frame.assign(effect=[atp_means[(r.layer, r.head)] for r in frame.itertuples()]), {"axis": "head"})
    # the top 2 exact sites are (0,1) −2 and (1,0) 1; the attribution gives 1.5 and 0.9: opposite order → −1
    assert math.isclose(top_agreement(atp, exact, 2), -1.0)
    # over the top 3 (adding (0,0): exact 0.5, attribution 0.2): exact ranks 1, 3, 2, attribution 3, 2, 1;
    # centred (−1, 1, 0) · (1, 0, −1) = −1 over √2 · √2 → −0.5
    assert math.isclose(top_agreement(atp, exact, 3), -0.5)


def test_token_strings_decode_each_token_alone(ioi_base):  # noqa: F811
    from transformers import AutoTokenizer

    from interp.tasks.tokens import token_strings

    tok = AutoTokenizer.from_pretrained(ioi_base[0])
    ids = torch.tensor([tok("When Mary and John went")["input_ids"]])
    got = token_strings(tok, ids)
    assert got == [[tok.decode([i]) for i in ids[0].tolist()]]  # the byte-level Ġ shown as a space
    assert "".join(got[0]) == "When Mary and John went" and any(t.startswith(" ") for t in got[0])
    assert token_strings(tok, ids.tolist()) == got  # a nested list works as a tensor


def test_the_ioi_circuit_job_runs_every_stage_on_a_tiny_llama(ioi_base, tmp_path):  # noqa: F811
    """``run_ioi_circuit`` (``experiments/ioi_smollm2.py``'s job) end to end on a folder: every stage
    recorded, its files written, the accuracy's logit difference equal to plain HF forwards, the maps
    equal to TransformerLens's own patching, ``results.json`` what it returns."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from interp.datasets.ioi import ioi_examples
    from interp.jobs.ioi_circuit import IOICircuitConfig, run_ioi_circuit

    folder, out = ioi_base[0], tmp_path / "ioi"
    cfg = IOICircuitConfig(
        out=str(out), model=str(folder), n_eval=8, n_maps=2, check_layers=[0, 2], top=2, n_boot=50, no_progress=True
    )
    said: list[str] = []
    res = run_ioi_circuit(cfg, command="test", say=said.append)
    assert list(res["seconds"]) == ["load", "eval", "maps", "tl_check", "attribution", "views", "sweep"]
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(res, default=str))
    for name in ("eval.md", "patching_heads.png", "patching_resid_pre.html", "top_heads.csv",
                 "attribution_heads.png", "attention_top_heads.html", "mlp_sweep.png"):  # fmt: skip
        assert (out / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    diffs = []
    with torch.no_grad():
        for e in ioi_examples(tok, 8, seed=0):
            last = hf(torch.tensor([tok(e.prompt)["input_ids"]])).logits[0, -1]
            diffs.append(float(last[tok(e.correct)["input_ids"][0]] - last[tok(e.foil)["input_ids"][0]]))
    assert res["eval"]["n"] == 8 and math.isclose(res["eval"]["logit_diff"], float(np.mean(diffs)), abs_tol=1e-4)
    for comp in ("resid_pre", "heads"):
        assert res["tl_check"][comp]["max_abs_diff"] < 1e-4
    assert len(res["sweep"]["layers"]) == 3 and res["views"]["heads"] and any("wrote" in s for s in said)


def test_the_ioi_planted_job_plants_judges_and_repairs_on_a_tiny_llama(ioi_base, tmp_path):  # noqa: F811
    """``run_ioi_planted`` (``experiments/ioi_planted.py``'s job) end to end on a folder, quick: one
    planting of one layer and one of two, each judged against the unplanted model's sweep, the
    two-layer one undone a layer at a time and repaired; its files and ``results.json`` agree."""
    import json

    from interp.jobs.ioi_planted import IOIPlantedConfig, run_ioi_planted

    out = tmp_path / "planted"
    cfg = IOIPlantedConfig(model=str(ioi_base[0]), out=str(out), plant=["1", "0,2"], repair=["L0+L2"], quick=True,
                           sweep_batch=16, threads=1, no_progress=True)  # fmt: skip
    said: list[str] = []
    report = run_ioi_planted(cfg, log=said.append)
    assert report == (out / "ioi_planted.md").read_text() and report.startswith("# Planted harm")
    res = json.loads((out / "results.json").read_text())
    assert [d["model"] for d in res["detection"]] == ["unplanted", "L1", "L0+L2"]
    assert [d["planted"] for d in res["detection"]] == [[], [1], [0, 2]]
    assert res["prompts"]["heldout"] == 24 and res["settings"]["plant"] == ["1", "0,2"]
    changes = pd.read_csv(out / "changes.csv")
    assert set(changes["model"]) == {"unplanted", "L1", "L0+L2"} and len(changes) == 3 * 3  # 3 models × 3 layers
    undone = pd.read_csv(out / "unplanted_layers.csv")
    assert len(undone) >= 2  # each of the two planted layers put back alone
    table = pd.read_csv(out / "repair.csv")
    assert set(table["planting"]) == {"L0+L2"}
    assert {"planted", "unplanted"} <= set(table["model"]) and any(str(m).startswith("plain") for m in table["model"])
    assert any("repair" in s for s in said)
