"""Current-state probes: oracle features, activation/label alignment, tuple labels, end to end, CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

from interp.metrics.probes import (
    ProbeData,
    check_layers,
    collect_activations,
    fit_probe,
    probe_activations,
    probe_layers,
)


def _synthetic(labels, features, n_seq):
    """ProbeData for one pseudo-layer, positions spread round-robin over ``n_seq`` sequences."""
    n = len(labels)
    return ProbeData(
        layers=(0,),
        features=features[None].float(),
        labels=list(labels),
        sequence=np.arange(n) % n_seq,
        position=np.arange(n) // n_seq,
        n_sequences=n_seq,
        skipped=0,
    )


def test_oracle_linear_labels_are_recovered_and_noise_scores_the_baseline():
    g = torch.Generator().manual_seed(0)
    n, d, k = 1200, 16, 6
    probs = torch.tensor([0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
    y = torch.multinomial(probs, n, replacement=True, generator=g)
    signal = torch.nn.functional.one_hot(y, k).float() @ torch.randn(k, d, generator=g) * 3
    noisy = signal + torch.randn(n, d, generator=g)
    noise = torch.randn(n, d, generator=g)
    labels = [f"node{int(v)}" for v in y]  # scalar (string) labels, like streets
    half = n // 2
    for feats, check in ((noisy, "signal"), (noise, "noise")):
        res = probe_activations(
            _synthetic(labels[:half], feats[:half], 40), _synthetic(labels[half:], feats[half:], 40)
        )
        row = res.layers.iloc[0]
        majority = max(labels[half:].count(c) for c in set(labels[half:])) / (n - half)
        assert row["baseline"] == pytest.approx(majority)
        assert row["converged"] and row["unseen"] == 0 and res.n_components == 1
        if check == "signal":
            assert row["accuracy"] > 0.98 and row["se"] < 0.02
        else:
            assert abs(row["accuracy"] - majority) < 0.06


def test_joint_component_fit_equals_separate_fits_and_unseen_classes_are_never_predicted():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(300, 8, generator=g)
    y = torch.stack([(x[:, 0] > 0).long(), (x[:, 1] > 0.5).long() + (x[:, 1] > -0.5).long()], dim=1)
    joint = fit_probe(x, y, [2, 3])
    for j, c in enumerate((2, 3)):
        alone = fit_probe(x, y[:, j : j + 1], [c])
        assert torch.equal(joint.predict(x)[:, j], alone.predict(x)[:, 0])
    # component 0 declares 3 classes but training only shows 2: class 2 is never predicted
    masked = fit_probe(x, y, [3, 3])
    assert not (masked.predict(x * 10)[:, 0] == 2).any()
    train = _synthetic([("a", i % 2) for i in range(40)], torch.randn(40, 4, generator=g), 4)
    test = _synthetic([("b", i % 2) for i in range(20)], torch.randn(20, 4, generator=g), 4)
    res = probe_activations(train, test)
    assert res.layers.iloc[0]["unseen"] == 20  # "b" never seen: counted and always wrong
    assert res.per_component.loc[res.per_component["component"] == 0, "accuracy"].item() == 0.0


@pytest.fixture(scope="module")
def city_ckpt(tmp_path_factory, tiny_city, tiny_model_config):
    from interp.models import build_gpt2, load_checkpoint, save_checkpoint

    path = tmp_path_factory.mktemp("probe_ckpt")
    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, path)
    return load_checkpoint(path)


def _n_hooks(bridge):
    """User hooks on hook points (the bridge's own capture hooks are installed once, lazily)."""
    return sum(len(h._forward_pre_hooks) + len(h._forward_hooks) for h in bridge.hook_dict.values())


def test_activations_equal_a_hand_written_run_with_cache(city_ckpt, tiny_city):
    from interp.worlds.encoding import encode_sequences

    bridge = city_ckpt.bridge
    seqs = tiny_city.generate(5, np.random.default_rng(3))
    data = collect_activations(bridge, tiny_city, seqs, layers=[-1, 1], batch_size=2)  # batches with padding
    assert _n_hooks(bridge) == 0
    for i in (0, 4, len(data.labels) - 1):
        s, p = int(data.sequence[i]), int(data.position[i])
        ids = encode_sequences([seqs[s]], tiny_city.vocab)  # alone: no padding at all
        _, cache = bridge.run_with_cache(ids, names_filter=["blocks.0.hook_resid_pre", "blocks.1.hook_resid_post"])
        torch.testing.assert_close(data.layer(-1)[i], cache["blocks.0.hook_resid_pre"][0, p])
        torch.testing.assert_close(data.layer(1)[i], cache["blocks.1.hook_resid_post"][0, p])
    with pytest.raises(ValueError, match="layer 2 was not collected"):
        data.layer(2)


def test_labels_are_the_state_after_p_tokens(tiny_city):
    from interp.metrics.probes import _labelled_positions
    from interp.worlds import parse_world

    c4 = parse_world("connect4:n=2")
    seq_idx, pos, labels, skipped = _labelled_positions(c4, [["0", "0", "3"], ["6"]])
    assert seq_idx.tolist() == [0, 0, 0, 0, 1, 1] and pos.tolist() == [0, 1, 2, 3, 0, 1] and skipped == 0
    assert labels == [
        (0,) * 7,
        (1, 0, 0, 0, 0, 0, 0),
        (2, 0, 0, 0, 0, 0, 0),
        (2, 0, 0, 1, 0, 0, 0),
        (0,) * 7,
        (0, 0, 0, 0, 0, 0, 1),
    ]
    graph, dirs = tiny_city.graph, ("N", "S", "E", "W", "NE", "NW", "SE", "SW")
    d1 = next(d for d in dirs if graph.neighbor("0", d) is not None)
    n1 = graph.neighbor("0", d1)
    d2 = next(d for d in dirs if graph.neighbor(n1, d) is not None)
    n2 = graph.neighbor(n1, d2)
    route = ["0", n2, d1, d2, "end"]  # <bos> 0 n2 d1 d2 end: 6 positions, first and last unlabelled
    seq_idx, pos, labels, skipped = _labelled_positions(tiny_city, [route])
    assert pos.tolist() == [1, 2, 3, 4] and labels == ["0", "0", n1, n2] and skipped == 2


def test_end_to_end_on_the_tiny_city(city_ckpt, tiny_city, tmp_path):
    from interp.worlds.split import split_sequences

    train, test = split_sequences(tiny_city, tiny_city.generate(120, np.random.default_rng(0)), 0.3, 0)
    res = probe_layers(city_ckpt.bridge, tiny_city, train, test)
    n_layers = city_ckpt.bridge.cfg.n_layers
    assert res.layers["index"].tolist() == list(range(-1, n_layers + 1))
    assert res.layers["layer"].tolist()[0] == "embed" and res.layers["layer"].tolist()[-1] == "final"
    assert res.layers["accuracy"].between(0, 1).all() and (res.layers["se"] > 0).all()
    nodes = [tiny_city.state_label(q) for s in test for q in tiny_city.states_along(s)]
    labelled = [x for x in nodes if x is not None]
    majority = max(labelled.count(x) for x in set(labelled)) / len(labelled)
    assert res.layers["baseline"].tolist() == pytest.approx([majority] * (n_layers + 2))
    assert (res.layers["n_test"] == len(labelled)).all()
    assert res.skipped_test == 2 * len(test) and res.test_in_train == 0  # <bos> and after `end`
    assert res.best_layer in res.layers["index"].tolist()
    summary = res.summary()
    assert summary["probe_last_layer"] == n_layers and len(summary["per_layer"]) == n_layers + 2
    res.save(tmp_path)
    assert json.loads((tmp_path / "probe.json").read_text())["probe_best_layer"] == res.best_layer
    assert (tmp_path / "probe_layers.csv").read_text().startswith("layer,index,accuracy,se,baseline")
    assert "embed" in str(res)


def test_final_layer_is_hf_last_hidden_state(city_ckpt, tiny_city):
    # the reference probes HF's hidden_states[-1] (after the final LayerNorm): layer n_layers here
    from interp.worlds.encoding import encode_sequences

    seqs = tiny_city.generate(6, np.random.default_rng(3))
    n_layers = int(city_ckpt.bridge.cfg.n_layers)
    data = collect_activations(city_ckpt.bridge, tiny_city, seqs, layers=[n_layers - 2, n_layers - 1, n_layers])
    hf = city_ckpt.bridge.original_model
    rows = []
    with torch.no_grad():
        for i, s in enumerate(seqs):
            hidden = hf(encode_sequences([s], tiny_city.vocab), output_hidden_states=True).hidden_states
            rows.append((hidden[-1][0], hidden[-2][0], i))
    final, before = [], []
    for i, p in zip(data.sequence, data.position):
        final.append(rows[i][0][p])
        before.append(rows[i][1][p])
    assert torch.allclose(data.layer(n_layers), torch.stack(final), atol=1e-5)
    # HF's hidden_states[-2] is the output of the second-to-last block (the last block's output is
    # only seen through ln_f), and the final LayerNorm changes the last block's output
    assert torch.allclose(data.layer(n_layers - 2), torch.stack(before), atol=1e-5)
    assert not torch.allclose(data.layer(n_layers), data.layer(n_layers - 1), atol=1e-3)


def test_tuple_labels_give_per_component_accuracies():
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    from interp.worlds import parse_world

    c4 = parse_world("connect4:n=2")
    seqs = c4.generate(60, np.random.default_rng(0))
    # any bridge works: here a native (non-HF) one with 3 layers, booted in training mode
    cfg = TransformerBridgeConfig(
        n_layers=3,
        d_model=24,
        n_heads=2,
        d_head=12,
        d_mlp=48,
        n_ctx=32,
        d_vocab=len(c4.vocab),
        act_fn="gelu",
        normalization_type="LN",
        seed=0,
    )
    bridge = TransformerBridge.boot_native(cfg)
    res = probe_layers(bridge, c4, seqs[:40], seqs[40:], layers=[2, -1])
    assert bridge.training  # restored after the eval-mode forwards
    assert res.n_components == 7 and res.layers["index"].tolist() == [-1, 2]
    comp = res.per_component
    assert len(comp) == 2 * 7 and set(comp["classes"]) <= {1, 2, 3}
    for layer, group in comp.groupby("index"):
        row = res.layers.set_index("index").loc[layer]
        assert row["accuracy"] == pytest.approx(group["accuracy"].mean())
        assert row["baseline"] == pytest.approx(group["baseline"].mean())
        assert row["all_correct"] <= group["accuracy"].min() + 1e-9


def test_bad_layers_and_options_are_clear_errors(capsys):
    from interp.cli import build_parser

    msg = r"layer 3 is out of range: this model has 2 layers, so probe layers are -1 \(embeddings\) … 1"
    with pytest.raises(ValueError, match=msg):
        check_layers([0, 3], 2)
    assert check_layers([2], 2) == [2]  # the final LayerNorm's output
    with pytest.raises(ValueError, match="layer -2 is out of range"):
        check_layers([-2], 2)
    assert check_layers([1, -1, 1], 2) == [-1, 1]
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["probe", "--model", "x", "--layerz", "1"])
    assert e.value.code == 2 and "unrecognized arguments: --layerz" in capsys.readouterr().err
    assert build_parser().parse_args(["probe", "--model", "x", "--layers", "-1", "0"]).layers == [-1, 0]


def test_cli_probe_prints_json_last(city_ckpt):
    args = [
        sys.executable,
        "-m",
        "interp.cli",
        "probe",
        "--model",
        str(city_ckpt.path),
        "--train-sequences",
        "40",
        "--test-sequences",
        "20",
        "--seed",
        "1",
    ]
    out = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(summary["per_layer"]) == 4 and 0 <= summary["probe_last_accuracy"] <= 1
    assert "block 1" in out.stdout and "note: no train.txt/test.txt" in out.stderr


def test_cli_rejects_a_bad_layer_before_any_work(city_ckpt, capsys):
    from interp.cli import main

    assert main(["probe", "--model", str(city_ckpt.path), "--layers", "5", "-1"]) == 2
    assert "interp probe: error: layer 5 is out of range: this model has 2 layers" in capsys.readouterr().err
