"""Every hooked forward goes through interp.hooks, and leaves the model's hooks as it found them.

Two halves: a scan of the source (no ``bridge.hooks(`` / ``run_with_hooks(`` /
``register_forward_hook`` outside ``interp/hooks``), and the behaviour it protects — a user's own
hooks survive every interp call and still fire; after an error no hook added by interp remains;
the hooks added are the hooks removed (counted on every hook point and module of the bridge)."""

from __future__ import annotations

import ast

import pytest
import torch
from conftest import REPO, save_gpt2_and_llama, warm_bridges

from interp.analysis.engines.direct_patching import resid_cache
from interp.analysis.engines.scoring import token_loss
from interp.analysis.engines.sweeps import mlp_removal_sweep
from interp.hooks import capturing, hooked, intervene, module_hooks, patch, zero

#: methods that add a hook (TransformerLens or PyTorch); ``.hooks(`` is checked separately
HOOKING_CALLS = frozenset(
    {
        "run_with_hooks",
        "add_hook",
        "add_perma_hook",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_backward_hook",
    }
)
#: (file, method) pairs allowed outside interp/hooks, each with the reason it cannot move there
ALLOWED = {
    ("interp/models/lm.py", "register_forward_pre_hook"): (
        "the KV-cache shim renames transformers 5's cache= argument for TransformerLens's attention "
        "bridge: part of the model's own forward (room models, below hooks), not an analysis hook"
    ),
}


def _hooking_calls(path) -> list[tuple[int, str]]:
    """(line, method) of every call in ``path`` that adds a hook outside the one door."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr = node.func.attr
        if attr in HOOKING_CALLS:
            found.append((node.lineno, attr))
        elif attr == "hooks":
            receiver = ast.unparse(node.func.value)
            if receiver.split(".")[-1] in ("bridge", "model") or {k.arg for k in node.keywords} & {
                "fwd_hooks",
                "bwd_hooks",
            }:
                found.append((node.lineno, attr))
    return sorted(found)


def test_every_hooked_forward_goes_through_interp_hooks():
    bad, used = [], set()
    for path in sorted((REPO / "interp").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel.startswith("interp/hooks/"):
            continue
        for line, attr in _hooking_calls(path):
            if (rel, attr) in ALLOWED:
                used.add((rel, attr))
            else:
                bad.append(f"{rel}:{line}: .{attr}(")
    assert not bad, (
        "hooked forwards outside interp/hooks (use interp.hooks.hooked / module_hooks / intervene, "
        "which remove exactly their own hooks, also on error):\n" + "\n".join(bad)
    )
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {sorted(set(ALLOWED) - used)}"


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scanner is not blind: each forbidden spelling is found, docstrings and other
    ``.hooks(`` methods are not."""
    src = tmp_path / "m.py"
    src.write_text(
        '"""bridge.hooks(fwd_hooks=...) in a docstring is fine."""\n'
        "with bridge.hooks(fwd_hooks=[]):\n    pass\n"
        "with self.bridge.hooks([]):\n    pass\n"
        "x.hooks(fwd_hooks=h)\n"
        "bridge.run_with_hooks(ids, fwd_hooks=h)\n"
        "m.register_forward_hook(f)\n"
        "m.register_forward_pre_hook(f, with_kwargs=True)\n"
        "self._collector.hooks(model_, layers)\n"
    )
    assert _hooking_calls(src) == [
        (2, "hooks"),
        (4, "hooks"),
        (6, "hooks"),
        (7, "run_with_hooks"),
        (8, "register_forward_hook"),
        (9, "register_forward_pre_hook"),
    ]


# ---- behaviour ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bridges(tmp_path_factory, tiny_city, tiny_model_config):
    return warm_bridges(save_gpt2_and_llama(tmp_path_factory.mktemp("discipline"), tiny_city, tiny_model_config))


@pytest.fixture(scope="module")
def ids(tiny_city):
    gen = torch.Generator().manual_seed(0)
    return torch.randint(5, len(tiny_city.vocab), (4, 6), generator=gen)


