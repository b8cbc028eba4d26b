"""What a fine-tune trains on and is evaluated on: a :class:`Task` built from the checkpoint and
``[data]`` of :class:`~interp.config.FinetuneConfig`.

- ``world`` sequences (any interp checkpoint): the run's ``data/train.txt`` / ``data/test.txt``
  beside the checkpoint by default; ULA labels are the world's current-state label at each row's
  last input position (the dialogue world: the probe's gold answer, :func:`~interp.train.regularisers.ula_labels`);
- ``pragworld`` QA rows (a user's HF model with its own tokenizer): each row asked exactly as
  ``interp sweep`` and ``interp pragworld eval --prompt label`` ask it
  (:class:`interp.tasks.YesNoTask`: the label prompt ending in ``Label:``, the model's own BOS
  rule), followed by the gold answer's token; the next-token loss is on that answer token only
  (``data.loss_on = "answer"``, the default: supervised fine-tuning with the prompt masked, as the
  reference's LLaMA-Factory SFT ran it) or on every token (``"all"``); the regularisers see every
  real token either way. ULA labels are the gold.
- ``contrast`` examples (a JSONL file of :mod:`interp.datasets.contrast`, e.g. ``interp data ioi``;
  an HF model with its own tokenizer): each asked as ``interp sweep`` / ``interp eval`` ask it
  (:class:`interp.tasks.ContrastTask`), followed by its *correct* token, the loss on that token
  (``loss_on = "answer"``, default) or on every token; ULA labels are the correct token. Evaluation
  adds ``contrast_accuracy``, ``contrast_logit_diff`` and ``contrast_p_correct`` on the held-out
  examples, and the sweep's effects are on the logit difference.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from interp.config import ConfigError, FinetuneData


@dataclass
class Task:
    """Training rows (token ids, one ULA label per row), and what evaluation needs."""

    kind: str
    train_ids: Tensor
    labels: Tensor
    classes: tuple[str, ...]
    pad_id: int
    eval_ids: Tensor
    world: Any = None
    eval_sequences: list[list[str]] | None = None
    qa: dict[str, Any] | None = None
    source: dict[str, str] = field(default_factory=dict)
    #: what ULA's labels are (names the heads' task)
    label_name: str = "yes/no gold"
    #: world data: every held-out sequence (uncapped; dialogue QA accuracy reads them)
    heldout_sequences: list[list[str]] | None = None
    #: dialogue QA benchmarks already drawn, by (groups, seed)
    benchmarks: dict[Any, Any] = field(default_factory=dict)
    #: per training row, the first token position the next-token loss counts (the answer's);
    #: None: every token
    loss_from: Tensor | None = None

    def save_model(self, model: nn.Module, path: Path) -> Path:
        if self.world is not None:
            from interp.models.checkpoint import save_checkpoint

            return save_checkpoint(model, self.world, path)
        if self.qa is None:
            raise ValueError("a PragWorld task saves its model with its tokenizer, and this task has none")
        # a transformers model: torch types an nn.Module's unknown attributes as Tensor | Module
        model.save_pretrained(path, safe_serialization=True)  # type: ignore[operator]
        self.qa["tokenizer"].save_pretrained(path)
        return path


def _cap(items: Any, n: int) -> Any:
    return items if n <= 0 else items[:n]


def world_task(checkpoint: Path, data: FinetuneData) -> Task:
    """Sequences of the checkpoint's world; labels: the current state at each row's last position
    (the dialogue world: the gold answer there, :func:`~interp.train.regularisers.ula_labels`)."""
    from interp.models.checkpoint import read_meta, run_data_dir
    from interp.train.regularisers import LabelCoding, ula_labels
    from interp.worlds import world_from_spec
    from interp.worlds.encoding import encode_sequences
    from interp.worlds.io import read_sequences

    meta = read_meta(checkpoint)
    if meta is None:
        raise ConfigError(f"{checkpoint} carries no world (no interp.json): world data needs an interp checkpoint")
    world = world_from_spec(meta["world"])
    train_path = Path(data.train) if data.train else run_data_dir(checkpoint) / "train.txt"
    test_path = Path(data.test) if data.test else run_data_dir(checkpoint) / "test.txt"
    for what, p in (("train", train_path), ("test", test_path)):
        if not p.is_file():
            raise FileNotFoundError(f"data.{what}: {p} does not exist (give data.{what} = a sequence file)")
    train = _cap(read_sequences(train_path, world), data.n_train)
    heldout = read_sequences(test_path, world)
    test = _cap(heldout, data.n_eval)
    config = json.loads((checkpoint / "config.json").read_text())
    n_ctx = config.get("n_positions") or config.get("max_position_embeddings")
    raw, label_name = ula_labels(world, train)
    coding = LabelCoding.fit(raw)
    return Task(
        kind="world",
        train_ids=encode_sequences(train, world.vocab, n_ctx),
        labels=coding.encode(raw),
        classes=coding.classes,
        pad_id=world.vocab.pad_id,
        eval_ids=encode_sequences(test, world.vocab, n_ctx),
        world=world,
        eval_sequences=test,
        source={"train": str(train_path), "test": str(test_path)},
        label_name=label_name,
        heldout_sequences=heldout,
    )


def free_pad_id(rows: Sequence[Sequence[int]], preferred: int | None, vocab_size: int) -> int:
    """A token id to pad ``rows`` with that none of them uses (the trainer masks the pad id out of
    the loss): ``preferred`` when it is free, else the lowest free id."""
    used = {t for r in rows for t in r}
    if preferred is not None and preferred not in used:
        return int(preferred)
    for i in range(vocab_size):
        if i not in used:
            return i
    raise ValueError("every token id occurs in the data: no id is free to mark padding")


def pragworld_task(checkpoint: Path, data: FinetuneData) -> Task:
    """PragWorld rows asked as everywhere else (:class:`interp.tasks.YesNoTask`: the label prompt,
    the model's own tokenizer settings); trained on prompt + gold answer token, with the loss on
    the answer (``data.loss_on = "answer"``, the default) or on every token (``"all"``)."""
    from interp.datasets.pragworld import first_groups, load_pragworld
    from interp.tasks import YesNoTask

    if not data.train or not data.test:
        raise ConfigError("pragworld data needs data.train and data.test (CSV files)")
    train_rows = _cap(load_pragworld(data.train).rows, data.n_train)
    test_rows = first_groups(load_pragworld(data.test).rows, data.n_eval)
    train = YesNoTask.pragworld(checkpoint, train_rows, prompt="label", prepend_bos=data.prepend_bos)
    test = YesNoTask.pragworld(
        checkpoint, test_rows, prompt="label", prepend_bos=data.prepend_bos, tokenizer=train.tokenization.tokenizer
    )
    tr, answer_start = train.training_rows()
    te = test.ids
    config = json.loads((checkpoint / "config.json").read_text())
    pad = free_pad_id(tr + te, train.pad_id, int(config["vocab_size"]))

    def pad_rows(rows: list[list[int]]) -> Tensor:
        width = max(len(r) for r in rows)
        t = torch.full((len(rows), width), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            t[i, : len(r)] = torch.tensor(r)
        return t

    loss_on = data.loss_on or "answer"
    return Task(
        kind="pragworld",
        train_ids=pad_rows(tr),
        labels=torch.tensor(train.gold, dtype=torch.long),
        classes=("no", "yes"),
        pad_id=pad,
        eval_ids=pad_rows(te),
        qa={
            "tokenizer": train.tokenization.tokenizer,
            "yes_id": train.yes_id,
            "no_id": train.no_id,
            "rows": test.rows,
            "task": test,
        },
        source={"train": str(data.train), "test": str(data.test)},
        loss_from=torch.tensor(answer_start, dtype=torch.long) if loss_on == "answer" else None,
    )


def _pad_rows(rows: list[list[int]], pad: int) -> Tensor:
    width = max(len(r) for r in rows)
    t = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        t[i, : len(r)] = torch.tensor(r)
    return t


def contrast_task(checkpoint: Path, data: FinetuneData) -> Task:
    """Contrast examples asked as everywhere else (:class:`interp.tasks.ContrastTask`), trained on
    prompt + correct token (the loss on it, or on every token); ULA labels: the correct token."""
    from interp.tasks import ContrastTask
    from interp.train.regularisers import LabelCoding

    if not data.train or not data.test:
        raise ConfigError("contrast data needs data.train and data.test (JSONL files of contrast examples)")
    train = ContrastTask.build(checkpoint, data.train, prepend_bos=data.prepend_bos, n=data.n_train or None)
    test = ContrastTask.build(
        checkpoint,
        data.test,
        prepend_bos=data.prepend_bos,
        n=data.n_eval or None,
        tokenizer=train.tokenization.tokenizer,
    )
    tr, answer_start = train.training_rows("correct")
    config = json.loads((checkpoint / "config.json").read_text())
    pad = free_pad_id(tr + test.ids, train.pad_id, int(config["vocab_size"]))
    tok = train.tokenization.tokenizer
    raw = tok.convert_ids_to_tokens([int(i) for i in train.correct_ids])
    coding = LabelCoding.fit(raw)
    loss_on = data.loss_on or "answer"
    return Task(
        kind="contrast",
        train_ids=_pad_rows(tr, pad),
        labels=coding.encode(raw),
        classes=coding.classes,
        pad_id=pad,
        eval_ids=_pad_rows(test.ids, pad),
        qa={"tokenizer": tok, "task": test},
        source={"train": str(data.train), "test": str(data.test)},
        label_name="the correct next token",
        loss_from=torch.tensor(answer_start, dtype=torch.long) if loss_on == "answer" else None,
    )


def load_task(checkpoint: Path, data: FinetuneData) -> Task:
    """The fine-tuning task of a config's ``[data]``: world sequences, PragWorld rows or contrast examples."""
    if data.kind == "world":
        return world_task(checkpoint, data)
    return pragworld_task(checkpoint, data) if data.kind == "pragworld" else contrast_task(checkpoint, data)


__all__ = ["Task", "contrast_task", "free_pad_id", "load_task", "pragworld_task", "world_task"]
