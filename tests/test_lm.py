"""The LM view: cached extension equals full forwards; DFA-backed LMs follow their DFA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.models import build_gpt2, load_checkpoint, save_checkpoint
from interp.models.lm import DFALM, BridgeLM, UniformLM, WorldLM
from interp.train import encode_sequences


@pytest.fixture(scope="module")
def bridge_lm(tmp_path_factory, tiny_city, tiny_model_config):
    path = tmp_path_factory.mktemp("ckpt")
    save_checkpoint(build_gpt2(tiny_city.vocab, tiny_model_config), tiny_city, path)
    ckpt = load_checkpoint(path)
    return BridgeLM(ckpt.bridge, tiny_city.vocab)


def _full_logprobs(lm, prefixes):
    """Reference: one plain forward per prefix, no cache, no padding."""
    out = []
    for p in prefixes:
        ids = encode_sequences([p], lm.vocab)
        with torch.no_grad():
            out.append(torch.log_softmax(lm.bridge(ids)[0, -1], dim=-1))
    return torch.stack(out)


def test_start_with_unequal_prefixes_equals_separate_forwards(bridge_lm, tiny_city):
    seqs = tiny_city.generate(6, np.random.default_rng(0))
    prefixes = [s[: 2 + i] for i, s in enumerate(seqs)]
    torch.testing.assert_close(bridge_lm.start(prefixes).logprobs, _full_logprobs(bridge_lm, prefixes),
                               atol=1e-5, rtol=1e-5)


def test_tree_extension_equals_full_forwards(bridge_lm, tiny_city):
    seqs = tiny_city.generate(3, np.random.default_rng(1))
    prefixes = [s[:3] for s in seqs[:2]] + [seqs[2][:5]]
    cur = bridge_lm.start(prefixes)
    rows = [list(p) for p in prefixes]
    rng = np.random.default_rng(0)
    for _ in range(3):  # three levels, with branching and dropped rows
        parents = sorted(rng.choice(len(rows), size=4).tolist())
        toks = [str(t) for t in rng.choice(["N", "S", "E", "W"], size=4)]
        cur = bridge_lm.extend(cur, parents, toks)
        rows = [rows[p] + [t] for p, t in zip(parents, toks)]
        torch.testing.assert_close(cur.logprobs, _full_logprobs(bridge_lm, rows), atol=1e-5, rtol=1e-5)


def test_a_cursor_is_consumed_by_extend(bridge_lm):
    cur = bridge_lm.start([["0", "1"]])
    bridge_lm.extend(cur, [0], ["N"])
    with pytest.raises(RuntimeError, match="already extended"):
        bridge_lm.extend(cur, [0], ["S"])


def test_hooks_on_the_bridge_apply_to_cached_steps(bridge_lm):
    def n_hooks():
        return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in bridge_lm.bridge.modules())

    before = n_hooks()
    clean = bridge_lm.extend(bridge_lm.start([["0", "1"]]), [0], ["N"]).logprobs
    with bridge_lm.bridge.hooks(fwd_hooks=[("blocks.1.hook_mlp_out", lambda t, hook: t * 0)]):
        ablated = bridge_lm.extend(bridge_lm.start([["0", "1"]]), [0], ["N"]).logprobs
    assert not torch.allclose(clean, ablated)
    assert n_hooks() == before  # the KV-cache shim and the intervention left nothing behind


def test_world_lm_is_uniform_over_legal_tokens(tiny_city):
    lm = WorldLM(tiny_city)
    seq = tiny_city.generate(1, np.random.default_rng(2))[0]
    cur = lm.start([seq[:3]])
    q = tiny_city.run(seq[:3])
    probs = cur.logprobs[0].exp()
    legal = [tiny_city.vocab.id(t) for t in tiny_city.legal(q)]
    assert torch.allclose(probs[legal], torch.full((len(legal),), 1 / len(legal)))
    assert probs.sum() == pytest.approx(1.0)
    dead = lm.extend(cur, [0], ["end" if "end" not in tiny_city.legal(q) else seq[0]])
    assert torch.isinf(dead.logprobs).all()  # an illegal token leaves no defined state


def test_uniform_and_dfa_lms(tmp_path):
    from interp.worlds import parse_world

    world = parse_world("connect4:n=2")
    u = UniformLM(world).start([["0", "0"]]).logprobs[0].exp()
    assert torch.allclose(u[3:], torch.full((7,), 1 / 7)) and u[:3].sum() == 0
    narrow = parse_world("connect4:n=1")
    lm = DFALM(narrow, world)
    p = lm.start([["0"]]).logprobs[0].exp()
    assert p[world.vocab.id("0")] == 0 and p[world.vocab.id("1")] == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="vocabulary does not match"):
        DFALM(parse_world("othello"), world)
