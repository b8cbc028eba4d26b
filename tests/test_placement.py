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

import ast
import io
import json
import re
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
OFFLOADED = {
    "transformer.wte": "disk",
    "transformer.wpe": "cpu",
    "transformer.h.0": "disk",
    "transformer.h.1": "cpu",
    "transformer.ln_f": "cpu",
    "lm_head": "disk",
}


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
        "plant": [
            "plant",
            "--model",
            best,
            "--out",
            str(tmp_path / "plant"),
            "--layers",
            "1",
            "--steps",
            "2",
            "--batch-size",
            "8",
            "--no-progress",
            *place,
        ],
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
    cfg.write_text(
        f'checkpoint = "{run / "best"}"\nout = "{tmp_path / "ft"}"\nobjectives = ["plain"]\n'
        f"[data]\nn_eval = 8\n[train]\nsteps = 2\nbatch_size = 8\nwarmup_steps = 0\n"
        f"[eval]\nmlp_sq = false\nsweep = false\nmn = false\n"
    )
    assert (
        main(
            [
                "finetune",
                "--config",
                str(cfg),
                "--device",
                "auto",
                "--dtype",
                "float32",
                "--n-devices",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    capsys.readouterr()
    before = json.loads((tmp_path / "ft" / "eval_before.json").read_text())
    assert "placement" not in before["key"]  # the CPU float32 default
    assert {r["metric"] for r in before["rows"]} >= {"heldout_loss", "next_token_position"}
    # a device map: training and the evaluations before/after load on it (recorded in the cache key)
    assert main(["finetune", "--config", str(cfg), "--device-map", '{"": "cpu"}', "--no-progress"]) == 0
    capsys.readouterr()
    mapped = json.loads((tmp_path / "ft" / "eval_before.json").read_text())
    assert mapped["key"]["placement"] == {
        "device": None,
        "dtype": "float32",
        "device_map": {"": "cpu"},
        "n_devices": None,
    }
    assert (
        json.loads((tmp_path / "ft" / "plain_s0" / "eval.json").read_text())["key"]["placement"]
        == mapped["key"]["placement"]
    )
    assert [r["value"] for r in mapped["rows"]] == pytest.approx([r["value"] for r in before["rows"]], rel=1e-5)
    if torch.cuda.device_count() < 2:
        assert main(["finetune", "--config", str(cfg), "--n-devices", "2", "--no-progress"]) == 2
        assert "n_devices=2 needs that many CUDA devices" in capsys.readouterr().err
    assert main(["finetune", "--config", str(cfg), "--n-devices", "0", "--no-progress"]) == 2
    assert "n_devices must be >= 1" in capsys.readouterr().err


def test_finetune_device_accepts_the_names_of_the_help(run, tmp_path, capsys):
    """``interp finetune --device`` lists auto, cpu, cuda, cuda:N and mps: the config takes each of
    them (checked against the machine when the run starts, as every other command does) and refuses
    any other name before a model loads."""
    from interp.cli import build_parser, main
    from interp.config import FinetuneConfig

    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions[0].choices["finetune"]._actions if a.dest == "device")
    for name in ("auto", "cpu", "cuda", "cuda:N", "mps"):
        assert name in sub.help
        FinetuneConfig(device=name.replace("N", "1"))  # accepted as a name
    for bad in ("gpu", "cuda:x", ""):
        with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, mps or cuda:N"):
            FinetuneConfig(device=bad)
    cfg = tmp_path / "ft.toml"
    cfg.write_text(
        f'checkpoint = "{run / "best"}"\nout = "{tmp_path / "ft"}"\nobjectives = ["plain"]\n'
        f"[train]\nsteps = 1\nbatch_size = 4\nwarmup_steps = 0\n"
        f"[eval]\nmlp_sq = false\nsweep = false\nmn = false\n"
    )
    assert main(["finetune", "--config", str(cfg), "--device", "gpu", "--no-progress"]) == 2
    assert "device must be one of" in capsys.readouterr().err
    if not torch.cuda.is_available():  # a name this machine lacks: the resolver's message, nothing written
        assert main(["finetune", "--config", str(cfg), "--device", "cuda:1", "--no-progress"]) == 2
        assert "this machine has no CUDA device" in capsys.readouterr().err
        assert not (tmp_path / "ft").exists()


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
    from interp.analysis.evaluation.finetune import evaluate
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval
    from interp.models.device import Placement
    from interp.train.finetune import eval_placement
    from interp.train.finetune_data import load_task

    cfg = FinetuneConfig(checkpoint=str(run / "best"), dtype="bfloat16")
    assert eval_placement(cfg, torch.device("cpu")) == Placement("cpu", torch.bfloat16)  # the training dtype
    mapped = Placement.resolve(device_map=OFFLOADED, offload_folder=str(tmp_path / "offload"))
    cfg = FinetuneConfig(checkpoint=str(run / "best"), device_map=json.dumps(OFFLOADED))
    assert eval_placement(cfg, torch.device("cpu")).device_map == OFFLOADED  # the map is kept

    task = load_task(run / "best", FinetuneData(kind="world", n_eval=12))
    ev = FinetuneEval(sweep=True, mn_pairs=6, mn_depth=2, n_boot=50)
    rows_one, _ = evaluate(run / "best", task, ev, log=lambda *_: None)
    assert {r["metric"] for r in rows_one} >= {
        "heldout_loss",
        "mlp_out_sq",
        "next_token_position",
        "sweep_effect_token_loss",
        "mn_compression_precision",
    }
    # every part, the MLP zero-out sweep included, on the map that offloads the embedding
    rows_map, _ = evaluate(run / "best", task, ev, log=lambda *_: None, placement=mapped)
    assert [(r["metric"], r["layer"]) for r in rows_one] == [(r["metric"], r["layer"]) for r in rows_map]
    for a, b in zip(rows_one, rows_map):
        assert b["value"] == pytest.approx(a["value"], rel=1e-4, abs=1e-6, nan_ok=True), a["metric"]


def test_analysis_sweeps_under_a_device_map_equal_one_device(run, tmp_path):
    """``interp sweep``'s three kinds, exact and attribution, on the map that offloads the token
    embedding (``bridge.cfg.device`` is ``meta`` there) give the one-device frames: direct-effect
    patching (resid_cache + scoring.forward), activation patching (TransformerLens's engine) and
    the MLP zero-out sweep (reuse: the resumed forwards; attribution: the gradient run)."""
    from interp.jobs.sweep import run_sweep
    from interp.models.device import Placement

    mapped = Placement.resolve(device_map=OFFLOADED, offload_folder=str(tmp_path / "offload"))
    for kind in ("mlp-zero", "direct-effect", "activation-patching"):
        for method in ("reuse", "attribution"):
            runs = [
                run_sweep(
                    run / "best",
                    kind=kind,
                    method=method,
                    n=20,
                    out=tmp_path / f"{kind}-{method}-{i}",
                    n_boot=50,
                    length=6,
                    edit_at=2,
                    placement=p,
                    log=io.StringIO(),
                )
                for i, p in enumerate((None, mapped))
            ]
            if kind == "activation-patching":
                assert set(runs[0].maps) == set(runs[1].maps) == {"resid_pre", "heads"}
                frames = [(r.maps["resid_pre"].frame, r.maps["heads"].frame) for r in runs]
                metas = [(r.maps["resid_pre"].meta, r.maps["heads"].meta) for r in runs]
                for a, b in zip(*metas):
                    assert (a["clean_mean"], a["corrupted_mean"]) == pytest.approx(
                        (b["clean_mean"], b["corrupted_mean"]), rel=1e-5, abs=1e-7
                    )
            else:
                frames = [(r.sweep.frame,) for r in runs]
            for a, b in zip(*frames):
                assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0, (kind, method)
                num = a.select_dtypes("number").columns
                np.testing.assert_allclose(
                    b[num].to_numpy(float),
                    a[num].to_numpy(float),
                    rtol=1e-5,
                    atol=1e-6,
                    err_msg=f"{kind} --method {method}",
                )
                assert np.nanmax(np.abs(a["effect"].to_numpy(float))) > 1e-4, (kind, method)  # not all zero


def test_activation_patching_restores_the_bridge_cfg_device(run, tmp_path):
    """TransformerLens's patching allocates its results on ``bridge.cfg.device``; under the map
    that is ``meta``, so the call names the model's device for its duration only."""
    from interp.analysis.engines.activation_patching import activation_patching, legal_mass
    from interp.models.checkpoint import load_bridge

    mapped = load_bridge(run / "best", device_map=OFFLOADED, offload_folder=tmp_path / "offload").eval()
    assert torch.device(mapped.cfg.device).type == "meta"
    gen = torch.Generator().manual_seed(3)
    v = int(mapped.cfg.d_vocab)
    clean = torch.randint(3, v, (2, 5), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 2] = 3 + (clean[:, 2] - 3 + 1) % (v - 3)
    legal = torch.zeros(2, v, dtype=torch.bool)
    legal[:, 3:8] = True
    res = activation_patching(mapped, clean, corrupted, legal_mass(legal), "mlp_out")
    assert torch.device(mapped.cfg.device).type == "meta"
    assert np.isfinite(res.frame["value"]).all() and len(res.frame) == int(mapped.cfg.n_layers) * 5 * 2


def test_mlp_out_squares_and_hls_under_a_device_map_equal_one_device(run, tmp_path):
    """The HLS penalty and fine-tuning's per-layer mean squared MLP output, on the raw HF model
    under the map that offloads the embedding: the one-device values (the mask meets each layer's
    output on that output's device)."""
    from interp.analysis.evaluation.finetune import mean_squared_mlp_out
    from interp.models.checkpoint import load_hf_model
    from interp.models.device import Placement
    from interp.train.data import make_batch
    from interp.train.regularisers import HLS

    one = load_hf_model(run / "best")
    mapped = load_hf_model(
        run / "best", placement=Placement.resolve(device_map=OFFLOADED, offload_folder=str(tmp_path / "off"))
    )
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(3, int(one.config.vocab_size), (6, 9), generator=gen)
    ids[1, 6:] = 0  # padding: the mask matters
    sq = [mean_squared_mlp_out(m, ids, 0, [0, 1]) for m in (one, mapped)]
    for layer in (0, 1):
        torch.testing.assert_close(sq[1][layer], sq[0][layer])
        assert float(sq[0][layer].min()) > 0
    values = []
    for m in (one, mapped):
        hls = HLS([0, 1], weight=1.0)
        batch = make_batch(ids, 0)
        with torch.no_grad(), hls.install(m):
            m(batch.inputs)
            values.append(hls.compute(batch))
    torch.testing.assert_close(values[1], values[0])
    # oracle: plain forward hooks on the one-device model's MLPs; Σ over layers of the mean over
    # real positions of the mean over features of out²
    outs = {}
    handles = [
        one.transformer.h[layer].mlp.register_forward_hook(
            lambda mod, args, out, layer=layer: outs.__setitem__(layer, out)
        )
        for layer in (0, 1)
    ]
    try:
        with torch.no_grad():
            one(batch.inputs)
    finally:
        for h in handles:
            h.remove()
    m = batch.mask.float()
    by_hand = [(outs[layer].pow(2).mean(-1) * m).sum(1) / m.sum(1) for layer in (0, 1)]
    assert float(values[0]) == pytest.approx(
        sum(float((b * m.sum(1)).sum()) for b in by_hand) / float(m.sum()), rel=1e-5
    )
    for layer in (0, 1):
        torch.testing.assert_close(sq[0][layer], by_hand[layer])


# ---- no tensor built on an explicit CPU device in code that feeds models ----------------------------

#: where "cpu" may be named: the device resolver itself, fallbacks when a model has no parameter,
#: and fine-tuning's config default of the main job and of the planted-harm job (a placement choice,
#: not a tensor)
_ALLOWED = {
    ("interp/metrics/pragworld_eval.py", 'return torch.device("cpu")'),
    ("interp/jobs/pipeline.py", 'device="cpu"'),
    ("interp/jobs/planted_harm.py", 'device="cpu"'),  # the planted-harm job's fine-tuning config, likewise
}


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
    assert not found, "tensors placed on the CPU by name (use the model's device, interp.models.device):\n" + "\n".join(
        found
    )


# ---- every model call in the analysis code gets its tensors through to_model_device ---------------

#: functions whose results are on the model's device (each must itself call to_model_device)
_MOVERS = ("to_model_device", "_model_inputs")


def _callee(node: ast.AST) -> str | None:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _model_input(call: ast.Call) -> ast.AST | None:
    """The tensor argument of a call that runs the model, or None for any other call: ``bridge(x)``,
    ``self.bridge(x)``, ``….run_with_cache(x)`` / ``run_with_hooks(x)``, and TransformerLens's
    patching ``getattr(tl_patching, name)(bridge, x, …)``."""
    f = call.func
    if isinstance(f, ast.Call) and _callee(f) == "getattr" and f.args and getattr(f.args[0], "id", "") == "tl_patching":
        return call.args[1] if len(call.args) > 1 else None
    if _callee(call) in ("bridge", "run_with_cache", "run_with_hooks") and call.args:
        return call.args[0]
    return None


def _unmoved_model_inputs(source: str, where: str) -> tuple[list[str], int]:
    """(model calls whose input was not moved by one of _MOVERS in the same function, model calls seen)."""
    bad, seen = [], 0
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        moved: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    names = target.elts if isinstance(target, ast.Tuple) else [target]
                    values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value] * len(names)
                    for t, v in zip(names, values):
                        if isinstance(t, ast.Name) and _callee(v) in _MOVERS:
                            moved.add(t.id)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or (arg := _model_input(node)) is None:
                continue
            seen += 1
            if not (_callee(arg) in _MOVERS or (isinstance(arg, ast.Name) and arg.id in moved)):
                bad.append(f"{where}:{node.lineno} in {fn.name}(): {ast.unparse(node)[:80]}")
    return bad, seen


def test_every_analysis_forward_moves_its_inputs_to_the_model_device():
    """A source check: in ``interp/analysis``, every call that runs the model (the bridge itself,
    ``run_with_cache`` / ``run_with_hooks``, TransformerLens's patching) is fed tensors that went
    through :func:`interp.analysis.engines.scoring.to_model_device` in the same function — not tokens left
    on the CPU where they were built. The checker flags a planted offender."""
    root = Path(__file__).resolve().parents[1]
    planted = "def f(bridge, tokens):\n    ids = tokens.long()\n    return bridge(ids)\n"
    assert _unmoved_model_inputs(planted, "planted") == (["planted:3 in f(): bridge(ids)"], 1)
    moved = "def f(bridge, tokens):\n    ids, m = to_model_device(bridge, tokens), None\n    return bridge(ids)\n"
    assert _unmoved_model_inputs(moved, "moved") == ([], 1)
    bad, seen = [], 0
    for path in sorted((root / "interp" / "analysis").rglob("*.py")):
        text = path.read_text()
        b, n = _unmoved_model_inputs(text, path.relative_to(root).as_posix())
        bad, seen = bad + b, seen + n
        for fn in ast.walk(ast.parse(text)):  # a mover other than to_model_device must call it
            if isinstance(fn, ast.FunctionDef) and fn.name in _MOVERS[1:]:
                assert any(_callee(c) == "to_model_device" for c in ast.walk(fn)), f"{path.name}: {fn.name}"
    # scoring.forward, attribution.gradient_run, patching.resid_cache, activation_patching (x2)
    assert seen >= 5
    assert not bad, (
        "model inputs not moved to the model's device (interp.analysis.engines.scoring.to_model_device):\n"
        + "\n".join(bad)
    )


# ---- on a GPU (marked cuda: skipped, saying why, without one; bench/gpu_check.sh runs them) ---------


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "auto"])
def test_every_model_command_runs_on_cuda(run, tmp_path, capsys, dtype):
    """Every command that loads a model, with ``--device auto`` (which is CUDA here) and ``--device
    cuda``, in float32, bfloat16 and ``auto`` (bfloat16 where the GPU supports it)."""
    from interp.cli import main
    from interp.models.device import Placement

    assert Placement.resolve("auto", dtype).device == "cuda"
    if dtype == "auto":
        assert Placement.resolve("auto", "auto").dtype == (
            torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        )
    best = str(run / "best")
    for device in ("auto", "cuda"):
        place = ["--device", device, "--dtype", dtype]
        calls = [
            ["next-token", "--model", best, "--json", *place],
            ["probe", "--model", best, "--layers", "0", "--max-iter", "20", "--json", *place],
            ["navigate", "--model", best, "--pairs", "4", "--json", *place],
            ["metrics", "--model", best, "--pairs", "4", "--depth", "2", "--json", "--no-progress", *place],
            ["sweep", "--model", best, "--n", "12", "--out", str(tmp_path / f"sweep-{device}"), "--json", *place],
            [
                "plant",
                "--model",
                best,
                "--out",
                str(tmp_path / f"plant-{device}"),
                "--layers",
                "1",
                "--steps",
                "2",
                "--batch-size",
                "8",
                "--no-progress",
                *place,
            ],
            ["report", str(run), "--out", str(tmp_path / f"report-{device}.html"), *place],
        ]
        for argv in calls:
            assert main(argv) == 0, argv
        capsys.readouterr()
    plant = json.loads((tmp_path / "plant-cuda" / "plant.json").read_text())
    assert plant["placement"]["device"].startswith("cuda")


