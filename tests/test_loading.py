"""Loading models the standard Hugging Face way: folders, hub names (cache / offline errors), the
environment left alone, devices, dtypes and device maps (plumbing checked on CPU: a map that
sends blocks to "disk" makes accelerate dispatch the model, and its logits equal the one-device
run's)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from interp.hooks import intervene, zero
from interp.models.checkpoint import CheckpointError, load_bridge, load_hf_model, resolve_model
from interp.models.device import DeviceError, Placement, resolve_device, resolve_device_map, resolve_dtype

X = torch.tensor([[1, 5, 6, 7, 9], [1, 8, 4, 3, 2]])


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tiny_city):
    from conftest import save_gpt2_and_llama

    from interp.models import ModelConfig

    return save_gpt2_and_llama(
        tmp_path_factory.mktemp("load"),
        tiny_city,
        ModelConfig(n_layer=3, d_model=32, n_head=2, n_ctx=32, seed=0),
        llama_layers=3,
    )


@pytest.fixture(scope="module")
def reference(ckpts):
    out = {}
    for name, path in ckpts.items():
        b = load_bridge(path)
        with torch.no_grad():
            clean = b(X)
            with intervene(b, [zero("mlp_out:1")]):
                ablated = b(X)
        out[name] = clean, ablated
    return out


def test_unknown_hub_name_offline_names_the_model_and_both_causes():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"  # set by the test setup (conftest.py) only
    with pytest.raises(CheckpointError) as e:
        load_bridge("interp-tests/no-such-model")
    msg = str(e.value)
    assert "'interp-tests/no-such-model'" in msg and "HF_HUB_OFFLINE" in msg and "not in the local cache" in msg
    with pytest.raises(CheckpointError, match="does not exist"):
        load_bridge("./runs/no/such/folder")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_hf_model("no/such/folder")


def test_loading_leaves_the_environment_alone(ckpts, monkeypatch):
    from interp import cli

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = dict(os.environ)
    load_bridge(ckpts["gpt2"])
    load_hf_model(ckpts["llama"])
    with pytest.raises(CheckpointError):
        resolve_model("interp-tests/no-such-model")  # still offline: the hub library read it at import
    assert dict(os.environ) == before
    cli._quiet_hf()
    assert "HF_HUB_OFFLINE" not in os.environ


def _fake_cache(hub, repo: str, folder) -> None:
    """``folder`` as the cached snapshot of hub model ``repo`` (the cache's documented layout)."""
    commit = "0" * 40
    root = hub / ("models--" + repo.replace("/", "--"))
    shutil.copytree(folder, root / "snapshots" / commit)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)


