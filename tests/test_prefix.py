"""Prefix sharing: tree-packed forwards (interp.models.packing) and the prefix sweep
(interp.analysis.engines.prefix) against plain per-row forwards and hook loops.

Oracles: the raw Hugging Face model run on each row alone (its last-token logits, with a plain
PyTorch forward hook zeroing an MLP), the sweep's ``loop`` method (one ``intervene`` forward per
layer, every row unpacked), brute-force counts of distinct prefixes. Models: tiny random-init
GPT-2, Llama, Qwen2 and GPT-NeoX built from their config classes; SmolLM2 on PragWorld rows of one
group when it is on this machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SHARED_DATA

ARCHS = ("gpt2", "llama", "qwen2", "gpt_neox")
#: the packed forward is also checked on these (a sliding window wider than every row for Gemma-2)
MORE_ARCHS = ("phi3", "gemma2", "mistral", "olmo2")
VOCAB = 97


def _hf(arch: str, seed: int = 0):
    import transformers as T

    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=256,
    )
    cfg = {
        "gpt2": lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4, n_positions=256, n_inner=64),
        "llama": lambda: T.LlamaConfig(**common, num_key_value_heads=2),
        "qwen2": lambda: T.Qwen2Config(**common, num_key_value_heads=2),
        "gpt_neox": lambda: T.GPTNeoXConfig(**common, rotary_pct=0.5),
        "phi3": lambda: T.Phi3Config(**common, num_key_value_heads=4, pad_token_id=0),
        "gemma2": lambda: T.Gemma2Config(**common, num_key_value_heads=2, head_dim=8, sliding_window=64),
        "mistral": lambda: T.MistralConfig(**common, num_key_value_heads=2, sliding_window=None),
        "olmo2": lambda: T.Olmo2Config(**common, num_key_value_heads=4),
    }[arch]()
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    gen = torch.Generator().manual_seed(100 + seed)
    with torch.no_grad():  # weights large enough that the answer depends on the input
        for name, p in model.named_parameters():
            gain = p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight")
            p.copy_(torch.randn(p.shape, generator=gen) * 0.15 + (1.0 if gain else 0.0))
    return model


def _bridge(model):
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module

    arch = type(model).__name__
    bridge = build_bridge_from_module(model, architecture=arch, hf_config=model.config).eval()
    bridge(torch.tensor([[1, 2, 3]]))  # a first forward may add the bridge's own hooks
    return bridge


@pytest.fixture(scope="module")
def hf_models():
    return {arch: _hf(arch, k) for k, arch in enumerate(ARCHS + MORE_ARCHS)}


@pytest.fixture(scope="module")
def bridges(hf_models):
    return {arch: _bridge(m) for arch, m in hf_models.items()}


def _rows(seed: int = 1) -> list[list[int]]:
    """Rows with planted sharing: a group of five on one 20-token prefix (one also sharing 25 with
    another), a row that is a prefix of another, a duplicate, two rows sharing nothing, a
    one-token row."""
    g = torch.Generator().manual_seed(seed)

    def rnd(n):
        return torch.randint(1, VOCAB, (n,), generator=g).tolist()

    base = rnd(30)
    rows = [base[:20] + rnd(n) for n in (3, 7, 1, 10)] + [base[:25], base[:12], rnd(9), base[:20] + [5], rnd(14), [7]]
    rows.append(list(rows[0]))
    return rows


def _n_hooks(bridge) -> int:
    return sum(len(h._forward_hooks) + len(h._forward_pre_hooks) for h in bridge.hook_dict.values())


# ---- packing ---------------------------------------------------------------------------------------


def test_packs_hold_every_distinct_prefix_once():
    from interp.models.packing import pack_rows, plan

    rows = _rows()
    packs = pack_rows(rows)  # no attention cost: one pack while the cap allows
    distinct = {tuple(r[:k]) for r in rows for k in range(1, len(r) + 1)}
    assert sum(len(p) for p in packs) == len(distinct)
    for p in packs:
        mask = p.ancestors()
        for row, last in zip(p.rows, p.scored):  # the scored node's path spells the row, in order
            path = mask[last].nonzero().flatten().tolist()
            assert [p.tokens[k] for k in path] == rows[row]
            assert [p.positions[k] for k in path] == list(range(len(rows[row])))
    assert sorted(r for p in packs for r in p.rows) == list(range(len(rows)))
    capped = pack_rows(rows, pack_tokens=20)
    assert all(len(p) <= 20 or len(p.rows) == 1 for p in capped)
    st = plan(rows, batch_tokens=64).stats()
    assert st["unique_tokens"] == len(distinct) and st["row_tokens"] == sum(map(len, rows))


def test_cost_rule_keeps_unrelated_rows_apart():
    from interp.models.packing import pack_rows

    rows = _rows()
    packs = pack_rows(rows, per_token=1.0, per_pair=1.0)  # attention dear: only sharing rows pack together
    by_row = {r: k for k, p in enumerate(packs) for r in p.rows}
    assert by_row[0] == by_row[1] == by_row[3] == by_row[10]  # the 20-token group stays together
    assert len({by_row[6], by_row[8], by_row[9]}) == 3  # rows sharing nothing are alone


def test_rows_longer_than_the_default_cap_still_share_their_preamble():
    from interp.models.packing import model_costs, plan

    class Costed(torch.nn.Module):  # SmolLM2-135M's shape: only its costs are read
        cfg = type("Cfg", (), {"d_model": 576, "n_layers": 30, "d_vocab": 49152})()

        def parameters(self, recurse=True):
            return iter([torch.empty(134_515_008, device="meta")])

    per_token, per_pair = model_costs(Costed())
    assert per_token > 0 and per_pair > 0
    preamble = list(range(1, 3001))  # a 3,000-token shared context, then four endings of 400 tokens
    rows = [preamble + [5000 + 10 * k + j for j in range(400)] for k in range(4)]
    pp = plan(rows, Costed(), batch_tokens=4 * 3400)
    assert len(pp.packs) == 1 and pp.unique_tokens == 3000 + 4 * 400  # the preamble read once
    assert pp.meta["pack_tokens"] == 2 * 3400
    assert len(plan(rows, Costed(), batch_tokens=4 * 3400, pack_tokens=2048).packs) == 4  # the old cap: none


def test_batches_bucket_by_length_and_count_padding():
    from interp.models.packing import plan

    rows = _rows()
    pp = plan(rows, batch_tokens=40, pack_tokens=24)
    for b in pp.batches:
        lengths = (b.mask[:, 0].diagonal(dim1=1, dim2=2) & (b.tokens != 0)).sum(1)  # noqa: F841
        assert b.tokens.shape[0] * b.tokens.shape[1] <= max(40, b.tokens.shape[1])
    widths = [b.tokens.shape[1] for b in pp.batches]
    assert widths == sorted(widths)
    real = sum(len(p) for p in pp.packs)
    assert pp.padding == sum(b.tokens.numel() for b in pp.batches) - real


@pytest.mark.parametrize("arch", ARCHS + MORE_ARCHS)
def test_packed_logits_equal_each_row_alone(arch, hf_models, bridges):
    from interp.models.packing import packed_logits, plan

    rows = _rows()
    model, bridge = hf_models[arch], bridges[arch]
    with torch.no_grad():
        ref = torch.stack([model(input_ids=torch.tensor([r])).logits[0, -1] for r in rows])
    for m in (model, bridge):
        out = torch.zeros_like(ref)
        for pb in plan(rows, m, batch_tokens=48, pack_tokens=64).batches:
            out[pb.rows] = packed_logits(m, pb)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert _n_hooks(bridge) == 0


# ---- the sweep -------------------------------------------------------------------------------------


def _padded(rows):
    from interp.worlds.encoding import pad_right

    ids, mask, _ = pad_right(rows, 0)
    return ids, mask


@pytest.mark.parametrize("arch", ARCHS)
def test_prefix_sweep_equals_loop_and_raw_hooks(arch, hf_models, bridges):
    from interp.analysis import logit_diff, mlp_zero_sweep

    rows = _rows()
    ids, mask = _padded(rows)
    bridge = bridges[arch]
    metric = logit_diff(torch.arange(len(rows)) % VOCAB, (torch.arange(len(rows)) * 7 + 3) % VOCAB)
    loop = mlp_zero_sweep(bridge, ids, metric, mask, method="loop", batch_size=4)
    pref = mlp_zero_sweep(bridge, ids, metric, mask, method="prefix", batch_size=2)
    np.testing.assert_allclose(pref.frame["ablated"], loop.frame["ablated"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pref.frame["clean"], loop.frame["clean"], atol=1e-5, rtol=0)
    assert (pref.frame["effect"].abs() > 1e-3).mean() > 0.5  # the removal changes the answer
    st = pref.meta["packing"]
    assert st["unique_tokens"] < st["row_tokens"]
    assert _n_hooks(bridge) == 0
    # the raw HF model, each row alone, layer 1's MLP zeroed by a plain PyTorch hook
    model = hf_models[arch]
    base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
    blocks = base.h if hasattr(base, "h") else base.layers
    handle = blocks[1].mlp.register_forward_hook(lambda mod, args, out: torch.zeros_like(out))
    try:
        with torch.no_grad():
            last = torch.stack([model(input_ids=torch.tensor([r])).logits[0, -1] for r in rows])
    finally:
        handle.remove()
    k = torch.arange(len(rows))
    raw = (last[k, k % VOCAB] - last[k, (k * 7 + 3) % VOCAB]).numpy()
    got = pref.frame[pref.frame.layer == 1].sort_values("example")["ablated"].to_numpy()
    np.testing.assert_allclose(got, raw, atol=1e-5, rtol=0)


def test_prefix_sweep_of_a_subset_reads_each_rows_own_metric_data(hf_models, bridges):
    """A sweep of some rows only (a resumable sweep's unit): the per-row metric data (here each
    row's own correct / foil tokens) is looked up by the row's id in the whole task, as the loop
    does — the clean values equal each row alone through the raw HF model."""
    from interp.analysis import logit_diff
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.sweeps import mlp_removal_sweep

    rows = _rows()
    ids, mask = _padded(rows)
    n = len(rows)
    metric = logit_diff(torch.arange(n) % VOCAB, (torch.arange(n) * 7 + 3) % VOCAB)
    part = np.array(sorted(np.random.default_rng(0).choice(n, size=n // 2, replace=False)))
    assert part[0] != 0  # a subset whose local order is not its ids
    kw = dict(ablation=Removal("zero"), rows=part, batch_size=2)
    pref = mlp_removal_sweep(bridges["llama"], ids, metric, mask, [0, 1], method="prefix", **kw)
    loop = mlp_removal_sweep(bridges["llama"], ids, metric, mask, [0, 1], method="loop", **kw)
    np.testing.assert_allclose(pref.frame["clean"], loop.frame["clean"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pref.frame["ablated"], loop.frame["ablated"], atol=1e-5, rtol=0)
    with torch.no_grad():
        last = torch.stack([hf_models["llama"](input_ids=torch.tensor([rows[k]])).logits[0, -1] for k in part])
    k = torch.as_tensor(part)
    raw = (last[torch.arange(len(part)), k % VOCAB] - last[torch.arange(len(part)), (k * 7 + 3) % VOCAB]).numpy()
    got = pref.frame[pref.frame.layer == 0].sort_values("example")  # examples: positions in ``part``
    assert len(got) == len(part)
    np.testing.assert_allclose(got["clean"].to_numpy(), raw, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ["scale", "mean", "resample"])
def test_prefix_removals_equal_loop(kind, bridges):
    """scale and mean (first-token / later-position reference means) run packed and equal the hook
    loop; resample is not prefix-safe and runs unshared, saying so."""
    from interp.analysis import logit_diff
    from interp.analysis.engines.prefix import PrefixSweep
    from interp.analysis.engines.removals import Removal
    from interp.analysis.engines.sweeps import mlp_removal_sweep

    bridge = bridges["llama"]
    rows = _rows()
    ids, mask = _padded(rows)
    metric = logit_diff(3, 5)
    removal = Removal("scale", factor=0.5) if kind == "scale" else Removal(kind)
    loop = mlp_removal_sweep(bridge, ids, metric, mask, ablation=removal, method="loop", batch_size=4)
    pref = mlp_removal_sweep(bridge, ids, metric, mask, ablation=removal, method="prefix", batch_size=2)
    np.testing.assert_allclose(pref.frame["ablated"], loop.frame["ablated"], atol=1e-5, rtol=0)
    assert ("packing" in pref.meta) == (kind != "resample") and ("prefix_fallback" in pref.meta) == (kind == "resample")
    if kind != "resample":
        zero = mlp_removal_sweep(bridge, ids, metric, mask, method="prefix", batch_size=2)
        assert np.abs(pref.frame["ablated"].to_numpy() - zero.frame["ablated"].to_numpy()).max() > 1e-3
    else:
        with pytest.raises(ValueError, match="resample"):
            PrefixSweep(bridge, [0], removal)
    assert _n_hooks(bridge) == 0


def test_prefix_sweep_refuses_a_metric_over_every_position(bridges):
    from interp.analysis import mlp_zero_sweep, token_loss

    ids, mask = _padded(_rows())
    with pytest.raises(ValueError, match="last"):
        mlp_zero_sweep(bridges["gpt2"], ids, token_loss, mask, method="prefix")
    assert _n_hooks(bridges["gpt2"]) == 0


# ---- SmolLM2 on PragWorld rows -----------------------------------------------------------------------

SMOL = "/root/.cache/interp/models/smollm2-135m-instruct"
#: the shared data beside the checkout (a worktree of /work/main also finds /work/shared)
MANUAL = next(
    (
        d / "pragworld" / "Manual_Dataset_500_Final.csv"
        for d in (SHARED_DATA, Path("/work/shared/data"))
        if (d / "pragworld" / "Manual_Dataset_500_Final.csv").is_file()
    ),
    SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv",
)


@pytest.mark.skipif(
    not (MANUAL.is_file() and Path(SMOL).is_dir()),
    reason="needs SmolLM2 (interp models get smollm2-135m-instruct) and the PragWorld manual split",
)
def test_smollm2_prefix_sweep_and_label_scores_on_one_group():
    from interp.analysis import mlp_zero_sweep
    from interp.datasets.pragworld import load_pragworld
    from interp.metrics.pragworld_eval import score_label_prompts
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    rows = load_pragworld(MANUAL).rows
    rows = rows[rows["group"] == rows["group"].iloc[0]].iloc[:4]
    bridge = load_bridge(SMOL)
    task = YesNoTask.pragworld(SMOL, rows, prompt="label")
    ids, mask = task.inputs()
    layers = [0, 15, 29]
    loop = mlp_zero_sweep(bridge, ids, task.metric(), mask, layers, method="loop")
    pref = mlp_zero_sweep(bridge, ids, task.metric(), mask, layers, method="prefix")
    np.testing.assert_allclose(pref.frame["ablated"], loop.frame["ablated"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(pref.frame["clean"], loop.frame["clean"], atol=1e-5, rtol=0)
    assert pref.meta["packing"]["unique_tokens"] < 0.8 * pref.meta["packing"]["row_tokens"]
    shared = score_label_prompts(bridge, task.prompts, chat_template=False)
    alone = score_label_prompts(bridge, task.prompts, chat_template=False, share_prefix=False)
    np.testing.assert_allclose(shared, alone, atol=1e-5, rtol=0)
    assert _n_hooks(bridge) == 0


def test_score_rows_equal_each_row_alone_in_input_order(hf_models, bridges):
    """Two last-position metrics from one packed forward per batch, rows back in input order."""
    from interp.analysis import logit_diff
    from interp.analysis.engines.prefix import score_rows
    from interp.tasks.contrast import pair_prob

    rows = _rows()
    k = torch.arange(len(rows))
    metrics = [logit_diff(k % VOCAB, (k + 11) % VOCAB), pair_prob(k % VOCAB, (k + 11) % VOCAB)]
    got, pp = score_rows(bridges["qwen2"], rows, metrics, batch_tokens=32)
    with torch.no_grad():
        last = torch.stack([hf_models["qwen2"](input_ids=torch.tensor([r])).logits[0, -1] for r in rows])
    ld = last[k, k % VOCAB] - last[k, (k + 11) % VOCAB]
    np.testing.assert_allclose(got[0], ld.numpy(), atol=1e-5, rtol=0)
    np.testing.assert_allclose(got[1], torch.sigmoid(ld).numpy(), atol=1e-5, rtol=0)
    assert len(pp.batches) > 1 and pp.unique_tokens < pp.row_tokens
