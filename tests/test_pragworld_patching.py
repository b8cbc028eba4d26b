"""Activation patching of PragWorld (original, alteration) pairs through the task object.

Oracle, written without interp's hooks: a plain PyTorch forward-(pre-)hook patch on the raw Hugging
Face model fed the HF tokenizer's own ids — block ℓ's input at one position (``resid_pre``) or one
head's slice of the attention output projection's input at every position (``heads``, TL's
``hook_z``) taken from the altered prompt's run and written into the original's; P(altered gold)
in the two-way yes/no softmax at the last token. A tiny GPT-2 (its tokenizer adds no BOS) and a
Llama whose tokenizer adds one, each with a byte-level BPE trained here on the rows' prompts.
The same models check ``interp sweep --prepend-bos`` and the benchmark prompt's ``prepend_bos``
against the HF model fed the HF tokenizer's ids with a BOS put first by hand.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_architectures import _blocks, _config, _scale, _tokenizer

GROUPS = [  # (original context, equal-length alteration, the word it swaps)
    ("A: did you put the apples in the box\nB: I did", ("apples", "pears")),
    ("A: where is Bob\nB: he went to the garden", ("garden", "kitchen")),
    ("A: are all the pears in the basket\nB: some are", ("some", "all")),
]
QUESTION = "Are the apples in the box?"
#: weight seeds where the first swap flips the model's answer and the other two do not
SEEDS = {"gpt2": 232, "llama": 205}


def _raw_rows() -> pd.DataFrame:
    rows = []
    for g, (ctx, (a, b)) in enumerate(GROUPS):
        rows.append(
            dict(context=ctx, question=QUESTION, gold=g % 2, altered=False, target="none", category=None, effect=None)
        )
        rows.append(
            dict(
                context=ctx.replace(a, b),
                question=QUESTION,
                gold=1 - g % 2,
                altered=True,
                target="context",
                category="variable_substitution",
                effect="flip",
            )
        )
        rows.append(
            dict(
                context=ctx + " not at all",
                question=QUESTION,
                gold=1 - g % 2,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            )
        )  # longer: not patched
    return pd.DataFrame(rows)


_LOADED: dict[str, pd.DataFrame] = {}


def _rows() -> pd.DataFrame:
    """The rows as the PragWorld loader reads them back from a written CSV (groups, categories)."""
    if "rows" not in _LOADED:
        import tempfile

        from interp.datasets.pragworld import load_pragworld, write_pragworld_csv

        with tempfile.TemporaryDirectory() as d:
            _LOADED["rows"] = load_pragworld(write_pragworld_csv(_raw_rows(), Path(d) / "rows.csv")).rows
    return _LOADED["rows"].copy()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{"gpt2": folder, "llama": folder}: tiny random-init models saved with a trained BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM

    from interp.datasets.pragworld import label_prompt

    rows = _rows()
    texts = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.train_from_iterator(
        texts * 20 + [" yes no"] * 50,
        trainers.BpeTrainer(
            vocab_size=1000,
            special_tokens=["<|endoftext|>", "<s>", "</s>", "<pad>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    root = tmp_path_factory.mktemp("pw_patch")
    out = {}
    for k, arch in enumerate(("gpt2", "llama")):
        tok = _tokenizer(core, adds_bos=arch == "llama")
        torch.manual_seed(k)
        model = _scale(AutoModelForCausalLM.from_config(_config(arch, len(tok), tok)), SEEDS[arch]).eval()
        model.save_pretrained(root / arch)
        tok.save_pretrained(root / arch)
        out[arch] = root / arch
    return out


class HFPatch:
    """P(yes) of the raw HF model on HF tokenizer ids, with PyTorch hooks patching the altered run's
    activations into the original's."""

    def __init__(self, folder):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForCausalLM.from_pretrained(folder).eval()
        self.yes, self.no = self.tok.convert_tokens_to_ids(["Ġyes", "Ġno"])
        cfg = self.model.config
        self.n_heads, self.d_head = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads

    def ids(self, text: str) -> list[int]:
        return list(self.tok(text)["input_ids"])

    def _out_proj(self, layer: int):
        block = _blocks(self.model)[layer]
        return block.attn.c_proj if hasattr(block, "attn") else block.self_attn.o_proj

    @torch.no_grad()
    def _p_yes(self, ids: list[int]) -> float:
        last = self.model(torch.tensor([ids])).logits[0, -1]
        return float(torch.softmax(last[[self.yes, self.no]].double(), -1)[0])

    def _run(self, module, ids, hook) -> float:
        handle = module.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            return self._p_yes(ids)
        finally:
            handle.remove()

    def _patched(self, module, original, altered, edit) -> float:
        kept = {}

        def first(args, kwargs):
            return args[0] if args else kwargs["hidden_states"]

        def grab(mod, args, kwargs):
            kept["h"] = first(args, kwargs).clone()

        def put(mod, args, kwargs):
            h = first(args, kwargs).clone()
            edit(h, kept["h"])
            return ((h, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": h})

        self._run(module, altered, grab)
        return self._run(module, original, put)

    def resid_pre(self, original, altered, layer: int, pos: int) -> float:
        def edit(h, src):
            h[:, pos] = src[:, pos]

        return self._patched(_blocks(self.model)[layer], original, altered, edit)

    def head(self, original, altered, layer: int, head: int) -> float:
        s = slice(head * self.d_head, (head + 1) * self.d_head)

        def edit(h, src):
            h[..., s] = src[..., s]

        return self._patched(self._out_proj(layer), original, altered, edit)


def _p_gold(p_yes, gold: int) -> float:
    return p_yes if gold == 1 else 1.0 - p_yes


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_pair_patching_equals_a_hand_written_hf_hook_patch(arch, folders):
    from interp.analysis.engines.pragworld_sweep import pair_activation_patching
    from interp.datasets.pragworld import label_prompt
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    folder = folders[arch]
    hf = HFPatch(folder)
    rows = _rows()
    task = YesNoTask.pragworld(folder, rows)
    texts = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    assert task.ids == [hf.ids(t) for t in texts]  # the model's own tokenizer, BOS only where it adds one
    assert (task.ids[0][0] == hf.tok.bos_token_id) == (arch == "llama")
    pairs, _ = task.pairs()
    equal = [(o, i) for o, i in pairs if len(task.ids[o]) == len(task.ids[i])]
    assert len(equal) == 3 and len(pairs) == 6, "the swaps keep the length, the negations do not"
    assert len({len(task.ids[o]) for o, _ in equal}) > 1, "several lengths: the groups are merged"

    bridge = load_bridge(folder).eval()
    maps, info = pair_activation_patching(bridge, task, pairs)
    assert info["skipped"] == {"token lengths differ": 3} and info["rows"] == [list(p) for p in equal]
    assert all(not hp._forward_hooks and not hp.fwd_hooks for hp in bridge.hook_dict.values())
    resid, heads = maps["resid_pre"], maps["heads"]
    gaps = []
    for k, (o, i) in enumerate(equal):
        orig, alt, g = hf.ids(texts[o]), hf.ids(texts[i]), int(rows["gold"][i])
        clean, corrupted = _p_gold(hf._p_yes(alt), g), _p_gold(hf._p_yes(orig), g)
        gaps.append((clean, corrupted))
        length = len(orig)
        f = resid.frame[resid.frame.example == k].sort_values(["layer", "position"])
        assert len(f) == 2 * length and (f["pos"] == f["position"] - (length - 1)).all()
        want = [_p_gold(hf.resid_pre(orig, alt, layer, p), g) for layer in range(2) for p in range(length)]
        np.testing.assert_allclose(f["value"].to_numpy(), want, atol=2e-5)
        np.testing.assert_allclose(f["effect"].to_numpy(), np.array(want) - corrupted, atol=2e-5)
        h = heads.frame[heads.frame.example == k].sort_values(["layer", "head"])
        want = [_p_gold(hf.head(orig, alt, layer, j), g) for layer in range(2) for j in range(hf.n_heads)]
        np.testing.assert_allclose(h["value"].to_numpy(), want, atol=2e-5)
        assert set(f["category"]) == {"variable_substitution"}
    np.testing.assert_allclose(resid.meta["clean_mean"], np.mean([c for c, _ in gaps]), atol=2e-5)
    np.testing.assert_allclose(resid.meta["corrupted_mean"], np.mean([c for _, c in gaps]), atol=2e-5)
    assert max(abs(c - d) for c, d in gaps) > 1e-3, "the alterations must move the answer"
    # layer 0's residual input is the embedding of (token, position): patching it changes nothing
    # where the two prompts hold the same token
    for k, (o, i) in enumerate(equal):
        f = resid.frame[(resid.frame.example == k) & (resid.frame.layer == 0)].sort_values("position")
        same = np.array(task.ids[o]) == np.array(task.ids[i])
        assert (f["effect"].to_numpy()[same] == 0).all() and (~same).sum() == 1
    assert resid.meta["labels"][-1] == hf.tok.decode(hf.ids(texts[0])[-1:]) == ":"  # "Label:" ends every prompt
    assert resid.meta["labels"][-3] == "\\n" and "·" in resid.meta["labels"]  # where the contexts differ


def test_pair_patching_refuses_when_no_pair_has_equal_lengths(folders):
    from interp.analysis.engines.pragworld_sweep import pair_activation_patching
    from interp.models import load_bridge
    from interp.tasks import YesNoTask

    task = YesNoTask.pragworld(folders["gpt2"], _rows())
    pairs, _ = task.pairs()
    unequal = [(o, i) for o, i in pairs if len(task.ids[o]) != len(task.ids[i])]
    with pytest.raises(ValueError, match="equal token length"):
        pair_activation_patching(load_bridge(folders["gpt2"]).eval(), task, unequal)


def _own_answers_csv(folder, path):
    """The rows with the model's own answers as gold (every alteration answered right), so the
    reference's filter keeps exactly the pairs whose answer changes."""
    from interp.datasets.pragworld import write_pragworld_csv

    hf = HFPatch(folder)
    rows = _rows()
    from interp.datasets.pragworld import label_prompt

    own = np.array(
        [hf._p_yes(hf.ids(label_prompt(c, q))) > 0.5 for c, q in zip(rows["context"], rows["question"])], dtype=int
    )
    return write_pragworld_csv(rows.assign(gold=own, answer=np.where(own == 1, "yes", "no")), path), own


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_sweep_activation_patching_on_a_pragworld_file(arch, folders, tmp_path):
    """``run_sweep(kind="activation-patching")`` on a CSV: the reference's pairs, of equal token
    length, the others counted by reason; the maps equal the HF hook patch; the files written."""
    import json

    from interp.datasets.pragworld import label_prompt
    from interp.jobs.sweep import run_sweep

    folder = folders[arch]
    csv, own = _own_answers_csv(folder, tmp_path / "own.csv")
    rows = _rows()
    texts = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    hf = HFPatch(folder)
    pairs = [(0, 1), (0, 2), (3, 4), (3, 5), (6, 7), (6, 8)]
    changed = [(o, i) for o, i in pairs if own[o] != own[i]]
    equal = [(o, i) for o, i in changed if len(hf.ids(texts[o])) == len(hf.ids(texts[i]))]
    assert equal == [(0, 1)], "SEEDS: the first swap flips the answer, the others do not"
    run = run_sweep(folder, data=csv, kind="activation-patching", out=tmp_path / "ap", n_boot=50)
    assert run.info["skipped"] == {
        "no original in group": 0,
        "alteration answered wrongly": 0,
        "answer unchanged": len(pairs) - len(changed),
        "token lengths differ": len(changed) - len(equal),
    }
    assert run.info["n_pairs"] == len(equal) and run.info["pair_rows"] == [list(p) for p in equal]
    resid = run.maps["resid_pre"].frame
    for k, (o, i) in enumerate(equal):
        orig, alt, g = hf.ids(texts[o]), hf.ids(texts[i]), int(own[i])
        f = resid[(resid.example == k) & (resid.layer == 1)].sort_values("position")
        want = [_p_gold(hf.resid_pre(orig, alt, 1, p), g) for p in range(len(orig))]
        np.testing.assert_allclose(f["value"].to_numpy(), want, atol=2e-5)
    saved = json.loads((tmp_path / "ap" / "run.json").read_text())
    assert saved["n_pairs"] == len(equal) and saved["clean"] == "altered prompt"
    for name in (
        "patching_resid_pre.csv",
        "patching_resid_pre_mean.csv",
        "patching_heads.csv",
        "patching_resid_pre.png",
        "patching_heads.png",
    ):
        assert (tmp_path / "ap" / name).is_file(), name
    # the filter keeps pairs whose answer flips: P(altered gold) is > 0.5 on the altered prompt, < 0.5
    # on the original
    assert run.maps["resid_pre"].meta["clean_mean"] > 0.5 > run.maps["resid_pre"].meta["corrupted_mean"]
    text = run.table()
    width = resid["pos"].nunique()
    assert f"the 24 of {width} positions" in text and text.splitlines()[2].split()[-1] == ":"  # 'Label:' last
    # --method attribution: the AtP estimate of the same cells (zero where layer 0's inputs agree)
    est = (
        run_sweep(folder, data=csv, kind="activation-patching", method="attribution", out=tmp_path / "at", n_boot=50)
        .maps["resid_pre"]
        .frame
    )
    assert (
        len(est) == len(resid)
        and (est[["layer", "pos", "example"]].to_numpy() == resid[["layer", "pos", "example"]].to_numpy()).all()
    )
    same = (resid["layer"] == 0) & (resid["effect"] == 0)
    assert same.sum() > 0 and (est.loc[same, "effect"].abs() < 1e-7).all()


def test_sweep_cli_prepend_bos_follows_the_switch(folders, tmp_path):
    """``interp sweep --data CSV --prepend-bos on|off|auto``: the sweep scores the ids the switch
    gives (the oracle: the HF model on the HF tokenizer's ids, a BOS put first by hand)."""
    import json

    from interp.cli import main
    from interp.datasets.pragworld import label_prompt, write_pragworld_csv

    folder = folders["gpt2"]  # its tokenizer adds no BOS
    hf = HFPatch(folder)
    rows = _rows().iloc[:3]
    csv = write_pragworld_csv(rows, tmp_path / "three.csv")
    texts = [label_prompt(c, q) for c, q in zip(rows["context"], rows["question"])]
    bos = hf.tok.bos_token_id
    for flag, first in (("auto", False), ("off", False), ("on", True)):
        out = tmp_path / flag
        assert (
            main(
                [
                    "sweep",
                    "--model",
                    str(folder),
                    "--data",
                    str(csv),
                    "--kind",
                    "mlp-zero",
                    "--layers",
                    "0",
                    "--out",
                    str(out),
                ]
                + (["--prepend-bos", flag] if flag != "auto" else [])
            )
            == 0
        )
        run = json.loads((out / "run.json").read_text())
        assert run["prepend_bos"] == {"auto": None, "off": False, "on": True}[flag] and not run["tokenizer_adds_bos"]
        clean = pd.read_csv(out / "sweep.csv").sort_values("example")["clean"].to_numpy()
        want = [_p_gold(hf._p_yes([bos] * first + hf.ids(t)), int(g)) for t, g in zip(texts, rows["gold"])]
        np.testing.assert_allclose(clean, want, atol=2e-5)
    with pytest.raises(ValueError, match="apply to a PragWorld CSV"):
        from interp.jobs.sweep import run_sweep

        run_sweep(folder, kind="mlp-zero", data=tmp_path / "seqs.txt", prepend_bos=True)


def test_benchmark_prompt_ids_follow_prepend_bos(folders, tmp_path):
    """``evaluate_model(prompt="benchmark", prepend_bos=...)``: the ids generation starts from
    follow the switch (caught at the HF model's embedding), and the answer is HF ``generate``'s
    on those ids."""
    from transformers import AutoModelForCausalLM

    from interp.datasets.pragworld import benchmark_prompt, load_pragworld, write_pragworld_csv
    from interp.metrics.pragworld_eval import evaluate_model

    folder = folders["gpt2"]  # its tokenizer adds no BOS
    hf = HFPatch(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    data = load_pragworld(write_pragworld_csv(_rows().iloc[:3], tmp_path / "three.csv"))
    text = benchmark_prompt(data.rows["context"][0], data.rows["question"][0])
    bos = hf.tok.bos_token_id
    for flag, first in ((None, False), (False, False), (True, True)):
        seen: list[list[int]] = []
        handle = model.get_input_embeddings().register_forward_pre_hook(
            lambda m, a, seen=seen: seen.append(a[0][0].tolist())
        )
        try:
            run = evaluate_model(
                model,
                data,
                tmp_path / f"bench_{flag}.jsonl",
                prompt="benchmark",
                tokenizer=hf.tok,
                max_new_tokens=3,
                limit=1,
                batch_size=1,
                prepend_bos=flag,
                progress=False,
            )
        finally:
            handle.remove()
        want_ids = [bos] * first + hf.ids(text)
        assert seen[0] == want_ids and run.meta["prepend_bos"] == flag
        ids = torch.tensor([want_ids])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=3,
                do_sample=False,
                pad_token_id=hf.tok.pad_token_id,
            )
        assert hf.tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True).startswith(run.records[0]["response"])
