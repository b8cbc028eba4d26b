"""Regularised fine-tuning: HLS / ULA terms, the accelerate loop, `interp finetune`, 2 processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import REPO, save_gpt2_and_llama


def _train_cfg(**kw):
    from interp.train import TrainConfig

    base = dict(steps=10, batch_size=8, lr=3e-3, min_lr=3e-4, warmup_steps=2, eval_every=0, checkpoint_every=0, seed=1)
    base.update(kw)
    return TrainConfig(**base)


@pytest.fixture(scope="module")
def world_data(tiny_city):
    from interp.worlds.encoding import encode_sequences

    seqs = tiny_city.generate(80, np.random.default_rng(0))
    return (
        seqs[:64],
        seqs[64:],
        encode_sequences(seqs[:64], tiny_city.vocab),
        encode_sequences(seqs[64:], tiny_city.vocab),
    )


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory, tiny_city, tiny_model_config, world_data):
    """Lively tiny GPT-2 and Llama checkpoints with their run's data/train.txt and test.txt."""
    from interp.worlds.io import write_sequences

    root = tmp_path_factory.mktemp("ft")
    out = {}
    for name, path in save_gpt2_and_llama(root, tiny_city, tiny_model_config).items():
        run = root / f"run_{name}"
        run.mkdir()
        path.rename(run / "best")
        write_sequences(run / "data" / "train.txt", world_data[0])
        write_sequences(run / "data" / "test.txt", world_data[1])
        out[name] = run / "best"
    return out


def _hf(path):
    from interp.models import load_hf_model

    return load_hf_model(path)


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


