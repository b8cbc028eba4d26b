"""The trainer: determinism, exact resumption, padding, optimizer groups, schedule, loss terms."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch

from interp.models import build_gpt2
from interp.train import TrainConfig, learning_rate, make_batch, train
from interp.train.trainer import TrainingInterrupted, make_optimizer, next_token_loss
from interp.worlds.encoding import encode_sequences

CFG = TrainConfig(
    steps=12, batch_size=8, lr=3e-3, warmup_steps=3, eval_every=6, checkpoint_every=0, eval_sequences=16, seed=1
)


@pytest.fixture(scope="module")
def data(tiny_city):
    seqs = tiny_city.generate(64, np.random.default_rng(0))
    ids = encode_sequences(seqs, tiny_city.vocab)
    return ids[:48], ids[48:]


def _params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_same_seed_same_weights(tmp_path, tiny_city, tiny_model_config, data):
    runs = []
    for k in range(2):
        model = build_gpt2(tiny_city.vocab, tiny_model_config)
        train(model, *data, CFG, tmp_path / str(k), progress=False)
        runs.append(_params(model))
    for n in runs[0]:
        assert torch.equal(runs[0][n], runs[1][n]), n


def test_resumed_run_ends_with_the_same_weights(tmp_path, tiny_city, tiny_model_config, data):
    straight = build_gpt2(tiny_city.vocab, tiny_model_config)
    train(straight, *data, CFG, tmp_path / "straight", progress=False)

    first = build_gpt2(tiny_city.vocab, tiny_model_config)
    r1 = train(first, *data, CFG, tmp_path / "resumed", progress=False, stop_at=5)
    assert r1.steps == 5
    # A new process would start from a fresh model: prove nothing leaks through the object.
    second = build_gpt2(tiny_city.vocab, tiny_model_config)
    r2 = train(second, *data, CFG, tmp_path / "resumed", progress=False)
    assert r2.steps == CFG.steps
    want = _params(straight)
    for n, p in second.named_parameters():
        assert torch.equal(p, want[n]), n
    # the resumed run's history continues the first part's (logged at its stop, step 5)
    assert list(r2.history["step"]) == [5, 6, 10, 12]


def test_resume_with_another_config_is_refused(tmp_path, tiny_city, tiny_model_config, data):
    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    train(model, *data, CFG, tmp_path, progress=False, stop_at=2)
    other = TrainConfig(**{**CFG.__dict__, "lr": 1e-2})
    with pytest.raises(ValueError, match="another training config"):
        train(model, *data, other, tmp_path, progress=False)


def test_padding_is_masked_out_of_the_loss(tiny_city, tiny_model_config):
    """The batch loss equals the token-weighted mean of each row's own loss (pads count nowhere)."""
    model = build_gpt2(tiny_city.vocab, tiny_model_config).eval()
    rows = [["0", "1", "end"], ["3", "4", "N", "E", "S", "W", "end"]]
    batch = make_batch(encode_sequences(rows, tiny_city.vocab), tiny_city.vocab.pad_id)
    assert batch.n_tokens == 3 + 7
    with torch.no_grad():
        joint = next_token_loss(model(batch.inputs).logits, batch.targets)
        parts = []
        for r in rows:
            b = make_batch(encode_sequences([r], tiny_city.vocab), tiny_city.vocab.pad_id)
            parts.append(next_token_loss(model(b.inputs).logits, b.targets) * b.n_tokens)
    torch.testing.assert_close(joint, sum(parts) / batch.n_tokens)


def test_weight_decay_only_on_matrices(tiny_city, tiny_model_config):
    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    decay, no_decay = make_optimizer(model, CFG).param_groups
    assert decay["weight_decay"] == CFG.weight_decay and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    n_unique = len({id(p) for p in model.parameters()})
    assert len(decay["params"]) + len(no_decay["params"]) == n_unique