def test_hub_name_resolves_from_the_local_cache(ckpts, reference, tmp_path, monkeypatch):
    """A hub id whose files are in the Hugging Face cache (its documented layout:
    models--owner--name/{refs/main, snapshots/<commit>/...}) loads offline, with the folder's logits."""
    from huggingface_hub import constants

    _fake_cache(tmp_path / "hub", "interp-tests/tiny-gpt2", ckpts["gpt2"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model("interp-tests/tiny-gpt2") == "interp-tests/tiny-gpt2"
    bridge = load_bridge("interp-tests/tiny-gpt2")
    with torch.no_grad():
        torch.testing.assert_close(bridge(X), reference["gpt2"][0])


@pytest.mark.slow
def test_online_but_unreachable_hub_falls_back_to_the_cache(ckpts, tmp_path):
    """With downloads allowed (HF_HUB_OFFLINE unset) and the hub unreachable (a closed local
    port), a cached hub id still resolves (the standard Hugging Face fallback) and an uncached one
    is an error naming the model, the failed download and the cache. A fresh process: the hub
    library reads its settings at import. Slow: huggingface_hub retries a refused connection
    five times with backoff (~23 s) before giving up."""
    import subprocess
    import sys

    hub = tmp_path / "hub"
    _fake_cache(hub, "interp-tests/tiny-gpt2", ckpts["gpt2"])
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(
        HF_HUB_CACHE=str(hub), HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_ETAG_TIMEOUT="2", HF_HUB_DOWNLOAD_TIMEOUT="2"
    )
    code = (
        "from interp.models.checkpoint import CheckpointError, resolve_model\n"
        "print('cached:', resolve_model('interp-tests/tiny-gpt2'))\n"
        "try:\n    resolve_model('interp-tests/not-cached')\n"
        "except CheckpointError as e:\n    print('error:', e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "cached: interp-tests/tiny-gpt2" in res.stdout
    assert "'interp-tests/not-cached'" in res.stdout and "could not be downloaded" in res.stdout
    assert "not in the local cache" in res.stdout and "HF_HUB_OFFLINE" not in res.stdout


def test_device_and_dtype_names():
    auto = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert resolve_device("auto") == resolve_device(None) == auto
    assert resolve_device("cpu") == "cpu"
    from interp.models.device import cpu_native_bf16

    # auto on a CPU: bfloat16 where its matrix instructions are native (measured faster with equal
    # verdicts, docs/benchmarks/precision.md), float32 elsewhere
    assert resolve_dtype("auto", "cpu") is (torch.bfloat16 if cpu_native_bf16() else torch.float32)
    assert resolve_dtype(None) is torch.float32
    assert resolve_dtype("bfloat16") is torch.bfloat16 and resolve_dtype("float16", "cpu") is torch.float16
    with pytest.raises(DeviceError, match="dtype must be one of"):
        resolve_dtype("float8")
    with pytest.raises(DeviceError, match="not a torch device"):
        resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            resolve_device("cuda")
        with pytest.raises(DeviceError, match="n_devices=2"):
            Placement.resolve(n_devices=2)
    with pytest.raises(DeviceError, match="give one of them"):
        Placement.resolve("cpu", device_map="auto")
    assert resolve_device_map('{"": "cpu"}') == {"": "cpu"} and resolve_device_map("balanced") == "balanced"
    with pytest.raises(DeviceError, match="JSON"):
        resolve_device_map("{not json")
    p = Placement.resolve(device_map={"": "cpu"}, dtype="auto")  # a CPU map: the CPU's auto dtype
    assert p.mapped and p.dtype is resolve_dtype("auto", "cpu") and "device" not in p.boot_kwargs()


def _split_map(arch: str, n_layers: int) -> dict[str, str]:
    """Embeddings and the first block on "cpu", later blocks offloaded to "disk"."""
    if arch == "gpt2":
        head = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.ln_f": "cpu", "lm_head": "cpu"}
        blocks = "transformer.h"
    else:
        head = {"model.embed_tokens": "cpu", "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
        blocks = "model.layers"
    return {**head, **{f"{blocks}.{i}": "cpu" if i == 0 else "disk" for i in range(n_layers)}}


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_device_map_dispatch_gives_the_one_device_values(arch, ckpts, reference, tmp_path):
    bridge = load_bridge(ckpts[arch], device_map=_split_map(arch, 3), offload_folder=tmp_path / "offload")
    hf_map = bridge.original_model.hf_device_map
    assert set(hf_map.values()) == {"cpu", "disk"}  # accelerate dispatched the modules
    with torch.no_grad():
        torch.testing.assert_close(bridge(X), reference[arch][0])
        with intervene(bridge, [zero("mlp_out:1")]):  # hooks still reach the offloaded blocks
            torch.testing.assert_close(bridge(X), reference[arch][1])
    # the raw HF model under the same map (fine-tuning's loader)
    hf = load_hf_model(
        ckpts[arch], Placement.resolve(device_map=_split_map(arch, 3), offload_folder=str(tmp_path / "offload_hf"))
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=X).logits, reference[arch][0], atol=2e-5, rtol=1e-4)


def test_generation_under_a_device_map_equals_one_device(ckpts, tmp_path):
    from interp.models.generate import greedy_generate

    prompts = [[1, 5, 6], [1, 8, 4, 3, 2, 9]]
    one = greedy_generate(load_bridge(ckpts["llama"]), prompts, pad_id=0, max_new_tokens=5)
    mapped = load_bridge(ckpts["llama"], device_map=_split_map("llama", 3), offload_folder=tmp_path)
    assert greedy_generate(mapped, prompts, pad_id=0, max_new_tokens=5) == one


def test_finetune_placement_from_the_config(ckpts, tmp_path):
    from interp.config import FinetuneConfig
    from interp.train.finetune import train_placement

    p = train_placement(FinetuneConfig(checkpoint=str(ckpts["gpt2"]), dtype="bfloat16"))
    assert p == Placement("cpu", torch.bfloat16)  # on the CPU, for accelerate to move to its device
    p = train_placement(FinetuneConfig(checkpoint=str(ckpts["gpt2"]), device_map='{"": "cpu"}', dtype="auto"))
    assert p.mapped and p.dtype is resolve_dtype("auto", "cpu")
    model = load_hf_model(ckpts["gpt2"], p)
    assert next(model.parameters()).device.type == "cpu"


def test_dtype_reaches_the_parameters(ckpts, reference):
    bridge = load_bridge(ckpts["gpt2"], dtype="bfloat16")
    assert {p.dtype for p in bridge.parameters() if p.is_floating_point()} == {torch.bfloat16}
    with torch.no_grad():
        torch.testing.assert_close(bridge(X).float(), reference["gpt2"][0], atol=0.3, rtol=0.05)


# ---- the command line ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pragworld_model(tmp_path_factory):
    """A tiny PragWorld file and a GPT-2 over a byte-level BPE trained on its prompts."""
    import pandas as pd
    from test_generation import _bpe_gpt2

    from interp.datasets.pragworld import benchmark_prompt, label_prompt, write_pragworld_csv

    ctx = "A: did you put the apples in the box\nB: I did\nA: and the pears\nB: they are in the basket"
    rows = pd.DataFrame(
        [
            dict(
                context=ctx,
                question="are the apples in the box?",
                gold=1,
                altered=False,
                target="none",
                category=None,
                effect=None,
            ),
            dict(
                context=ctx.replace("I did", "I did not"),
                question="are the apples in the box?",
                gold=0,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            ),
            dict(
                context=ctx,
                question="are the pears in the box?",
                gold=0,
                altered=True,
                target="question",
                category="variable_substitution",
                effect="flip",
            ),
        ]
    )
    root = tmp_path_factory.mktemp("pw_cli")
    csv = write_pragworld_csv(rows, root / "tiny.csv")
    texts = [f(c, q) for f in (benchmark_prompt, label_prompt) for c, q in zip(rows.context, rows.question)]
    return _bpe_gpt2(root / "model", texts * 4 + [" yes no (yes) (no) yes no"] * 20, 5), csv


def _split_file(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(
        '{"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu", '
        '"transformer.h.1": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}'
    )
    return path


def test_pragworld_eval_device_auto_and_device_map_give_the_same_answers(pragworld_model, tmp_path, capsys):
    from interp.cli import build_parser, main

    model, csv = pragworld_model
    assert build_parser().parse_args(["pragworld", "eval", "--model", "m", "--data", "d"]).device == "auto"
    out = {}
    for name, extra in (("auto", []), ("map", ["--device-map", str(_split_file(tmp_path))])):
        for prompt in ("benchmark", "label"):
            assert (
                main(
                    [
                        "pragworld",
                        "eval",
                        "--model",
                        str(model),
                        "--data",
                        str(csv),
                        "--prompt",
                        prompt,
                        "--max-new-tokens",
                        "4",
                        "--out",
                        str(tmp_path / f"{name}_{prompt}"),
                        "--n-boot",
                        "10",
                        "--no-progress",
                        *extra,
                    ]
                )
                == 0
            )
            recs = [json.loads(line) for line in (tmp_path / f"{name}_{prompt}" / "responses.jsonl").open()]
            out[name, prompt] = [(r["response"], r.get("p_yes")) for r in recs]
    capsys.readouterr()
    assert out["auto", "benchmark"] == out["map", "benchmark"] and len(out["auto", "benchmark"]) == 3
    for (a, pa), (b, pb) in zip(out["auto", "label"], out["map", "label"]):
        assert a == b and pa == pytest.approx(pb, abs=1e-6)


def test_sweep_on_pragworld_under_a_device_map_equals_one_device(pragworld_model, tmp_path, capsys):
    import pandas as pd

    from interp.cli import main

    model, csv = pragworld_model
    for name, extra in (("one", ["--device", "cpu"]), ("map", ["--device-map", str(_split_file(tmp_path))])):
        assert main(["sweep", "--model", str(model), "--data", str(csv), "--out", str(tmp_path / name), *extra]) == 0
    capsys.readouterr()
    a, b = (pd.read_csv(tmp_path / n / "sweep.csv") for n in ("one", "map"))
    pd.testing.assert_frame_equal(a, b, atol=1e-6, rtol=1e-5)


def test_bad_placement_options_fail_before_loading(pragworld_model, tmp_path, capsys):
    from interp.cli import main

    model, csv = pragworld_model
    base = ["pragworld", "eval", "--model", str(model), "--data", str(csv), "--out", str(tmp_path / "x")]
    assert main([*base, "--device", "cpu", "--device-map", "auto"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main([*base, "--dtype", "float8"]) == 2
    assert "dtype must be one of" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main([*base, "--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    cfg = tmp_path / "ft.toml"
    cfg.write_text(f'checkpoint = "{model}"\n')
    assert main(["finetune", "--config", str(cfg), "--processes", "2", "--dtype", "bfloat16"]) == 2
    assert "set dtype there" in capsys.readouterr().err
    assert main(["finetune", "--config", str(cfg), "--device-map", "{nope"]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