# ---- the hooked modules and the HLS quantity --------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hooked_mlp_module_is_the_bridge_hook_mlp_out(ckpts, arch):
    """The module HLS/ULA hook in the HF model computes TransformerLens's blocks.ℓ.hook_mlp_out."""
    from interp.models import load_bridge
    from interp.train.regularisers import _Collector, mlp_module_names

    ids = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 4, 6, 3]])
    model = _hf(ckpts[arch]).eval()
    layers = [0, 1]
    assert mlp_module_names(model, layers)[0] == {"gpt2": "transformer.h.0.mlp", "llama": "model.layers.0.mlp"}[arch]
    coll = _Collector()
    with torch.no_grad(), coll.hooks(model, layers):
        model(ids)
        ours = dict(coll.outputs)
    assert not any(m._forward_hooks for m in model.modules())
    bridge = load_bridge(ckpts[arch])
    _, cache = bridge.run_with_cache(
        ids, names_filter=lambda n: n.endswith("hook_mlp_out") or n.endswith("mlp.hook_out")
    )
    for layer in layers:
        key = next(k for k in (f"blocks.{layer}.hook_mlp_out", f"blocks.{layer}.mlp.hook_out") if k in cache)
        torch.testing.assert_close(ours[layer], cache[key], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hls_penalty_equals_hand_computation_over_non_padding(ckpts, world_data, tiny_city, arch):
    from interp.train import make_batch
    from interp.train.regularisers import HLS, mlp_modules

    model = _hf(ckpts[arch]).eval()
    batch = make_batch(world_data[2][:6], tiny_city.vocab.pad_id)
    assert (~batch.mask).any(), "the batch must hold padding for this test to mean something"
    term = HLS([0, 1], weight=1.0)
    with term.install(model):
        model(batch.inputs)
        got = term.compute(batch)
    # by hand: each layer's MLP recomputed from its own hook-free forward, summed over real positions
    outs = {}
    handles = [
        m.register_forward_hook(lambda mod, a, o, k=k: outs.__setitem__(k, o.detach()))
        for k, m in zip([0, 1], mlp_modules(model, [0, 1]))
    ]
    with torch.no_grad():
        model(batch.inputs)
    for h in handles:
        h.remove()
    per_layer = []
    for layer in (0, 1):
        total, count = 0.0, 0
        for b in range(batch.inputs.shape[0]):
            for p in range(batch.inputs.shape[1]):
                if batch.targets[b, p] != -100:
                    total += float((outs[layer][b, p].double() ** 2).sum())
                    count += outs[layer].shape[-1]
        per_layer.append(total / count)
    want = sum(per_layer)  # the paper's HLS: a sum over the penalised layers
    assert float(got) == pytest.approx(want, rel=1e-5)
    mean_term = HLS([0, 1], weight=1.0, reduction="mean")
    with mean_term.install(model):
        model(batch.inputs)
        assert float(mean_term.compute(batch)) == pytest.approx(want / 2, rel=1e-5)
    with_padding = float(sum((outs[x].double() ** 2).mean() for x in (0, 1)))
    assert abs(with_padding - want) > 1e-3 * want  # counting padding (the reference's defect) differs
    with pytest.raises(ValueError, match="reduction"):
        HLS([0], reduction="max")


def test_beta_zero_is_plain_training_bit_for_bit(ckpts, world_data, tiny_city):
    from interp.train import train
    from interp.train.regularisers import HLS

    cfg = _train_cfg()
    plain = _hf(ckpts["gpt2"])
    train(plain, world_data[2], None, cfg, pad_id=tiny_city.vocab.pad_id, progress=False)
    zero = _hf(ckpts["gpt2"])
    hist = train(
        zero, world_data[2], None, cfg, loss_terms=[HLS([1], weight=0.0)], pad_id=tiny_city.vocab.pad_id, progress=False
    ).history
    assert hist["hls"].iloc[-1] > 0  # the penalty was computed, only weighted by 0
    want = _params(plain)
    for n, p in zero.named_parameters():
        assert torch.equal(p, want[n]), n


def test_train_equals_a_hand_written_loop_with_and_without_accelerate(ckpts, world_data, tiny_city):
    """The one loop (plain, and prepared by a 1-process accelerator as ``interp finetune`` runs it)
    against a hand-written reference: the seeded batches, warmup + cosine schedule, AdamW with
    decay on ≥2-D parameters, clipping, and the next-token loss summed over non-padding targets
    and divided by the expected targets of a batch (``token`` weighting: batch size × mean targets
    per row, counted here by hand) or by the batch's own count (``batch``: its mean)."""
    for weighting in ("token", "batch"):
        _check_against_hand_written_loop(ckpts, world_data, tiny_city, weighting)


def _check_against_hand_written_loop(ckpts, world_data, tiny_city, weighting):
    import dataclasses

    import torch.nn.functional as F

    from interp.models.parallel import make_accelerator
    from interp.train import learning_rate, make_batch, train
    from interp.train.data import LengthBucketedBatches

    cfg = dataclasses.replace(_train_cfg(), loss_weighting=weighting)
    ids, pad = world_data[2], tiny_city.vocab.pad_id
    per_batch = cfg.batch_size * sum(int((row != pad).sum()) - 1 for row in ids) / len(ids)
    ref = _hf(ckpts["gpt2"])
    decay = [p for p in ref.parameters() if p.dim() >= 2]
    rest = [p for p in ref.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
    )
    rows = LengthBucketedBatches((ids != pad).sum(dim=1), cfg.batch_size, cfg.seed)
    torch.manual_seed(0)  # dropout draws
    ref.train()
    for step in range(cfg.steps):
        b = make_batch(ids[rows(step)], pad)
        for g in opt.param_groups:
            g["lr"] = learning_rate(cfg, step)
        logits = ref(b.inputs).logits
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), b.targets.reshape(-1), ignore_index=-100, reduction="sum"
        )
        loss = loss / (per_batch if weighting == "token" else int((b.targets != -100).sum()))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), cfg.grad_clip)
        opt.step()
    want = _params(ref)
    for acc in (None, make_accelerator("cpu")):
        ours = _hf(ckpts["gpt2"])
        torch.manual_seed(0)
        train(ours, ids, None, cfg, pad_id=pad, accelerator=acc, progress=False)
        for n, p in ours.named_parameters():
            x, y = p.detach(), want[n]
            if n.endswith("attn.c_attn.bias"):  # the key bias's true gradient is 0: rounding noise (see below)
                d = x.shape[0] // 3
                x, y = torch.cat([x[:d], x[2 * d :]]), torch.cat([y[:d], y[2 * d :]])
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=n)