@pytest.mark.cuda
def test_cuda_results_equal_the_cpu_ones(run, tiny_city):
    """The next-token test, the LM view and the MLP zero-out sweep on CUDA in float32 equal the CPU
    values (TF32 matrix products off); a map that keeps the embedding on the CPU and the blocks
    on the GPU moves activations between them and gives the same numbers."""
    from interp.analysis.engines.scoring import logit_diff
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.metrics.next_token import next_token_test
    from interp.models.checkpoint import load_bridge
    from interp.models.device import model_device
    from interp.models.lm import BridgeLM
    from interp.worlds.io import read_sequences

    torch.backends.cuda.matmul.allow_tf32 = False
    seqs = read_sequences(run / "data" / "test.txt", tiny_city)
    cpu = load_bridge(run / "best")
    gpu = load_bridge(run / "best", device="cuda")
    split = {
        "transformer.wte": "cpu",
        "transformer.wpe": "cpu",
        "transformer.h.0": 0,
        "transformer.h.1": 0,
        "transformer.ln_f": 0,
        "lm_head": "cpu",
    }
    mapped = load_bridge(run / "best", device_map=split)
    assert model_device(gpu).type == "cuda" and model_device(mapped).type == "cpu"
    ref = next_token_test(cpu, tiny_city, seqs)
    for other in (gpu, mapped):
        got = next_token_test(other, tiny_city, seqs)
        assert got.summary()["positions"] == ref.summary()["positions"]
        assert got.summary()["next_token_position"] == pytest.approx(ref.summary()["next_token_position"], abs=0.02)
    prefixes = [list(s[:k]) for s, k in zip(seqs[:4], (2, 3, 4, 5))]
    lps = [BridgeLM(m, tiny_city.vocab).start(prefixes).logprobs for m in (cpu, gpu, mapped)]
    for lp in lps[1:]:
        torch.testing.assert_close(lp, lps[0], rtol=1e-4, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, int(cpu.cfg.d_vocab), (6, 8), generator=gen)
    metric = logit_diff(3, 4)
    frames = [mlp_zero_sweep(m, ids, metric).frame for m in (cpu, gpu, mapped)]
    for f in frames[1:]:
        np.testing.assert_allclose(
            f[["clean", "ablated"]].to_numpy(), frames[0][["clean", "ablated"]].to_numpy(), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_finetune_in_half_precision(run, tmp_path, capsys, dtype, device):
    """``interp finetune --device cpu|cuda --dtype bfloat16|float16`` (float32 master weights under
    autocast, a loss scale for float16; through accelerate, as every fine-tuning run) and
    ``--device-map auto``: the runs finish, the loss is finite, the saved model keeps the dtype it
    was loaded in, the evaluations record the placement."""
    from interp.cli import main

    cfg = tmp_path / "ft.toml"
    cfg.write_text(
        f'checkpoint = "{run / "best"}"\nout = "{tmp_path / "ft"}"\nobjectives = ["hls"]\n'
        f"[regulariser]\nharmful = [1]\n[data]\nn_eval = 8\n[train]\nsteps = 4\nbatch_size = 8\n"
        f"warmup_steps = 0\n[eval]\nmlp_sq = true\nsweep = true\nmn = false\n"
    )
    assert (
        main(["finetune", "--config", str(cfg), "--device", device, "--dtype", dtype, "--no-progress", "--fresh"]) == 0
    )
    capsys.readouterr()
    done = json.loads((tmp_path / "ft" / "hls_s0" / "train.json").read_text())
    assert np.isfinite(done["last"]["loss"]) and np.isfinite(done["last"]["hls"])
    saved = json.loads((tmp_path / "ft" / "hls_s0" / "model" / "config.json").read_text())
    assert saved.get("dtype", saved.get("torch_dtype")) == dtype
    assert (
        main(["finetune", "--config", str(cfg), "--device-map", "auto", "--dtype", dtype, "--no-progress", "--fresh"])
        == 0
    )
    capsys.readouterr()
    key = json.loads((tmp_path / "ft" / "eval_before.json").read_text())["key"]
    assert key["placement"]["device_map"] == "auto" and key["placement"]["dtype"] == dtype
