"""How likely a model says ``end`` when a route stands at its destination.

A greedy route is valid only if the model's argmax is ``end`` once it arrives. On random-walk data
the destination is wherever the walk stopped, so the data's own process gives ``end`` there only
the probability the walk-length distribution allows (the ideal predictor,
:class:`~interp.models.lm.IdealLM`: about 0.35 on the default 8×8 city); a model that puts much
less there never ends its routes. This module measures, over held-out sequences, at every position
whose state is ``("at", d, d)``: the mean ``P(end)`` and how often ``end`` is the argmax, with
standard errors clustered by sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from interp.models.lm import LM
from interp.results import ratio_se
from interp.worlds.streets.graph import END
from interp.worlds.streets.world import StreetsWorld


def end_at_destination(
    lm: LM, world: StreetsWorld, sequences: Sequence[Sequence[str]], batch_size: int = 256
) -> dict[str, Any]:
    """``P(end)`` and ``argmax = end`` at every destination visit of ``sequences`` (world tokens).

    Returns ``p_end``, ``p_end_se``, ``argmax_end``, ``argmax_end_se`` (means over visits, SE
    clustered by sequence), ``visits`` and ``sequences`` (those with at least one visit).
    """
    prefixes: list[list[str]] = []
    owner: list[int] = []
    for i, seq in enumerate(sequences):
        for p, q in enumerate(world.states_along(seq)):
            if isinstance(q, tuple) and q[0] == "at" and q[1] == q[2]:
                prefixes.append(list(seq[:p]))
                owner.append(i)
    if not prefixes:
        raise ValueError("no position of these sequences stands at its destination")
    end_id = lm.vocab.id(END)
    p_end = np.empty(len(prefixes))
    top = np.empty(len(prefixes))
    for lo in range(0, len(prefixes), batch_size):
        lp = lm.logprobs(prefixes[lo : lo + batch_size])
        p_end[lo : lo + len(lp)] = lp[:, end_id].exp().numpy()
        top[lo : lo + len(lp)] = (lp.argmax(dim=-1) == end_id).numpy()
    own = np.asarray(owner)
    seqs, inverse = np.unique(own, return_inverse=True)
    n = np.bincount(inverse).astype(float)
    pe = ratio_se(np.bincount(inverse, weights=p_end), n)
    am = ratio_se(np.bincount(inverse, weights=top), n)
    return {
        "p_end": pe.mean,
        "p_end_se": pe.se,
        "argmax_end": am.mean,
        "argmax_end_se": am.se,
        "visits": len(prefixes),
        "sequences": int(len(seqs)),
    }


__all__ = ["end_at_destination"]