def test_an_interrupted_finetune_resumes_to_the_uninterrupted_weights(ckpts, world_data, tiny_city, tmp_path):
    """HLS + ULA under a 1-process accelerator, stopped at step 4 (the state of an interruption) and
    resumed with freshly built terms: the model and the ULA heads end bit for bit where an
    uninterrupted run ends (with dropout on: the RNG state is restored too)."""
    from interp.models.parallel import make_accelerator
    from interp.train import train
    from interp.train.regularisers import HLS, ULA, LabelCoding, ULAHeads, last_state_labels

    coding = LabelCoding.fit(last_state_labels(tiny_city, world_data[0]))
    labels = coding.encode(last_state_labels(tiny_city, world_data[0]))
    cfg = _train_cfg(steps=9)
    pad = tiny_city.vocab.pad_id

    def run(out, stop_at=None):
        from transformers import AutoModelForCausalLM

        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(ckpts["gpt2"], resid_pdrop=0.2, embd_pdrop=0.2)
        heads = ULAHeads([0], 32, coding.classes, hidden=8, seed=2)
        terms = [HLS([1], weight=0.5), ULA(heads, weight=0.3)]
        res = train(
            model,
            world_data[2],
            world_data[3],
            cfg,
            out,
            pad_id=pad,
            loss_terms=terms,
            labels=labels,
            accelerator=make_accelerator("cpu"),
            stop_at=stop_at,
            progress=False,
        )
        return model, heads, res

    whole, whole_heads, whole_res = run(tmp_path / "whole")
    _, _, part = run(tmp_path / "cut", stop_at=4)
    assert part.steps == 4
    assert json.loads((tmp_path / "cut" / "last" / "trainer_state.json").read_text())["step"] == 4
    torch.manual_seed(123)  # the global RNG is put back from the saved state, not from here
    resumed, resumed_heads, res = run(tmp_path / "cut")
    assert res.steps == cfg.steps
    for (n, p), q in zip(whole.named_parameters(), resumed.parameters()):
        assert torch.equal(p, q), n
    for k, v in whole_heads.state_dict().items():
        assert torch.equal(resumed_heads.state_dict()[k], v), k
    cols = ["step", "loss", "next_token_loss", "hls", "ula", "eval_loss"]
    logged = res.history[res.history.step != 4][cols]  # the stopped run also logged its last step
    assert logged.to_dict("records") == whole_res.history[cols].to_dict("records")
    assert res.best_eval_loss == whole_res.best_eval_loss


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hls_lowers_the_harmful_layers_mlp_output_vs_plain(ckpts, world_data, tiny_city, arch):
    from interp.analysis.evaluation.finetune import mean_squared_mlp_out
    from interp.train import train
    from interp.train.regularisers import HLS

    cfg = _train_cfg(steps=15)
    pad = tiny_city.vocab.pad_id
    plain, hls = _hf(ckpts[arch]), _hf(ckpts[arch])
    train(plain, world_data[2], None, cfg, pad_id=pad, progress=False)
    train(hls, world_data[2], None, cfg, loss_terms=[HLS([1], weight=1.0)], pad_id=pad, progress=False)
    before = mean_squared_mlp_out(_hf(ckpts[arch]), world_data[3], pad, [0, 1])
    p = mean_squared_mlp_out(plain, world_data[3], pad, [0, 1])
    h = mean_squared_mlp_out(hls, world_data[3], pad, [0, 1])
    assert h[1].mean() < 0.7 * p[1].mean(), (float(before[1].mean()), float(p[1].mean()), float(h[1].mean()))
    assert not any(m._forward_hooks for m in hls.modules())


# ---- ULA ---------------------------------------------------------------------------------------


def test_ula_heads_round_trip_and_train(ckpts, world_data, tiny_city, tmp_path):
    from interp.train import train
    from interp.train.regularisers import ULA, LabelCoding, ULAHeads, last_state_labels

    raw = last_state_labels(tiny_city, world_data[0])
    coding = LabelCoding.fit(raw)
    labels = coding.encode(raw)
    assert (labels >= 0).all() and len(coding.classes) > 2
    heads = ULAHeads([0, 1], 32, coding.classes, hidden=16, seed=3, task="current-state label")
    before = {k: v.clone() for k, v in heads.state_dict().items()}
    model = _hf(ckpts["gpt2"])
    hist = train(
        model,
        world_data[2],
        None,
        _train_cfg(),
        loss_terms=[ULA(heads, weight=1.0)],
        labels=labels,
        pad_id=tiny_city.vocab.pad_id,
        progress=False,
    ).history
    assert hist["ula"].iloc[-1] < hist["ula"].iloc[0] + 1.0
    assert any(not torch.equal(before[k], v) for k, v in heads.state_dict().items())  # the heads trained
    heads.save(tmp_path)
    back = ULAHeads.load(tmp_path)
    assert back.config() == heads.config()
    for k, v in heads.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    x = [torch.randn(4, 32), torch.randn(4, 32)]
    for a, b in zip(heads(x), back(x)):
        assert torch.equal(a, b)
    assert json.loads((tmp_path / "ula_heads.json").read_text())["classes"] == list(coding.classes)


