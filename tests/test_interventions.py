"""Interventions: sites and hook names, every kind changes what it should (and scale(1) nothing),
patching oracles, alignments, no leaked hooks, serialisation, GPT-2 and Llama bridges, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO, save_gpt2_and_llama, warm_bridges

from interp.hooks import (
    COMPONENTS,
    Alignment,
    HookNames,
    Intervention,
    InterventionError,
    Site,
    SiteError,
    Source,
    canonical_name,
    check_site,
    compile_interventions,
    from_json,
    hook_alias,
    intervene,
    mean,
    parse_site,
    patch,
    resample,
    scale,
    to_json,
    zero,
)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny_city, tiny_model_config):
    return save_gpt2_and_llama(tmp_path_factory.mktemp("interventions"), tiny_city, tiny_model_config)


@pytest.fixture(scope="module")
def bridges(checkpoints):
    return warm_bridges(checkpoints)


@pytest.fixture(scope="module")
def ids(tiny_city):
    gen = torch.Generator().manual_seed(0)
    return torch.randint(5, len(tiny_city.vocab), (3, 7), generator=gen)


@pytest.fixture(scope="module")
def other(tiny_city):
    gen = torch.Generator().manual_seed(1)
    return torch.randint(5, len(tiny_city.vocab), (4, 7), generator=gen)


def _run(bridge, ids, interventions=(), **kw):
    with torch.no_grad(), intervene(bridge, list(interventions), **kw) as active:
        out = bridge(ids)
    return out, active


def _recorded(bridge, ids, interventions, site_name, **kw):
    """The activation at ``site_name`` as the rest of the network sees it (after the edit)."""
    got = {}

    def rec(t, hook):
        got["t"] = t.detach().clone()

    with torch.no_grad(), intervene(bridge, interventions, **kw), bridge.hooks(fwd_hooks=[(site_name, rec)]):
        bridge(ids)
    return got["t"]


def _n_hooks(bridge) -> int:
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    return sum(
        len(hp._forward_hooks)
        + len(hp._forward_pre_hooks)
        + len(hp._backward_hooks)
        + len(hp.fwd_hooks)
        + len(hp.bwd_hooks)
        for hp in points
    )


# ---- sites and names ------------------------------------------------------------------------------


def test_parse_site_and_hook_names():
    assert parse_site("mlp_out:3") == Site(3, "mlp_out")
    assert parse_site("mlp_out:3").hook_name == "blocks.3.hook_mlp_out"
    assert parse_site("resid_pre:0").hook_name == "blocks.0.hook_resid_pre"
    z = parse_site("z:2.1")
    assert (z.layer, z.component, z.head, z.hook_name) == (2, "z", 1, "blocks.2.attn.hook_z")
    assert parse_site("pattern:1").hook_name == "blocks.1.attn.hook_pattern"
    for text in ("mlp_out:3", "z:2.1", "pattern:0", "resid_mid:4"):
        assert str(parse_site(text)) == text
    for bad, match in (
        ("mlp:3", "unknown component"),
        ("mlp_out", "cannot parse"),
        ("z:1.x", "cannot parse"),
        ("mlp_out:1.0", "has no heads"),
        ("mlp_out:-1", "cannot parse"),
    ):
        with pytest.raises(SiteError, match=match):
            parse_site(bad)


def test_site_validation_against_the_model(bridge):
    check_site(Site(1, "mlp_out"), bridge)
    with pytest.raises(SiteError, match=r"layer 2 is out of range; this model has 2 layers \(0\.\.1\)"):
        check_site(parse_site("mlp_out:2"), bridge)
    with pytest.raises(SiteError, match=r"head 5 is out of range.*2 heads"):
        check_site(parse_site("z:0.5"), bridge)
    with pytest.raises(SiteError, match="out of range"):  # intervene checks before registering anything
        with intervene(bridge, [zero("attn_out:7")]):
            pass


def test_missing_or_refused_hooks_are_clear_errors():
    """A bridge without a hook (or whose driver refuses it) names the site and what it has."""
    hp = SimpleNamespace(name="blocks.0.mlp.hook_out")
    stub = SimpleNamespace(
        cfg=SimpleNamespace(n_layers=1, n_heads=2, architecture="Stub"),
        hook_dict={"blocks.0.hook_mlp_out": hp, "blocks.0.mlp.hook_out": hp},
    )
    with pytest.raises(SiteError, match=r"exposes no hook 'blocks.0.attn.hook_z'.*sites it has at layer 0: mlp_out"):
        check_site(parse_site("z:0.1"), stub)

    class Refusing:
        def __enter__(self):
            raise NotImplementedError("this backend cannot fire it")

        def __exit__(self, *exc):
            return False

    stub.hooks = lambda fwd_hooks: Refusing()
    with pytest.raises(SiteError, match="unavailable on this bridge.*cannot fire"):
        check_site(parse_site("mlp_out:0"), stub)


def test_aliases_and_canonical_names(bridge):
    """Inside a hook ``hook.name`` is canonical; HookNames maps it back to the alias we registered."""
    assert canonical_name(bridge, "blocks.1.hook_mlp_out") == "blocks.1.mlp.hook_out"
    assert hook_alias(bridge, "blocks.1.mlp.hook_out") == "blocks.1.hook_mlp_out"
    assert hook_alias(bridge, "blocks.1.hook_mlp_out") == "blocks.1.hook_mlp_out"
    names = HookNames(bridge)
    seen = {}

    def rec(alias):
        def fn(t, hook):
            seen[alias] = hook.name

        return fn

    aliases = [tpl.format(layer=1) for tpl in COMPONENTS.values()]
    with torch.no_grad(), bridge.hooks(fwd_hooks=[(a, rec(a)) for a in aliases]):
        bridge(torch.tensor([[1, 5, 6]]))
    assert set(seen) == set(aliases)  # every component fires on this bridge
    for alias, reported in seen.items():
        assert reported == names.canonical(alias) and names.alias(reported) == alias
    assert seen["blocks.1.hook_resid_mid"] == "blocks.1.ln2.hook_in"  # the quirk sites.py explains


# ---- kinds ----------------------------------------------------------------------------------------


def test_zero_mlp_equals_a_hand_written_hook(bridge, ids):
    clean = bridge(ids)
    ablated, active = _run(bridge, ids, [zero("mlp_out:1")])
    hand = bridge.run_with_hooks(ids, fwd_hooks=[("blocks.1.hook_mlp_out", lambda t, hook: torch.zeros_like(t))])
    torch.testing.assert_close(ablated, hand)
    assert not torch.allclose(ablated, clean, atol=1e-3)
    assert active.calls == [1]


SITES = [
    "resid_pre:1",
    "resid_mid:1",
    "resid_post:0",
    "attn_out:0",
    "mlp_out:0",
    "z:1.1",
    "z:0",
    "pattern:1.0",
    "pattern:0",
]


def _every_kind():
    for site in SITES:
        yield zero(site)
        yield scale(site, 3.0 if not site.startswith("pattern") else 0.5)
        if not site.startswith("pattern"):
            yield mean(site, "ref")
        yield resample(site, "ref", seed=3)
        yield patch(site, "ref1")
        yield patch(site, "ref1", positions="last")
        yield zero(site, positions=[1, -2])


def test_every_kind_changes_the_output_and_scale_one_nothing(bridge, ids, other):
    """A silent no-op hook is a known failure mode: every intervention must move the logits."""
    clean = bridge(ids)
    sources = {"ref": other, "ref1": other[:1]}
    unchanged = []
    for iv in _every_kind():
        out, active = _run(bridge, ids, [iv], sources=sources)
        assert active.calls == [1], iv.describe()
        if torch.allclose(out, clean, atol=1e-4):
            unchanged.append(iv.describe())
    assert not unchanged, f"interventions that changed nothing: {unchanged}"
    for site in SITES:
        out, _ = _run(bridge, ids, [scale(site, 1.0)])
        torch.testing.assert_close(out, clean, msg=f"scale(1.0) changed the output at {site}")


def test_patching_a_run_with_its_own_activations_returns_its_logits(bridge, ids):
    clean, cache = bridge.run_with_cache(ids)
    for site in SITES:
        out, _ = _run(bridge, ids, [patch(site, "self")], sources={"self": ids})
        torch.testing.assert_close(out, clean, msg=f"self-patch at {site}")
    out, _ = _run(bridge, ids, [patch(s, "cache") for s in SITES], sources={"cache": cache})  # an ActivationCache
    torch.testing.assert_close(out, clean)


def test_resid_mid_edits_the_residual_stream(bridge, ids):
    """Zeroing resid_mid leaves resid_post = mlp_out (the skip carries the edit). A raw hook on the
    bridge's hook_resid_mid (an alias of ln2.hook_in) only edits the MLP input."""
    got = {}

    def rec(name):
        def fn(t, hook):
            got[name] = t.detach().clone()

        return fn

    recs = [(n, rec(n)) for n in ("blocks.1.hook_resid_mid", "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post")]
    with torch.no_grad(), intervene(bridge, [zero("resid_mid:1")]), bridge.hooks(fwd_hooks=recs):
        bridge(ids)
    assert torch.all(got["blocks.1.hook_resid_mid"] == 0)
    torch.testing.assert_close(got["blocks.1.hook_resid_post"], got["blocks.1.hook_mlp_out"])
    _, cache = bridge.run_with_cache(ids)
    with (
        torch.no_grad(),
        bridge.hooks(fwd_hooks=[("blocks.1.hook_resid_mid", lambda t, hook: torch.zeros_like(t))] + recs[1:]),
    ):
        bridge(ids)
    # canary for TL 4.3's semantics: if this starts failing, the bridge fixed resid_mid upstream
    torch.testing.assert_close(
        got["blocks.1.hook_resid_post"], cache["blocks.1.hook_resid_mid"] + got["blocks.1.hook_mlp_out"]
    )