def test_learning_rate_warmup_then_cosine():
    cfg = TrainConfig(steps=100, lr=1.0, min_lr=0.1, warmup_steps=10)
    assert learning_rate(cfg, 0) == pytest.approx(0.1)
    assert learning_rate(cfg, 9) == pytest.approx(1.0)
    assert learning_rate(cfg, 55) == pytest.approx(0.55)
    assert learning_rate(cfg, 100) == pytest.approx(0.1)
    lrs = [learning_rate(cfg, s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


class MlpNormPenalty:
    """A LossTerm of the kind HLS needs: mean squared MLP output, collected by a hook."""

    name, weight = "mlp_sq", 10.0

    def __init__(self):
        self.collected = []
        self.calls = 0

    @contextlib.contextmanager
    def install(self, model):
        handle = model.transformer.h[0].mlp.register_forward_hook(lambda m, i, o: self.collected.append(o))
        try:
            yield
        finally:
            handle.remove()

    def partial(self, batch):
        self.calls += 1
        out, self.collected = self.collected[-1], []
        sq = out[batch.mask].pow(2)
        return sq.mean(dim=-1).sum(), batch.mask.sum().float()


def test_loss_terms_change_training_and_leave_no_hooks(tmp_path, tiny_city, tiny_model_config, data):
    plain = build_gpt2(tiny_city.vocab, tiny_model_config)
    train(plain, *data, CFG, tmp_path / "plain", progress=False)
    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    term = MlpNormPenalty()
    result = train(model, *data, CFG, tmp_path / "reg", progress=False, loss_terms=[term])
    assert term.calls == CFG.steps
    assert "mlp_sq" in result.history.columns
    assert not torch.equal(model.transformer.h[0].mlp.c_proj.weight, plain.transformer.h[0].mlp.c_proj.weight)
    assert not model.transformer.h[0].mlp._forward_hooks


def test_keyboard_interrupt_saves_a_resumable_state(tmp_path, tiny_city, tiny_model_config, data):
    class Interrupt:
        name, weight = "boom", 0.0

        def __init__(self):
            self.n = 0

        @contextlib.contextmanager
        def install(self, model):
            yield

        def partial(self, batch):
            self.n += 1
            if self.n == 4:
                raise KeyboardInterrupt
            return torch.zeros(()), torch.ones(())

    model = build_gpt2(tiny_city.vocab, tiny_model_config)
    with pytest.raises(TrainingInterrupted, match="resume"):
        train(model, *data, CFG, tmp_path, progress=False, loss_terms=[Interrupt()])
    import json

    assert json.loads((tmp_path / "last" / "trainer_state.json").read_text())["step"] == 3
    result = train(build_gpt2(tiny_city.vocab, tiny_model_config), *data, CFG, tmp_path, progress=False)
    assert result.steps == CFG.steps and math.isfinite(result.best_eval_loss)


def test_length_bucketing_sees_every_row_once_per_epoch_with_less_padding():
    from interp.train.data import LengthBucketedBatches, batch_indices

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 100, (1000,), generator=g)
    sampler = LengthBucketedBatches(lengths, batch_size=32, seed=5, window=10)
    epoch = torch.cat([sampler(s) for s in range(31)])
    assert len(set(epoch.tolist())) == len(epoch) == 31 * 32
    assert torch.equal(sampler(3), LengthBucketedBatches(lengths, 32, 5, window=10)(3))  # pure in (seed, step)
    assert not torch.equal(sampler(31), sampler(0))  # the next epoch is reshuffled

    def waste(batches):
        return sum(int(lengths[b].max()) * len(b) - int(lengths[b].sum()) for b in batches)

    random = [batch_indices(1000, 32, 5, s) for s in range(31)]
    assert waste([sampler(s) for s in range(31)]) < 0.2 * waste(random)


class _Unigram(torch.nn.Module):
    """Logits that ignore the input: training finds the token frequencies the loss weighs."""

    def __init__(self, vocab: int):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(vocab))

    def forward(self, inputs):
        return self.bias.expand(*inputs.shape, -1)


