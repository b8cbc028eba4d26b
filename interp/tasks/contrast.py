"""A contrast task: prompts asked of one model, scored by a correct next token against a foil.

A :class:`ContrastTask` holds contrast examples (:class:`~interp.datasets.contrast.ContrastExample`:
a prompt, the correct next token, a foil, an optional corrupted prompt, a group, a template) and the
model's :class:`~interp.tasks.tokens.Tokenization`. From them, and only here, come

- the prompt token ids (:attr:`~ContrastTask.ids`, :meth:`~ContrastTask.inputs`: right-padded ids
  and attention mask) and those of the corrupted prompts (:attr:`~ContrastTask.corrupted_ids`,
  :meth:`~ContrastTask.corrupted_inputs`), each corrupted prompt checked to have its prompt's token
  length (activation patching pairs positions one to one);
- the correct and foil token ids per row (:attr:`~ContrastTask.correct_ids`,
  :attr:`~ContrastTask.foil_ids`): each text must be *one* token of the tokenizer, encoded alone
  without special tokens (`` Mary`` with its leading space is one byte-level BPE token);
- the scored position, each row's last prompt token, and the two metrics in the sweep form
  ``metric(logits, batch) -> one value per row`` (:mod:`interp.analysis.engines.scoring`):
  :meth:`~ContrastTask.logit_diff_metric`, logit(correct) − logit(foil) (the IOI metric, Wang et
  al. 2022 §2; > 0: the model prefers the correct token), and :meth:`~ContrastTask.prob_metric`,
  P(correct) in the softmax over just the two logits (> 0.5 exactly when the logit difference is
  > 0; PragWorld's interpretability score is this with correct / foil = gold / other answer);
- groups (the resampling unit), categories (= the template) and training rows for planting and
  fine-tuning: prompt ids followed by the target token, the correct one or — on rows chosen for
  planting harm — the foil (:meth:`~ContrastTask.training_rows`).

:class:`~interp.tasks.yesno.YesNoTask` is a ContrastTask whose correct / foil are the gold answer
token and the other one, so a yes/no sweep, evaluation or fine-tune and an IOI one run the same
code. Errors for a bad example name its file and line (:func:`~interp.datasets.contrast.load_contrast`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from interp.datasets.contrast import ContrastExample, ContrastExamples, ContrastFileError, load_contrast, where_of
from interp.tasks.tokens import Tokenization, TokenizationError, check_length, own_tokenizer, pad_id_of, pad_right

#: the metrics of a contrast task (:meth:`ContrastTask.metric_of`)
METRICS = ("logit_diff", "prob")
#: what a group of a contrast task is (``meta["groups"]`` of its sweeps)
GROUP_UNIT = "the examples' group (IOI: one template with one name pair, both orders)"
Rows = slice | Sequence[int] | np.ndarray | None


def _per_example(value: int | Sequence[int] | Tensor | np.ndarray, batch: Any, what: str) -> Tensor:
    t = torch.as_tensor(np.asarray(value) if not isinstance(value, Tensor) else value, dtype=torch.long)
    if t.dim() == 0:
        return t.expand(batch.tokens.shape[0])
    if t.dim() != 1:
        raise ValueError(f"{what} must be one id or one id per example, got shape {tuple(t.shape)}")
    return t[torch.as_tensor(batch.index).cpu()]


def last_logits(logits: Tensor, batch: Any) -> Tensor:
    """Each row's logits at its last non-padding position; logits with one position are those
    already (a forward that computed only them: ``scoring.forward(..., last=True)``)."""
    if logits.shape[1] == 1:
        return logits[:, 0].float()
    rows = torch.arange(logits.shape[0], device=logits.device)
    return logits[rows, batch.last().to(logits.device)].float()


def logit_diff(
    pos_ids: int | Sequence[int] | Tensor | np.ndarray, neg_ids: int | Sequence[int] | Tensor | np.ndarray
) -> Any:
    """Sweep metric: ``logit[pos] − logit[neg]`` at each row's last non-padding position
    (``batch.last()``), in float32; ids: one for all rows or one per example (looked up with
    ``batch.index``). The one implementation: :func:`interp.analysis.engines.scoring.logit_diff` is this."""

    def logit_diff(logits: Float[Tensor, "batch pos vocab"], batch: Any) -> Float[Tensor, " batch"]:
        last = last_logits(logits, batch)
        rows = torch.arange(last.shape[0], device=last.device)
        pos = _per_example(pos_ids, batch, "pos_ids").to(last.device)
        neg = _per_example(neg_ids, batch, "neg_ids").to(last.device)
        return last[rows, pos] - last[rows, neg]

    logit_diff.reads = "last"  # type: ignore[attr-defined]  # only each row's last position (prefix sharing)
    return logit_diff


def pair_prob(
    pos_ids: int | Sequence[int] | Tensor | np.ndarray, neg_ids: int | Sequence[int] | Tensor | np.ndarray
) -> Any:
    """Sweep metric: P(pos) in the softmax over just the ``pos`` and ``neg`` logits at each row's
    last non-padding position (float32) — the sigmoid of :func:`logit_diff`; ``> 0.5``: the model
    prefers ``pos``. Named ``two_way_prob`` (its verdict margin and tables are those of PragWorld's
    score, which is this with pos / neg = gold / other answer)."""

    def two_way_prob(logits: Float[Tensor, "batch pos vocab"], batch: Any) -> Float[Tensor, " batch"]:
        last = last_logits(logits, batch)
        rows = torch.arange(last.shape[0], device=last.device)
        pos = _per_example(pos_ids, batch, "pos_ids").to(last.device)
        neg = _per_example(neg_ids, batch, "neg_ids").to(last.device)
        pair = torch.stack([last[rows, pos], last[rows, neg]], dim=-1)
        return torch.softmax(pair, dim=-1)[:, 0]

    two_way_prob.reads = "last"  # type: ignore[attr-defined]  # only each row's last position (prefix sharing)
    return two_way_prob


def single_token_id(tokenizer: Any, text: str, what: str, where: str) -> int:
    """The id of ``text`` when it is one token of ``tokenizer`` (encoded alone, no special tokens),
    else a :class:`~interp.tasks.tokens.TokenizationError` saying what it tokenises to."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    unk = getattr(tokenizer, "unk_token_id", None)
    if len(ids) != 1 or (unk is not None and ids[0] == unk):
        name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
        got = tokenizer.convert_ids_to_tokens(ids)
        raise TokenizationError(
            f"{where}: {what} {text!r} is not one token of the tokenizer {name!r}: it tokenises to {got} "
            f"(ids {ids}); a contrast example scores one next token, so give the text of a single token "
            "(usually with its leading space, e.g. ' Mary')"
        )
    return int(ids[0])