# ---- positions ------------------------------------------------------------------------------------


def test_patch_and_resample_with_an_alignment_move_the_right_positions(bridge, ids, other):
    name = "blocks.1.hook_resid_pre"
    _, clean = bridge.run_with_cache(ids)
    src = other[:, :5]  # a shorter source: only an alignment (or explicit positions) can map it
    _, src_cache = bridge.run_with_cache(src)
    c, s = clean[name], src_cache[name]
    align = Alignment(((1, 2), (4, 0), (6, 4)))
    got = _recorded(bridge, ids, [patch("resid_pre:1", "src", positions=align)], name, sources={"src": src[:3]})
    for d, sp in align.pairs:
        torch.testing.assert_close(got[:, d], s[:3, sp])
    untouched = [p for p in range(ids.shape[1]) if p not in (1, 4, 6)]
    torch.testing.assert_close(got[:, untouched], c[:, untouched])
    with pytest.raises(InterventionError, match="source has 5 positions, the run 7"):
        _recorded(bridge, ids, [patch("resid_pre:1", "src")], name, sources={"src": src[:3]})

    # resample: each row takes one row of the source set, the same for every aligned position
    a = _recorded(bridge, ids, [resample("resid_pre:1", "src", positions=align, seed=7)], name, sources={"src": src})
    b = _recorded(bridge, ids, [resample("resid_pre:1", "src", positions=align, seed=7)], name, sources={"src": src})
    torch.testing.assert_close(a, b)  # seeded
    for row in range(ids.shape[0]):
        matches = [r for r in range(src.shape[0]) if all(torch.allclose(a[row, d], s[r, sp]) for d, sp in align.pairs)]
        assert matches, f"row {row} took no source row"
    torch.testing.assert_close(a[:, untouched], c[:, untouched])