def test_ula_pools_the_last_scored_position(tiny_city):
    from interp.train import make_batch
    from interp.train.regularisers import last_positions

    ids = torch.tensor([[1, 5, 6, 7, 0, 0], [1, 5, 6, 7, 8, 9], [1, 5, 0, 0, 0, 0]])
    batch = make_batch(ids, 0)
    # row 0: tokens at 0..3, the final token (3) is only a target → pooled at 2; row 1 at 4; row 2 at 0
    assert last_positions(batch.mask).tolist() == [2, 4, 0]


# ---- layer lists and verdict files --------------------------------------------------------------


def test_bad_layer_lists_and_verdict_files_raise(ckpts, world_data, tiny_city, tmp_path):
    from interp.analysis import ModelMismatchError, layer_verdicts, mlp_zero_sweep, token_loss
    from interp.config import RegulariserConfig
    from interp.models import load_bridge
    from interp.train.finetune import resolve_layers
    from interp.train.regularisers import HLS, LayerSpecError

    with pytest.raises(LayerSpecError, match=r"layer 5 is out of range.*2 layers.*0\.\.1"):
        resolve_layers(RegulariserConfig(harmful=(5,)), "hls", 2)
    with pytest.raises(LayerSpecError, match="no layers given but the weight is 0.001"):
        resolve_layers(RegulariserConfig(useful=()), "ula", 2)
    assert resolve_layers(RegulariserConfig(harmful=(), beta=0.0), "hls", 2) == []
    with pytest.raises(LayerSpecError, match="β"):
        HLS([], weight=1e-3)
    with pytest.raises(LayerSpecError, match="out of range"):
        HLS([3], weight=1e-3).install(_hf(ckpts["gpt2"]))
    # a verdict file computed on the Llama model refuses the GPT-2 model
    llama = load_bridge(ckpts["llama"])
    mask = (world_data[3] != 0).long()
    sweep = mlp_zero_sweep(llama, world_data[3], token_loss, mask, method="loop", higher_is_better=False)
    path = layer_verdicts(sweep, n_boot=50).save(tmp_path) / "verdicts.json"
    gpt2 = load_bridge(ckpts["gpt2"])
    with pytest.raises(ModelMismatchError, match="config hash"):
        resolve_layers(RegulariserConfig(verdicts=str(path), beta=0.0), "hls", 2, bridge=gpt2)
    # on its own model the file gives its lists (possibly empty: then only a zero weight is allowed)
    harmful = resolve_layers(RegulariserConfig(verdicts=str(path), beta=0.0), "hls", 2, bridge=llama)
    assert harmful == json.loads(path.read_text())["harmful"]
    with pytest.raises(FileNotFoundError, match="interp sweep"):
        resolve_layers(RegulariserConfig(verdicts=str(tmp_path / "nope.json")), "hls", 2)


def test_config_errors_name_the_key(tmp_path):
    from interp.config import ConfigError, load_finetune_config

    bad = tmp_path / "bad.toml"
    bad.write_text('objectives = ["hls"]\n[regulariser]\nharmfull = [1]\n')
    with pytest.raises(ConfigError, match="unknown key 'harmfull'"):
        load_finetune_config(bad)
    bad.write_text('objectives = ["hsl"]\n')
    with pytest.raises(ConfigError, match="objectives must be among"):
        load_finetune_config(bad)


# ---- the command ------------------------------------------------------------------------------


