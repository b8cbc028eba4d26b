"""Tasks built in one call for a loaded :class:`~interp.api.model.Model`: IOI prompts, a contrast
JSONL file (or a list of examples), a PragWorld CSV, the dialogue world's natural conversations. Each returns the task every analysis takes
(:class:`interp.tasks.ContrastTask` / :class:`interp.tasks.YesNoTask`), asked with the model's own
tokenizer; a bad file, an answer that is not one token for this tokenizer, or a prompt longer than
the model's context fails here, with the row named, before anything runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from interp.api.model import Model, as_model
from interp.datasets.contrast import ContrastExample
from interp.datasets.ioi import ioi_examples
from interp.tasks import ContrastTask, YesNoTask


def _fits(task: Any, model: Model) -> Any:
    task.check_fits(int(model.bridge.cfg.n_ctx))
    return task


def ioi(
    model: Model | str,
    n: int = 240,
    *,
    seed: int = 0,
    templates: Sequence[str] | None = None,
) -> ContrastTask:
    """``n`` indirect-object-identification prompts (Wang et al. 2022; :mod:`interp.datasets.ioi`):
    correct the indirect object, foil the subject, corrupted the ABC prompt; ABBA / BABA balanced,
    names single tokens for this model's tokenizer; seeded."""
    m = as_model(model)
    task = ContrastTask.build(
        m.source, ioi_examples(m.tokenizer, n, seed=seed, templates=templates), tokenizer=m.tokenizer
    )
    task.source = f"ioi(n={n}, seed={seed}{'' if templates is None else f', templates={list(templates)!r}'})"
    return _fits(task, m)


def contrast(
    model: Model | str,
    data: str | os.PathLike | Sequence[ContrastExample],
    *,
    n: int | None = None,
    chat_template: bool = False,
) -> ContrastTask:
    """Contrast examples (a JSONL file as ``interp data ioi`` writes, or a list of
    :class:`~interp.datasets.contrast.ContrastExample`): a prompt, a correct and a foil next token
    (:doc:`/concepts/contrast-tasks`). ``n``: the first n only; ``chat_template``: wrap each prompt
    in the model's chat template."""
    m = as_model(model)
    task = ContrastTask.build(m.source, data, tokenizer=m.tokenizer, chat_template=chat_template, n=n)
    return _fits(task, m)


def pragworld(
    model: Model | str,
    data: str | os.PathLike,
    *,
    n: int | None = None,
    grouping: str = "clean",
    chat_template: bool = False,
) -> YesNoTask:
    """A PragWorld CSV (e.g. ``../shared/data/pragworld/Manual_Dataset_500_Final.csv``) asked as
    yes/no questions at the label prompt (:doc:`/concepts/pragworld`); ``n``: the first n rows;
    ``grouping``: ``"clean"`` or ``"reference"`` (:func:`interp.datasets.pragworld.load_pragworld`)."""
    from interp.datasets.pragworld import load_pragworld

    pw = load_pragworld(data, grouping=grouping)  # a malformed file fails here, naming the row
    rows = pw.rows if n is None else pw.rows.iloc[:n]
    if rows.empty:
        raise ValueError(f"no data rows in {data}")
    m = as_model(model)
    task = YesNoTask.pragworld(m.source, rows, prompt="label", chat_template=chat_template, tokenizer=m.tokenizer)
    task.source = str(data)
    return _fits(task, m)


def dialogue(
    model: Model | str,
    groups: int = 40,
    *,
    seed: int = 0,
    split: str = "heldout",
    chat_template: bool = False,
) -> ContrastTask:
    """``groups`` natural conversations of the dialogue world, each an original, PragWorld's seven
    alterations where admissible (gold recomputed by the world) and a paraphrase, asked as a cloze
    ("So right now the key is in the" → the place or a foil; :doc:`/concepts/dialogue-cloze`).
    ``split``: ``"train"`` or ``"heldout"`` (template families and word lists disjoint); every
    example's ``meta`` carries its category and effect (``Flip`` / ``Invariant``) for
    :func:`~interp.analysis.evaluation.dialogue.evaluate_dialogue`. Alterations a group does not admit
    are left out and counted in ``task.left_out`` (category → groups)."""
    from interp.worlds.dialogue.natural import DialogueConfig, dialogue_examples

    m = as_model(model)
    made = dialogue_examples(m.tokenizer, DialogueConfig(groups=groups, seed=seed, split=split))
    task = ContrastTask.build(m.source, list(made.examples), tokenizer=m.tokenizer, chat_template=chat_template)
    task.source = f"dialogue(groups={groups}, seed={seed}, split={split!r})"
    task.left_out = {c: k for c, k in made.missing.items() if k}
    return _fits(task, m)


__all__ = ["contrast", "dialogue", "ioi", "pragworld"]
