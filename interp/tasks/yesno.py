"""One yes/no question-answering task: how a PragWorld row (or a dialogue-world probe) is asked.

A :class:`YesNoTask` holds the rows (the schema of
:func:`~interp.datasets.pragworld.load_pragworld`: ``context``, ``question``, ``gold``,
``group``, ``altered``, ``category``, …), the prompt kind and the model's
:class:`~interp.tasks.tokens.Tokenization`. From them, and only here, come

- the prompt texts (:attr:`prompts`; ``label``: the interpretability prompt ending in
  ``Label:``, ``benchmark``: the evaluation prompt ending in an open ``(``, ``dialogue``: a
  dialogue-world item as its whitespace-joined tokens ``… Q: <question>``);
- their token ids (:attr:`~interp.tasks.contrast.ContrastTask.ids`), right-padded ids and attention masks
  (:meth:`~interp.tasks.contrast.ContrastTask.inputs`);
- the scored position: each row's last prompt token, where the answer is predicted;
- the yes / no token ids (:func:`~interp.tasks.tokens.yes_no_token_ids`) and the metric,
  P(gold) in the two-way softmax over the yes/no logits at that position (:meth:`metric`,
  PragWorld's interpretability score; the answer is yes when P(yes) > 0.5);
- the fine-tuning rows: the same prompt ids followed by the gold answer's token, the loss on the
  answer (:meth:`~interp.tasks.contrast.ContrastTask.training_rows`) — supervised fine-tuning as
  the reference ran it (LLaMA-Factory SFT masks the prompt). The reference's SFT also appends an EOS to the response; here the answer
  is the one token the label prompt is scored on, and no EOS follows it;
- categories, groups and the (original, alteration) pairs (:meth:`pairs`). The group is the
  verdicts' resampling unit (:mod:`interp.analysis.verdicts.layers`): an original and its alterations
  share most of their text, so their effects are not independent; a pair belongs to the group of
  its original (:meth:`pair_groups`). Rows without a ``group`` column are each their own group.

``interp sweep --data CSV``, ``interp pragworld eval --prompt label|benchmark`` and ``interp
finetune`` with ``[data] kind = "pragworld"`` all build their inputs here, so one row is asked the
same way everywhere (a test checks the three agree id for id).

**Dialogue probes.** :meth:`YesNoTask.dialogue` asks a dialogue-world benchmark row the way the
world's models read it: the checkpoint's word-level tokenizer, a ``<bos>`` first (interp's world
models are trained on ``<bos>``-prefixed sequences), the answer token ``yes`` / ``no`` — the ids of
``Vocab.encode(prompt_tokens(context, question))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from interp.tasks.contrast import ContrastTask, last_logits, logit_diff
from interp.tasks.tokens import Tokenization, own_tokenizer, yes_no_token_ids

PROMPT_KINDS = ("label", "benchmark", "dialogue")
#: what a group of a yes/no task is (``meta["groups"]`` of its sweeps)
GROUP_UNIT = "PragWorld group: an original conversation and its alterations"


def dialogue_prompt(context: str, question: str) -> str:
    """A dialogue-world row as text: its tokens (:func:`~interp.worlds.dialogue.export.prompt_tokens`)
    joined by spaces, so a whitespace-splitting tokenizer gives them back."""
    from interp.worlds.dialogue.export import prompt_tokens

    return " ".join(prompt_tokens(context, question))


def p_yes(last_logits: Float[Tensor, "batch vocab"], yes_id: int, no_id: int) -> Float[Tensor, " batch"]:
    """P(yes) / (P(yes) + P(no)): the softmax over the two logits, in float32."""
    return torch.softmax(last_logits[:, [yes_id, no_id]].float(), dim=-1)[:, 0]


def two_way_prob(yes_id: int, no_id: int, gold: Sequence[int] | np.ndarray | Tensor) -> Any:
    """PragWorld's interpretability score as a sweep metric (the paper's "Prompting and parsing",
    used by §6.1 and §6.2): ``metric(logits, batch) -> P(gold)``, the softmax over just the yes and
    no logits at each row's last real position (``batch.last()``), and the probability it gives
    the gold answer (``> 0.5``: answered correctly). ``gold``: one 0 (no) / 1 (yes) per example,
    looked up with ``batch.index`` (``batch``: an :class:`interp.analysis.engines.scoring.Batch`). The one
    implementation; :func:`interp.analysis.engines.scoring.two_way_prob` is this function."""
    g = torch.tensor(np.array(gold), dtype=torch.long)
    if g.dim() != 1 or not bool(((g == 0) | (g == 1)).all()):
        raise ValueError("gold must be a 1-D sequence of 0 (no) / 1 (yes), one per example")

    def two_way_prob(logits: Float[Tensor, "batch pos vocab"], batch: Any) -> Float[Tensor, " batch"]:
        p = p_yes(last_logits(logits, batch), yes_id, no_id)
        gb = g[torch.as_tensor(batch.index).cpu()].to(p.device)
        return torch.where(gb == 1, p, 1.0 - p)

    two_way_prob.reads = "last"  # type: ignore[attr-defined]  # only each row's last position (prefix sharing)
    return two_way_prob


def gold_logit_diff(yes_id: int, no_id: int, gold: Sequence[int] | np.ndarray | Tensor) -> Any:
    """The logit difference gold − other as a sweep metric: ``logit[gold answer] − logit[other
    answer]`` at each row's last real position, in nats (the log-odds of the gold answer in the
    two-way yes/no softmax: ``sigmoid(logit_diff) = P(gold)``) — the contrast task's
    :func:`~interp.tasks.contrast.logit_diff` with correct / foil = gold / other (one
    implementation). Linear in the last residual stream's contributions, so it shows negative
    components that P(gold) saturates away (Zhang & Nanda 2024, metrics section; Heimersheim &
    Nanda 2024). Name ``logit_diff``."""
    g = np.asarray(gold.cpu() if isinstance(gold, Tensor) else gold)
    if g.ndim != 1 or not np.isin(g, (0, 1)).all():
        raise ValueError("gold must be a 1-D sequence of 0 (no) / 1 (yes), one per example")
    return logit_diff(np.where(g == 1, yes_id, no_id), np.where(g == 1, no_id, yes_id))


def gold_accuracy(yes_id: int, no_id: int, gold: Sequence[int] | np.ndarray | Tensor) -> Any:
    """Accuracy as a sweep metric: 1 where P(gold) > 0.5 (the answer PragWorld reads), else 0.
    Name ``accuracy``. Discrete: a layer moves it only where it moves a row across the threshold."""
    p_gold = two_way_prob(yes_id, no_id, gold)

    def accuracy(logits: Float[Tensor, "batch pos vocab"], batch: Any) -> Float[Tensor, " batch"]:
        return (p_gold(logits, batch) > 0.5).float()

    accuracy.reads = "last"  # type: ignore[attr-defined]  # only each row's last position (prefix sharing)
    return accuracy


#: ``--metric`` of a yes/no sweep → (the metric's name in files, what it is)
METRICS = {
    "p-gold": ("two_way_prob", "P(gold) in the two-way yes/no softmax at the last prompt token"),
    "logit-diff": ("logit_diff", "logit(gold answer) − logit(other answer) at the last prompt token, nats"),
    "accuracy": ("accuracy", "1 where P(gold) > 0.5, else 0"),
}
_METRIC_FNS = {"p-gold": two_way_prob, "logit-diff": gold_logit_diff, "accuracy": gold_accuracy}


def _rows_of(data: Any) -> pd.DataFrame:
    from interp.datasets.pragworld import load_pragworld

    if isinstance(data, pd.DataFrame):
        rows = data
    elif hasattr(data, "rows"):
        rows = data.rows
    else:
        rows = load_pragworld(data).rows
    missing = [c for c in ("context", "question", "gold") if c not in rows.columns]
    if missing:
        raise ValueError(f"task rows need the columns context, question, gold; missing {missing}")
    return rows.reset_index(drop=True)


class YesNoTask(ContrastTask):
    """Yes/no questions asked of one model (module docstring). Build with :meth:`pragworld` or
    :meth:`dialogue`.

    A :class:`~interp.tasks.contrast.ContrastTask` with correct = the gold answer's token and foil =
    the other one (:attr:`correct_ids`, :attr:`foil_ids`), so every path that takes a contrast task
    takes it; its default metric is P(gold) (:meth:`metric`, ``prob``), and :meth:`contrast_examples`
    writes its rows as contrast examples. It has no corrupted prompts (its pairs are
    :meth:`pairs`)."""

    default_metric = "prob"
    group_unit = GROUP_UNIT

    def __init__(
        self,
        rows: pd.DataFrame,
        tokenization: Tokenization,
        prompt: str = "label",
        yes_no_ids: tuple[int, int] | None = None,
    ):  # rows, not examples: no ContrastTask.__init__
        if prompt not in PROMPT_KINDS:
            raise ValueError(f"prompt must be one of {PROMPT_KINDS}, got {prompt!r}")
        self.rows = _rows_of(rows)
        if self.rows.empty:
            raise ValueError("a task needs at least one row")
        gold = self.rows["gold"].to_numpy()
        if not np.isin(gold, (0, 1)).all():
            raise ValueError("gold must be 0 (no) or 1 (yes) in every row")
        self.tokenization = tokenization
        self.prompt = prompt
        self._yes_no = yes_no_ids
        self.source = None

    @property
    def yes_no_ids(self) -> tuple[int, int]:
        """``(yes_id, no_id)``, resolved on first use (generation needs none)."""
        if self._yes_no is None:
            self._yes_no = yes_no_token_ids(self.tokenization.tokenizer)
        return self._yes_no

    @property
    def yes_id(self) -> int:
        return self.yes_no_ids[0]

    @property
    def no_id(self) -> int:
        return self.yes_no_ids[1]

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def pragworld(
        cls,
        model: Any,
        data: Any,
        *,
        prompt: str = "label",
        prepend_bos: bool | None = None,
        chat_template: bool | None = False,
        tokenizer: Any = None,
    ) -> "YesNoTask":
        """PragWorld rows (a DataFrame, a :class:`~interp.datasets.pragworld.PragWorldData` or a
        CSV path) asked of ``model`` (a folder, a hub name or a TransformerBridge) with its own
        tokenizer (or ``tokenizer``). Defaults: the label prompt, BOS as the tokenizer adds it,
        no chat template (the reference layer analyses)."""
        tok = tokenizer if tokenizer is not None else own_tokenizer(model)
        return cls(_rows_of(data), Tokenization(tok, prepend_bos, chat_template), prompt)

    @classmethod
    def dialogue(cls, model: Any, data: Any, tokenizer: Any = None) -> "YesNoTask":
        """Dialogue-world benchmark rows asked of an interp checkpoint (see the module docstring)."""
        tok = tokenizer if tokenizer is not None else own_tokenizer(model)
        return cls(_rows_of(data), Tokenization(tok, prepend_bos=True, chat_template=False), "dialogue")

    # ---- prompts and ids -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    @cached_property
    def prompts(self) -> list[str]:
        from interp.datasets.pragworld.prompts import build_prompt

        pairs = zip(self.rows["context"], self.rows["question"])
        if self.prompt == "dialogue":
            return [dialogue_prompt(c, q) for c, q in pairs]
        return [build_prompt(self.prompt, c, q) for c, q in pairs]

    def where(self, i: int) -> str:
        """How errors name row ``i``."""
        return f"row {i}"

    @property
    def has_corrupted(self) -> bool:
        return False

    @property
    def corrupted_ids(self) -> None:
        return None

    def answer_id(self, gold: int) -> int:
        return self.yes_id if int(gold) == 1 else self.no_id

    @property
    def correct_ids(self) -> np.ndarray:
        """Each row's gold answer token id (yes or no)."""
        return np.where(self.gold == 1, self.yes_id, self.no_id).astype(np.int64)

    @property
    def foil_ids(self) -> np.ndarray:
        """Each row's other answer token id."""
        return np.where(self.gold == 1, self.no_id, self.yes_id).astype(np.int64)

    def contrast_examples(self) -> Any:
        """The rows as contrast examples (:class:`~interp.datasets.contrast.ContrastExample`): the
        prompt text, correct / foil = the gold / other answer token's text, the group, template =
        the category. Asked through a :class:`~interp.tasks.contrast.ContrastTask` with this task's
        tokenization they give the same ids and P(gold) (a test checks it)."""
        from interp.datasets.contrast import ContrastExample, ContrastExamples

        tok = self.tokenization.tokenizer
        text = {i: tok.decode([i]) for i in self.yes_no_ids}
        groups, cats = self.groups, self.categories
        return ContrastExamples(
            [
                ContrastExample(
                    prompt=p,
                    correct=text[int(c)],
                    foil=text[int(f)],
                    group=g.item() if hasattr(g, "item") else g,
                    template=cat,
                )
                for p, c, f, g, cat in zip(self.prompts, self.correct_ids, self.foil_ids, groups, cats)
            ]
        )

    # ---- gold, metric, groups --------------------------------------------------------------

    @property
    def gold(self) -> np.ndarray:
        return self.rows["gold"].to_numpy(dtype=int)

    @property
    def categories(self) -> list[str]:
        """Each row's alteration category (``original`` for an unaltered row)."""
        if "category" not in self.rows:
            return ["original"] * len(self.rows)
        return [c if isinstance(c, str) else "original" for c in self.rows["category"]]

    @property
    def groups(self) -> np.ndarray:
        """Each row's group id (the rows' ``group`` column; without one, each row its own)."""
        if "group" not in self.rows:
            return np.arange(len(self.rows))
        return self.rows["group"].to_numpy()

    def pair_groups(self, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
        """The group of each (original, alteration) pair: its original row's."""
        g = self.groups
        return np.array([g[o] for o, _ in pairs])

    def pairs(self) -> tuple[list[tuple[int, int]], int]:
        """``(pairs, unpaired)``: every (original row, alteration row) of a group, in row order, and
        how many alterations have no original in their group."""
        if "group" not in self.rows or "altered" not in self.rows:
            raise ValueError("pairs need the columns group and altered")
        originals = {g: i for i, (g, alt) in enumerate(zip(self.rows["group"], self.rows["altered"])) if not alt}
        out, unpaired = [], 0
        for i, (g, alt) in enumerate(zip(self.rows["group"], self.rows["altered"])):
            if not alt:
                continue
            if g in originals:
                out.append((originals[g], i))
            else:
                unpaired += 1
        return out, unpaired

    def p_yes(self, last_logits: Float[Tensor, "batch vocab"]) -> Float[Tensor, " batch"]:
        """P(yes) / (P(yes) + P(no)) from the logits at the scored position (float32)."""
        return p_yes(last_logits, self.yes_id, self.no_id)

    def metric(  # type: ignore[override]
        self,
        gold: Sequence[int] | np.ndarray | Tensor | None = None,
        kind: str = "p-gold",
    ) -> Any:
        """The sweep metric ``metric(logits, batch)`` at each row's last real position: ``kind``
        ``p-gold`` (default) P(gold) (:func:`two_way_prob`), ``logit-diff`` logit gold − other
        (:func:`gold_logit_diff`), ``accuracy`` (:func:`gold_accuracy`), with this task's yes/no
        ids. ``gold`` defaults to the rows' gold; pass another (e.g. the altered row's gold of a
        patched pair) to score against it."""
        if kind not in _METRIC_FNS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {kind!r}")
        return _METRIC_FNS[kind](self.yes_id, self.no_id, self.gold if gold is None else gold)

    def settings(self) -> dict[str, Any]:
        """What a results file records: the prompt, the encoding, the yes/no tokens."""
        tok = self.tokenization.tokenizer
        return {
            "prompt": self.prompt,
            **self.tokenization.settings(),
            "yes_id": self.yes_id,
            "no_id": self.no_id,
            "yes_token": tok.convert_ids_to_tokens(self.yes_id),
            "no_token": tok.convert_ids_to_tokens(self.no_id),
            "metric": "two_way_prob: P(gold) in the softmax over the yes/no logits at the last prompt token",
        }


__all__ = [
    "GROUP_UNIT",
    "METRICS",
    "PROMPT_KINDS",
    "YesNoTask",
    "dialogue_prompt",
    "gold_accuracy",
    "gold_logit_diff",
    "p_yes",
    "two_way_prob",
]
