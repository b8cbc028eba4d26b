"""The next-token test (Vafa et al. 2024, §2.2 and Table 1, "next-token").

For every position of a held-out sequence the model's top-1 prediction over the *full* vocabulary
is checked against the world's legal next tokens at the state the prefix reaches. We report

- ``position_share``: the share of positions whose top-1 token is legal (what the issue asks), with
  a cluster-robust standard error (sequences are the independent units), and
- ``sequence_share``: the share of sequences whose top-1 token is legal at *every* position — the
  paper's stricter form ("valid at every position") — with a binomial standard error.

Which positions are scored. ``positions="reference"`` (the default, as the reference code's
``next_token_test.py``): the positions after the world's prompt (``world.prompt_length`` tokens;
streets: origin and destination, after which any intersection is legal, so those positions test
nothing), i.e. from the first direction on; other worlds have no prompt, so every position.
``positions="all"``: every position, ``<bos>`` and the prompt included (this package's earlier
rule). In both, the position after the last token is scored too (the state there is defined and
the model's guess of what may follow must be legal), except positions whose state has no legal
continuation (after a terminal ``end``, or a finished game); their count is reported
(``unscored_positions``; the prompt positions skipped by the reference rule are not counted there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from interp.results import Estimate, mean_se, ratio_se, save_result
from interp.worlds.base import World
from interp.worlds.encoding import encode_sequences


@dataclass
class NextTokenResult:
    """The next-token test: the share of legal top-1 predictions per position and per sequence, with
    the per-position table."""

    position_share: Estimate
    sequence_share: Estimate
    positions: int
    unscored_positions: int
    per_position: pd.DataFrame = field(repr=False)
    rule: str = "reference"

    def summary(self) -> dict[str, Any]:
        return {
            "next_token_position": self.position_share.mean,
            "next_token_position_se": self.position_share.se,
            "next_token_sequence": self.sequence_share.mean,
            "next_token_sequence_se": self.sequence_share.se,
            "sequences": self.sequence_share.n,
            "positions": self.positions,
            "unscored_positions": self.unscored_positions,
            "positions_rule": self.rule,
        }

    def __str__(self) -> str:
        return (
            f"next-token test: {self.position_share.mean:.4f} ± {self.position_share.se:.4f} of "
            f"{self.positions} positions legal; {self.sequence_share.mean:.4f} ± "
            f"{self.sequence_share.se:.4f} of {self.sequence_share.n} sequences legal at every position"
        )

    @property
    def frame(self) -> pd.DataFrame:
        """One row per scored position (``per_position``)."""
        return self.per_position

    def save(self, folder: str | Path, stem: str = "next_token") -> Path:
        return save_result(folder, stem, self.summary(), **{"": self.per_position})


def _top1_fn(model: Any, vocab) -> Any:
    """ids → top-1 ids: one forward for networks; prefix by prefix for DFA-backed LMs."""
    from interp.models.lm import LM, BridgeLM, logits_of

    if isinstance(model, BridgeLM):
        model = model.bridge
    if isinstance(model, torch.nn.Module):
        from interp.models.device import model_device

        device = model_device(model)  # inputs go where the model (its first module) lives

        def top1(ids):
            return logits_of(model, ids.to(device)).argmax(dim=-1).cpu().numpy()

        return top1
    if isinstance(model, LM):

        def top1(ids):
            out = np.zeros(ids.shape, dtype=int)
            for b, row in enumerate(ids.tolist()):
                tokens = [t for t in vocab.decode(row[1:]) if t != vocab.tokens[vocab.pad_id]]
                lp = model.start([tokens[:p] for p in range(len(tokens) + 1)]).logprobs
                out[b, : len(tokens) + 1] = lp.argmax(dim=-1).numpy()
            return out

        return top1
    raise TypeError(f"next_token_test needs a torch module or an interp LM, got {type(model).__name__}")


@torch.no_grad()
def next_token_test(
    model: Any,
    world: World,
    sequences: Sequence[Sequence[str]],
    batch_size: int = 128,
    progress: bool = False,
    positions: str = "reference",
) -> NextTokenResult:
    """Run the next-token test of ``model`` on ``sequences``.

    ``positions``: ``"reference"`` (from the first token after the world's prompt on) or ``"all"``
    (see the module docstring).

    ``model``: an HF causal LM, a TransformerBridge, or any :class:`interp.models.lm.LM` (the
    world oracle scores 1.0 by construction, a useful reference row).
    """
    from tqdm.auto import tqdm

    if positions not in ("reference", "all"):
        raise ValueError(f"positions must be 'reference' or 'all', got {positions!r}")
    first = int(getattr(world, "prompt_length", 0) or 0) if positions == "reference" else 0
    vocab = world.vocab
    legal_ids_cache: dict[Any, np.ndarray] = {}
    rows: list[tuple[int, int, str, bool]] = []
    per_seq_ok: list[int] = []
    per_seq_n: list[int] = []
    unscored = 0
    module = model if isinstance(model, torch.nn.Module) else getattr(model, "bridge", None)
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
    top1_of = _top1_fn(model, vocab)
    try:
        for start in tqdm(range(0, len(sequences), batch_size), disable=not progress, desc="next-token"):
            chunk = sequences[start : start + batch_size]
            ids = encode_sequences(chunk, vocab)
            top1 = top1_of(ids)
            for j, seq in enumerate(chunk):
                states = world.states_along(seq)
                ok = n = 0
                for pos, q in enumerate(states):
                    if pos < first:
                        continue
                    if q not in legal_ids_cache:
                        legal_ids_cache[q] = np.array([vocab.id(t) for t in world.legal(q)], dtype=int)
                    legal = legal_ids_cache[q]
                    if legal.size == 0:
                        unscored += 1
                        continue
                    hit = bool(np.isin(top1[j, pos], legal))
                    rows.append((start + j, pos, vocab.tokens[top1[j, pos]], hit))
                    ok += hit
                    n += 1
                per_seq_ok.append(ok)
                per_seq_n.append(n)
    finally:
        if module is not None:
            module.train(was_training)
    df = pd.DataFrame(rows, columns=["sequence", "position", "top1", "legal"])
    n_arr = np.array(per_seq_n)
    scored = n_arr > 0
    return NextTokenResult(
        position_share=ratio_se(np.array(per_seq_ok)[scored], n_arr[scored]),
        sequence_share=mean_se((np.array(per_seq_ok) == n_arr)[scored]),
        positions=int(n_arr.sum()),
        unscored_positions=unscored,
        per_position=df,
        rule=positions,
    )
