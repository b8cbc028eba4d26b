"""The public Python API (interp.api): the README's five lines run on a model folder; each result
is checked against an independent oracle (plain Hugging Face forwards with PyTorch hooks, a hand
computation); results save, load and rerun; bad input fails before any model loads; no hook
remains after any call.

The model: a tiny random Llama whose byte-level BPE holds every default IOI name, place and object
as one token, so the README block runs on its folder unchanged."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from test_analysis import _n_hooks

import interp
from interp.analysis.config.sweep_config import ConfigError, SweepConfig, VerdictRule
from interp.datasets.ioi import IOI_TEMPLATES, NAMES, OBJECTS, PLACES

README_BLOCK = re.compile(r"<!-- BEGIN api-block -->\s*```python\n(.*?)```\s*<!-- END api-block -->", re.S)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from test_architectures import _config, _scale, train_bpe
    from transformers import AutoModelForCausalLM

    words = list(NAMES) + list(PLACES) + list(OBJECTS)
    texts = [" ".join(f" {w}" for w in words)] * 80
    texts += [t.replace("{", " ").replace("}", " ") for t in IOI_TEMPLATES] * 30
    tok = train_bpe(texts, 1200)
    root = tmp_path_factory.mktemp("api_model") / "tiny-llama"
    torch.manual_seed(0)
    model = _scale(AutoModelForCausalLM.from_config(_config("llama", len(tok), tok)), 7).eval()
    model.save_pretrained(root)
    tok.save_pretrained(root)
    return root


@pytest.fixture(scope="module")
def model(folder):
    return interp.load_model(folder)


@pytest.fixture(scope="module")
def task(model):
    return interp.ioi(model, n=24, seed=0)


@pytest.fixture(scope="module")
def result(model, task, tmp_path_factory):
    return interp.sweep(model, task, removals=["zero", "mean"], rule=VerdictRule(n_boot=200))


def _hf_logit_diffs(hf, task, zero_layer: int | None = None) -> np.ndarray:
    """correct − foil at each prompt's last token, by a plain HF forward (one prompt at a time, no
    padding), the MLP of ``zero_layer`` zeroed by a PyTorch forward hook."""
    handle = None
    if zero_layer is not None:
        handle = hf.model.layers[zero_layer].mlp.register_forward_hook(lambda m, a, o: torch.zeros_like(o))
    try:
        out = []
        with torch.no_grad():
            for ids, c, f in zip(task.ids, task.correct_ids, task.foil_ids):
                logits = hf(torch.tensor([ids])).logits[0, -1]
                out.append(float(logits[int(c)] - logits[int(f)]))
    finally:
        if handle is not None:
            handle.remove()
    return np.array(out)


def test_the_readme_block_runs_unchanged_on_a_model_folder(folder, capsys, tmp_path, monkeypatch):
    from conftest import REPO

    monkeypatch.chdir(tmp_path)  # the block saves to runs/ioi_sweep: here, not in the checkout

    block = README_BLOCK.search((REPO / "README.md").read_text())
    assert block, "README.md has no <!-- BEGIN api-block --> python block"
    code = block.group(1)
    lines = [x for x in code.splitlines() if x.strip() and not x.strip().startswith("#")]
    assert len(lines) <= 5, lines
    assert '"smollm2-135m-instruct"' in code
    exec(compile(code.replace('"smollm2-135m-instruct"', repr(str(folder))), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "verdict" in printed and "layer" in printed
    assert (tmp_path / "runs" / "ioi_sweep" / "verdicts.json").is_file()


def test_sweep_effects_equal_plain_hf_forwards_with_the_mlp_zeroed(folder, task, result):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    clean = _hf_logit_diffs(hf, task)
    frame = result.frame
    zero = frame[frame.removal == "zero"]
    for layer in range(hf.config.num_hidden_layers):
        got = zero[zero.layer == layer].sort_values("example")
        np.testing.assert_allclose(got["clean"], clean, atol=1e-4)
        np.testing.assert_allclose(got["effect"], _hf_logit_diffs(hf, task, layer) - clean, atol=1e-4)
    assert set(frame.columns) >= {"removal", "site", "layer", "example", "group", "metric", "effect"}
    assert set(frame.removal) == {"zero", "mean"}


def test_verdicts_are_a_frame_and_lists_and_another_rule_rejudges(result):
    v = result.verdicts()
    assert set(v.frame.verdict) <= {"useful", "harmful", "negligible", "inconclusive"}
    assert {"layer", "mean_effect", "ci_low", "ci_high", "verdict"} <= set(v.frame.columns)
    assert v.harmful == sorted(v.frame.layer[v.frame.verdict == "harmful"].tolist())
    wide = result.verdicts(VerdictRule(n_boot=200, confidence=0.5))
    narrow_width = (wide.frame.ci_high - wide.frame.ci_low).to_numpy()
    assert (narrow_width <= (v.frame.ci_high - v.frame.ci_low).to_numpy() + 1e-12).all()
    assert result.verdicts(removal="mean").frame.shape[0] == v.frame.shape[0]
    with pytest.raises(KeyError, match="no removal 'scale'"):
        result.verdicts(removal="scale")
    assert result.plot().path.is_file() and "harmful" in str(result)


def test_save_load_and_rerun_from_run_json(model, task, result, tmp_path):
    saved = result.save(tmp_path / "sweep")
    back = interp.load(saved, model=model)
    assert isinstance(back, interp.Sweep)
    cols = ["removal", "layer", "example", "effect"]
    np.testing.assert_allclose(back.frame[cols[3]], result.frame[cols[3]])
    assert back.frame[cols[:3]].equals(result.frame[cols[:3]])
    assert back.verdicts().frame.verdict.tolist() == result.verdicts().frame.verdict.tolist()
    info = json.loads((saved / "run.json").read_text())
    assert info["provenance"]["model"]["config_hash"] == model.fingerprint()["config_hash"]
    assert torch.__version__.startswith(info["provenance"]["versions"]["torch"])
    config = SweepConfig.from_run(saved)
    assert config == result.config and config.removals == ("zero", "mean")
    again = interp.sweep(model, task, config)
    np.testing.assert_allclose(again.frame.effect, result.frame.effect, atol=1e-6)


def test_a_cli_folder_loads_and_a_folder_of_another_model_is_refused(folder, model, tmp_path):
    from interp.analysis.engines.fingerprint import ModelMismatchError
    from interp.cli import main
    from interp.datasets.contrast import write_contrast
    from interp.datasets.ioi import ioi_examples

    data = write_contrast(ioi_examples(model.tokenizer, 8, seed=3), tmp_path / "ioi.jsonl")
    assert (
        main(["sweep", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "cli"), "--n-boot", "50"])
        == 0
    )
    cli = interp.load(tmp_path / "cli", model=model)
    assert sorted(cli.frame.layer.unique()) == list(range(model.n_layers))
    rerun = interp.sweep(model, interp.contrast(model, data), SweepConfig.from_run(tmp_path / "cli"))
    np.testing.assert_allclose(rerun.frame.effect, cli.frame.effect, atol=1e-6)
    assert rerun.verdicts().frame.verdict.tolist() == cli.verdicts().frame.verdict.tolist()
    other = interp.Model(bridge=_other_bridge(), tokenizer=model.tokenizer, name="other", source="other")
    with pytest.raises(ModelMismatchError, match="computed on model"):
        interp.load(tmp_path / "cli", model=other)


def _other_bridge():
    """A stand-in with another architecture (5 layers): all the fingerprint check reads."""

    class _Cfg:
        n_layers = 5

    class _Bridge:
        cfg = _Cfg()

    return _Bridge()


def test_bad_input_fails_before_any_model_loads(model, task):
    with pytest.raises(interp.api.UnknownModelError, match="does not exist"):
        interp.load_model("./no/such/folder")
    with pytest.raises(ConfigError, match="unknown kind 'nope'"):
        interp.sweep(model, task, removals=["nope"])
    with pytest.raises(ConfigError, match="method must be one of"):
        SweepConfig(method="fastest")
    with pytest.raises(ValueError, match=f"layer 99 is out of range: .* has {model.n_layers} layers"):
        interp.sweep(model, task, layers=[99])
    with pytest.raises(ConfigError, match="unknown sweep setting"):
        SweepConfig.from_dict({"removal": ["zero"]})
    with pytest.raises(ValueError, match="kind must be one of activation, attribution"):
        interp.patch(model, task, kind="causal")
    with pytest.raises(interp.api.ResultFolderError, match="no run.json"):
        interp.load(model.source)


def test_patching_cell_equals_a_plain_hf_forward_with_the_clean_residual_patched_in(folder, model, task):
    from transformers import AutoModelForCausalLM

    small = interp.ioi(model, n=4, seed=1)
    before = _n_hooks(model.bridge)
    res = interp.patch(model, small, over="position")
    assert _n_hooks(model.bridge) == before
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    layer, i = 1, 0
    clean, corrupted = torch.tensor([small.ids[i]]), torch.tensor([small.corrupted_ids[i]])
    with torch.no_grad():
        cache = {}
        h = hf.model.layers[layer].register_forward_pre_hook(lambda m, a: cache.setdefault("x", a[0].clone()))
        hf(clean)
        h.remove()
        pos = clean.shape[1] - 1  # the last token: offset 0 from the end

        def put(m, a):
            x = a[0].clone()
            x[:, pos] = cache["x"][:, pos]
            return (x, *a[1:])

        h = hf.model.layers[layer].register_forward_pre_hook(put)
        logits = hf(corrupted).logits[0, -1]
        h.remove()
    want = float(logits[int(small.correct_ids[i])] - logits[int(small.foil_ids[i])])
    grid = res.maps["resid_pre"].frame
    row = grid[(grid.layer == layer) & (grid.example == i)]
    pos_col = res.maps["resid_pre"].axis
    got = row.sort_values(pos_col).iloc[-1]["value"]
    assert got == pytest.approx(want, abs=1e-4)
    assert len(res.top_heads(3)) == 3 and res.plot("head").path.is_file()


def test_finetune_hls_suppresses_the_layer_and_leaves_the_given_model_alone(model, task, tmp_path, capsys):
    w0 = {k: v.clone() for k, v in model.bridge.state_dict().items()}
    plain = interp.finetune(model, task, method="plain", steps=6, lr=3e-3, out=tmp_path / "plain")
    hls = interp.finetune(model, task, method="hls", suppress=[1], weight=10.0, steps=6, lr=3e-3, out=tmp_path / "hls")
    assert all(torch.equal(w0[k], v) for k, v in model.bridge.state_dict().items())

    def mlp_sq(m):
        out = {}
        h = m.bridge.original_model.model.layers[1].mlp.register_forward_hook(lambda mod, a, o: out.setdefault("o", o))
        with torch.no_grad():
            m.bridge.original_model(torch.tensor([task.ids[0]]))
        h.remove()
        return float((out["o"] ** 2).mean())

    assert mlp_sq(hls.model) < mlp_sq(plain.model)
    assert list(hls.table.index) == ["before", "after"] and "accuracy" in hls.table.columns
    # the same call into the same out reads the finished run back (an interrupted script resumes);
    # another setting runs again
    again = interp.finetune(
        model, task, method="hls", suppress=[1], weight=10.0, steps=6, lr=3e-3, out=tmp_path / "hls"
    )
    assert "read back" in capsys.readouterr().err
    assert list(again.table.index) == ["before", "after"] and again.layers == [1]
    np.testing.assert_allclose(again.table["logit_diff"].to_numpy(), hls.table["logit_diff"].to_numpy())
    assert all(
        torch.equal(a, b)
        for a, b in zip(again.model.bridge.state_dict().values(), hls.model.bridge.state_dict().values())
    )
    other = interp.finetune(
        model, task, method="hls", suppress=[1], weight=10.0, steps=5, lr=3e-3, out=tmp_path / "hls"
    )
    assert "read back" not in capsys.readouterr().err and other.config.steps == 5
    with pytest.raises(ConfigError, match="needs layers"):
        interp.finetune(model, task, method="hls")
    with pytest.raises(ConfigError, match="out of range"):
        interp.finetune(model, task, method="hls", suppress=[40])


def test_hls_penalty_equals_a_hand_computation_and_removes_its_hooks(folder):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = torch.randint(5, 100, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    seen = {}
    h = hf.model.layers[0].mlp.register_forward_hook(lambda m, a, o: seen.setdefault("o", o.detach()))
    with interp.hls_penalty(hf, [0], weight=0.5) as penalty:
        hf(ids, attention_mask=mask)
        got = penalty(ids, mask)
    h.remove()
    o = seen["o"]
    want = 0.5 * ((o**2).mean(-1) * mask).sum() / mask.sum()
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    assert not any(m._forward_hooks for m in hf.modules())


def test_a_sweep_into_the_same_folder_resumes_and_another_config_is_refused(model, task, tmp_path):
    from interp.analysis.engines.unitstore import ResumeMismatchError

    first = interp.sweep(model, task, layers=[0, 1], rule=VerdictRule(n_boot=50), out=tmp_path / "s")
    again = interp.sweep(model, task, layers=[0, 1], rule=VerdictRule(n_boot=50), out=tmp_path / "s")
    np.testing.assert_allclose(again.frame.effect, first.frame.effect, atol=1e-6)
    with pytest.raises(ResumeMismatchError, match="layers"):
        interp.sweep(model, task, layers=[0], rule=VerdictRule(n_boot=50), out=tmp_path / "s")


def test_auto_method_packs_rows_that_share_prefixes_and_keeps_the_effects(folder, model):
    """``method="auto"`` reads rows sharing a long preamble as token tries (prefix) and rows that
    share little one by one (reuse); the packed sweep's effects equal plain HF forwards with the
    MLP zeroed (the oracle), and the choice is recorded."""
    from transformers import AutoModelForCausalLM

    from interp.analysis.engines.batching import choose_method, unique_token_share
    from interp.datasets.contrast import ContrastExample

    # by hand: a trie of [1 2 3], [1 2 4], [5] has the nodes 1, 2, 3, 4, 5 — 5 of 7 tokens
    assert unique_token_share([[1, 2, 3], [1, 2, 4], [5]]) == pytest.approx(5 / 7)
    assert unique_token_share([]) == 1.0
    shared = [[1] * 20 + [k] for k in range(4)]
    assert choose_method(shared, ["zero", "mean"])[0] == "prefix"
    assert choose_method(shared, ["zero", "resample"])[0] == "reuse"  # resample does not run packed
    assert choose_method(shared, ["zero"], kind="direct-effect")[0] == "reuse"
    assert choose_method([[k, k + 1] for k in range(0, 20, 2)], ["zero"])[0] == "reuse"

    preamble = " ".join(f"{n} went to the {p}." for n, p in zip(NAMES[:8], PLACES[:8] * 2))
    xs = [
        ContrastExample(f"{preamble} Then {n} gave the {o} to", f" {m}", f" {n}", group=i)
        for i, (n, m, o) in enumerate(zip(NAMES[:6], NAMES[6:12], OBJECTS[:6] * 2))
    ]
    task = interp.contrast(model, xs)
    sw = interp.sweep(model, task, removals=["zero"], layers=[0, 1], rule=VerdictRule(n_boot=50))
    assert sw.info["method_choice"].startswith("auto: prefix") and sw.info["config"]["method"] == "auto"
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    clean = _hf_logit_diffs(hf, task)
    for layer in (0, 1):
        got = sw.frame[sw.frame.layer == layer].sort_values("example")
        np.testing.assert_allclose(got["effect"], _hf_logit_diffs(hf, task, layer) - clean, atol=1e-4)
    reuse = interp.sweep(model, task, removals=["zero"], layers=[0, 1], method="reuse", rule=VerdictRule(n_boot=50))
    assert "method_choice" not in reuse.info
