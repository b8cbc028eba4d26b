"""Half precision against float32 on the same rows: the MLP zero-out sweep, the label evaluation
(P(yes), P(gold)), greedy generation and HLS fine-tuning steps, in bfloat16 and float16 — what a
GPU user runs by default (``--dtype auto`` is bfloat16 on CUDA).

Tolerances: :mod:`interp.models.precision` (``k · u · √(2L) · s``: the dtype's unit roundoff,
the residual stream's 2L rounded writes, the float32 logits' spread over the vocabulary; a
quarter of it for a probability). Beyond the numbers, the decisions a user reads must agree
wherever float32's margin is larger than the tolerance: the yes/no answer, the sign of a sweep
effect, greedy tokens up to the first near-tie.

Every test runs on the CPU (tiny random-init models: the default suite; SmolLM2-135M-Instruct:
``slow``, skipped without the model) and again on CUDA (marked ``cuda``: skipped, saying so, on a
machine without a GPU; ``bench/gpu_check.sh`` runs them there). On the CPU (torch 2.13) every path
runs in both half dtypes; float16 matrix products there are emulated and several times slower
than float32 (``bench/precision.py``).
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import SHARED_DATA

HALF = (torch.bfloat16, torch.float16)
DEVICES = ("cpu", pytest.param("cuda", marks=pytest.mark.cuda))
MANUAL = SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv"

CTX = [
    "A: did you put the apples in the box\nB: I did\nA: and the pears\nB: they are in the basket",
    "A: where is Bob\nB: he went to the garden\nA: did he take the dog\nB: no he did not",
    "A: is the milk in the fridge\nB: I moved it to the table\nA: thanks",
    "A: the keys are on the shelf\nB: I took them to the car\nA: ok",
]
QUESTIONS = [
    "are the apples in the box?",
    "did Bob take the dog?",
    "is the milk in the fridge?",
    "are the keys on the shelf?",
]


def unit_gain(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Random weights at the scale of a trained network: each matrix ``N(0, 1/fan_in)`` (a
    product keeps its input's size, as a trained block roughly does), norm gains near 1, small
    biases. (The ``liven`` weights of other tests, N(0, 0.3²), make each block amplify a
    perturbation several times over: a chaotic network, in which any rounding grows without bound.)"""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if p.dim() >= 2:
                p.copy_(r / p.shape[-1] ** 0.5 if "wte" not in name and "embed" not in name else r)
            elif ("ln" in name or "norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * r)
            else:
                p.copy_(0.1 * r)
    return model


def _rows() -> pd.DataFrame:
    return pd.DataFrame({"context": CTX, "question": QUESTIONS, "gold": [1, 0, 0, 0]})


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    """A lively 4-layer Llama (grouped-query attention) and a 2-layer GPT-2 over the label prompts'
    words, each with interp's word-level tokenizer. The Llama's layer-1 MLP writes 30× its usual
    output: a large activation in the residual stream, as real models have."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from interp.datasets.pragworld import label_prompt
    from interp.models import ModelConfig, build_gpt2
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.worlds import Vocab

    words = {"yes", "no"}
    for c, q in zip(CTX, QUESTIONS):
        words |= set(label_prompt(c, q).split())
    vocab = Vocab.for_tokens(sorted(words))
    root = tmp_path_factory.mktemp("precision")
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(vocab),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=vocab.pad_id,
            bos_token_id=vocab.bos_id,
            eos_token_id=vocab.bos_id,
        )
    )
    unit_gain(llama, 1)
    with torch.no_grad():
        for p in llama.model.layers[1].mlp.down_proj.parameters():
            p.mul_(30)
    gpt2 = unit_gain(build_gpt2(vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=256, seed=0)), 0)
    out = {}
    for name, model in (("llama", llama), ("gpt2", gpt2)):
        folder = root / name
        model.save_pretrained(folder)
        _word_level_tokenizer(vocab).save_pretrained(folder)
        out[name] = folder
    return out


def _bridge(folder, device, dtype):
    from interp.models import load_bridge

    return load_bridge(folder, device=device, dtype=dtype)


def _n_hooks(bridge) -> int:
    return sum(len(h._forward_hooks) + len(h._forward_pre_hooks) for h in bridge.hook_dict.values())


def _last_logits(bridge, ids, mask):
    from interp.analysis.engines.scoring import forward

    logits = forward(bridge, ids, mask)
    return logits[torch.arange(len(ids), device=logits.device), (mask.sum(1) - 1).to(logits.device)].float().cpu()


def _scale(last_logits) -> torch.Tensor:
    """The metric's scale per row: the float32 logits' standard deviation over the vocabulary."""
    return last_logits.std(dim=-1)


# ---- the checks, shared by the tiny models and SmolLM2 --------------------------------------------


def check_label(ref, half, task, dtype, report):
    """P(yes) within the probability tolerance; the answer agrees where |float32 margin| > tol."""
    from interp.metrics.pragworld_eval import score_label_prompts
    from interp.models.precision import logit_tolerance, probability_tolerance

    ids, mask = task.inputs()
    n_layers = int(ref.cfg.n_layers)
    last = _last_logits(ref, ids, mask)
    scale = _scale(last)
    margin = last[:, task.yes_id] - last[:, task.no_id]
    p_ref = score_label_prompts(ref, task.prompts, task.tokenization.tokenizer, chat_template=False)
    p_half = score_label_prompts(half, task.prompts, task.tokenization.tokenizer, chat_template=False)
    np.testing.assert_allclose(p_ref, torch.sigmoid(margin).numpy(), atol=1e-5)  # the same rows, read alike
    tol_p = np.array([probability_tolerance(dtype, n_layers, float(s)) for s in scale])
    tol_m = np.array([logit_tolerance(dtype, n_layers, float(s)) for s in scale])
    diff = np.abs(p_half - p_ref)
    report(f"label P(yes): max |Δ| {diff.max():.2e} (tolerance {tol_p.min():.2e}–{tol_p.max():.2e})")
    assert (diff <= tol_p).all(), (diff, tol_p)
    clear = np.abs(margin.numpy()) > tol_m
    assert ((p_half > 0.5) == (p_ref > 0.5))[clear].all()
    return clear


def check_sweep(ref, half, task, dtype, layers, report):
    """P(gold) clean and ablated within tolerance; the effect's sign agrees where the float32
    effect exceeds twice the tolerance; in the half dtype, ``reuse`` equals the ``loop``."""
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.models.precision import probability_tolerance

    ids, mask = task.inputs()
    scale = _scale(_last_logits(ref, ids, mask))
    tol = np.array([probability_tolerance(dtype, int(ref.cfg.n_layers), float(s)) for s in scale])
    metric = task.metric()
    a = mlp_zero_sweep(ref, ids, metric, mask, layers, batch_size=8).frame
    b = mlp_zero_sweep(half, ids, metric, mask, layers, batch_size=8).frame
    loop = mlp_zero_sweep(half, ids, metric, mask, layers, batch_size=8, method="loop").frame
    # the resumed forward starts from the block's own residual before its MLP: the loop's numbers,
    # not a rounding of resid_post − mlp_out (which cancels where an MLP writes a large activation)
    np.testing.assert_allclose(b[["clean", "ablated"]].to_numpy(), loop[["clean", "ablated"]].to_numpy(), atol=1e-6)
    t = tol[a["example"].to_numpy()]
    for col in ("clean", "ablated"):
        diff = np.abs(b[col].to_numpy() - a[col].to_numpy())
        assert (diff <= t).all(), (col, diff.max(), t)
    d_eff = np.abs(b["effect"].to_numpy() - a["effect"].to_numpy())
    report(
        f"sweep P(gold): max |Δ| clean/ablated {np.abs(b[['clean', 'ablated']].to_numpy() - a[['clean', 'ablated']].to_numpy()).max():.2e}, "
        f"effect {d_eff.max():.2e} (tolerance {t.min():.2e}–{t.max():.2e}; effect 2×)"
    )
    assert (d_eff <= 2 * t).all()
    clear = np.abs(a["effect"].to_numpy()) > 2 * t
    assert (np.sign(a["effect"]) == np.sign(b["effect"]))[clear].all()
    return int(clear.sum())


def check_generation(ref, half, prompts, pad_id, dtype, report, max_new_tokens=8):
    """The same greedy tokens until the first step whose float32 top-two gap is under the
    tolerance (a near-tie the half dtype may resolve the other way). Returns the agreeing steps."""
    from interp.models.generate import greedy_generate
    from interp.models.precision import logit_tolerance
    from interp.worlds.encoding import pad_right

    a = greedy_generate(ref, prompts, pad_id=pad_id, max_new_tokens=max_new_tokens)
    b = greedy_generate(half, prompts, pad_id=pad_id, max_new_tokens=max_new_tokens)
    # float32 logits along float32's own continuation: the gap between its top two at each step
    full = [list(p) + t for p, t in zip(prompts, a)]
    ids, mask, _ = pad_right(full, pad_id)
    from interp.analysis.engines.scoring import forward

    logits = forward(ref, ids, mask).float().cpu()
    checked = 0
    for i, (p, ta, tb) in enumerate(zip(prompts, a, b)):
        steps = logits[i, len(p) - 1 : len(p) - 1 + len(ta)]
        top2 = steps.topk(2, dim=-1).values
        gap = (top2[:, 0] - top2[:, 1]).numpy()
        assert steps.argmax(-1).tolist() == ta  # the teacher-forced float32 forward picks float32's tokens
        tol = np.array([logit_tolerance(dtype, int(ref.cfg.n_layers), float(s)) for s in steps.std(-1)])
        tie = int(np.argmax(gap < tol)) if (gap < tol).any() else len(ta)
        assert tb[:tie] == ta[:tie], (i, ta, tb, gap, tol)
        checked += tie
    report(f"greedy: {checked} of {sum(map(len, a))} tokens before the first near-tie, all equal")
    return checked


def hls_steps(folder_or_model, dtype, device, ids, pad, layers, steps, lr):
    """(the log's last row, the weights after ``steps`` HLS steps as float32, before) of a model
    loaded in ``dtype``."""
    from interp.config import TrainConfig
    from interp.train.regularisers import HLS
    from interp.train.trainer import train

    model = copy.deepcopy(folder_or_model).to(device=device, dtype=dtype)
    before = {k: v.detach().float().cpu().clone() for k, v in model.named_parameters()}
    cfg = TrainConfig(
        steps=steps,
        batch_size=len(ids),
        lr=lr,
        min_lr=lr,
        warmup_steps=0,
        eval_every=0,
        checkpoint_every=0,
        seed=0,
        grad_clip=0.0,
    )
    result = train(model, ids, None, cfg, None, pad_id=pad, loss_terms=[HLS(layers, 1e-3)], progress=False)
    assert {p.dtype for p in model.parameters()} == {dtype}  # the model gets its dtype back
    assert not any(m._forward_hooks for m in model.modules())
    after = {k: v.detach().float().cpu() for k, v in model.named_parameters()}
    return result.history.iloc[-1].to_dict(), after, before


def update_error(after, before, ref_after, ref_before) -> float:
    """‖Δw_half − Δw_float32‖ / ‖Δw_float32‖ over every weight."""
    num = sum(float(((after[k] - before[k]) - (ref_after[k] - ref_before[k])).norm() ** 2) for k in after)
    den = sum(float((ref_after[k] - ref_before[k]).norm() ** 2) for k in after)
    return (num / den) ** 0.5


#: HLS steps whose learning rate is under half the bfloat16 spacing of most weights (|w| ≳ 0.08), while
#: their sum is several spacings: what float32 master weights keep and pure half-precision AdamW loses
STEPS, LR = 60, 1.5e-4

# ---- tiny random-init models (the default suite) --------------------------------------------------


def _skip_without(device):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_label_and_sweep_in_half_precision_agree_with_float32(tiny_folders, arch, dtype, device):
    from interp.tasks import YesNoTask

    _skip_without(device)
    ref, half = _bridge(tiny_folders[arch], device, "float32"), _bridge(tiny_folders[arch], device, dtype)
    task = YesNoTask.pragworld(tiny_folders[arch], _rows(), prompt="label", chat_template=False)
    lines = []
    clear = check_label(ref, half, task, dtype, lines.append)
    assert clear.any()  # not vacuous: some answers are decided
    n_layers = int(ref.cfg.n_layers)
    assert check_sweep(ref, half, task, dtype, list(range(n_layers)), lines.append) > 0
    assert _n_hooks(ref) == _n_hooks(half) == 0
    print(f"{arch} {dtype} {device}: " + "; ".join(lines))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_greedy_generation_in_half_precision_agrees_until_a_near_tie(tiny_folders, arch, dtype, device):
    from interp.tasks import YesNoTask

    _skip_without(device)
    ref, half = _bridge(tiny_folders[arch], device, "float32"), _bridge(tiny_folders[arch], device, dtype)
    task = YesNoTask.pragworld(tiny_folders[arch], _rows(), prompt="label", chat_template=False)
    assert check_generation(ref, half, task.ids, task.pad_id, dtype, print) >= 4


def test_the_planted_large_activation_makes_the_old_subtraction_cancel(tiny_folders):
    """The oracle behind ``reuse``'s resumed residual: in bfloat16, ``resid_post − mlp_out`` of the
    layer whose MLP writes a large activation is not the block's residual before the MLP (the
    loop's ablated input), while ``resid_pre + attn_out`` is, bit for bit."""
    bridge = _bridge(tiny_folders["llama"], "cpu", torch.bfloat16)
    from interp.tasks import YesNoTask

    ids, mask = YesNoTask.pragworld(tiny_folders["llama"], _rows(), prompt="label", chat_template=False).inputs()
    got = {}
    names = [
        f"blocks.1.{n}"
        for n in ("hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out", "hook_resid_post")
    ]
    with torch.no_grad():
        bridge.run_with_hooks(
            ids,
            attention_mask=mask,
            fwd_hooks=[(n, lambda a, hook, n=n: got.__setitem__(n.split(".")[-1], a.detach())) for n in names],
        )
    mid = got["hook_resid_mid"]
    assert torch.equal(got["hook_resid_pre"] + got["hook_attn_out"], mid)
    assert got["hook_mlp_out"].abs().max() > 10 * mid.abs().max()  # the planted large activation
    assert not torch.equal(got["hook_resid_post"] - got["hook_mlp_out"], mid)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["zero", "scale"])
def test_the_prefix_sweep_resumes_exactly_past_the_planted_large_activation(tiny_folders, kind, device):
    """``method="prefix"`` resumes from ``resid_pre + attn_out (+ r(mlp_out))`` too: in bfloat16, on
    the tiny Llama whose layer-1 MLP writes the planted large activation, its P(gold) equals the
    oracle — the same packed forward with the removal as a plain hook on ``mlp_out`` (every block
    run) — at every layer, and the unpacked loop within bfloat16's tolerance. The old
    ``resid_post − mlp_out`` missed that oracle by up to 0.004 (measured; bfloat16 rounding of the
    subtraction)."""
    from interp.analysis.engines.prefix import PrefixSweep, rows_of, score_rows
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.sweeps import mlp_removal_sweep
    from interp.models.precision import probability_tolerance
    from interp.tasks import YesNoTask

    _skip_without(device)
    bridge = _bridge(tiny_folders["llama"], device, torch.bfloat16)
    task = YesNoTask.pragworld(tiny_folders["llama"], _rows(), prompt="label", chat_template=False)
    ids, mask = task.inputs()
    metric, seqs = task.metric(), rows_of(ids, mask)
    layers = list(range(int(bridge.cfg.n_layers)))
    removal = Removal("scale", factor=0.5) if kind == "scale" else Removal("zero")
    sweep = PrefixSweep(bridge, layers, removal)
    clean, removed, _ = sweep.run(seqs, metric)
    assert all(sweep.additive.values())  # every layer resumed after its block, the planted one included
    (want_clean,), _ = score_rows(bridge, seqs, metric)
    np.testing.assert_array_equal(clean, want_clean)
    factor = 0.5 if kind == "scale" else 0.0
    for j, layer in enumerate(layers):
        with bridge.hooks(fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", lambda a, hook: a * factor)]):
            (want,), _ = score_rows(bridge, seqs, metric)
        np.testing.assert_allclose(removed[j], want, atol=1e-6, err_msg=f"layer {layer}")
    assert _n_hooks(bridge) == 0
    loop = mlp_removal_sweep(bridge, ids, metric, mask, layers, ablation=removal, method="loop").frame
    pref = mlp_removal_sweep(bridge, ids, metric, mask, layers, ablation=removal, method="prefix").frame
    tol = probability_tolerance(torch.bfloat16, len(layers), float(_scale(_last_logits(bridge, ids, mask)).max()))
    assert np.abs(pref["ablated"].to_numpy() - loop["ablated"].to_numpy()).max() <= tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_hls_steps_in_half_precision_follow_float32(tiny_folders, dtype, device, monkeypatch):
    """One HLS step: the loss and the penalty within tolerance of float32's. ``STEPS`` steps at a
    learning rate below the weights' half-precision spacing: the update follows float32's (float32
    master weights: error 0.16 in bfloat16, 0.02 in float16, mostly the final rounding back);
    without them (the old loop, planted here) it does not (0.89; float16: 11.7, AdamW's ε
    underflows)."""
    from transformers import AutoModelForCausalLM

    from interp.models.precision import logit_tolerance, unit_roundoff
    from interp.train import trainer

    _skip_without(device)
    model = AutoModelForCausalLM.from_pretrained(tiny_folders["llama"], dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, int(model.config.vocab_size), (4, 24), generator=gen)
    ids[1, 18:] = 0
    pad, layers, n_layers = 0, [1, 2], int(model.config.num_hidden_layers)
    ref_log, ref_after, ref_before = hls_steps(model, torch.float32, device, ids, pad, layers, 1, 1e-4)
    log, _, _ = hls_steps(model, dtype, device, ids, pad, layers, 1, 1e-4)
    with torch.no_grad():
        scale = float(model(ids).logits.float().std(-1).mean())
    tol_loss = logit_tolerance(dtype, n_layers, scale)
    # a mean of squares doubles the activations' relative error
    tol_hls = 2 * 4 * unit_roundoff(dtype) * (2 * n_layers) ** 0.5
    print(
        f"HLS step {dtype} {device}: |Δ loss| {abs(log['next_token_loss'] - ref_log['next_token_loss']):.2e} "
        f"(tol {tol_loss:.2e}), HLS rel {abs(log['hls'] / ref_log['hls'] - 1):.2e} (tol {tol_hls:.2e})"
    )
    assert log["next_token_loss"] == pytest.approx(ref_log["next_token_loss"], abs=tol_loss)
    assert log["hls"] == pytest.approx(ref_log["hls"], rel=tol_hls)
    steps, lr = STEPS, LR
    ref_log, ref_after, ref_before = hls_steps(model, torch.float32, device, ids, pad, layers, steps, lr)
    _, after, before = hls_steps(model, dtype, device, ids, pad, layers, steps, lr)
    err = update_error(after, before, ref_after, ref_before)

    @__import__("contextlib").contextmanager
    def no_master_weights(model):
        yield None

    monkeypatch.setattr(trainer, "master_weights", no_master_weights)
    _, after, before = hls_steps(model, dtype, device, ids, pad, layers, steps, lr)
    old = update_error(after, before, ref_after, ref_before)
    print(f"{steps} HLS steps at lr {lr:g}, {dtype}: update error {err:.2f} (pure {dtype} AdamW: {old:.2f})")
    assert err < 0.3 and old > 0.6


# ---- SmolLM2-135M-Instruct (slow on the CPU; rerun on CUDA) ---------------------------------------

REAL_DEVICES = (pytest.param("cpu", marks=pytest.mark.slow), pytest.param("cuda", marks=pytest.mark.cuda))


@pytest.fixture(scope="module")
def smollm2():
    pytest.importorskip("gguf", reason="the gguf package is in the dev extra: pip install -e '.[dev]'")
    from interp.models.registry import NoCopyError, get_model

    try:
        return get_model("smollm2-135m-instruct")
    except NoCopyError as e:
        pytest.skip(f"no network and no cached copy of smollm2-135m-instruct: {e}")


@pytest.mark.parametrize("device", REAL_DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_smollm2_in_half_precision_agrees_with_float32(smollm2, dtype, device):
    """Six manual PragWorld rows: label P(yes), the MLP zero-out sweep at layers 0, 15 and 29 and
    the benchmark prompt's greedy generation (chat template)."""
    from interp.datasets.pragworld import load_pragworld
    from interp.tasks import YesNoTask

    _skip_without(device)
    if not MANUAL.is_file():
        pytest.skip(f"PragWorld data not present at {MANUAL}")
    rows = load_pragworld(MANUAL).rows.iloc[:6]
    ref, half = _bridge(smollm2, device, "float32"), _bridge(smollm2, device, dtype)
    task = YesNoTask.pragworld(smollm2, rows, prompt="label", chat_template=False)
    lines: list[str] = []
    assert check_label(ref, half, task, dtype, lines.append).any()
    check_sweep(ref, half, task, dtype, [0, 15, 29], lines.append)
    bench = YesNoTask.pragworld(smollm2, rows.iloc[:3], prompt="benchmark", chat_template=True)
    assert check_generation(ref, half, bench.ids, bench.pad_id, dtype, lines.append, max_new_tokens=12) >= 3
    assert _n_hooks(ref) == _n_hooks(half) == 0
    print(f"SmolLM2 {dtype} {device}: " + "; ".join(lines))


@pytest.mark.parametrize("device", REAL_DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_smollm2_hls_step_in_half_precision_agrees_with_float32(smollm2, dtype, device):
    """One full-weight HLS step (β = 1e-3 on layers 3 and 17) on two synthetic PragWorld rows: the
    step's next-token loss and penalty within tolerance of float32's; the model keeps its dtype."""
    from transformers import AutoModelForCausalLM

    from interp.datasets.pragworld import load_pragworld
    from interp.models.precision import logit_tolerance, unit_roundoff
    from interp.tasks import YesNoTask

    _skip_without(device)
    synthetic = SHARED_DATA / "pragworld" / "synthetic_final.csv"
    if not synthetic.is_file():
        pytest.skip(f"PragWorld data not present at {synthetic}")
    task = YesNoTask.pragworld(smollm2, load_pragworld(synthetic).rows.iloc[:2], prompt="label")
    seqs, _ = task.training_rows()
    pad = 49151
    width = max(map(len, seqs))
    ids = torch.tensor([s + [pad] * (width - len(s)) for s in seqs])
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    ref_log, _, _ = hls_steps(model, torch.float32, device, ids, pad, [3, 17], 1, 1e-4)
    log, _, _ = hls_steps(model, dtype, device, ids, pad, [3, 17], 1, 1e-4)
    with torch.no_grad():
        scale = float(model(ids).logits.float().std(-1).mean())
    n_layers = int(model.config.num_hidden_layers)
    tol_loss = logit_tolerance(dtype, n_layers, scale)
    tol_hls = 2 * 4 * unit_roundoff(dtype) * (2 * n_layers) ** 0.5
    print(
        f"SmolLM2 HLS step {dtype} {device}: |Δ loss| {abs(log['next_token_loss'] - ref_log['next_token_loss']):.2e} "
        f"(tol {tol_loss:.2e}), HLS rel {abs(log['hls'] / ref_log['hls'] - 1):.2e} (tol {tol_hls:.2e})"
    )
    assert log["next_token_loss"] == pytest.approx(ref_log["next_token_loss"], abs=tol_loss)
    assert log["hls"] == pytest.approx(ref_log["hls"], rel=tol_hls)


# ---- verdicts: bfloat16's equal float32's wherever float32's are clear of the rounding --------------


def _all_pairs() -> pd.DataFrame:
    """Every context with every question (16 rows, each its own group), gold alternating."""
    rows = [(c, q) for c in CTX for q in QUESTIONS]
    return pd.DataFrame(
        {"context": [c for c, _ in rows], "question": [q for _, q in rows], "gold": [i % 2 for i in range(len(rows))]}
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_bfloat16_sweep_verdicts_equal_float32_where_clear(tiny_folders, arch, device):
    """The verdict a user reads (useful / harmful / negligible / inconclusive per layer) is
    float32's in bfloat16 at every layer whose float32 interval bounds lie farther than the effect
    tolerance from the margin ±min_effect (:mod:`interp.analysis.verdicts.precision`); the
    statistics run in float32 either way; every layer's mean effect is within the tolerance. Not
    vacuous on the Llama: its planted large-activation layer is clear (the 2-layer GPT-2's effects
    are all within its tolerance of a threshold, so there only the tolerance is checked)."""
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.analysis.verdicts.precision import verdict_agreement
    from interp.models.precision import effect_tolerance
    from interp.tasks import YesNoTask

    _skip_without(device)
    ref, half = _bridge(tiny_folders[arch], device, "float32"), _bridge(tiny_folders[arch], device, torch.bfloat16)
    task = YesNoTask.pragworld(tiny_folders[arch], _all_pairs(), prompt="label", chat_template=False)
    ids, mask = task.inputs()
    layers = list(range(int(ref.cfg.n_layers)))
    verdicts = {}
    for name, bridge in (("float32", ref), ("bfloat16", half)):
        sweep = mlp_zero_sweep(bridge, ids, task.metric(), mask, layers, batch_size=8)
        assert sweep.frame["effect"].dtype.kind == "f"  # statistics read plain floats, whatever the model's dtype
        verdicts[name] = layer_verdicts(sweep, seed=0, n_boot=500)
    scale = float(_scale(_last_logits(ref, ids, mask)).max())
    tol = effect_tolerance(torch.bfloat16, len(layers), scale, verdicts["float32"].meta["metric"])
    agreement = verdict_agreement(verdicts["float32"], verdicts["bfloat16"], tol)
    print(agreement)
    assert agreement.summary()["max_abs_mean_effect_diff"] <= tol
    assert agreement.clear or arch == "gpt2", agreement.frame
    assert not agreement.disagreeing_clear, agreement.frame
    assert _n_hooks(ref) == _n_hooks(half) == 0


def test_verdict_agreement_refuses_different_rules_and_reads_a_planted_disagreement(tiny_folders):
    """The comparison itself: a layer moved across the margin by more than the tolerance is a
    clear disagreement; verdicts judged under another margin are refused."""
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts.layers import layer_verdicts
    from interp.analysis.verdicts.precision import verdict_agreement
    from interp.tasks import YesNoTask

    ref = _bridge(tiny_folders["llama"], "cpu", "float32")
    task = YesNoTask.pragworld(tiny_folders["llama"], _all_pairs(), prompt="label", chat_template=False)
    ids, mask = task.inputs()
    sweep = mlp_zero_sweep(ref, ids, task.metric(), mask, [0, 1, 2, 3], batch_size=8)
    a = layer_verdicts(sweep, seed=0, n_boot=300)
    same = verdict_agreement(a, a, 0.0)
    assert same.summary()["agree_all"] == 4 and not same.disagreeing_clear
    b = layer_verdicts(sweep, seed=0, n_boot=300)
    b.frame = b.frame.copy()
    b.frame.loc[b.frame["layer"] == 1, "verdict"] = "planted"
    planted = verdict_agreement(a, b, 0.0)
    assert 1 in planted.clear and planted.disagreeing_clear == [1]
    assert planted.summary()["agree_all"] == 3
    with pytest.raises(ValueError, match="different rules"):
        verdict_agreement(a, layer_verdicts(sweep, seed=0, n_boot=300, min_effect=0.2), 0.0)
