"""``--device auto`` / ``--dtype`` on every command that loads a model, and metric code that is
device-correct (plumbing checked on CPU, the only device here).

No GPU exists on this machine, so what can be checked is: (a) every such command accepts
``--device auto --dtype float32`` and runs end to end on CPU; (b) under a device map that sends
blocks to ``"disk"`` (accelerate dispatches the model: offloaded parameters live on ``meta`` and
are materialised per call, so code that reads "the model's device" from an arbitrary parameter
breaks) the next-token test, the probes' activations, the LM view and the fine-tuning evaluation
equal the one-device values; (c) no metric, analysis or view code builds a tensor on an explicit
``"cpu"`` device (source check)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

COMMANDS = ("next-token", "probe", "navigate", "metrics", "sweep", "plant", "report")


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_city, tiny_model_config):
    """A run folder: data/train.txt, data/test.txt and a lively tiny GPT-2 at best/."""
    from conftest import liven

    from interp.models import build_gpt2, save_checkpoint
    from interp.worlds.io import write_sequences

    root = tmp_path_factory.mktemp("placement") / "run"
    seqs = tiny_city.generate(80, np.random.default_rng(0))
    write_sequences(root / "data" / "train.txt", seqs[:60])
    write_sequences(root / "data" / "test.txt", seqs[60:])
    save_checkpoint(liven(build_gpt2(tiny_city.vocab, tiny_model_config), 0), tiny_city, root / "best")
    return root


#: GPT-2 with its token embedding (the model's first parameter), block 0 and the (tied) head
#: offloaded to "disk": code that takes the device of the first parameter sends inputs to "meta"
OFFLOADED = {"transformer.wte": "disk", "transformer.wpe": "cpu", "transformer.h.0": "disk", "transformer.h.1": "cpu",
             "transformer.ln_f": "cpu", "lm_head": "disk"}


def test_every_model_command_defaults_to_device_auto():
    from interp.cli import build_parser

    p = build_parser()
    for cmd in COMMANDS:
        extra = {"plant": ["--out", "o", "--layers", "1"], "report": []}.get(cmd, [])
        args = p.parse_args([cmd, *(["r"] if cmd == "report" else ["--model", "m"]), *extra])
        assert (args.device, args.dtype) == ("auto", "float32"), cmd
    args = p.parse_args(["finetune", "--config", "c.toml", "--n-devices", "2"])
    assert args.n_devices == 2 and args.device is None  # finetune: the config's settings unless given


def test_every_model_command_runs_with_device_auto_and_dtype(run, tmp_path, capsys):
    from interp.cli import main

    best, place = str(run / "best"), ["--device", "auto", "--dtype", "float32"]
    calls = {
        "next-token": ["next-token", "--model", best, "--json", *place],
        "probe": ["probe", "--model", best, "--layers", "0", "--max-iter", "20", "--json", *place],
        "navigate": ["navigate", "--model", best, "--pairs", "4", "--json", *place],
        "metrics": ["metrics", "--model", best, "--pairs", "4", "--depth", "2", "--json", "--no-progress", *place],
        "sweep": ["sweep", "--model", best, "--n", "12", "--out", str(tmp_path / "sweep"), "--json", *place],
        "plant": ["plant", "--model", best, "--out", str(tmp_path / "plant"), "--layers", "1", "--steps", "2",
                  "--batch-size", "8", "--no-progress", *place],
        "report": ["report", str(run), "--out", str(tmp_path / "report.html"), *place],
    }
    assert set(calls) == set(COMMANDS)
    out = {}
    for name, argv in calls.items():
        assert main(argv) == 0, name
        out[name] = capsys.readouterr().out.strip().splitlines()
    nt = json.loads(out["next-token"][-1])
    assert nt["sequences"] == 20 and 0 <= nt["next_token_position"] <= 1
    assert 0 <= json.loads(out["probe"][-1])["probe_best_accuracy"] <= 1
    assert json.loads(out["navigate"][-1])["routes"]
    assert json.loads(out["metrics"][-1])
    assert (tmp_path / "sweep" / "sweep.csv").is_file()
    assert (tmp_path / "plant" / "model" / "config.json").is_file()
    plant = json.loads((tmp_path / "plant" / "plant.json").read_text())
    assert "placement" not in plant  # the CPU float32 default: plantings recorded before stay valid
    html = (tmp_path / "report.html").read_text()
    assert "Attention patterns (CircuitsVis)" in html and "attention patterns:" not in html  # no load error


def test_finetune_accepts_device_auto_dtype_and_n_devices(run, tmp_path, capsys):
    from interp.cli import main

    cfg = tmp_path / "ft.toml"
    cfg.write_text(f'checkpoint = "{run / "best"}"\nout = "{tmp_path / "ft"}"\nobjectives = ["plain"]\n'
                   f"[data]\nn_eval = 8\n[train]\nsteps = 2\nbatch_size = 8\nwarmup_steps = 0\n"
                   f"[eval]\nmlp_sq = false\nsweep = false\nmn = false\n")
    assert main(["finetune", "--config", str(cfg), "--device", "auto", "--dtype", "float32", "--n-devices", "1",
                 "--no-progress"]) == 0
    capsys.readouterr()
    before = json.loads((tmp_path / "ft" / "eval_before.json").read_text())
    assert "placement" not in before["key"]  # the CPU float32 default
    assert {r["metric"] for r in before["rows"]} >= {"heldout_loss", "next_token_position"}
    # a device map: training and the evaluations before/after load on it (recorded in the cache key)
    assert main(["finetune", "--config", str(cfg), "--device-map", '{"": "cpu"}', "--no-progress"]) == 0
    capsys.readouterr()
    mapped = json.loads((tmp_path / "ft" / "eval_before.json").read_text())
    assert mapped["key"]["placement"] == {"device": None, "dtype": "float32", "device_map": {"": "cpu"},
                                          "n_devices": None}
    assert json.loads((tmp_path / "ft" / "plain_s0" / "eval.json").read_text())["key"]["placement"] == \
        mapped["key"]["placement"]
    assert [r["value"] for r in mapped["rows"]] == pytest.approx([r["value"] for r in before["rows"]], rel=1e-5)
    if torch.cuda.device_count() < 2:
        assert main(["finetune", "--config", str(cfg), "--n-devices", "2", "--no-progress"]) == 2
        assert "n_devices=2 needs that many CUDA devices" in capsys.readouterr().err
    assert main(["finetune", "--config", str(cfg), "--n-devices", "0", "--no-progress"]) == 2
    assert "n_devices must be >= 1" in capsys.readouterr().err


# ---- device maps: the one-device values ------------------------------------------------------------

def test_next_token_probes_and_lm_under_a_device_map_equal_one_device(run, tiny_city, tmp_path):
    from interp.metrics.next_token import next_token_test
    from interp.metrics.probes import collect_activations
    from interp.models.checkpoint import load_bridge
    from interp.models.device import model_device
    from interp.models.lm import BridgeLM
    from interp.worlds.io import read_sequences

    seqs = read_sequences(run / "data" / "test.txt", tiny_city)
    one = load_bridge(run / "best")
    mapped = load_bridge(run / "best", device_map=OFFLOADED, offload_folder=tmp_path / "offload")
    assert mapped.original_model.hf_device_map == OFFLOADED
    assert next(mapped.parameters()).device.type == "meta"  # the first parameter is offloaded
    assert model_device(mapped).type == "cpu"

    a, b = next_token_test(one, tiny_city, seqs), next_token_test(mapped, tiny_city, seqs)
    assert a.summary() == b.summary()
    assert a.per_position.equals(b.per_position)

    fa, fb = (collect_activations(m, tiny_city, seqs[:6], [-1, 0, 1, 2]) for m in (one, mapped))
    assert fa.labels == fb.labels
    torch.testing.assert_close(fa.features, fb.features)

    prefixes = [list(s[:k]) for s, k in zip(seqs[:4], (2, 3, 4, 5))]
    lms = BridgeLM(one, tiny_city.vocab), BridgeLM(mapped, tiny_city.vocab)
    cursors = [lm.start(prefixes) for lm in lms]
    torch.testing.assert_close(cursors[0].logprobs, cursors[1].logprobs)
    parents, tokens = [0, 0, 1, 3], [seqs[0][2], seqs[1][3], seqs[1][3], seqs[3][5]]
    ext = [lm.extend(c, parents, tokens) for lm, c in zip(lms, cursors)]
    torch.testing.assert_close(ext[0].logprobs, ext[1].logprobs)


def test_finetune_evaluation_loads_on_the_training_placement(run, tmp_path):
    from interp.models.device import Placement
    from interp.train.finetune import FinetuneConfig, FinetuneData, FinetuneEval, eval_placement, evaluate, load_task

    cfg = FinetuneConfig(checkpoint=str(run / "best"), dtype="bfloat16")
    assert eval_placement(cfg, torch.device("cpu")) == Placement("cpu", torch.bfloat16)  # the training dtype
    mapped = Placement.resolve(device_map=OFFLOADED, offload_folder=str(tmp_path / "offload"))
    cfg = FinetuneConfig(checkpoint=str(run / "best"), device_map=json.dumps(OFFLOADED))
    assert eval_placement(cfg, torch.device("cpu")).device_map == OFFLOADED  # the map is kept

    task = load_task(run / "best", FinetuneData(kind="world", n_eval=12))
    ev = FinetuneEval(sweep=True, mn_pairs=6, mn_depth=2, n_boot=50)
    rows_one, _ = evaluate(run / "best", task, ev, log=lambda *_: None)
    assert {r["metric"] for r in rows_one} >= {"heldout_loss", "mlp_out_sq", "next_token_position",
                                               "sweep_effect_token_loss", "mn_compression_precision"}
    # the sweep's forward reads bridge.cfg.device ("meta" when the embedding is offloaded), so
    # the first-parameter-offloaded map runs without it; a map keeping the embedding runs it all
    kept = {**{k: "cpu" for k in OFFLOADED}, "transformer.h.0": "disk"}
    for placement, e in ((mapped, replace(ev, sweep=False)),
                         (Placement.resolve(device_map=kept, offload_folder=str(tmp_path / "o2")), ev)):
        rows_map, _ = evaluate(run / "best", task, e, log=lambda *_: None, placement=placement)
        ref = [r for r in rows_one if e.sweep or not r["metric"].startswith("sweep")]
        assert [(r["metric"], r["layer"]) for r in ref] == [(r["metric"], r["layer"]) for r in rows_map]
        for a, b in zip(ref, rows_map):
            assert b["value"] == pytest.approx(a["value"], rel=1e-4, abs=1e-6, nan_ok=True), a["metric"]


# ---- no tensor built on an explicit CPU device in code that feeds models ----------------------------

#: where "cpu" may be named: the device resolver itself, fallbacks when a model has no parameter,
#: and fine-tuning's config default of the main job (a placement choice, not a tensor)
_ALLOWED = {("interp/metrics/pragworld_eval.py", 'return torch.device("cpu")'),
            ("interp/pipeline.py", 'device="cpu"')}


def test_no_model_input_is_built_on_an_explicit_cpu_device():
    root = Path(__file__).resolve().parents[1]
    pattern = re.compile(r"""device\s*=\s*["']cpu["']|torch\.device\(\s*["']cpu["']\s*\)|\.to\(\s*["']cpu["']\s*\)""")
    found = []
    for path in sorted((root / "interp").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "interp/models/device.py":
            continue
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            m = pattern.search(code)
            if m and not any(rel == f and s in code for f, s in _ALLOWED):
                found.append(f"{rel}: {line.strip()}")
    assert not found, "tensors placed on the CPU by name (use the model's device, interp.models.device):\n" + \
        "\n".join(found)
