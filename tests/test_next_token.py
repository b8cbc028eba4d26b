"""The next-token test against oracles: a model that knows the world scores 1, one that never
predicts a legal token scores 0, and a half-right model lands in between as counted by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from interp.metrics import next_token_test


class WorldOracle(torch.nn.Module):
    """Logits from the world itself: 1 on legal next tokens (or on illegal ones when ``wrong``)."""

    def __init__(self, world, wrong=False):
        super().__init__()
        self.world, self.wrong = world, wrong

    def forward(self, ids):
        vocab = self.world.vocab
        out = torch.zeros(*ids.shape, len(vocab))
        for b, row in enumerate(ids.tolist()):
            tokens = [t for t in vocab.decode(row[1:]) if t != "<pad>"]
            for pos, q in enumerate(self.world.states_along(tokens)):
                legal = [vocab.id(t) for t in self.world.legal(q)]
                mask = torch.zeros(len(vocab), dtype=torch.bool)
                mask[legal] = True
                out[b, pos] = (~mask if self.wrong else mask).float()
        return out


@pytest.fixture(scope="module")
def sequences(tiny_city):
    return tiny_city.generate(40, np.random.default_rng(3))


def test_true_world_model_scores_one(tiny_city, sequences):
    r = next_token_test(WorldOracle(tiny_city), tiny_city, sequences, batch_size=16)
    assert r.position_share.mean == 1.0 and r.sequence_share.mean == 1.0
    # the reference scores from the first direction on: the predictions of d1 .. end
    assert r.positions == sum(len(s) - 2 for s in sequences)
    assert r.unscored_positions == len(sequences)  # the position after `end`
    r = next_token_test(WorldOracle(tiny_city), tiny_city, sequences, batch_size=16, positions="all")
    assert r.positions == sum(len(s) for s in sequences) and r.summary()["positions_rule"] == "all"


def test_reference_positions_skip_the_prompt(tiny_city, sequences):
    """A model wrong only where the origin and the destination are predicted: perfect by the
    reference rule, not by the every-position rule (counted by hand)."""

    class WrongPrompt(torch.nn.Module):
        def forward(self, ids):
            good, bad = WorldOracle(tiny_city)(ids), WorldOracle(tiny_city, wrong=True)(ids)
            return torch.where(torch.arange(ids.shape[1])[None, :, None] < 2, bad, good)

    assert next_token_test(WrongPrompt(), tiny_city, sequences).position_share.mean == 1.0
    r = next_token_test(WrongPrompt(), tiny_city, sequences, positions="all")
    assert r.position_share.mean == pytest.approx(1 - 2 * len(sequences) / sum(len(s) for s in sequences))
    with pytest.raises(ValueError, match="positions must be"):
        next_token_test(WrongPrompt(), tiny_city, sequences, positions="some")


def test_always_illegal_model_scores_zero(tiny_city, sequences):
    r = next_token_test(WorldOracle(tiny_city, wrong=True), tiny_city, sequences)
    assert r.position_share.mean == 0.0 and r.sequence_share.mean == 0.0
    assert not r.per_position["legal"].any()


def test_share_counts_by_hand(tiny_city, sequences):
    """Oracle on even sequences, anti-oracle on odd ones: shares are the counted fractions."""

    class Mixed(torch.nn.Module):
        def forward(self, ids):
            good, bad = WorldOracle(tiny_city)(ids), WorldOracle(tiny_city, wrong=True)(ids)
            return torch.where(torch.arange(len(ids))[:, None, None] % 2 == 0, good, bad)

    r = next_token_test(Mixed(), tiny_city, sequences, batch_size=len(sequences))
    even = sum(len(s) - 2 for s in sequences[::2])
    assert r.position_share.mean == pytest.approx(even / sum(len(s) - 2 for s in sequences))
    assert r.sequence_share.mean == pytest.approx(0.5)
    assert 0 < r.position_share.se < 0.5


def test_lm_objects_are_accepted(tiny_city, sequences):
    from interp.models.lm import UniformLM, WorldLM

    assert next_token_test(WorldLM(tiny_city), tiny_city, sequences[:10]).position_share.mean == 1.0
    uniform = next_token_test(UniformLM(tiny_city), tiny_city, sequences[:10])
    assert uniform.position_share.mean < 0.5  # argmax of a flat row is the first node token
