"""Myhill–Nerode compression and distinction of a real model on dialogue items (issue 39).

Vafa et al. (2024, §3) judge a sequence model's implicit world model by pairs of prefixes: two
prefixes that reach the *same* DFA state accept the same continuations, so a coherent model must
treat them alike (compression); two that reach *different* states differ on some continuation (the
Myhill–Nerode boundary), so it must tell them apart there (distinction). On the dialogue world the
prefixes are conversations and the model is asked one thing: where the queried object is now (the
cloze). interp restricts the boundary to that question:

- a pair is *same* when both conversations of a group (an original and one of its alterations or its
  paraphrase) ask about the same object and the world puts it in the same place; *different* when
  the place differs (a flip);
- the model's answer to a conversation is its highest-logit place among the candidates the pair
  could name (every place mentioned in either conversation, and both golds), read at the cloze's
  last token;
- **compression** = the share of *same* pairs the model answers alike; **distinction** = the share of
  *different* pairs it answers differently; each with a group-bootstrap interval.

How this maps onto paper A (and where it departs): its compression precision asks whether two
same-state prefixes accept the same set of continuations, over sampled continuations of bounded
length; here the continuation set is a single one-token answer, so "accepts the same
continuations" becomes "names the same place". Its distinction recall asks whether the model's
accepted sets differ on the true boundary; here the boundary is known exactly (the gold places
differ) and has one element. Pairs come from the generator's alterations (one edit apart), not from
sampled states, and the acceptance rule is argmax instead of a probability threshold. Pairs whose
two conversations ask about different objects are skipped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from interp.analysis.engines.scoring import forward
from interp.analysis.evaluation.contrast import cluster_percentile
from interp.tasks.contrast import single_token_id
from interp.tasks.tokens import pad_id_of
from interp.worlds.encoding import pad_right


@dataclass
class DialogueBoundary:
    """Per pair (``frame``: group, category, ``kind`` same | different, both answers, ``agree``) and
    the two rates with their intervals (``summary``)."""

    frame: pd.DataFrame
    summary: dict[str, Any]
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary, "settings": self.settings}


def place_answers(
    model: Any, examples: Sequence[Any], candidates: Sequence[Sequence[str]], batch_size: int = 8
) -> list[str]:
    """For each example, the candidate place (each one token with its leading space) with the
    highest logit at the prompt's last token."""
    tok = model.tokenizer
    bridge = getattr(model, "bridge", model)
    ids, pad = [tok(e.prompt)["input_ids"] for e in examples], pad_id_of(tok)
    cand_ids = [[single_token_id(tok, f" {c}", "a candidate place", f"group {e.group!r}") for c in cs]
                for e, cs in zip(examples, candidates)]  # fmt: skip
    out: list[str] = []
    for start in range(0, len(examples), batch_size):
        chunk = ids[start : start + batch_size]
        tokens, mask, lengths = pad_right(chunk, pad)
        logits = forward(bridge, tokens, mask)
        last = logits[torch.arange(len(chunk)), (lengths - 1).to(logits.device)].float().cpu()
        for j, row in enumerate(last):
            i = start + j
            out.append(candidates[i][int(row[cand_ids[i]].argmax())])
    return out


def boundary_pairs(examples: Sequence[Any]) -> tuple[list[tuple[int, int, str]], int]:
    """``(original index, other index, kind)`` for every non-original row of each group, and the
    count of rows skipped because they ask about another object than their original."""
    originals = {e.group: i for i, e in enumerate(examples) if e.meta.get("category") == "Original"}
    pairs, skipped = [], 0
    for i, e in enumerate(examples):
        o = originals.get(e.group)
        if o is None or o == i:
            continue
        if e.meta.get("object") != examples[o].meta.get("object"):
            skipped += 1
            continue
        kind = "same" if e.meta["gold_place"] == examples[o].meta["gold_place"] else "different"
        pairs.append((o, i, kind))
    return pairs, skipped


def dialogue_boundary(
    model: Any, examples: Sequence[Any], *, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> DialogueBoundary:
    """Compression and distinction of ``model`` (an :class:`interp.Model`) on dialogue ``examples``
    (cloze items of :func:`interp.worlds.dialogue.natural.dialogue_examples`; module docstring)."""
    pairs, skipped = boundary_pairs(examples)
    if not pairs:
        raise ValueError("no original / alteration pairs: the examples need each group's Original row")
    places: dict[int, set[str]] = {}
    for o, i, _ in pairs:  # each row answers among its pair's places (an original: the union over its pairs)
        both = {*examples[o].meta.get("mentions", []), *examples[i].meta.get("mentions", [])}
        both |= {examples[o].meta["gold_place"], examples[i].meta["gold_place"]}
        places.setdefault(o, set()).update(both)
        places.setdefault(i, set()).update(both)
    rows = sorted(places)
    answers = dict(zip(rows, place_answers(model, [examples[r] for r in rows], [sorted(places[r]) for r in rows])))
    frame = pd.DataFrame(
        [
            {
                "group": examples[o].group,
                "category": examples[i].meta["category"],
                "kind": kind,
                "gold_original": examples[o].meta["gold_place"],
                "gold_other": examples[i].meta["gold_place"],
                "answer_original": answers[o],
                "answer_other": answers[i],
                "agree": answers[o] == answers[i],
            }
            for o, i, kind in pairs
        ]
    )
    summary: dict[str, Any] = {"pairs": len(frame), "skipped_other_object": skipped}
    for name, kind, value in (("compression", "same", True), ("distinction", "different", False)):
        sub = frame[frame["kind"] == kind]
        hit = (sub["agree"] == value).to_numpy(float)
        if len(sub):
            est, lo, hi, g = cluster_percentile(
                hit[:, None], sub["group"].astype(str).to_numpy(), n_boot=n_boot, confidence=confidence, seed=seed
            )
            summary[name] = {
                "value": float(est[0]),
                "low": float(lo[0]),
                "high": float(hi[0]),
                "pairs": len(sub),
                "groups": g,
            }
        else:
            summary[name] = {"value": None, "low": None, "high": None, "pairs": 0, "groups": 0}
    settings = {"n_boot": n_boot, "confidence": confidence, "seed": seed, "answer": "argmax over the pair's places"}
    return DialogueBoundary(frame, summary, settings)


__all__ = ["DialogueBoundary", "boundary_pairs", "dialogue_boundary", "place_answers"]