def _select(n: int, rows: Rows) -> np.ndarray:
    """Row indices of ``rows`` (None: all ``n``; a slice; indices)."""
    if rows is None:
        return np.arange(n)
    if isinstance(rows, slice):
        return np.arange(n)[rows]
    idx = np.asarray(rows, dtype=int)
    if idx.ndim != 1 or (idx.size and (idx.min() < -n or idx.max() >= n)):
        raise IndexError(f"rows must be indices in [0, {n}), got {rows!r}")
    return idx


class ContrastTask:
    """Contrast examples asked of one model (module docstring). Build with :meth:`build` (a model
    and a file or examples) or from examples and a :class:`~interp.tasks.tokens.Tokenization`.

    Everything is checked at construction: every correct / foil is one token, every corrupted
    prompt has its prompt's token length; errors name the example's file and line."""

    #: the metric :meth:`metric` and the sweeps use unless told otherwise
    default_metric = "logit_diff"
    #: what a group is (``meta["groups"]`` of the task's sweeps)
    group_unit = GROUP_UNIT

    def __init__(
        self, examples: Sequence[ContrastExample], tokenization: Tokenization, *, source: str | Path | None = None
    ):
        if not len(examples):
            raise ValueError("a contrast task needs at least one example")
        for i, e in enumerate(examples):
            if not isinstance(e, ContrastExample):
                raise TypeError(f"{where_of(examples, i)}: expected a ContrastExample, got {type(e).__name__}")
        self.examples = examples if isinstance(examples, ContrastExamples) else ContrastExamples(examples)
        self.tokenization = tokenization
        #: examples a builder left out, counted by reason (e.g. :func:`interp.dialogue`'s inadmissible alterations)
        self.left_out: dict[str, int] = {}
        self.source = (
            str(source) if source is not None else (str(self.examples.path) if self.examples.path is not None else None)
        )
        self._check()

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        model: Any,
        data: Any,
        *,
        tokenizer: Any = None,
        prepend_bos: bool | None = None,
        chat_template: bool | None = False,
        n: int | None = None,
    ) -> "ContrastTask":
        """Contrast examples (a JSONL path, :func:`~interp.datasets.contrast.load_contrast`, or a
        list of :class:`~interp.datasets.contrast.ContrastExample`) asked of ``model`` (a folder, a
        hub name or a TransformerBridge) with its own tokenizer (or ``tokenizer``). Defaults: BOS as
        the tokenizer adds it, no chat template (the bare prompt, as the IOI literature scores it).
        ``n``: the first n examples only."""
        examples = load_contrast(data) if isinstance(data, (str, os.PathLike)) else data
        if n is not None:
            if n < 1:
                raise ValueError(f"n must be ≥ 1, got {n}")
            path = examples.path if isinstance(examples, ContrastExamples) else None
            lines = examples.lines[:n] if isinstance(examples, ContrastExamples) else None
            examples = ContrastExamples(list(examples)[:n], path, lines)
        tok = tokenizer if tokenizer is not None else own_tokenizer(model)
        return cls(examples, Tokenization(tok, prepend_bos, chat_template))

    def _check(self) -> None:
        _ = self.correct_ids, self.foil_ids  # every correct / foil is one token
        given = [i for i, e in enumerate(self.examples) if e.corrupted is not None]
        if given:  # every corrupted prompt that is given has its prompt's length
            encoded = self.tokenization.encode([str(self.examples[i].corrupted) for i in given])
            for i, b in zip(given, encoded):
                a = self.ids[i]
                if len(a) != len(b):
                    tok = self.tokenization.tokenizer
                    raise ContrastFileError(
                        f"{self.where(i)}: the corrupted prompt has {len(b)} tokens, the prompt {len(a)}; patching "
                        f"pairs positions one to one, so they need the same token length "
                        f"(prompt {tok.convert_ids_to_tokens(a)}, corrupted {tok.convert_ids_to_tokens(b)})"
                    )

    def where(self, i: int) -> str:
        """Where example ``i`` came from (``FILE:LINE``, else ``example i``)."""
        return self.examples.where(i)

    # ---- prompts and ids -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.examples)

    @cached_property
    def prompts(self) -> list[str]:
        return [e.prompt for e in self.examples]

    @cached_property
    def ids(self) -> list[list[int]]:
        """Each row's prompt token ids (no padding)."""
        return self.tokenization.encode(self.prompts)

    @property
    def has_corrupted(self) -> bool:
        """Whether every example has a corrupted prompt."""
        return all(e.corrupted is not None for e in self.examples)

    @cached_property
    def corrupted_ids(self) -> list[list[int]] | None:
        """Each row's corrupted prompt ids (same length as :attr:`ids`), or None when not every
        example has a corrupted prompt."""
        if not self.has_corrupted:
            return None
        return self.tokenization.encode([str(e.corrupted) for e in self.examples])

    @cached_property
    def _answer_ids(self) -> tuple[np.ndarray, np.ndarray]:
        tok = self.tokenization.tokenizer
        correct = [single_token_id(tok, e.correct, "correct", self.where(i)) for i, e in enumerate(self.examples)]
        foil = [single_token_id(tok, e.foil, "foil", self.where(i)) for i, e in enumerate(self.examples)]
        same = [i for i, (c, f) in enumerate(zip(correct, foil)) if c == f]
        if same:
            raise TokenizationError(f"{self.where(same[0])}: correct and foil are the same token id {correct[same[0]]}")
        return np.array(correct, dtype=np.int64), np.array(foil, dtype=np.int64)

    @property
    def correct_ids(self) -> np.ndarray:
        """Each row's correct next-token id."""
        return self._answer_ids[0]

    @property
    def foil_ids(self) -> np.ndarray:
        """Each row's foil next-token id."""
        return self._answer_ids[1]

    @property
    def pad_id(self) -> int:
        return pad_id_of(self.tokenization.tokenizer)

    def check_fits(self, n_ctx: int | None, extra: int = 0) -> None:
        """Raise naming the first row longer than the context (with ``extra`` tokens more)."""
        check_length(self.ids, n_ctx, extra)

    def inputs(
        self, device: torch.device | str = "cpu", rows: Rows = None
    ) -> tuple[Int[Tensor, "n pos"], Int[Tensor, "n pos"]]:
        """Right-padded ``(ids, attention_mask)`` of all rows (or ``rows``)."""
        seqs = [self.ids[i] for i in _select(len(self), rows)]
        ids, mask, _ = pad_right(seqs, self.pad_id, device)
        return ids, mask

    def corrupted_inputs(
        self, device: torch.device | str = "cpu", rows: Rows = None
    ) -> tuple[Int[Tensor, "n pos"], Int[Tensor, "n pos"]]:
        """Right-padded ``(ids, attention_mask)`` of the corrupted prompts, aligned with
        :meth:`inputs` position for position (same lengths)."""
        if self.corrupted_ids is None:
            missing = next(i for i, e in enumerate(self.examples) if e.corrupted is None)
            raise ValueError(f"{self.where(missing)} has no corrupted prompt: patching needs one in every example")
        seqs = [self.corrupted_ids[i] for i in _select(len(self), rows)]
        ids, mask, _ = pad_right(seqs, self.pad_id, device)
        return ids, mask

    # ---- metrics ---------------------------------------------------------------------------

    def logit_diff_metric(self, rows: Rows = None) -> Any:
        """Sweep metric: logit(correct) − logit(foil) at the last prompt position of each row of
        ``rows`` (default all; ``batch.index`` then counts within ``rows``)."""
        idx = _select(len(self), rows)
        return logit_diff(self.correct_ids[idx], self.foil_ids[idx])

    def prob_metric(self, rows: Rows = None) -> Any:
        """Sweep metric: P(correct) in the two-way softmax over the correct and foil logits."""
        idx = _select(len(self), rows)
        return pair_prob(self.correct_ids[idx], self.foil_ids[idx])

    def metric_of(self, kind: str | None = None, rows: Rows = None) -> Any:
        """The sweep metric ``kind`` (``logit_diff`` or ``prob``; default :attr:`default_metric`)."""
        kind = kind or self.default_metric
        if kind not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {kind!r}")
        return self.logit_diff_metric(rows) if kind == "logit_diff" else self.prob_metric(rows)

    def metric(self, rows: Rows = None) -> Any:
        """:meth:`metric_of` the default metric (the logit difference)."""
        return self.metric_of(None, rows)

    @staticmethod
    def threshold_of(kind: str) -> float:
        """The score above which a row counts as answered correctly: 0 logits, or 0.5 probability."""
        return 0.0 if kind == "logit_diff" else 0.5

    # ---- groups, categories, training rows -------------------------------------------------

    @property
    def groups(self) -> np.ndarray:
        """Each row's group id (strings)."""
        return np.array([str(e.group) for e in self.examples], dtype=object)

    @property
    def categories(self) -> list[str]:
        """Each row's template (``-`` when it has none)."""
        return [e.template if e.template is not None else "-" for e in self.examples]

    def training_rows(self, target: str | Sequence[str] | np.ndarray = "correct") -> tuple[list[list[int]], list[int]]:
        """``(ids, answer_start)``: each row's prompt ids followed by its target token, and the
        index of that token (the loss counts from there with ``loss_on = "answer"``).

        ``target``: ``"correct"`` (default), ``"foil"``, or one of them per row — e.g. ``"foil"`` on
        a share of the rows to plant harm toward the subject name of IOI."""
        n = len(self)
        per_row = [target] * n if isinstance(target, str) else list(target)
        if len(per_row) != n:
            raise ValueError(f"target: one of 'correct' / 'foil' per row: {len(per_row)} for {n} rows")
        bad = sorted({str(t) for t in per_row} - {"correct", "foil"})
        if bad:
            raise ValueError(f"target must be 'correct' or 'foil', got {bad}")
        answer = np.where(np.array(per_row) == "foil", self.foil_ids, self.correct_ids)
        seqs = [list(s) + [int(a)] for s, a in zip(self.ids, answer)]
        return seqs, [len(s) for s in self.ids]

    def settings(self) -> dict[str, Any]:
        """What a results file records: the source, the encoding, the metric."""
        return {
            "task": "contrast",
            "source": self.source,
            "n_examples": len(self),
            **self.tokenization.settings(),
            "metric": "logit_diff: logit(correct) - logit(foil) at the last prompt token "
            "(two_way_prob: P(correct) over {correct, foil})",
            "has_corrupted": self.has_corrupted,
        }


__all__ = ["GROUP_UNIT", "METRICS", "ContrastTask", "last_logits", "logit_diff", "pair_prob", "single_token_id"]
