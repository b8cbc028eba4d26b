"""Attribution patching (AtP) against independent oracles: exact where the metric is linear in the
site, the derivative a finite difference of the exact intervention measures, TransformerLens's own
``attribution_patch``, the exact sweeps' signs on the cells that matter, the CLI's files, and no
hook left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import save_gpt2_and_llama, warm_bridges

from interp.analysis.engines.activation_patching import activation_patching, legal_mass
from interp.analysis.engines.attribution import (
    activation_attribution,
    agreement,
    direct_effect_attribution,
    exact_cells,
    gradient_run,
    mlp_zero_attribution,
    spearman,
)
from interp.analysis.engines.direct_patching import PatchPair, direct_effect_patching
from interp.analysis.engines.scoring import Batch, forward, token_loss
from interp.analysis.engines.sweeps import mlp_zero_sweep
from interp.hooks import Site, intervene, scale


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tiny_city, tiny_model_config):
    return save_gpt2_and_llama(tmp_path_factory.mktemp("attribution"), tiny_city, tiny_model_config)


@pytest.fixture(scope="module")
def bridges(paths):
    out = warm_bridges(paths)
    for b in out.values():
        b.eval()
    return out


@pytest.fixture(scope="module")
def pair(tiny_city):
    """Four clean rows of 7 tokens; the corrupted rows differ at position 3 only."""
    gen = torch.Generator().manual_seed(2)
    v = len(tiny_city.vocab)
    clean = torch.randint(5, v, (4, 7), generator=gen)
    corrupted = clean.clone()
    corrupted[:, 3] = 5 + (clean[:, 3] - 5 + 1) % (v - 5)
    legal = torch.zeros(4, v, dtype=torch.bool)
    legal[:, 5:9] = True
    return clean, corrupted, legal


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(
        len(hp._forward_hooks) + len(hp.fwd_hooks) + len(hp._backward_hooks) + len(hp.bwd_hooks) for hp in points
    )


def test_exact_where_the_metric_is_linear_in_the_site(bridge, pair):
    """A metric linear in the last block's output (no norm after the site): the estimate for the
    last layer's mlp_out equals the exact zero-out and the exact clean→corrupted patch."""
    clean, corrupted, _ = pair
    last = int(bridge.cfg.n_layers) - 1
    w = torch.randn(int(bridge.cfg.d_model), generator=torch.Generator().manual_seed(0))
    final: dict[str, torch.Tensor] = {}

    def keep(act, hook):
        final["resid"] = act

    def linear(logits, batch):  # w · (final residual summed over positions): linear in mlp_out:last
        return final["resid"].float().sum(1) @ w + 0 * logits[:, 0, 0]

    before = _n_hooks(bridge)
    with bridge.hooks(fwd_hooks=[(f"blocks.{last}.hook_resid_post", keep)]):
        est = mlp_zero_attribution(bridge, clean, linear, layers=[last])
        exact = mlp_zero_sweep(bridge, clean, linear, layers=[last], method="loop")
        np.testing.assert_allclose(est.frame["effect"], exact.frame["effect"], rtol=1e-4, atol=1e-4)
        assert est.frame["effect"].abs().max() > 1e-2  # not trivially 0 = 0
        amap = activation_attribution(bridge, clean, corrupted, linear, "mlp_out")
        cells = [(last, p) for p in range(clean.shape[1])]
        want = exact_cells(bridge, clean, corrupted, linear, "mlp_out", cells)
    got = amap.frame[amap.frame.layer == last].sort_values(["pos", "example"])["effect"].to_numpy()
    np.testing.assert_allclose(got, want.numpy().ravel(), rtol=1e-4, atol=1e-4)
    assert _n_hooks(bridge) == before