@pytest.mark.parametrize("weighting, want", [("token", 1 / 9), ("batch", 1 / 2)])
def test_token_weighting_learns_the_data_frequencies_under_length_bucketing(weighting, want):
    """60 rows ``1 2`` (one scored token: 2) and 60 rows of nine 1s (eight scored 1s), batched by
    length so every batch is all-short or all-long. The data's frequency of token 2 among scored
    tokens is 60 / 540 = 1/9 — what a bias-only model learns with ``token`` weighting; the
    per-batch mean weighs a short batch like a long one and learns 1/2 (hand-worked optima)."""
    pad = 0
    short = torch.tensor([[1, 2] + [pad] * 7] * 60)
    long = torch.ones(60, 9, dtype=torch.long)
    ids = torch.cat([short, long])
    cfg = TrainConfig(
        steps=600,
        batch_size=10,
        lr=0.05,
        min_lr=1e-3,
        warmup_steps=0,
        eval_every=0,
        checkpoint_every=0,
        weight_decay=0.0,
        loss_weighting=weighting,
        seed=0,
    )
    model = _Unigram(3)
    train(model, ids, None, cfg, pad_id=pad, progress=False)
    p = torch.softmax(model.bias.detach()[1:], -1)  # token 0 is padding, never a target
    assert float(p[1]) == pytest.approx(want, abs=0.02)


def test_expected_scored_tokens_counts_what_the_loop_scores():
    from interp.train.trainer import expected_scored_tokens

    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8], [5, 0, 0, 0]])  # 2, 3 and 0 scored targets
    assert expected_scored_tokens(ids, 0, batch_size=2) == pytest.approx(2 * 5 / 3)
    # answer-only rows: row r scores tokens j ≥ loss_from[r]
    assert expected_scored_tokens(ids, 0, 2, loss_from=torch.tensor([2, 3, 1])) == pytest.approx(2 * 2 / 3)
    assert expected_scored_tokens(ids, 0, batch_size=10) == pytest.approx(5)  # a step takes at most n rows
    with pytest.raises(ValueError, match="loss_weighting"):
        TrainConfig(loss_weighting="row")


def test_one_module_of_interp_train_has_a_backward_pass():
    """Pre-training, planting and fine-tuning all run :func:`interp.train.train`: no other module
    of ``interp/train`` calls ``backward`` (``loss.backward()`` or ``accelerator.backward``)."""
    import ast
    from pathlib import Path

    import interp.train

    found = set()
    for path in Path(interp.train.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "backward":
                found.add(path.name)
    assert found == {"trainer.py"}


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_answer_only_loss_computes_logits_at_the_answers_only_and_equals_the_full_loss(arch):
    """With ``loss_targets`` (the answer tokens only) the objective asks the forward for logits at
    the scored positions only; its loss and gradients equal cross-entropy over the full logits
    (the oracle: a plain forward and ``F.cross_entropy`` by hand)."""
    import torch.nn.functional as F
    from test_architectures import _config, train_bpe
    from transformers import AutoModelForCausalLM

    from interp.train.trainer import Objective

    tok = train_bpe(["the key is in the box and the cup is on the shelf"] * 20, 300)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(_config(arch, len(tok), tok)).eval()
    inputs = torch.randint(3, len(tok), (3, 9))
    targets = torch.randint(3, len(tok), (3, 9))
    answer = torch.full_like(targets, -100)
    answer[0, 5], answer[1, 8], answer[2, 5] = targets[0, 5], targets[1, 8], targets[2, 5]
    obj = Objective(model)
    assert obj.few_logits
    asked = []
    handle = model.register_forward_pre_hook(lambda m, a, kw: asked.append(kw.get("logits_to_keep")), with_kwargs=True)
    try:
        ce, n = obj(inputs, targets, torch.zeros(3, dtype=torch.long), answer)[:2]
    finally:
        handle.remove()
    assert asked[0].tolist() == [5, 8] and int(n) == 3
    ce.backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = F.cross_entropy(model(inputs).logits.reshape(-1, len(tok)).float(), answer.reshape(-1), reduction="sum")
    want.backward()
    assert float(ce.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