def test_head_and_last_positions(bridge, ids, other):
    """z:1.0 at positions [2] changes head 0 at position 2 only; 'last' follows the attention mask."""
    name = "blocks.1.attn.hook_z"
    _, clean = bridge.run_with_cache(ids)
    c = clean[name]
    got = _recorded(bridge, ids, [zero("z:1.0", positions=[2])], name)
    assert torch.all(got[:, 2, 0] == 0)
    keep = torch.ones_like(got, dtype=torch.bool)
    keep[:, 2, 0] = False
    torch.testing.assert_close(got[keep], c[keep])

    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1]])
    got = _recorded(bridge, ids, [zero("z:1", positions="last")], name, attention_mask=mask)
    for row, last in enumerate([6, 3, 6]):
        assert torch.all(got[row, last] == 0)
        others = [p for p in range(7) if p != last]
        torch.testing.assert_close(got[row, others], c[row, others])
    with pytest.raises(InterventionError, match="attention mask is"):
        _recorded(bridge, ids, [zero("z:1", positions="last")], name, attention_mask=mask[:, :5])


def test_mean_ablation_uses_the_reference_mean(bridge, ids, other):
    name = "blocks.0.hook_mlp_out"
    mask = torch.ones_like(other)
    mask[0, 5:] = 0
    got = _recorded(
        bridge, ids, [mean("mlp_out:0", "ref")], name, sources={"ref": Source(tokens=other, attention_mask=mask)}
    )
    # the source ran with its mask (and positions), so compare against a masked run of the reference
    _, ref_masked = bridge.run_with_cache(other, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0))
    want = (ref_masked[name] * mask[..., None]).sum((0, 1)) / mask.sum()
    torch.testing.assert_close(got, want.expand_as(got))


# ---- hooks never leak -----------------------------------------------------------------------------