def test_estimate_is_the_derivative_of_the_exact_intervention(bridge, pair):
    """Oracle for the gradient plumbing: the estimate equals a central finite difference of the exact
    edit scaled by ε (MLP output scaled by 1 ∓ ε; a clean→corrupted patch mixed in by ±ε)."""
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    batch = Batch(clean, None, torch.arange(4))
    eps = 1e-3
    est = mlp_zero_attribution(bridge, clean, metric)
    for layer in range(int(bridge.cfg.n_layers)):
        vals = []
        for f in (1 - eps, 1 + eps):
            with intervene(bridge, [scale(Site(layer, "mlp_out"), f)]):
                vals.append(metric(forward(bridge, clean), batch).double())
        fd = ((vals[0] - vals[1]) / (2 * eps)).numpy()  # d metric / d(−scale) = −Σ mlp_out · grad
        got = est.frame[est.frame.layer == layer].sort_values("example")["effect"].to_numpy()
        np.testing.assert_allclose(got, fd, rtol=2e-2, atol=2e-4)

    maps = activation_attribution(bridge, clean, corrupted, metric, ("resid_pre", "attn_out", "heads"))
    cache: dict[str, torch.Tensor] = {}
    for name in ("blocks.1.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.1.attn.hook_z"):
        with torch.no_grad(), bridge.hooks(fwd_hooks=[(name, lambda a, hook, n=name: cache.__setitem__(n, a.clone()))]):
            bridge(clean)
    for comp, name, sel, key in (
        ("resid_pre", "blocks.1.hook_resid_pre", (slice(None), 4), {"layer": 1, "pos": 4}),
        ("attn_out", "blocks.0.hook_attn_out", (slice(None), 3), {"layer": 0, "pos": 3}),
        ("heads", "blocks.1.attn.hook_z", (slice(None), slice(None), 1), {"layer": 1, "head": 1}),
    ):
        vals = []
        for e in (eps, -eps):

            def mix(act, hook, e=e, name=name, sel=sel):
                out = act.clone()
                out[sel] = act[sel] + e * (cache[name][sel] - act[sel])
                return out

            with torch.no_grad():
                logits = bridge.run_with_hooks(corrupted, fwd_hooks=[(name, mix)])
            vals.append(metric(logits, Batch(corrupted, None, torch.arange(4))).double())
        fd = ((vals[0] - vals[1]) / (2 * eps)).numpy()
        f = maps[comp].frame
        axis = [k for k in key if k != "layer"][0]
        got = f[(f.layer == key["layer"]) & (f[axis] == key[axis])].sort_values("example")["effect"].to_numpy()
        np.testing.assert_allclose(got, fd, rtol=2e-2, atol=2e-4, err_msg=comp)


def test_mlp_zero_estimate_is_the_derivative_along_the_output_weights(paths, bridges, pair):
    """Oracle without hooks or bridge: zeroing layer ℓ's MLP scales its output projection (W, b) to
    0, so the summed estimate −Σ mlp_out · ∇ equals −(W · ∂M/∂W + b · ∂M/∂b) for M = Σ_examples
    metric, from a plain Hugging Face forward and backward. (At a trained minimum of M these
    derivatives vanish, which is why AtP cannot see MLP zero-out on a model's own training loss.)"""
    from interp.models import load_hf_model

    clean, _, _ = pair
    est = mlp_zero_attribution(bridges["gpt2"], clean, token_loss).frame.groupby("layer")["effect"].sum()
    hf = load_hf_model(paths["gpt2"]).eval()
    total = token_loss(hf(clean).logits, Batch(clean, None, torch.arange(len(clean)))).sum()
    projs = [block.mlp.c_proj for block in hf.transformer.h]
    grads = torch.autograd.grad(total, [t for p in projs for t in (p.weight, p.bias)])
    for layer, p in enumerate(projs):
        gw, gb = grads[2 * layer], grads[2 * layer + 1]
        want = -float((p.weight.detach() * gw).sum() + (p.bias.detach() * gb).sum())
        assert est[layer] == pytest.approx(want, rel=1e-3, abs=1e-5), layer


