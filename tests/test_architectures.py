"""The architecture matrix: a user's own Hugging Face model, eight architectures, end to end.

Tiny random-init GPT-2, GPT-NeoX, Llama, Qwen2, Phi-3, Gemma-2, Mistral and OLMo-2 models (built from
the ``transformers`` config classes, weights scaled so the answers depend on the input), each saved
with a byte-level BPE tokenizer trained here on PragWorld text (the manual split when
``/work/shared/data/pragworld`` is present, else a benchmark file written by the dialogue world).
Half the tokenizers add a BOS like Llama's (Llama, Mistral, Gemma-2), half add none like GPT-2's,
so the BOS rule of :mod:`interp.tasks.tokens` is exercised both ways — the bridge's own tokenizer
prepends one to all eight.

Each model runs the MLP zero-out sweep and direct-effect patching (``run_sweep`` on the CSV), both
evaluation prompts (``evaluate_model``) and a 2-step plain / HLS / ULA fine-tune. Oracles, written
without interp: a plain PyTorch forward-hook loop on the raw HF model fed the HF tokenizer's own
ids (the sweep's clean and ablated P(gold), the label prompt's P(yes), the direct-effect patch's
unpatched score; ≤ 1e-4), HF's own greedy ``generate`` (the benchmark prompt's answer), and the
HLS penalty summed over the layers by hand.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import SHARED_DATA

ARCHS = ("gpt2", "gpt_neox", "llama", "qwen2", "phi3", "gemma2", "mistral", "olmo2")
#: architectures whose tokenizer adds a BOS (the others add none, as GPT-2's)
ADDS_BOS = {"llama", "mistral", "gemma2"}
N_LAYERS = 2
N_CTX = 1024
INFO: dict[str, dict] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    """After the module: per architecture, its time, how far a prepended BOS moves P(gold) (the
    bridge tokenizer's input), the pairs patched directly and by ``interp sweep`` (its filter);
    ``pytest -s`` shows it."""
    yield
    if INFO:
        print("\narchitecture matrix: " + json.dumps(INFO))


# ---- data, tokenizer, models ---------------------------------------------------------------------


def _pick_rows(rows: pd.DataFrame, n_groups: int = 3, per_group: int = 3) -> pd.DataFrame:
    """The ``n_groups`` groups with the shortest contexts (an original and up to ``per_group``
    alterations each)."""
    sizes = rows.groupby("group")["context"].apply(lambda c: c.str.len().max())
    has_original = rows[~rows["altered"]]["group"].unique()
    keep = sizes[sizes.index.isin(has_original)].sort_values().index[:n_groups]
    out = []
    for g in sorted(keep):  # in file order (the writer checks it)
        grp = rows[rows["group"] == g]
        out.append(pd.concat([grp[~grp["altered"]].iloc[:1], grp[grp["altered"]].iloc[:per_group]]))
    return pd.concat(out).reset_index(drop=True)


@pytest.fixture(scope="module")
def pragworld(tmp_path_factory):
    """(rows, csv path, texts to train the tokenizer on, source)."""
    from interp.datasets.pragworld import benchmark_prompt, label_prompt, load_pragworld, write_pragworld_csv

    root = tmp_path_factory.mktemp("arch_data")
    src = SHARED_DATA / "pragworld" / "Manual_Dataset_500_Final.csv"
    if src.is_file():
        all_rows = load_pragworld(src).rows
        source = str(src)
    else:  # the dialogue world's export, read by the same loader
        from interp.worlds.dialogue import DialogueWorld
        from interp.worlds.dialogue.export import write_benchmark

        all_rows = load_pragworld(write_benchmark(DialogueWorld(), root / "dialogue.csv", n_groups=40, seed=0)).rows
        source = "dialogue world export (40 groups, seed 0)"
    rows = _pick_rows(all_rows)
    csv = write_pragworld_csv(rows, root / "rows.csv")
    rows = load_pragworld(csv).rows
    texts = [label_prompt(c, q) for c, q in zip(all_rows["context"], all_rows["question"])]
    texts += [benchmark_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    return rows, csv, texts, source


@pytest.fixture(scope="module")
def bpe_core(pragworld):
    return _bpe_core(pragworld[2] + [" yes no Yes No (yes) (no)"] * 50, 700)


def _bpe_core(texts, vocab_size: int):
    """A byte-level BPE model trained on ``texts`` (words seen often become single tokens)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=["<|endoftext|>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    return core


def train_bpe(texts, vocab_size: int, adds_bos: bool = False):
    """:func:`_bpe_core` wrapped as a tokenizer (:func:`_tokenizer`)."""
    return _tokenizer(_bpe_core(texts, vocab_size), adds_bos=adds_bos)


def _tokenizer(core, adds_bos: bool):
    """A GPT-2-style tokenizer (no BOS added; BOS = EOS = ``<|endoftext|>``) or a Llama-style one
    (``<s>`` added first by its post-processor)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer.from_str(core.to_str())
    if adds_bos:
        bos = core.token_to_id("<s>")
        core.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
        )
        return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def _config(arch: str, vocab: int, tok):
    import transformers as T

    special = dict(
        vocab_size=vocab, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    common = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=4,
        max_position_embeddings=N_CTX,
        **special,
    )
    if arch == "gpt2":
        return T.GPT2Config(n_embd=32, n_layer=N_LAYERS, n_head=4, n_positions=N_CTX, n_inner=64, **special)
    if arch == "gpt_neox":
        return T.GPTNeoXConfig(**common, rotary_pct=0.5)
    if arch == "llama":
        return T.LlamaConfig(**common, num_key_value_heads=2)
    if arch == "qwen2":
        return T.Qwen2Config(**common, num_key_value_heads=2)
    if arch == "phi3":
        return T.Phi3Config(**common, num_key_value_heads=4)
    if arch == "gemma2":
        return T.Gemma2Config(**common, num_key_value_heads=2, head_dim=8, sliding_window=N_CTX)
    if arch == "mistral":
        return T.MistralConfig(**common, num_key_value_heads=2, sliding_window=None)
    if arch == "olmo2":
        return T.Olmo2Config(**common, num_key_value_heads=4)
    raise ValueError(arch)


def _scale(model, seed: int):
    """Weights drawn N(0, 0.3²) (norm gains around 1): the default 0.02 init leaves a tiny model's
    answers nearly independent of its input."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            gain = p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight")
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + (1.0 if gain else 0.0))
    return model


