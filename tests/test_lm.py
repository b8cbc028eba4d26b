"""The LM view: cached extension equals full forwards; DFA-backed LMs follow their DFA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.models import build_gpt2, load_checkpoint, save_checkpoint
from interp.models.lm import DFALM, BridgeLM, UniformLM, WorldLM
from interp.worlds.encoding import encode_sequences


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
    torch.testing.assert_close(
        bridge_lm.start(prefixes).logprobs, _full_logprobs(bridge_lm, prefixes), atol=1e-5, rtol=1e-5
    )


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


@pytest.mark.parametrize("slots, batch_size", [(None, 512), (1, 512), (3, 7), (None, 5), (16, 40)])
def test_packed_tree_extension_equals_full_forwards(bridge_lm, tiny_city, slots, batch_size):
    """Wide trees (many siblings per row, rows of several prefixes and lengths) over several
    levels, packed with 1, 3, 16 or chosen query slots per bin, in forwards of a few tokens."""
    lm = BridgeLM(bridge_lm.bridge, tiny_city.vocab, batch_size=batch_size, slots=slots)
    seqs = tiny_city.generate(4, np.random.default_rng(3))
    prefixes = [s[: 2 + i] for i, s in enumerate(seqs)]
    cur = lm.start(prefixes)
    torch.testing.assert_close(cur.logprobs, _full_logprobs(lm, prefixes), atol=1e-5, rtol=1e-5)
    rows = [list(p) for p in prefixes]
    rng = np.random.default_rng(4)
    for n_new in (9, 17, 23):
        parents = rng.choice(len(rows), size=n_new).tolist()  # unsorted, repeated, some rows dropped
        toks = [str(t) for t in rng.choice(["N", "S", "E", "W", "end"], size=n_new)]
        cur = lm.extend(cur, parents, toks)
        rows = [rows[p] + [t] for p, t in zip(parents, toks)]
        torch.testing.assert_close(cur.logprobs, _full_logprobs(lm, rows), atol=1e-5, rtol=1e-5)


def test_chain_extension_past_the_free_room_equals_full_forwards(bridge_lm, tiny_city):
    """Decoding-like: one child per row for more steps than a bin has free room (whole bins are
    copied, then regrown), rows dropping out on the way."""
    seqs = [s for s in tiny_city.generate(20, np.random.default_rng(8)) if len(s) >= 3][:3]
    rows = [list(s[:3]) for s in seqs]  # equal lengths: no padding, so bins are copied whole
    cur = bridge_lm.start(rows)
    rng = np.random.default_rng(9)
    for step in range(12):
        keep = list(range(len(rows))) if step != 6 else [0, 2]
        toks = [str(t) for t in rng.choice(["N", "S", "E", "W"], size=len(keep))]
        cur = bridge_lm.extend(cur, keep, toks)
        rows = [rows[p] + [t] for p, t in zip(keep, toks)]
    torch.testing.assert_close(cur.logprobs, _full_logprobs(bridge_lm, rows), atol=1e-5, rtol=1e-5)


def test_packed_extension_on_llama_equals_full_forwards(tmp_path, tiny_city, tiny_model_config):
    """Rotary positions and grouped heads: a Llama checkpoint through the same packed extension."""
    from conftest import save_gpt2_and_llama

    path = save_gpt2_and_llama(tmp_path, tiny_city, tiny_model_config)["llama"]
    lm = BridgeLM(load_checkpoint(path).bridge, tiny_city.vocab, batch_size=16)
    seqs = tiny_city.generate(3, np.random.default_rng(5))
    rows = [s[: 3 + i] for i, s in enumerate(seqs)]
    cur = lm.start(rows)
    rng = np.random.default_rng(6)
    for n_new in (7, 15):
        parents = rng.choice(len(rows), size=n_new).tolist()
        toks = [str(t) for t in rng.choice(["N", "S", "E", "W"], size=n_new)]
        cur = lm.extend(cur, parents, toks)
        rows = [list(rows[p]) + [t] for p, t in zip(parents, toks)]
        torch.testing.assert_close(cur.logprobs, _full_logprobs(lm, rows), atol=1e-4, rtol=1e-4)


def test_a_cursor_can_be_extended_again(bridge_lm):
    cur = bridge_lm.start([["0", "1"], ["2", "3", "N"]])
    a = bridge_lm.extend(cur, [0, 1], ["N", "S"]).logprobs
    b = bridge_lm.extend(cur, [1, 0, 0], ["E", "N", "W"]).logprobs  # extend never modifies its cursor
    torch.testing.assert_close(b[1], a[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        b, _full_logprobs(bridge_lm, [["2", "3", "N", "E"], ["0", "1", "N"], ["0", "1", "W"]]), atol=1e-5, rtol=1e-5
    )


def test_hooks_on_the_bridge_apply_to_cached_steps(bridge_lm):
    def n_hooks():
        return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in bridge_lm.bridge.modules())

    before = n_hooks()
    clean = bridge_lm.extend(bridge_lm.start([["0", "1"]]), [0], ["N"]).logprobs
    with bridge_lm.bridge.hooks(fwd_hooks=[("blocks.1.hook_mlp_out", lambda t, hook: t * 0)]):
        ablated = bridge_lm.extend(bridge_lm.start([["0", "1"]]), [0], ["N"]).logprobs
    assert not torch.allclose(clean, ablated)
    assert n_hooks() == before  # the KV-cache shim and the intervention left nothing behind


def test_under_hooks_extension_reads_one_token_per_batch_row(bridge_lm, tiny_city):
    """With a hook registered, ``extend`` does not pack siblings into one bin: every forward is
    ``[rows, 1]`` (the layout position-indexed interventions expect), with the same results."""
    seqs = tiny_city.generate(2, np.random.default_rng(7))
    prefixes = [s[:4] for s in seqs]
    parents, toks = [0, 0, 0, 1, 1], ["N", "S", "E", "W", "N"]
    packed = bridge_lm.extend(bridge_lm.start(prefixes), parents, toks).logprobs
    shapes = []

    def record(t, hook):
        shapes.append(tuple(t.shape[:2]))
        return t

    with bridge_lm.bridge.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", record)]):
        cur = bridge_lm.start(prefixes)
        shapes.clear()
        hooked = bridge_lm.extend(cur, parents, toks).logprobs
    assert shapes == [(5, 1)]
    torch.testing.assert_close(hooked, packed, atol=1e-5, rtol=1e-5)


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