def test_agrees_with_transformer_lens_attribution_patch(bridges, pair):
    """TransformerLens 4.3's node-level AtP (one example, backward hooks) gives the same head and MLP
    scores, summed over positions."""
    from transformer_lens.tools.analysis.attribution_patching import attribution_patch

    bridge = bridges["gpt2"]
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    maps = activation_attribution(bridge, clean[:1], corrupted[:1], metric, ("mlp_out", "heads"))
    tl = attribution_patch(
        bridge, clean[:1], corrupted[:1], lambda logits: metric(logits, Batch(corrupted[:1], None, torch.arange(1)))[0]
    )
    for node, score in tl.node_scores.items():
        if node.kind == "mlp_out":
            mine = maps["mlp_out"].frame.query(f"layer == {node.layer} and pos == {node.position}")["effect"]
        elif node.kind == "attn_head_out":
            continue  # per position in TL; compared summed below
        else:
            continue
        assert float(mine.iloc[0]) == pytest.approx(score, abs=1e-5)
    for layer in range(int(bridge.cfg.n_layers)):
        for head in range(int(bridge.cfg.n_heads)):
            want = sum(
                s
                for nd, s in tl.node_scores.items()
                if nd.kind == "attn_head_out" and nd.layer == layer and nd.head == head
            )
            got = maps["heads"].frame.query(f"layer == {layer} and head == {head}")["effect"].iloc[0]
            assert float(got) == pytest.approx(want, abs=1e-5)


@pytest.fixture(scope="module")
def gentle(tmp_path_factory, tiny_city, tiny_model_config):
    """The tiny GPT-2 and Llama with weights of std 0.05 (near the linear regime AtP assumes)."""

    paths = save_gpt2_and_llama(tmp_path_factory.mktemp("gentle"), tiny_city, tiny_model_config)
    out = warm_bridges(paths)
    for b in out.values():
        with torch.no_grad():  # shrink the lively weights around their means (norm gains stay 1)
            for name, p in b.named_parameters():
                gain = p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight")
                p.copy_(1.0 + (p - 1.0) / 6 if gain else p / 6)
        b.eval()
    return out


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_matches_the_exact_maps_near_the_linear_regime(gentle, pair, arch):
    """Against the exact clean→corrupted sweeps (transformer_lens.patching) on small-weight tiny
    models: cells before the edit are exactly 0 in both, every map correlates (Pearson ≥ 0.9; ≥ 0.8
    for the residual stream, where a patch is largest: measured 0.88 GPT-2, 0.93 Llama) and the
    signs agree on every cell whose exact effect is at least a fifth of the largest (residual
    stream: on its largest cell)."""
    bridge = gentle[arch]
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    maps = activation_attribution(bridge, clean, corrupted, metric, ("resid_pre", "attn_out", "mlp_out", "heads"))
    for comp, est in maps.items():
        exact = activation_patching(bridge, clean, corrupted, metric, comp)
        assert est.meta["clean_mean"] == pytest.approx(exact.meta["clean_mean"], abs=1e-6)
        assert est.meta["corrupted_mean"] == pytest.approx(exact.meta["corrupted_mean"], abs=1e-6)
        if comp != "heads":
            f = est.frame
            assert (f[f.pos < 3]["effect"] == 0).all(), comp
        a = agreement(est, exact)
        assert a["pearson"] >= (0.8 if comp == "resid_pre" else 0.9), (comp, a)
        e, x = est.mean().to_numpy(), exact.mean().to_numpy()
        # the residual stream: only its largest cell (on GPT-2 one of three large cells flips sign)
        big = np.abs(x) >= (1.0 if comp == "resid_pre" else 0.2) * np.abs(x).max()
        assert (np.sign(e[big]) == np.sign(x[big])).all(), comp
        assert a["n_sites"] == x.size


def test_exact_cells_equal_the_transformer_lens_maps(bridges, pair):
    """``--verify-top``'s exact measurement of single cells equals the full TransformerLens map."""
    bridge = bridges["llama"]
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    for comp, _axis, cells in (("resid_pre", "pos", [(1, 3), (0, 3), (1, 6)]), ("heads", "head", [(1, 0), (0, 1)])):
        full = activation_patching(bridge, clean, corrupted, metric, comp).mean()
        got = exact_cells(bridge, clean, corrupted, metric, comp, cells).mean(dim=1).numpy()
        want = np.array([full.loc[layer, second] for layer, second in cells])
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=comp)