@pytest.fixture(scope="module")
def models(bpe_core, tmp_path_factory):
    """{arch: folder}: each model saved with its tokenizer, as a user's HF folder."""
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("arch_models")
    out = {}
    for k, arch in enumerate(ARCHS):
        tok = _tokenizer(bpe_core, arch in ADDS_BOS)
        torch.manual_seed(k)
        model = _scale(AutoModelForCausalLM.from_config(_config(arch, len(tok), tok)), 100 + k).eval()
        folder = root / arch
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        out[arch] = folder
    return out


# ---- the oracle: raw HF model, HF tokenizer, plain PyTorch hooks ---------------------------------


def _blocks(model):
    base = getattr(model, "transformer", None) or getattr(model, "gpt_neox", None) or model.model
    return base.h if hasattr(base, "h") else base.layers


def _mlp(model, layer: int):
    return _blocks(model)[layer].mlp


class Oracle:
    """P(yes) at each prompt's last token by the raw HF model on ``AutoTokenizer`` ids, one prompt
    at a time (no padding), optionally with one layer's MLP output zeroed by a forward hook."""

    def __init__(self, folder):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.yes, self.no = self.tok.convert_tokens_to_ids(["Ġyes", "Ġno"])

    def ids(self, text: str) -> list[int]:
        return list(self.tok(text)["input_ids"])

    @torch.no_grad()
    def p_yes(self, texts, zero_layer: int | None = None, bos: bool = False) -> np.ndarray:
        handle = None
        if zero_layer is not None:
            handle = _mlp(self.model, zero_layer).register_forward_hook(
                lambda m, a, o: (o[0] * 0, *o[1:]) if isinstance(o, tuple) else o * 0
            )
        try:
            out = []
            for t in texts:
                ids = self.ids(t)
                if bos and ids[0] != self.tok.bos_token_id:
                    ids = [self.tok.bos_token_id, *ids]
                last = self.model(torch.tensor([ids])).logits[0, -1]
                out.append(float(torch.softmax(last[[self.yes, self.no]].double(), -1)[0]))
        finally:
            if handle is not None:
                handle.remove()
        assert not _mlp(self.model, 0)._forward_hooks
        return np.array(out)

    @torch.no_grad()
    def patched_p_yes(self, original: str, altered: str, layer: int) -> tuple[float, float]:
        """(P(yes) of the original prompt, P(yes) with block ``layer``'s input at the aligned
        positions taken from the altered prompt's run) — PyTorch forward-pre-hooks on the HF block."""
        from interp.hooks import Alignment

        a, b = self.ids(original), self.ids(altered)
        block = _blocks(self.model)[layer]
        kept = {}

        def hidden_of(args, kwargs):
            return args[0] if args else kwargs["hidden_states"]

        def grab(mod, args, kwargs):
            kept["h"] = hidden_of(args, kwargs).clone()

        def put(mod, args, kwargs):
            h = hidden_of(args, kwargs).clone()
            for d, s in Alignment.matching(a, b).pairs:
                h[:, d] = kept["h"][:, s]
            if args:
                return (h, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": h}

        def p(ids):
            last = self.model(torch.tensor([ids])).logits[0, -1]
            return float(torch.softmax(last[[self.yes, self.no]].double(), -1)[0])

        clean = p(a)
        handle = block.register_forward_pre_hook(grab, with_kwargs=True)
        try:
            p(b)
        finally:
            handle.remove()
        handle = block.register_forward_pre_hook(put, with_kwargs=True)
        try:
            patched = p(a)
        finally:
            handle.remove()
        return clean, patched


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(
        len(hp._forward_hooks) + len(hp._forward_pre_hooks) + len(hp.fwd_hooks) + len(hp.bwd_hooks) for hp in points
    )


def _p_gold(p_yes: np.ndarray, gold) -> np.ndarray:
    g = np.asarray(gold, dtype=int)
    return np.where(g == 1, p_yes, 1 - p_yes)


# ---- the matrix ----------------------------------------------------------------------------------


def test_bridge_supports_every_architecture(models):
    """TransformerLens 4.3 maps each model class of the matrix to an architecture adapter."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    for arch, folder in models.items():
        (cls,) = json.loads((folder / "config.json").read_text())["architectures"]
        assert cls in SUPPORTED_ARCHITECTURES, (arch, cls)


@pytest.mark.parametrize("arch", ARCHS)
def test_architecture_end_to_end(arch, models, pragworld, tmp_path):
    from transformers import AutoModelForCausalLM

    from interp.config import FinetuneData, TrainConfig
    from interp.datasets.pragworld import benchmark_prompt, label_prompt, load_pragworld, write_pragworld_csv
    from interp.jobs.sweep import run_sweep
    from interp.metrics.pragworld_eval import evaluate_model
    from interp.models import load_bridge
    from interp.tasks import YesNoTask
    from interp.train import train
    from interp.train.finetune_data import pragworld_task
    from interp.train.regularisers import HLS, ULA, ULAHeads, mlp_modules

    t0 = time.perf_counter()
    folder, (rows, csv, _, _) = models[arch], pragworld
    oracle = Oracle(folder)
    labels = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    gold = rows["gold"].to_numpy(dtype=int)

    # the tokenizer settings: BOS exactly where the model's own tokenizer adds one
    task = YesNoTask.pragworld(folder, rows)
    bos = oracle.tok.bos_token_id
    assert task.ids == [oracle.ids(t) for t in labels]
    assert all((ids[0] == bos) == (arch in ADDS_BOS) for ids in task.ids)
    assert (task.yes_id, task.no_id) == (oracle.yes, oracle.no)
    bridge = load_bridge(folder)
    assert bridge.tokenizer(labels[0])["input_ids"][0] == bos  # the bridge's tokenizer always prepends one
    bridge(torch.tensor([task.ids[0][:4]]))  # a bridge may add hooks of its own on its first forward
    n_hooks = _n_hooks(bridge)

    # MLP zero-out sweep: clean and ablated P(gold) equal the hook loop on the raw HF model
    clean = _p_gold(oracle.p_yes(labels), gold)
    assert clean.std() > 1e-3, "the answers must depend on the input"
    # the check can fail: the input the bridge's tokenizer would give (a BOS first) scores otherwise
    with_bos = _p_gold(oracle.p_yes(labels, bos=True), gold)
    shift = float(np.abs(with_bos - clean).max())
    if arch not in ADDS_BOS:
        assert shift > 1e-3, shift
    sweep = run_sweep(folder, data=csv, kind="mlp-zero", out=tmp_path / "mlp", n_boot=50).sweep.frame
    for layer in range(N_LAYERS):
        got = sweep[sweep.layer == layer].sort_values("example")
        np.testing.assert_allclose(got["clean"].to_numpy(), clean, atol=1e-4)
        np.testing.assert_allclose(got["ablated"].to_numpy(), _p_gold(oracle.p_yes(labels, layer), gold), atol=1e-4)
    assert (sweep["ablated"] - sweep["clean"]).abs().max() > 1e-4  # zeroing an MLP changes the answer

    # direct-effect patching on every (original, alteration) pair: the altered run's residual stream
    # entering block ℓ written into the original run at aligned positions; clean and patched P(altered
    # gold) equal a forward-pre-hook patch on the raw HF model
    from interp.analysis.engines.direct_patching import PatchPair, direct_effect_patching

    pairs, _ = task.pairs()
    alt_gold = [int(gold[i]) for _, i in pairs]
    de = direct_effect_patching(
        bridge, [PatchPair(task.ids[o], task.ids[i]) for o, i in pairs], task.metric(alt_gold), list(range(N_LAYERS))
    )
    for layer in range(N_LAYERS):
        got = de.frame[de.frame.layer == layer].sort_values("example")
        want = [oracle.patched_p_yes(labels[o], labels[i], layer) for o, i in pairs]
        np.testing.assert_allclose(
            got["clean"].to_numpy(), _p_gold(np.array([w[0] for w in want]), alt_gold), atol=1e-4
        )
        np.testing.assert_allclose(
            got["ablated"].to_numpy(), _p_gold(np.array([w[1] for w in want]), alt_gold), atol=1e-4
        )
    assert (de.frame["effect"].abs() > 1e-4).any()
    assert _n_hooks(bridge) == n_hooks

    # ``interp sweep --kind direct-effect`` on the CSV, with the model's own answers as gold (so every
    # alteration is answered right): it patches exactly the pairs whose answer changed, the reference's
    # filter, or refuses by name when there is none
    own = (oracle.p_yes(labels) > 0.5).astype(int)
    own_csv = write_pragworld_csv(rows.assign(gold=own, answer=np.where(own == 1, "yes", "no")), tmp_path / "own.csv")
    changed = [(o, i) for o, i in pairs if own[o] != own[i]]
    if changed:
        run = run_sweep(folder, data=own_csv, kind="direct-effect", out=tmp_path / "de", n_boot=50)
        assert run.info["n_pairs"] == len(changed)
        got = run.sweep.frame[run.sweep.frame.layer == 0].sort_values("example")["clean"].to_numpy()
        want = _p_gold(oracle.p_yes([labels[o] for o, _ in changed]), [own[i] for _, i in changed])
        np.testing.assert_allclose(got, want, atol=1e-4)
    else:
        with pytest.raises(ValueError, match="no \\(original, alteration\\) pair"):
            run_sweep(folder, data=own_csv, kind="direct-effect", out=tmp_path / "de", n_boot=50)

    # both evaluation prompts through the bridge
    data = load_pragworld(csv)
    lab = evaluate_model(bridge, data, tmp_path / "label.jsonl", prompt="label", progress=False)
    np.testing.assert_allclose([r["p_yes"] for r in lab.records], oracle.p_yes(labels), atol=1e-4)
    bench = evaluate_model(
        bridge, data, tmp_path / "bench.jsonl", prompt="benchmark", max_new_tokens=3, limit=2, progress=False
    )
    for r, (c, q) in zip(bench.records, zip(rows["context"], rows["question"])):
        ids = torch.tensor([oracle.ids(benchmark_prompt(c, q))])
        with torch.no_grad():
            hf = oracle.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=3,
                do_sample=False,
                pad_token_id=oracle.tok.pad_token_id,
            )
        want = oracle.tok.decode(hf[0, ids.shape[1] :], skip_special_tokens=True)
        assert want.startswith(r["response"]), (r["response"], want)

    # fine-tuning: the same prompt ids + the gold answer, loss on the answer; plain / HLS / ULA, 2 steps
    ft = pragworld_task(folder, FinetuneData(kind="pragworld", train=str(csv), test=str(csv), n_eval=0))
    lengths = (ft.train_ids != ft.pad_id).sum(1)
    for k, ids in enumerate(task.ids):
        assert ft.train_ids[k, : lengths[k]].tolist() == ids + [task.answer_id(int(gold[k]))]
        assert int(ft.loss_from[k]) == len(ids)
    cfg = TrainConfig(
        steps=2, batch_size=4, lr=1e-3, min_lr=1e-4, warmup_steps=0, eval_every=0, checkpoint_every=0, seed=0
    )
    for name in ("plain", "hls", "ula"):
        hf = AutoModelForCausalLM.from_pretrained(folder)
        before = [p.detach().clone() for p in hf.parameters()]
        terms = {
            "plain": [],
            "hls": [HLS([0, 1], 1.0)],
            "ula": [ULA(ULAHeads([0], 32, ft.classes, hidden=8, seed=0), 0.1)],
        }[name]
        hist = train(
            hf,
            ft.train_ids,
            None,
            cfg,
            loss_terms=terms,
            labels=ft.labels,
            pad_id=ft.pad_id,
            loss_from=ft.loss_from,
            progress=False,
        ).history
        assert np.isfinite(hist.iloc[-1]["next_token_loss"])
        assert any(not torch.equal(a, b) for a, b in zip(before, hf.parameters())), name
        assert all(not m._forward_hooks for m in mlp_modules(hf, [0, 1]))  # no hook left behind

    # the HLS penalty is the sum over the layers of each one's mean squared MLP output (real tokens)
    from interp.train import make_batch

    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    batch = make_batch(ft.train_ids[:4], ft.pad_id)
    term = HLS([0, 1], weight=1.0)
    with term.install(hf), torch.no_grad():
        hf(batch.inputs)
        got = float(term.compute(batch))
    outs = {}
    handles = [
        m.register_forward_hook(lambda mod, a, o, k=k: outs.__setitem__(k, o[0] if isinstance(o, tuple) else o))
        for k, m in enumerate(mlp_modules(hf, [0, 1]))
    ]
    with torch.no_grad():
        hf(batch.inputs)
    for h in handles:
        h.remove()
    real = batch.targets != -100
    want = sum(float((outs[x][real].double() ** 2).mean()) for x in (0, 1))
    assert got == pytest.approx(want, rel=1e-5)

    assert _n_hooks(bridge) == n_hooks  # no hook left behind
    INFO[arch] = {
        "seconds": round(time.perf_counter() - t0, 1),
        "bos_shift": round(shift, 4),
        "pairs": len(pairs),
        "sweep_pairs": len(changed),
        "rows": len(rows),
    }