def _handles(bridge) -> int:
    """Every hook on the bridge, each counted once: TransformerLens handles on each hook point,
    PyTorch hooks on every other module (a hook point carries its handles' PyTorch hooks too:
    those must match the handles)."""
    points = {id(hp): hp for hp in bridge.hook_dict.values()}.values()
    lens = sum(len(hp.fwd_hooks) + len(hp.bwd_hooks) for hp in points)
    inner = sum(len(hp._forward_hooks) + len(hp._backward_hooks) for hp in points)
    assert inner == lens, f"{inner} PyTorch hooks on hook points for {lens} TransformerLens handles"
    ids = {id(hp) for hp in points}
    torch_hooks = sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        for m in bridge.modules()
        if id(m) not in ids
    )
    return lens + torch_hooks


def _interp_calls(bridge, ids):
    """A few interp calls that hook the bridge: an intervention, a patch, a capture, three sweeps."""
    with torch.no_grad(), intervene(bridge, [zero("mlp_out:1")]):
        bridge(ids)
    with torch.no_grad(), intervene(bridge, [patch("resid_pre:1", "clean")], sources={"clean": ids.flip(0)}):
        bridge(ids)
    got: dict = {}
    with torch.no_grad(), hooked(bridge, capturing(got, ["blocks.0.hook_mlp_out"])):
        bridge(ids)
    resid_cache(bridge, ids, [0, 1])
    for ablation in ("zero", "mean", "resample"):
        mlp_removal_sweep(bridge, ids, token_loss, ablation=ablation, batch_size=2)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_users_hooks_survive_every_interp_call_and_still_fire(bridges, ids, arch):
    bridge = bridges[arch]
    fired = {"lens": 0, "torch": 0}

    def lens_hook(act, hook):
        fired["lens"] += 1

    def torch_hook(module, args, output):
        fired["torch"] += 1

    before = _handles(bridge)
    bridge.add_hook("blocks.0.hook_mlp_out", lens_hook)
    handle = bridge.blocks[1].register_forward_hook(torch_hook)
    try:
        with_user = _handles(bridge)
        assert with_user == before + 2
        _interp_calls(bridge, ids)
        assert _handles(bridge) == with_user
        fired.update(lens=0, torch=0)
        with torch.no_grad():
            bridge(ids)
        assert fired == {"lens": 1, "torch": 1}
    finally:
        handle.remove()
        bridge.reset_hooks()
    assert _handles(bridge) == before


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hooks_added_are_the_hooks_removed_also_on_error(bridges, ids, arch):
    bridge = bridges[arch]
    before = _handles(bridge)
    noop = [("blocks.0.hook_mlp_out", lambda a, hook: None), ("blocks.1.hook_resid_pre", lambda a, hook: None)]
    with hooked(bridge, noop):
        assert _handles(bridge) == before + 2
    assert _handles(bridge) == before
    with pytest.raises(RuntimeError, match="boom"), hooked(bridge, noop):
        bridge(ids)
        raise RuntimeError("boom")
    assert _handles(bridge) == before

    def raising(act, hook):
        raise RuntimeError("inside the hook")

    with pytest.raises(RuntimeError, match="inside the hook"), hooked(bridge, [("blocks.1.hook_mlp_out", raising)]):
        bridge(ids)
    assert _handles(bridge) == before
    # a bad name after a good one: the good one was added, and is removed
    with (
        pytest.raises((KeyError, AttributeError, ValueError)),
        hooked(bridge, [*noop, ("blocks.9.no_such", noop[0][1])]),
    ):
        pass
    assert _handles(bridge) == before
    # PyTorch hooks on modules: the same rules
    with pytest.raises(RuntimeError, match="boom"), module_hooks([(b, lambda m, i, o: None) for b in bridge.blocks]):
        assert _handles(bridge) == before + len(bridge.blocks)
        raise RuntimeError("boom")
    assert _handles(bridge) == before
    # an interp call that fails inside its forward leaves nothing either
    with pytest.raises(ValueError), intervene(bridge, [zero("mlp_out:1", positions=[40])]):
        bridge(ids)
    assert _handles(bridge) == before