def test_direct_effect_frame_matches_the_exact_one(bridges, tiny_city):
    """Same rows and columns as direct_effect_patching; layer 0 (embeddings, identical at aligned
    positions) is exactly 0 in both; a pair of identical prompts estimates 0 everywhere."""
    bridge = bridges["llama"]
    gen = torch.Generator().manual_seed(4)
    v = len(tiny_city.vocab)
    pairs = []
    for k in (6, 6, 8):
        o = torch.randint(5, v, (k,), generator=gen)
        a = o.clone()
        a[2] = 5 + (o[2] - 5 + 1) % (v - 5)
        pairs.append(PatchPair(o, a))
    pairs.append(PatchPair(pairs[0].original, pairs[0].original))
    est = direct_effect_attribution(bridge, pairs, token_loss, higher_is_better=False)
    exact = direct_effect_patching(bridge, pairs, token_loss, higher_is_better=False)
    cols = ["example", "layer", "n_aligned", "len_original", "len_altered"]
    assert list(est.frame.columns) == list(exact.frame.columns)
    assert est.frame[cols].equals(exact.frame[cols])
    np.testing.assert_allclose(est.frame["clean"], exact.frame["clean"], atol=1e-6)
    assert (est.frame.query("layer == 0")["effect"] == 0).all()
    assert (est.frame.query("example == 3")["effect"].abs() < 1e-7).all()
    with pytest.raises(ValueError, match="direct_effect_attribution"):  # the estimate is called, not dispatched to
        direct_effect_patching(bridge, pairs, token_loss, method="attribution", higher_is_better=False)