def test_no_hooks_remain_after_the_block_or_an_exception(bridge, ids):
    before = _n_hooks(bridge)
    module_hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in bridge.modules())
    ivs = [zero("mlp_out:1"), zero("resid_mid:0"), scale("z:1.0", 2.0)]
    with intervene(bridge, ivs):
        assert _n_hooks(bridge) > before
        bridge(ids)
    assert _n_hooks(bridge) == before
    with pytest.raises(RuntimeError, match="boom"):
        with intervene(bridge, ivs):
            bridge(ids)
            raise RuntimeError("boom")
    assert _n_hooks(bridge) == before
    with pytest.raises(InterventionError, match="out of range"):  # an error raised inside a hook
        with intervene(bridge, [zero("mlp_out:1", positions=[40])]):
            bridge(ids)
    assert _n_hooks(bridge) == before
    with pytest.raises(InterventionError, match="no source named"):  # fails before registering
        with intervene(bridge, [zero("mlp_out:1"), patch("mlp_out:0", "missing")]):
            pass
    assert _n_hooks(bridge) == before
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in bridge.modules()) == module_hooks


def test_compile_gives_hook_tuples_for_run_with_hooks(bridge, ids):
    hooks = compile_interventions([zero("mlp_out:1"), zero("resid_mid:0")], bridge)
    assert [n for n, _ in hooks] == ["blocks.1.hook_mlp_out", "blocks.0.hook_resid_pre", "blocks.0.hook_attn_out"]
    out = bridge.run_with_hooks(ids, fwd_hooks=hooks)
    ablated, _ = _run(bridge, ids, [zero("mlp_out:1"), zero("resid_mid:0")])
    torch.testing.assert_close(out, ablated)


def test_edits_keep_gradients(bridge, ids):
    """The hooks are differentiable (a training penalty can run under them)."""
    w = next(p for p in bridge.blocks[0].mlp.parameters() if p.dim() == 2)
    with intervene(
        bridge,
        [scale("mlp_out:0", 0.5, positions=[1, 2]), patch("resid_mid:1", "self", positions=[0])],
        sources={"self": ids},
    ):
        bridge(ids).logsumexp(-1).sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0
    bridge.zero_grad(set_to_none=True)


# ---- serialisation --------------------------------------------------------------------------------


def test_serialisation_round_trip():
    ivs = [
        zero("mlp_out:3"),
        scale("attn_out:0", 0.5, positions="last"),
        mean("z:2.1", "ref", positions=[0, -1]),
        resample("resid_pre:1", "others", seed=4),
        patch("pattern:1.0", "clean"),
        patch("resid_pre:2", "altered", positions=Alignment(((0, 0), (3, 5)))),
    ]
    text = to_json(ivs)
    assert from_json(text) == ivs
    assert json.loads(text)[5] == {
        "site": "resid_pre:2",
        "kind": "patch",
        "positions": {"align": [[0, 0], [3, 5]]},
        "source": "altered",
    }
    assert Intervention.from_dict({"site": "mlp_out:1"}) == zero("mlp_out:1")
    assert hash(ivs[5]) == hash(from_json(text)[5])  # frozen and hashable
    assert Alignment.matching("a b c d".split(), "a x c d e".split()).pairs == ((0, 0), (2, 2), (3, 3))
    # a substitution next to a repeated token pairs positions with themselves (difflib alone shifts them)
    assert Alignment.matching("2 12 W W E E".split(), "2 12 W W N E".split()).pairs == (
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
        (5, 5),
    )
    assert Alignment.matching("a b a".split(), "a a".split()).pairs == ((0, 0), (2, 1))  # an insertion/deletion
    for bad, match in (
        (lambda: Intervention(Site(0, "mlp_out"), "scale"), "finite factor"),
        (lambda: Intervention(Site(0, "mlp_out"), "patch"), "needs the name of its source"),
        (lambda: Intervention(Site(0, "mlp_out"), "blur"), "unknown intervention kind"),
        (lambda: Intervention(Site(0, "mlp_out"), "zero", Alignment(((0, 1),))), "no source positions"),
        (lambda: mean("pattern:0", "ref"), "not defined"),
        (lambda: zero("mlp_out:0", positions="first"), "positions must be"),
        (lambda: zero("mlp_out:0", positions=[1, 1]), "repeated"),
        (lambda: Intervention.from_dict({"site": "mlp_out:1", "layer": 3}), "unknown intervention keys"),
    ):
        with pytest.raises(InterventionError, match=match):
            bad()


# ---- metrics under interventions ------------------------------------------------------------------


