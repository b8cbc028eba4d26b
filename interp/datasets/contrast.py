"""Contrast examples and their file: a prompt, the next token that is right and one that is wrong.

A *contrast example* asks a model to prefer one next token over another after a prompt — the
setting of indirect-object identification (Wang et al. 2022: "When Mary and John went to the
store, John gave a drink to" → `` Mary`` over `` John``) and of most patching studies. Its metric is
the logit difference correct − foil at the last prompt position (and the two-way probability of the
correct token over {correct, foil}); a *corrupted* prompt of the same token length (the ABC prompt
of IOI: three other names) is what activation patching restores from. A PragWorld yes/no question is
the same shape with correct / foil = the gold answer / the other one.

**The file (JSONL)**: one JSON object a line; blank lines are skipped.

- ``prompt`` (string, required): the text the model continues;
- ``correct`` (string, required): the right next token as text, usually with its leading space
  (`` Mary``); it must be one token of the model's tokenizer (checked by the task,
  :class:`interp.tasks.ContrastTask`);
- ``foil`` (string, required): the wrong next token, one token too, different from ``correct``;
- ``group`` (string or integer, required): the resampling unit of intervals and verdicts — examples
  that share most of their text share a group (IOI: template × name pair);
- ``corrupted`` (string, optional): a prompt of the same token length as ``prompt`` (checked by the
  task) for patching;
- ``template`` (string, optional): what the per-template tables group by (the task's categories);
- ``meta`` (object, optional): anything else (IOI: the order ABBA/BABA, the names, place, object).

Unknown keys are an error (a misspelt ``corupted`` would otherwise vanish). :func:`load_contrast`
reads a file and names the file and line of the first bad row; :func:`write_contrast` writes one.
:func:`data_file_kind` is the one place that says what a ``--data`` file is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

#: the keys a line must have, and those it may have
REQUIRED = ("prompt", "correct", "foil", "group")
OPTIONAL = ("corrupted", "template", "meta")
#: what a ``--data`` file can be (:func:`data_file_kind`)
DATA_KINDS = ("pragworld", "contrast", "sequences")


class ContrastFileError(ValueError):
    """A contrast file (or example) that cannot be read: names the file and line."""


@dataclass(frozen=True)
class ContrastExample:
    """One contrast example (module docstring): ``prompt`` continued by ``correct`` rather than
    ``foil``; ``corrupted``: a prompt of the same token length for patching (or None); ``group``:
    the resampling unit; ``template``: the category of per-template tables (or None); ``meta``:
    anything else, JSON values."""

    prompt: str
    correct: str
    foil: str
    corrupted: str | None = None
    group: str | int = 0
    template: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = example_problem(self)
        if problem:
            raise ContrastFileError(problem)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of one line (optional keys only when set)."""
        out: dict[str, Any] = {"prompt": self.prompt, "correct": self.correct, "foil": self.foil, "group": self.group}
        if self.corrupted is not None:
            out["corrupted"] = self.corrupted
        if self.template is not None:
            out["template"] = self.template
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


def example_problem(e: Any) -> str | None:
    """What is wrong with an example's values (None: nothing) — types, empty texts, correct = foil.
    ``e``: a :class:`ContrastExample` or a line's dict."""
    get = e.get if isinstance(e, Mapping) else (lambda k, d=None: getattr(e, k, d))
    for key in ("prompt", "correct", "foil"):
        v = get(key)
        if not isinstance(v, str) or not v:
            return f"{key} must be a non-empty string, got {v!r}"
    if get("correct") == get("foil"):
        return f"correct and foil are the same text {get('correct')!r}"
    corrupted = get("corrupted")
    if corrupted is not None and (not isinstance(corrupted, str) or not corrupted):
        return f"corrupted must be a non-empty string when given, got {corrupted!r}"
    group = get("group", 0)
    if isinstance(group, bool) or not isinstance(group, (str, int)):
        return f"group must be a string or an integer, got {group!r}"
    template = get("template")
    if template is not None and not isinstance(template, str):
        return f"template must be a string when given, got {template!r}"
    meta = get("meta")
    if meta is not None and not isinstance(meta, Mapping):
        return f"meta must be an object, got {meta!r}"
    return None