def test_no_hook_remains_and_bad_input(bridges, pair):
    bridge = bridges["gpt2"]
    clean, corrupted, legal = pair
    before = _n_hooks(bridge)

    def boom(logits, batch):
        raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError, match="metric failed"):
        mlp_zero_attribution(bridge, clean, boom)
    with pytest.raises(ValueError, match="not differentiable"):
        mlp_zero_attribution(bridge, clean, lambda logits, batch: logits[:, -1, 0].detach())
    with pytest.raises(ValueError, match=r"tensor \[batch=4\]"):
        gradient_run(bridge, clean, lambda logits, batch: logits.sum(), ["blocks.0.hook_mlp_out"])
    with pytest.raises(ValueError, match="components must be among"):
        activation_attribution(bridge, clean, corrupted, legal_mass(legal), "resid_mid")
    assert _n_hooks(bridge) == before
    assert all(p.grad is None for p in bridge.parameters())
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_sweep_command_with_verify_top(tmp_path, tiny_city, tiny_model_config, capsys):
    """``interp sweep --method attribution --verify-top K``: the exact sweep's files from the
    estimates, and the top K layers measured exactly (equal to the exact reuse sweep)."""
    from conftest import liven

    from interp.cli import main
    from interp.models import build_gpt2, load_checkpoint, save_checkpoint
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences, write_sequences

    save_checkpoint(liven(build_gpt2(tiny_city.vocab, tiny_model_config), 3), tiny_city, tmp_path / "best")
    write_sequences(tmp_path / "data" / "test.txt", tiny_city.generate(10, np.random.default_rng(5)))
    out = tmp_path / "att"
    assert (
        main(
            [
                "sweep",
                "--model",
                str(tmp_path / "best"),
                "--method",
                "attribution",
                "--verify-top",
                "2",
                "--n",
                "10",
                "--out",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["method"] == "attribution"
    for name in ("sweep.csv", "sweep_layers.csv", "sweep.json", "verdicts.json", "layers.png", "verify.csv"):
        assert (out / name).is_file(), name
    ver = summary["verify"]
    assert [r["rank"] for r in ver] == [1, 2]
    assert abs(ver[0]["attribution"]) >= abs(ver[1]["attribution"])
    ckpt = load_checkpoint(tmp_path / "best")
    seqs = read_sequences(tmp_path / "data" / "test.txt", ckpt.world)
    ids = encode_sequences(seqs, ckpt.world.vocab, ckpt.bridge.cfg.n_ctx)
    mask = (ids != ckpt.world.vocab.pad_id).long()
    exact = mlp_zero_sweep(ckpt.bridge.eval(), ids, token_loss, mask, higher_is_better=False).per_layer()
    for r in ver:
        assert r["exact"] == pytest.approx(float(exact.loc[exact.layer == r["layer"], "mean_effect"].iloc[0]), abs=1e-5)
    att = mlp_zero_attribution(ckpt.bridge, ids, token_loss, mask, higher_is_better=False).per_layer()
    got = {r["layer"]: r["effect"] for r in summary["layers"]}
    for r in att.itertuples():
        assert got[r.layer] == pytest.approx(r.mean_effect, abs=1e-6)
    assert (
        main(
            [
                "sweep",
                "--model",
                str(tmp_path / "best"),
                "--verify-top",
                "2",
                "--n",
                "4",
                "--out",
                str(tmp_path / "bad"),
            ]
        )
        == 2
    )
    assert "--verify-top needs --method attribution" in capsys.readouterr().err

    out2 = tmp_path / "att_patch"
    assert (
        main(
            [
                "sweep",
                "--model",
                str(tmp_path / "best"),
                "--kind",
                "activation-patching",
                "--method",
                "attribution",
                "--verify-top",
                "3",
                "--length",
                "6",
                "--edit-at",
                "2",
                "--n",
                "10",
                "--out",
                str(out2),
            ]
        )
        == 0
    )
    for name in (
        "patching_resid_pre.csv",
        "patching_heads.csv",
        "verify_resid_pre.csv",
        "verify_heads.csv",
        "attribution_scatter_resid_pre.png",
        "attribution_scatter_heads.png",
    ):
        assert (out2 / name).is_file(), name

    # the run report shows the scatter and the verified table of a sweep folder
    import shutil

    from interp.viz.report import render_report

    run = tmp_path / "run"
    shutil.copytree(out, run / "sweep_mlp-zero")
    page = render_report(run)
    assert "Attribution patching vs exact (the verified sites)" in page
    assert "Attribution patching: the top sites measured exactly" in page
    assert page.count("data:image/png;base64,") >= 2  # layers.png and attribution_scatter.png


def test_pragworld_file_sweeps_dispatch_to_attribution(pw, tmp_path):
    """``interp sweep --data X.csv --method attribution``: the same rows and clean scores as the
    exact PragWorld sweep, and the estimates of the library functions."""
    from interp.jobs.sweep import run_sweep

    model_dir, csv = pw
    exact = run_sweep(model_dir, data=csv, kind="mlp-zero", out=tmp_path / "e", n_boot=100)
    est = run_sweep(model_dir, data=csv, kind="mlp-zero", method="attribution", out=tmp_path / "a", n_boot=100)
    assert est.sweep.meta["method"] == "attribution" and est.info["method"] == "attribution"
    cols = ["example", "layer", "category"]
    assert est.sweep.frame[cols].equals(exact.sweep.frame[cols])
    np.testing.assert_allclose(est.sweep.frame["clean"], exact.sweep.frame["clean"], atol=1e-5)
    assert (tmp_path / "a" / "verdicts.json").is_file()
    de = run_sweep(model_dir, data=csv, kind="direct-effect", method="attribution", out=tmp_path / "d", n_boot=100)
    de_exact = run_sweep(model_dir, data=csv, kind="direct-effect", out=tmp_path / "dx", n_boot=100)
    assert de.info["method"] == "attribution" and de.sweep.meta["method"] == "attribution"
    assert de.info["n_pairs"] == de_exact.info["n_pairs"]
    assert de.info["n_pairs"] >= 1
    assert de.sweep.frame[["example", "layer"]].equals(de_exact.sweep.frame[["example", "layer"]])
    with pytest.raises(ValueError, match="--verify-top runs on world checkpoints"):
        run_sweep(model_dir, data=csv, method="attribution", verify_top=1, out=tmp_path / "v")


@pytest.fixture(scope="module")
def pw(tmp_path_factory):
    """A tiny PragWorld file and a lively word-level GPT-2 for it (as tests/test_pragworld_sweep.py)."""
    import pandas as pd
    from conftest import liven

    from interp.datasets.pragworld import label_prompt, load_pragworld, write_pragworld_csv
    from interp.models import ModelConfig, build_gpt2, load_bridge
    from interp.models.checkpoint import _word_level_tokenizer
    from interp.tasks import YesNoTask
    from interp.worlds import Vocab

    ctx = ["A: did you put the apples in the box\nB: I did", "A: where is Bob\nB: he went to the garden"]
    rows = []
    for g, c in enumerate(ctx):
        rows.append(
            dict(context=c, question="is it yes?", gold=g % 2, altered=False, target="none", category=None, effect=None)
        )
        rows.append(
            dict(
                context=c + " not",
                question="is it yes?",
                gold=1 - g % 2,
                altered=True,
                target="context",
                category="negation",
                effect="flip",
            )
        )
    root = tmp_path_factory.mktemp("pw_att")
    csv = write_pragworld_csv(pd.DataFrame(rows), root / "tiny.csv")
    data = load_pragworld(csv)
    words = {"yes", "no"} | {
        w for c, q in zip(data.rows["context"], data.rows["question"]) for w in label_prompt(c, q).split()
    }
    vocab = Vocab.for_tokens(sorted(words))
    folder = root / "best"
    for seed in range(3, 20):  # weights whose answer changes on some alteration (so there is a pair)
        liven(build_gpt2(vocab, ModelConfig(n_layer=2, d_model=32, n_head=2, n_ctx=64, seed=0)), seed).save_pretrained(
            folder
        )
        _word_level_tokenizer(vocab).save_pretrained(folder)
        bridge = load_bridge(folder).eval()
        task = YesNoTask.pragworld(folder, data.rows)
        ids, mask = task.inputs()
        yes_id, no_id = task.yes_no_ids
        last = forward(bridge, ids, mask)[torch.arange(len(ids)), mask.sum(1) - 1]
        answer = (last[:, yes_id] > last[:, no_id]).long().numpy()
        if any(answer[i] != answer[i - 1] for i in (1, 3)):
            break
    own = data.rows.assign(gold=answer, answer=np.where(answer == 1, "yes", "no"))  # every alteration right
    return folder, write_pragworld_csv(own, root / "own.csv")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_layer_sweeps_match_the_exact_ones_near_the_linear_regime(gentle, pair, arch):
    """Against the exact layer sweeps on the small-weight models. Direct-effect patching of the
    one-token edits: layer 0 exactly 0 in both, the other layer within 40 % and of the same sign
    (measured 4 % GPT-2, 26 % Llama). MLP zero-out, a whole layer's output removed, is a large edit
    even here: only the layer of largest exact effect keeps its sign for sure (GPT-2: 0.0020 / 0.0027
    estimated vs 0.0068 / 0.0044 exact; Llama's small layer 0 flips)."""
    bridge = gentle[arch]
    clean, corrupted, legal = pair
    metric = legal_mass(legal)
    pairs = [PatchPair(c, k) for c, k in zip(corrupted, clean)]
    est = direct_effect_attribution(bridge, pairs, metric).per_layer().set_index("layer")["mean_effect"]
    exact = direct_effect_patching(bridge, pairs, metric).per_layer().set_index("layer")["mean_effect"]
    assert est[0] == 0 and exact[0] == 0
    assert np.sign(est[1]) == np.sign(exact[1]) and abs(est[1] - exact[1]) <= 0.4 * abs(exact[1])
    est = mlp_zero_attribution(bridge, clean, metric).per_layer()["mean_effect"].to_numpy()
    exact = mlp_zero_sweep(bridge, clean, metric, method="loop").per_layer()["mean_effect"].to_numpy()
    top = int(np.argmax(np.abs(exact)))
    assert np.sign(est[top]) == np.sign(exact[top])