def test_cached_extension_runs_under_the_intervention(bridges, tiny_city):
    """BridgeLM's KV-cached steps see the hooks: extension equals the ablated full forward."""
    from interp.models.lm import BridgeLM
    from interp.worlds.encoding import encode_sequences

    bridge = bridges["gpt2"]
    lm = BridgeLM(bridge, tiny_city.vocab)
    prefix = ["0", "1"]
    with intervene(lm, [zero("mlp_out:1"), zero("resid_mid:0")]) as active:
        cached = lm.extend(lm.start([prefix]), [0], ["N"]).logprobs
    assert active.calls == [2, 2]  # start + one cached step
    full_ids = encode_sequences([prefix + ["N"]], tiny_city.vocab)
    with torch.no_grad():
        full = bridge.run_with_hooks(
            full_ids, fwd_hooks=compile_interventions([zero("mlp_out:1"), zero("resid_mid:0")], bridge)
        )
    torch.testing.assert_close(cached[0], torch.log_softmax(full[0, -1], -1), atol=1e-5, rtol=1e-5)


def test_cli_metrics_and_next_token_report_the_ablation(checkpoints, capsys):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "interp.cli",
            "metrics",
            "--model",
            str(checkpoints["gpt2"]),
            "--ablate",
            "mlp_out:1",
            "--pairs",
            "3",
            "--depth",
            "2",
            "--json",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "intervention active: zero mlp_out:1 at all positions" in out.stderr
    s = json.loads(out.stdout.strip().splitlines()[-1])
    (iv,) = s["interventions"]
    assert iv["site"] == "mlp_out:1" and iv["kind"] == "zero" and iv["calls"] > 0
    assert "compression_precision" in s

    from interp.cli import main

    assert (
        main(
            [
                "next-token",
                "--model",
                str(checkpoints["llama"]),
                "--n",
                "8",
                "--json",
                "--ablate",
                "mlp_out:0",
                "--ablate",
                "z:1.1",
            ]
        )
        == 0
    )
    s = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(i["site"], i["calls"] > 0) for i in s["interventions"]] == [("mlp_out:0", True), ("z:1.1", True)]
    assert main(["metrics", "--model", str(checkpoints["gpt2"]), "--ablate", "mlp_out:9", "--pairs", "2"]) == 2
    assert "layer 9 is out of range" in capsys.readouterr().err
    assert main(["metrics", "--model", "oracle", "--world", "connect4:n=2", "--ablate", "mlp_out:0"]) == 2
    assert "needs a checkpoint model" in capsys.readouterr().err


def test_mean_over_first_and_later_positions_left_or_right_padded(bridge, ids, other):
    """``over="first/later"``: the first real token of each run row takes the reference rows'
    first-token mean, every later position the mean of their later non-padding positions (hand
    loops); a left-padded reference gives the same means as the right-padded one."""
    name = "blocks.0.hook_mlp_out"
    lengths = [7, 5, 3, 6]
    right = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).long()
    left = torch.stack([r.roll(7 - n) for r, n in zip(right, lengths)])
    left_other = torch.stack([o.roll(7 - n) for o, n in zip(other, lengths)])
    _, cache = bridge.run_with_cache(other, attention_mask=right, position_ids=(right.cumsum(1) - 1).clamp(min=0))
    acts = cache[name]
    first = torch.stack([acts[i, 0] for i in range(4)]).mean(0)
    later = torch.stack([acts[i, t] for i in range(4) for t in range(1, lengths[i])]).mean(0)
    run_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
    for ref in (Source(tokens=other, attention_mask=right), Source(tokens=left_other, attention_mask=left)):
        iv = mean("mlp_out:0", "ref", over="first/later")
        got = _recorded(bridge, ids, [iv], name, sources={"ref": ref}, attention_mask=run_mask)
        for row, start in enumerate([0, 2, 0]):
            torch.testing.assert_close(got[row, start], first, rtol=1e-4, atol=1e-5)
            for t in [t for t in range(7) if t != start]:
                torch.testing.assert_close(got[row, t], later, rtol=1e-4, atol=1e-5)
    assert Intervention.from_dict(iv.to_dict()) == iv and iv.to_dict()["over"] == "first/later"
    assert from_json(to_json([iv])) == [iv]
    with pytest.raises(
        InterventionError, match=r"unknown mean pooling over='rows'; expected one of positions, first/later"
    ):
        mean("mlp_out:0", "ref", over="rows")
    with pytest.raises(InterventionError, match="pooling of mean, not of zero"):
        Intervention(parse_site("mlp_out:0"), "zero", over="first/later")
    with pytest.raises(InterventionError, match=r"unknown intervention kind 'median'; expected one of zero, mean"):
        Intervention.from_dict({"site": "mlp_out:0", "kind": "median"})