class ContrastExamples(list):
    """The examples of a file, in order, remembering where each came from: ``path`` and ``lines``
    (the 1-based line number of each example), so a task can name the line of a bad example."""

    def __init__(
        self,
        examples: Iterable[ContrastExample] = (),
        path: str | Path | None = None,
        lines: Iterable[int] | None = None,
    ):
        super().__init__(examples)
        self.path = None if path is None else Path(path)
        self.lines = list(lines) if lines is not None else list(range(1, len(self) + 1))
        if len(self.lines) != len(self):
            raise ValueError(f"{len(self.lines)} line numbers for {len(self)} examples")

    def where(self, i: int) -> str:
        """``FILE:LINE`` of example ``i`` (``example i`` when not read from a file)."""
        if self.path is None:
            return f"example {i}"
        return f"{self.path}:{self.lines[i]}"


def where_of(examples: Any, i: int) -> str:
    """Where example ``i`` of ``examples`` came from (a file line, else its index)."""
    return examples.where(i) if isinstance(examples, ContrastExamples) else f"example {i}"


def parse_line(obj: Any, where: str) -> ContrastExample:
    """One decoded JSON line → a :class:`ContrastExample`; errors say ``where``."""
    if not isinstance(obj, dict):
        raise ContrastFileError(
            f"{where}: a line must be a JSON object with the keys {', '.join(REQUIRED)}, got {type(obj).__name__}"
        )
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise ContrastFileError(
            f"{where}: missing key(s) {', '.join(missing)} (a line needs {', '.join(REQUIRED)}; "
            f"may have {', '.join(OPTIONAL)})"
        )
    unknown = sorted(set(obj) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ContrastFileError(
            f"{where}: unknown key(s) {', '.join(unknown)} (allowed: "
            f"{', '.join(REQUIRED + OPTIONAL)}; put anything else under meta)"
        )
    problem = example_problem(obj)  # before construction: the message names the line
    if problem:
        raise ContrastFileError(f"{where}: {problem}")
    return ContrastExample(
        prompt=obj["prompt"],
        correct=obj["correct"],
        foil=obj["foil"],
        corrupted=obj.get("corrupted"),
        group=obj["group"],
        template=obj.get("template"),
        meta=obj.get("meta") or {},
    )


def load_contrast(path: str | PathLike[str]) -> ContrastExamples:
    """Read a contrast JSONL file (module docstring) into :class:`ContrastExamples` (a list of
    :class:`ContrastExample` that remembers each one's line). Errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"contrast file {path} does not exist")
    examples, lines = [], []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ContrastFileError(f"{path}:{n}: not a JSON object ({e.msg} at column {e.colno})") from None
            examples.append(parse_line(obj, f"{path}:{n}"))
            lines.append(n)
    if not examples:
        raise ContrastFileError(f"{path}: no examples (an empty file)")
    return ContrastExamples(examples, path, lines)


def write_contrast(examples: Iterable[ContrastExample], path: str | Path) -> Path:
    """Write examples as a contrast JSONL file (one object a line, UTF-8, keys in the documented
    order); returns the path. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps(e.to_dict(), ensure_ascii=False) for e in examples]
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def data_file_kind(path: str | Path) -> str:
    """What a ``--data`` file holds, the one dispatch of every command: ``"pragworld"`` (a
    ``.csv``: PragWorld yes/no rows), ``"contrast"`` (a ``.jsonl``, or any file whose first
    non-blank line is a JSON object: contrast examples) or ``"sequences"`` (a world's sequence
    file: whitespace-separated tokens a line)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".csv":
        return "pragworld"
    if suffix == ".jsonl":
        return "contrast"
    if p.is_file():
        with p.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.strip():
                    return "contrast" if line.lstrip().startswith("{") else "sequences"
    return "sequences"


__all__ = [
    "DATA_KINDS",
    "OPTIONAL",
    "REQUIRED",
    "ContrastExample",
    "ContrastExamples",
    "ContrastFileError",
    "data_file_kind",
    "example_problem",
    "load_contrast",
    "parse_line",
    "where_of",
    "write_contrast",
]