def _write_config(path, ckpt, out, **over):
    objectives = over.pop("objectives", ["plain", "hls"])
    seeds = over.pop("seeds", [0])
    steps = over.pop("steps", 6)
    evals = over.pop("eval", "mn_pairs = 6\nmn_depth = 2\nn_boot = 50\n")
    reg = over.pop("regulariser", "harmful = [1]\nuseful = [0, 1]\nbeta = 1.0\nalpha = 0.1\nhead_hidden = 16\n")
    extra = over.pop("extra", "")
    path.write_text(
        f'name = "t"\ncheckpoint = "{ckpt}"\nout = "{out}"\nobjectives = {json.dumps(objectives)}\n'
        f'seeds = {json.dumps(seeds)}\ndevice = "cpu"\n{extra}'
        f"[train]\nsteps = {steps}\nbatch_size = 8\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 2\n"
        f"eval_every = 0\ncheckpoint_every = 0\n"
        f"[data]\nn_eval = 12\n[regulariser]\n{reg}[eval]\n{evals}"
    )
    return path


def _cli(*args, timeout=240):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "interp.cli", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout
    )


def test_run_finetune_writes_table_and_figure(ckpts, tmp_path):
    import pandas as pd

    from interp.config import load_finetune_config
    from interp.models import load_checkpoint
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import ULAHeads

    cfg = _write_config(tmp_path / "ft.toml", ckpts["gpt2"], tmp_path / "out", objectives=["plain", "hls", "ula"])
    logged: list[str] = []
    report = run_finetune(load_finetune_config(cfg), progress=False, log=logged.append)
    out = tmp_path / "out"
    for name in ("finetune_table.csv", "finetune_table.md", "finetune.png", "results.json", "eval_before.json"):
        assert (out / name).is_file(), name
    assert (out / "finetune.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = pd.read_csv(out / "finetune_table.csv")
    assert set(table.model) == {"before", "plain", "hls", "ula"}
    for m in (
        "heldout_loss",
        "next_token_position",
        "mlp_out_sq",
        "sweep_effect_token_loss",
        "mn_compression_precision",
        "mn_distinction_precision",
        "mn_distinction_recall",
    ):
        assert m in set(table.metric), m
    assert "| metric | layer | before | plain | hls | ula |" in report.markdown()
    assert any("transformer.h.1.mlp" in line for line in logged)  # says which module it hooks
    assert load_checkpoint(out / "hls_s0" / "model").world is not None  # a checkpoint with its world
    assert ULAHeads.load(out / "ula_s0" / "model").layers == [0, 1]
    # HLS (β = 1 on layer 1) pushed layer 1's MLP output below plain fine-tuning's
    sq = table[(table.metric == "mlp_out_sq") & (table.layer == 1)].set_index("model").value
    assert sq["hls"] < sq["plain"]
    wide = report.wide.set_index(["metric", "layer"])
    assert wide.loc[("mlp_out_sq", 1), "hls_change"] == pytest.approx(sq["hls"] - sq["before"])
    # a second call reuses the finished runs and their evaluations
    logged.clear()
    run_finetune(load_finetune_config(cfg), progress=False, log=logged.append)
    assert sum("not retrained" in line for line in logged) == 3


def test_an_interrupted_finetune_command_resumes_where_it_stopped(ckpts, tmp_path, monkeypatch, capsys):
    """Ctrl-C in the middle of a ULA fine-tune (a KeyboardInterrupt from the term at its 4th step)
    leaves ``ula_s0/last``; rerunning the same config resumes there (interrupted once more, through
    ``interp finetune``: exit 130 and where the state is) and ends with the model and heads of an
    uninterrupted run, then drops the state."""
    from safetensors.torch import load_file

    from interp.cli import main
    from interp.config import load_finetune_config
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import ULA, ULAHeads
    from interp.train.trainer import TrainingInterrupted

    none = "next_token = false\nmlp_sq = false\nsweep = false\nmn = false\n"
    whole = _write_config(
        tmp_path / "whole.toml", ckpts["gpt2"], tmp_path / "whole", objectives=["ula"], eval=none, steps=7
    )
    cut = _write_config(tmp_path / "cut.toml", ckpts["gpt2"], tmp_path / "cut", objectives=["ula"], eval=none, steps=7)
    run_finetune(load_finetune_config(whole), progress=False, log=lambda s: None)
    calls, partial = [], ULA.partial

    def interrupt_at_step_4(self, batch):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return partial(self, batch)

    monkeypatch.setattr(ULA, "partial", interrupt_at_step_4)
    with pytest.raises(TrainingInterrupted, match="resume"):
        run_finetune(load_finetune_config(cut), progress=False, log=lambda s: None)
    state = tmp_path / "cut" / "ula_s0" / "last"
    assert json.loads((state / "trainer_state.json").read_text())["step"] == 3
    calls.clear()  # interrupted again, through the command: it resumed at 3, stops after 3 more steps
    assert main(["finetune", "--config", str(cut), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert "interrupted after step 6" in err and "resume" in err and "Traceback" not in err
    monkeypatch.undo()
    assert json.loads((state / "trainer_state.json").read_text())["step"] == 6
    assert not (tmp_path / "cut" / "ula_s0" / "model").exists()
    logged: list[str] = []
    run_finetune(load_finetune_config(cut), progress=False, log=logged.append)
    assert any("resuming" in line for line in logged)
    assert not state.exists()  # dropped once the model is saved
    a = load_file(str(tmp_path / "whole" / "ula_s0" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "ula_s0" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ha = ULAHeads.load(tmp_path / "whole" / "ula_s0" / "model").state_dict()
    hb = ULAHeads.load(tmp_path / "cut" / "ula_s0" / "model").state_dict()
    assert all(torch.equal(ha[k], hb[k]) for k in ha)


def test_finetune_command_refuses_bad_layers(ckpts, tmp_path):
    cfg = _write_config(
        tmp_path / "ft.toml", ckpts["gpt2"], tmp_path / "out", objectives=["hls"], regulariser="harmful = [7]\n"
    )
    res = _cli("finetune", "--config", str(cfg), "--no-progress", timeout=120)
    assert res.returncode == 2
    assert "layer 7 is out of range" in res.stderr and "Traceback" not in res.stderr


# ---- two processes ------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_gloo_processes_match_one(ckpts, tmp_path):
    """accelerate data parallelism over 2 CPU processes (gloo, `interp finetune --processes 2`) ends
    with the weights (and ULA heads) of a single-process run on the same global batches and seed."""
    from safetensors.torch import load_file

    from interp.config import load_finetune_config
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import ULAHeads

    none = "next_token = false\nmlp_sq = false\nsweep = false\nmn = false\n"
    one = _write_config(
        tmp_path / "one.toml", ckpts["gpt2"], tmp_path / "one", objectives=["hls", "ula"], eval=none, steps=5
    )
    two = _write_config(
        tmp_path / "two.toml", ckpts["gpt2"], tmp_path / "two", objectives=["hls", "ula"], eval=none, steps=5
    )
    run_finetune(load_finetune_config(one), progress=False, log=lambda s: None)
    res = _cli("finetune", "--config", str(two), "--processes", "2", "--no-progress", timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "| metric | layer | before | hls | ula |" in res.stdout
    assert json.loads((tmp_path / "two" / "hls_s0" / "train.json").read_text())["processes"] == 2
    for run in ("hls_s0", "ula_s0"):
        a = load_file(str(tmp_path / "one" / run / "model" / "model.safetensors"))
        b = load_file(str(tmp_path / "two" / run / "model" / "model.safetensors"))
        base = load_file(str(ckpts["gpt2"] / "model.safetensors"))
        assert a.keys() == b.keys()
        assert any(not torch.equal(a[k], base[k]) for k in a)  # it trained
        for k in a:
            x, y = a[k], b[k]
            if k.endswith("attn.c_attn.bias"):
                # The key bias has a true gradient of exactly 0 (softmax is shift-invariant), so its
                # gradient is rounding noise that Adam normalises to steps of ~lr: compare q and v only.
                d = x.shape[0] // 3
                x, y = torch.cat([x[:d], x[2 * d :]]), torch.cat([y[:d], y[2 * d :]])
            torch.testing.assert_close(y, x, msg=f"{run} {k}")
    ha, hb = ULAHeads.load(tmp_path / "one" / "ula_s0" / "model"), ULAHeads.load(tmp_path / "two" / "ula_s0" / "model")
    for k, v in ha.state_dict().items():
        torch.testing.assert_close(hb.state_dict()[k], v, msg=k)


def test_shard_and_gather_round_trip():
    from interp.models.parallel import gather, shard, shard_bounds

    items = list(range(11))
    parts = [shard(items, rank=r, size=3) for r in range(3)]
    assert [len(p) for p in parts] == [4, 4, 3]
    assert [x for p in parts for x in p] == items
    assert shard_bounds(2, 2, 3) == (2, 2)  # more processes than items: an empty share
    assert gather(parts[0]) == parts[0]  # one process: nothing to gather
    t = torch.arange(10)
    assert torch.equal(torch.cat([shard(t, rank=r, size=4) for r in range(4)]), t)
    with pytest.raises(ValueError):
        shard(items, rank=3, size=3)


# ---- LoRA ----------------------------------------------------------------------------------------


def test_lora_finetuning_with_hls(ckpts, world_data, tiny_city, tmp_path):
    pytest.importorskip("peft")
    from interp.analysis.evaluation.finetune import mean_squared_mlp_out
    from interp.config import LoraSettings
    from interp.train import train
    from interp.train.finetune import _apply_lora, _merged
    from interp.train.regularisers import HLS

    base = _hf(ckpts["gpt2"])
    model = _apply_lora(_hf(ckpts["gpt2"]), LoraSettings(enabled=True, r=4, alpha=8, target_modules=("c_fc", "c_proj")))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    hist = train(
        model,
        world_data[2],
        None,
        _train_cfg(lr=1e-2),
        loss_terms=[HLS([1], weight=1.0)],
        pad_id=tiny_city.vocab.pad_id,
        progress=False,
    ).history
    assert "hls" in hist
    merged = _merged(model)
    assert type(merged).__name__ == "GPT2LMHeadModel"
    b = mean_squared_mlp_out(base, world_data[3], 0, [1])[1].mean()
    m = mean_squared_mlp_out(merged, world_data[3], 0, [1])[1].mean()
    assert m < b


# ---- PragWorld QA data ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    """A tiny GPT-2 with a word-level tokenizer over a slice of the PragWorld manual split, and that
    slice as train (first groups) and held-out (later groups) CSVs."""
    import csv

    from tests.conftest import SHARED_DATA

    src = SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv"
    if not src.is_file():
        pytest.skip(f"{src} is not here")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from interp.datasets.pragworld import label_prompt

    root = tmp_path_factory.mktemp("qa")
    with src.open(newline="") as f:
        records = list(csv.reader(f))
    header, body = records[0], records[1:]
    starts = [i for i, r in enumerate(body) if r[3].strip().upper() == "FALSE"]
    train, test = body[: starts[8]], body[starts[8] : starts[12]]
    for name, rows in (("train.csv", train), ("test.csv", test)):
        with (root / name).open("w", newline="") as f:
            csv.writer(f).writerows([header] + rows)
    words = sorted({w for r in train + test for w in label_prompt(r[0], r[1]).split()} | {"yes", "no"})
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<unk>"] + words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", unk_token="<unk>")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(vocab),
            n_positions=256,
            n_embd=32,
            n_layer=2,
            n_head=2,
            bos_token_id=1,
            eos_token_id=1,
            pad_token_id=0,
        )
    )
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    return root


def test_finetune_on_pragworld_qa_rows(qa_model, tmp_path):
    import pandas as pd

    from interp.config import load_finetune_config
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import ULAHeads

    cfg = tmp_path / "qa.toml"
    cfg.write_text(
        f'name = "qa"\ncheckpoint = "{qa_model / "model"}"\nout = "{tmp_path / "out"}"\n'
        'objectives = ["plain", "hls", "ula"]\ndevice = "cpu"\n'
        f'[data]\nkind = "pragworld"\ntrain = "{qa_model / "train.csv"}"\ntest = "{qa_model / "test.csv"}"\n'
        "n_eval = 0\n[regulariser]\nharmful = [1]\nuseful = [0]\nbeta = 1.0\nalpha = 0.1\nhead_hidden = 8\n"
        "[train]\nsteps = 4\nbatch_size = 8\nlr = 3e-3\nmin_lr = 3e-4\nwarmup_steps = 1\neval_every = 0\n"
        "checkpoint_every = 0\n[eval]\nn_boot = 50\n"
    )
    report = run_finetune(load_finetune_config(cfg), progress=False, log=lambda s: None)
    table = pd.read_csv(tmp_path / "out" / "finetune_table.csv")
    assert set(table.model) == {"before", "plain", "hls", "ula"}
    metrics = set(table.metric)
    for m in (
        "pragworld_robust",
        "pragworld_yes",
        "pragworld_no",
        "pragworld_flip",
        "mlp_out_sq",
        "sweep_effect_p_gold",
    ):
        assert m in metrics, m
    assert not any(m.startswith("mn_") for m in metrics)  # no world, no Myhill–Nerode
    robust = table[(table.metric == "pragworld_robust") & (table.model == "before")].iloc[0]
    assert 0 <= robust.value <= 100 and robust.n == 4  # the 4 held-out groups, whole
    assert ULAHeads.load(tmp_path / "out" / "ula_s0" / "model").classes == ["no", "yes"]
    assert (tmp_path / "out" / "hls_s0" / "model" / "tokenizer.json").is_file()
    assert "pragworld_robust" in report.markdown()


# ---- the dialogue world: ULA on the gold answer, QA accuracy before / after ----------------------


@pytest.fixture(scope="module")
def dialogue_ckpt(tmp_path_factory):
    """A tiny GPT-2 on a small dialogue world, with its run's data/train.txt and test.txt."""
    from interp.models import ModelConfig, build_gpt2, save_checkpoint
    from interp.worlds.dialogue import DialogueWorld
    from interp.worlds.io import write_sequences

    world = DialogueWorld(agents=2, objects=2, locations=2, max_count=2, max_utts=2, probes=1)
    seqs = world.generate(60, np.random.default_rng(0))
    run = tmp_path_factory.mktemp("ft_dialogue") / "run"
    model = build_gpt2(world.vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=64, seed=0))
    best = save_checkpoint(model, world, run / "best")
    write_sequences(run / "data" / "train.txt", seqs[:48])
    write_sequences(run / "data" / "test.txt", seqs[48:])
    return best, world, seqs


def test_ula_labels_are_the_gold_answer_on_dialogue(dialogue_ckpt, tiny_city, world_data):
    from interp.train.regularisers import LabelCoding, last_state_labels, ula_labels

    _, world, seqs = dialogue_ckpt
    labels, name = ula_labels(world, seqs)
    assert name == "yes/no gold answer"
    assert labels == [s[-1] for s in seqs] and set(labels) == {"yes", "no"}
    assert LabelCoding.fit(labels).classes == ("no", "yes")
    # the current-state label there would be the conversation's facts: many classes, not the answer
    assert len(LabelCoding.fit(last_state_labels(world, seqs)).classes) > 2
    assert ula_labels(world, [seqs[0][:-1]])[0] == [None]  # no answer at the end: not trained on
    # other worlds keep the current-state label
    assert ula_labels(tiny_city, world_data[0]) == (last_state_labels(tiny_city, world_data[0]), "current-state label")


def test_finetune_on_dialogue_adds_qa_accuracy(dialogue_ckpt, tmp_path):
    import pandas as pd

    from interp.config import load_finetune_config
    from interp.metrics.dialogue_qa import probe_accuracy
    from interp.models import load_checkpoint
    from interp.train.finetune import run_finetune
    from interp.train.regularisers import ULAHeads
    from interp.worlds.io import read_sequences

    best, world, _ = dialogue_ckpt
    cfg = _write_config(
        tmp_path / "ft.toml",
        best,
        tmp_path / "out",
        objectives=["plain", "ula"],
        steps=4,
        regulariser="useful = [1]\nalpha = 0.1\nhead_hidden = 16\n",
        eval="mn = false\nnext_token = false\nsweep = false\nqa_groups = 6\nn_boot = 50\n",
    )
    run_finetune(load_finetune_config(cfg), progress=False, log=lambda s: None)
    table = pd.read_csv(tmp_path / "out" / "finetune_table.csv")
    for m in ("qa_probe_accuracy", "qa_probe_yes", "qa_probe_no", "pragworld_robust", "pragworld_flip"):
        assert set(table[table.metric == m].model) == {"before", "plain", "ula"}, m
    # every held-out probe (the whole test file, not capped by n_eval = 12), as probe_accuracy scores it
    held_out = read_sequences(best.parent / "data" / "test.txt", world)
    direct = probe_accuracy(load_checkpoint(best).bridge, world, held_out)
    row = table[(table.metric == "qa_probe_accuracy") & (table.model == "before")].iloc[0]
    assert row.value == pytest.approx(direct["accuracy"]) and row.n == direct["probes"]
    heads = ULAHeads.load(tmp_path / "out" / "ula_s0" / "model")
    assert heads.classes == ["no", "yes"] and heads.task == "yes/no gold answer"
