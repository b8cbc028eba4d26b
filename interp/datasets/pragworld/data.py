"""Loading the PragWorld CSV files into explicit groups (paper §3; reference facts: ``pragworld.md``).

PragWorld asks yes/no questions about two-person conversations. Each *original* conversation is
followed, row by row, by its minimally altered versions; a model is robustly right on a *group*
(the original and its alterations) only if it answers every row of it correctly. The files mark
groups only by row order, so the loader turns that order into explicit group ids.

Two layouts are read (the header decides):

- **manual split** (``Manual_Dataset_500_Final.csv``): ``Local Context, Question, Answer,
  Perturbation?, Perturbation Target, Perturbation Category, Perturbation Effect``;
- **synthetic split** (``synthetic_final.csv``): the same plus ``Seed Index, Utterance Index,
  Old Word, New Word``; answers may be ``cannot answer`` / ``notsure`` and the effect column says
  ``Possible`` / ``Not Possible`` instead of flip / invariant.

Normalisation (nothing is dropped silently; a cell that cannot be read is an error naming the
data row, the CSV line and the column):

- ``gold``: 1 for yes, 0 for no; ``cannot answer`` and ``notsure`` are scored as no (the
  published evaluation maps both to 0); the three-way label is kept in ``answer``.
- ``altered``: the ``Perturbation?`` flag, read whitespace- and case-insensitively (``TRUE``,
  ``TRUE ``, ``true``, ``1`` …) under ``grouping="clean"``.
- ``category``: one of :data:`CATEGORIES` whatever the spelling (trailing spaces, case, line
  breaks, the typos ``Variablle``, ``Substituion``, ``Quanity``, ``Quanifier``, and the synthetic
  split's subtypes such as ``Variable Swap: agent`` — the subtype is kept in ``subcategory``).
- ``effect``: ``flip`` | ``invariant`` (``Invarianat`` [sic] in the manual file) | None for
  originals. The synthetic file has no flip/invariant label, so there the effect is derived: an
  alteration is a flip when its scored gold (yes = 1, anything else = 0) differs from its
  original's (``effect_source = "derived"``; the raw cell stays in ``effect_raw``).
- ``n_utterances``: speaker turns in the conversation (lines that start with ``Speaker:``; a
  wrapped line without a speaker continues the turn before) → ``length_bucket``: short < 11,
  medium 11–15, long > 15 (paper, length analysis).

**Grouping.** The manual file has ten ``Perturbation?`` cells that read ``TRUE `` (trailing
space). The published evaluation (``src/datautils.py`` of SachinVashisth/PRAGWORLD) tests
``cell.lower() == "true"``, so it reads those ten alterations as *unaltered* rows; each then
starts a new group, which gives the published 98 groups (98 originals, 402 alterations).
``grouping="clean"`` (the default) reads them as the alterations they are: 88 groups and 412
alterations. ``grouping="reference"`` reproduces the published reading, and with it the
published Table 1 numbers. Only the grouping and the ``altered`` column differ; categories,
effects and gold labels are the same under both.

The file ends with three summary rows (counts 77, 44, 33 in the ``Perturbation?`` column,
everything else empty): trailing records with empty conversation, question and answer whose
other cells are empty or integers are dropped and reported in :attr:`PragWorldData.dropped`.
The same record in the middle of the data is an error.
"""

from __future__ import annotations

import csv
import difflib
import os
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

#: the seven alterations (paper §3.1), canonical key → the name the manual file uses
CATEGORIES: dict[str, str] = {
    "negation": "Negation",
    "variable_substitution": "Variable Substitution",
    "quantity_change": "Quantity Change",
    "variable_swap": "Variable Swap",
    "quantifier_change": "Quantifier Change",
    "connective_change": "Logical Connective Change",
    "inconsistent_data": "Injecting Inconsistent Data",
}

GROUPINGS = ("clean", "reference")
LENGTH_BUCKETS = ("short", "medium", "long")

#: the manual split's columns (the synthetic split adds :data:`SYNTHETIC_EXTRA`)
MANUAL_COLUMNS = (
    "Local Context",
    "Question",
    "Answer",
    "Perturbation?",
    "Perturbation Target",
    "Perturbation Category",
    "Perturbation Effect",
)
SYNTHETIC_EXTRA = ("Seed Index", "Utterance Index", "Old Word", "New Word")
_FIELD = {
    "Local Context": "context",
    "Question": "question",
    "Answer": "answer",
    "Perturbation?": "flag",
    "Perturbation Target": "target",
    "Perturbation Category": "category",
    "Perturbation Effect": "effect",
    "Seed Index": "seed_index",
    "Utterance Index": "utterance_index",
    "Old Word": "old_word",
    "New Word": "new_word",
}

_CATEGORY_ALIASES = {
    "negation": "negation",
    "variable substitution": "variable_substitution",
    "quantity change": "quantity_change",
    "variable swap": "variable_swap",
    "quantifier change": "quantifier_change",
    "logical connective change": "connective_change",
    "connective change": "connective_change",
    "injecting inconsistent data": "inconsistent_data",
    "inconsistent data": "inconsistent_data",
}
#: misspellings found in the published files (the published evaluation fixes the same four)
_TYPOS = {"variablle": "variable", "substituion": "substitution", "quanity": "quantity", "quanifier": "quantifier"}
_NONE_CELLS = {"", "-", "none", "not applicable", "n/a", "na"}
_ANSWERS = {
    "yes": ("yes", 1),
    "no": ("no", 0),
    "cannot answer": ("cannot answer", 0),
    "notsure": ("cannot answer", 0),
    "not sure": ("cannot answer", 0),
}
_TRUE, _FALSE = {"true", "1"}, {"false", "0"}
_SPEAKER = re.compile(r"""^\s*["'“]?\s*(?:\d+\s*[:.)]\s*)?[A-Za-z][\w .'’-]{0,24}:""")


class PragWorldFormatError(ValueError):
    """A PragWorld file cannot be read as it stands; the message names the row, line and column."""


@dataclass(frozen=True)
class Dropped:
    """Records of the file that are not data rows, and why (e.g. the trailing summary rows).

    ``count`` records were skipped; ``lines`` are their first CSV lines (1 = the header) and
    ``values`` their non-empty cells. Also readable as a mapping (``dropped["count"]``).
    """

    count: int = 0
    reason: str = "nothing dropped"
    lines: tuple[int, ...] = ()
    values: tuple[tuple[str, ...], ...] = ()

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "reason": self.reason,
            "lines": list(self.lines),
            "values": [list(v) for v in self.values],
        }

    def __str__(self) -> str:
        return f"dropped {self.count}: {self.reason}" if self.count else "dropped nothing"


@dataclass
class PragWorldData:
    """The rows of a PragWorld file with explicit groups.

    ``rows`` has one row per data row in file order: ``row`` (0-based data-row index), ``group``
    (0-based id: an original row and the alterations after it), ``context``, ``question``,
    ``answer`` ('yes' | 'no' | 'cannot answer'), ``gold`` (1 = yes, 0 = no), ``altered``,
    ``target`` ('none' | 'context' | 'question'), ``category`` (a key of :data:`CATEGORIES` or
    None), ``subcategory``, ``effect`` ('flip' | 'invariant' | None), ``effect_source`` ('file' |
    'derived' | None), ``n_utterances``, ``length_bucket``, ``line`` (first CSV line of the record,
    1 = header) and the raw cells ``flag_raw``, ``category_raw``, ``effect_raw``; the synthetic
    split adds ``seed_index``, ``utterance_index``, ``old_word``, ``new_word``.
    """

    rows: pd.DataFrame
    dropped: Dropped
    path: Path | None
    grouping: str
    layout: str  # "manual" | "synthetic"

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def n_groups(self) -> int:
        return int(self.rows["group"].nunique())

    @property
    def flag_differences(self) -> list[int]:
        """Data rows whose ``Perturbation?`` cell the clean and reference readings disagree on."""
        raw = self.rows["flag_raw"]
        return [int(r) for r, c in zip(self.rows["row"], raw) if _flag_clean(c) != _flag_reference(c)]

    def with_grouping(self, grouping: str) -> PragWorldData:
        """The same rows under another grouping (see the module docstring)."""
        return PragWorldData(
            _apply_grouping(self.rows.copy(), grouping, self.path), self.dropped, self.path, grouping, self.layout
        )

    def summary(self) -> dict[str, Any]:
        r = self.rows
        return {
            "path": str(self.path) if self.path else None,
            "layout": self.layout,
            "grouping": self.grouping,
            "rows": len(r),
            "groups": self.n_groups,
            "altered": int(r["altered"].sum()),
            "yes": int(r["gold"].sum()),
            "no": int((r["gold"] == 0).sum()),
            "cannot_answer": int((r["answer"] == "cannot answer").sum()),
            "flag_differences": len(self.flag_differences),
            "dropped": self.dropped.to_dict(),
        }

    def describe(self) -> str:
        s = self.summary()
        return (
            f"{s['path'] or 'PragWorld data'} ({self.layout} split, grouping {self.grouping}): "
            f"{s['rows']} rows in {s['groups']} groups, {s['altered']} alterations; {self.dropped}"
        )


# ---- cell readers ----------------------------------------------------------------------------------


def _squash(text: str) -> str:
    """Lower case, line breaks and runs of whitespace folded into single spaces."""
    return " ".join(text.split()).lower()


def normalise_category(cell: str) -> tuple[str | None, str | None]:
    """``(category key or None, subtype or None)`` for a ``Perturbation Category`` cell.

    Accepts the seven names in any case/spacing, with line breaks, the published typos, a
    subtype after a colon (``Variable Swap: agent``) or words (``Quantity Change add for: object``),
    and close misspellings (difflib ratio ≥ 0.85 against a single name). ``-``, empty and
    ``Not applicable`` mean no alteration (None). Anything else raises ``ValueError``.
    """
    text = _squash(cell)
    if text in _NONE_CELLS:
        return None, None
    for wrong, right in _TYPOS.items():
        text = text.replace(wrong, right)
    head, _, sub = text.partition(":")
    head, sub = head.strip(), sub.strip()
    if head in _CATEGORY_ALIASES:
        return _CATEGORY_ALIASES[head], sub or None
    for alias in sorted(_CATEGORY_ALIASES, key=len, reverse=True):  # "quantity change add for"
        if head.startswith(alias + " "):
            rest = head[len(alias) :].strip()
            return _CATEGORY_ALIASES[alias], (f"{rest}: {sub}" if sub else rest) or None
    close = difflib.get_close_matches(head, list(_CATEGORY_ALIASES), n=2, cutoff=0.85)
    if len(close) == 1 or (len(close) == 2 and _CATEGORY_ALIASES[close[0]] == _CATEGORY_ALIASES[close[1]]):
        return _CATEGORY_ALIASES[close[0]], sub or None
    raise ValueError(
        f"unknown alteration category {cell!r} (expected one of: "
        f"{', '.join(CATEGORIES.values())}, or '-' for an original)"
    )


def _effect(cell: str) -> str | None:
    """'flip' | 'invariant' | 'possible' | 'not possible' | None."""
    text = _squash(cell)
    if text in _NONE_CELLS:
        return None
    if text in ("flip", "possible", "not possible"):
        return text
    if text == "invariant" or difflib.get_close_matches(text, ["invariant"], n=1, cutoff=0.8):
        return "invariant"  # "Invarianat" [sic] in the manual file
    raise ValueError(f"unknown alteration effect {cell!r} (expected Flip, Invariant, Possible, Not Possible, or '-')")


def _target(cell: str) -> str:
    text = _squash(cell)
    if text in _NONE_CELLS:
        return "none"
    if text in ("context", "question"):
        return text
    raise ValueError(f"unknown alteration target {cell!r} (expected None, Context or Question)")


def parse_answer(cell: str) -> tuple[str, int]:
    """An ``Answer`` cell as ``(answer, gold)``: yes → 1; no, cannot answer, not sure → 0; anything else is refused."""
    text = _squash(cell)
    if text in _ANSWERS:
        return _ANSWERS[text]
    raise ValueError(f"unknown answer {cell!r} (expected yes, no, cannot answer or notsure)")


def _flag_clean(cell: str) -> bool:
    text = cell.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"unknown Perturbation? flag {cell!r} (expected TRUE or FALSE)")


def _flag_reference(cell: str) -> bool:
    """The published reading: ``cell.lower() == "true"`` — a ``TRUE `` cell (trailing space) is False."""
    return _flag_clean(cell) and cell == cell.strip()


def count_utterances(context: str) -> int:
    """Speaker turns: lines starting ``Speaker:`` (optionally numbered ``3: Alice:``); a non-empty
    line without a speaker continues the turn before. A conversation with no speaker lines at
    all counts its non-empty lines."""
    lines = [ln for ln in context.split("\n") if ln.strip()]
    turns = sum(1 for ln in lines if _SPEAKER.match(ln))
    return turns if turns else len(lines)


def length_bucket(n_utterances: int) -> str:
    """short < 11 utterances, medium 11–15, long > 15 (the paper's length analysis)."""
    return "short" if n_utterances < 11 else "medium" if n_utterances <= 15 else "long"


# ---- the file --------------------------------------------------------------------------------------


def _is_summary_record(cells: list[str], index: dict[str, int]) -> bool:
    text = [cells[index[c]].strip() for c in ("Local Context", "Question", "Answer")]
    if any(text):
        return False
    return all(c.strip() == "" or re.fullmatch(r"[+-]?\d+(\.\d+)?", c.strip()) for c in cells)


def _read_records(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and ``(first line, cells)`` records; CRLF inside cells becomes LF."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise PragWorldFormatError(f"{path}: empty file (no header)") from None
        except csv.Error as e:
            raise PragWorldFormatError(f"{path}, line 1: not a CSV header ({e})") from None
        records = []
        last = reader.line_num
        while True:
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise PragWorldFormatError(f"{path}, CSV line {last + 1}: {e}") from None
            records.append((last + 1, [c.replace("\r\n", "\n").replace("\r", "\n") for c in cells]))
            last = reader.line_num
    return header, records


def _layout(header: list[str], path: Path) -> tuple[str, dict[str, int]]:
    names = [" ".join(h.split()) for h in header]
    index = {}
    for col in MANUAL_COLUMNS + SYNTHETIC_EXTRA:
        hits = [i for i, h in enumerate(names) if h.lower() == col.lower()]
        if len(hits) > 1:
            raise PragWorldFormatError(f"{path}: column {col!r} appears {len(hits)} times in the header")
        if hits:
            index[col] = hits[0]
    missing = [c for c in MANUAL_COLUMNS if c not in index]
    if missing:
        raise PragWorldFormatError(
            f"{path}: missing column(s) {missing} (header: {names}); a PragWorld file has {list(MANUAL_COLUMNS)}"
        )
    extra = [c for c in SYNTHETIC_EXTRA if c in index]
    if extra and len(extra) != len(SYNTHETIC_EXTRA):
        raise PragWorldFormatError(
            f"{path}: synthetic-split columns {extra} without {[c for c in SYNTHETIC_EXTRA if c not in index]}"
        )
    return ("synthetic" if extra else "manual"), index


def load_pragworld(path: str | os.PathLike, grouping: str = "clean") -> PragWorldData:
    """Read a PragWorld CSV (manual or synthetic layout) into a :class:`PragWorldData`.

    ``grouping="clean"`` (default) reads every ``Perturbation?`` flag whitespace-insensitively;
    ``grouping="reference"`` reproduces the published evaluation, which reads ``TRUE `` cells as
    unaltered rows (98 instead of 88 groups on the manual split; see the module docstring).
    Raises :class:`PragWorldFormatError` naming the data row, CSV line and column of the first
    cell that cannot be read; trailing summary rows are dropped and counted in ``.dropped``.
    """
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"PragWorld file {path} does not exist")
    header, records = _read_records(path)
    layout, index = _layout(header, path)
    end, dropped = _data_end(records, index, len(header))
    out: list[dict[str, Any]] = []
    for line, cells in records[:end]:
        where = f"{path}: row {len(out)} (data row, 0-based; CSV line {line})"
        out.append(_read_row(cells, index, len(header), layout, where, {"row": len(out), "line": line}))
    if not out:
        raise PragWorldFormatError(f"{path}: no data rows")
    rows = _apply_grouping(_frame(out, path), grouping, path)
    return PragWorldData(rows, dropped, path, grouping, layout)


def _data_end(records: list[tuple[int, list[str]]], index: dict[str, int], width: int) -> tuple[int, Dropped]:
    """Where the data records end, and the trailing non-data records after them (summary rows such
    as ``,,,77,,,`` and blank lines) counted."""
    end = len(records)
    while end > 0 and (
        not records[end - 1][1]
        or (len(records[end - 1][1]) == width and _is_summary_record(records[end - 1][1], index))
    ):
        end -= 1
    tail = records[end:]
    if not tail:
        return end, Dropped()
    vals = tuple(tuple(c.strip() for c in cells if c.strip()) for _, cells in tail)
    shown = ", ".join("/".join(v) or "blank" for v in vals)
    return end, Dropped(
        len(tail), f"trailing summary or blank records, not data ({shown})", tuple(line for line, _ in tail), vals
    )


#: how each coded column of a data row is read (each reader raises ValueError naming the cell)
_READERS = {
    "Answer": parse_answer,
    "Perturbation?": _flag_clean,
    "Perturbation Target": _target,
    "Perturbation Category": normalise_category,
    "Perturbation Effect": _effect,
}


def _read_row(
    cells: list[str], index: dict[str, int], width: int, layout: str, where: str, rec: dict[str, Any]
) -> dict[str, Any]:
    """One data record as a row of :attr:`PragWorldData.rows` (``rec`` holds its ``row`` and
    ``line``); :class:`PragWorldFormatError` at ``where`` for the first cell that cannot be read."""
    if not cells:
        raise PragWorldFormatError(f"{where}: blank record in the middle of the data")
    if len(cells) != width:
        raise PragWorldFormatError(f"{where}: {len(cells)} fields, the header has {width}")
    if _is_summary_record(cells, index):
        raise PragWorldFormatError(
            f"{where}: a summary/empty record before the end of the data (cells {[c for c in cells if c.strip()]})"
        )
    for col in ("Local Context", "Question"):
        if not cells[index[col]].strip():
            raise PragWorldFormatError(f"{where}, column {col!r}: empty")
    parsed: dict[str, Any] = {}
    for col, fn in _READERS.items():
        try:
            parsed[col] = fn(cells[index[col]])
        except ValueError as e:
            raise PragWorldFormatError(f"{where}, column {col!r}: {e}") from None
    altered = parsed["Perturbation?"]
    category, sub = parsed["Perturbation Category"]
    effect, target = parsed["Perturbation Effect"], parsed["Perturbation Target"]
    flag = cells[index["Perturbation?"]]
    for col, missing, present in (
        ("Perturbation Category", category is None, category is not None),
        ("Perturbation Effect", effect is None, effect is not None),
        ("Perturbation Target", target == "none", target != "none"),
    ):
        if altered and missing:
            raise PragWorldFormatError(
                f"{where}, column {col!r}: an altered row (Perturbation? {flag!r}) needs a value, got "
                f"{cells[index[col]]!r}"
            )
        if not altered and present:
            raise PragWorldFormatError(
                f"{where}, column {col!r}: an unaltered row (Perturbation? {flag!r}) has {cells[index[col]]!r}"
            )
    context = cells[index["Local Context"]]
    n_utt = count_utterances(context)
    rec.update(
        context=context,
        question=cells[index["Question"]],
        answer=parsed["Answer"][0],
        gold=parsed["Answer"][1],
        flag_raw=flag,
        target=target,
        category=category,
        subcategory=sub,
        effect=effect,
        effect_source=None if effect is None else ("derived" if effect in ("possible", "not possible") else "file"),
        n_utterances=n_utt,
        length_bucket=length_bucket(n_utt),
        category_raw=cells[index["Perturbation Category"]],
        effect_raw=cells[index["Perturbation Effect"]],
    )
    if layout == "synthetic":
        for col in SYNTHETIC_EXTRA:
            v = cells[index[col]].strip()
            rec[_FIELD[col]] = None if _squash(v) in _NONE_CELLS else v
    return rec


def _frame(out: list[dict[str, Any]], path: Path) -> pd.DataFrame:
    """The rows as a frame: nullable text columns kept as None, and the synthetic split's Possible /
    Not Possible effects derived (flip when the scored gold differs from the group's original)."""
    rows = pd.DataFrame(out)
    # nullable text columns keep None (pandas ≥ 3 would infer a string dtype that turns None into NaN)
    for col in ("category", "subcategory", "effect", "effect_source", *(_FIELD[c] for c in SYNTHETIC_EXTRA)):
        if col in rows.columns:
            rows[col] = pd.Series([r[col] for r in out], dtype=object, index=rows.index)
    clean_group = rows["flag_raw"].map(lambda c: not _flag_clean(c)).cumsum() - 1
    if (clean_group < 0).any():
        raise PragWorldFormatError(
            f"{path}: row 0 (CSV line {out[0]['line']}), column 'Perturbation?': "
            f"the first data row is an alteration with no original before it"
        )
    original_gold = rows["gold"].groupby(clean_group).transform("first")
    derived = rows["effect"].isin(["possible", "not possible"])
    rows.loc[derived, "effect"] = [
        ("flip" if g != o else "invariant") for g, o in zip(rows.loc[derived, "gold"], original_gold[derived])
    ]
    return rows


def _apply_grouping(rows: pd.DataFrame, grouping: str, path: Path | None) -> pd.DataFrame:
    """Set ``altered`` and ``group`` from ``flag_raw`` under ``grouping``."""
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    read = _flag_clean if grouping == "clean" else _flag_reference
    altered = rows["flag_raw"].map(read).astype(bool)
    group = (~altered).cumsum() - 1
    if len(group) and group.iloc[0] < 0:
        raise PragWorldFormatError(
            f"{path}: row 0, column 'Perturbation?': the first data row is an alteration with no original before it"
        )
    rows["altered"] = altered.to_numpy()
    rows["group"] = group.astype(int).to_numpy()
    front = [
        "row",
        "group",
        "context",
        "question",
        "gold",
        "answer",
        "altered",
        "target",
        "category",
        "effect",
        "n_utterances",
        "length_bucket",
    ]
    return rows[front + [c for c in rows.columns if c not in front]]


def first_groups(rows: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first groups of ``rows`` (in file order) that fit in ``n`` rows, whole (0: all rows; at
    least one group): robust accuracy and the group bootstrap need whole groups."""
    if n <= 0 or len(rows) <= n:
        return rows.reset_index(drop=True)
    sizes = rows.groupby("group", sort=False).size()
    keep = sizes.index[sizes.cumsum() <= n]
    if not len(keep):
        keep = sizes.index[:1]
    return rows[rows["group"].isin(set(keep))].reset_index(drop=True)


def write_pragworld_csv(rows: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write rows in the manual-split layout, so :func:`load_pragworld` reads them back.

    ``rows`` needs ``context``, ``question``, ``altered``, ``target``, ``category``, ``effect`` and
    ``gold`` (or ``answer``: 'yes' | 'no' | 'cannot answer'); rows are written in order, each
    original followed by its alterations (an ``altered`` first row or a ``group`` column that is
    not contiguous in that order is an error). Effects are written as ``Flip`` / ``Invariant``,
    categories by their names in :data:`CATEGORIES`, flags as ``TRUE`` / ``FALSE`` (so the clean
    and reference groupings of a written file agree). Returns the path.
    """
    need = ["context", "question", "altered", "target", "category", "effect"]
    missing = [c for c in need if c not in rows.columns]
    if "gold" not in rows.columns and "answer" not in rows.columns:
        missing.append("gold (or answer)")
    if missing:
        raise ValueError(f"write_pragworld_csv: rows lack column(s) {missing}")
    if len(rows) and bool(rows["altered"].iloc[0]):
        raise ValueError("write_pragworld_csv: the first row is an alteration; each group starts with its original")
    if "group" in rows.columns:
        starts = (~rows["altered"].astype(bool)).cumsum()
        if (
            not (rows["group"].astype(int).groupby(starts.to_numpy()).nunique() == 1).all()
            or rows["group"].astype(int).diff().fillna(1).lt(0).any()
        ):
            raise ValueError(
                "write_pragworld_csv: the group column does not match the row order "
                "(each group must be its original followed by its alterations)"
            )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)  # CRLF row endings, as the published manual file
        w.writerow(MANUAL_COLUMNS)

        def bad_row(i: int, col: str, msg: str) -> ValueError:
            return ValueError(f"write_pragworld_csv: row {i}, column {col!r}: {msg}")

        for i, r in enumerate(rows.to_dict("records")):
            bad = partial(bad_row, i)  # binds this row's index now (a closure would read the loop variable later)
            altered = bool(r["altered"])
            if "answer" in r and isinstance(r["answer"], str) and _squash(r["answer"]) in _ANSWERS:
                label = _ANSWERS[_squash(r["answer"])][0]
                if "gold" in r and r["gold"] is not None and int(r["gold"]) != _ANSWERS[label][1]:
                    raise bad("gold", f"{r['gold']} disagrees with answer {r['answer']!r}")
            elif "gold" in r and r["gold"] in (0, 1, True, False):
                label = "yes" if int(r["gold"]) == 1 else "no"
            else:
                raise bad("gold", f"expected 1/0 (or an answer yes/no/cannot answer), got {r.get('gold')!r}")
            category = r["category"] if isinstance(r["category"], str) else None
            if category is not None and category not in CATEGORIES:
                category = normalise_category(category)[0]
            effect = r["effect"] if isinstance(r["effect"], str) else None
            if effect not in (None, "flip", "invariant"):
                raise bad("effect", f"expected 'flip', 'invariant' or None, got {effect!r}")
            target = r["target"] if isinstance(r["target"], str) else "none"
            if target not in ("none", "context", "question"):
                raise bad("target", f"expected 'none', 'context' or 'question', got {target!r}")
            if altered and (category is None or effect is None or target == "none"):
                raise bad("category", "an altered row needs a category, an effect and a target")
            if not altered and (category is not None or effect is not None or target != "none"):
                raise bad("category", "an original row has no category, effect or target")
            w.writerow(
                [
                    r["context"],
                    r["question"],
                    label if label == "cannot answer" else label.title(),
                    "TRUE" if altered else "FALSE",
                    target.title(),
                    CATEGORIES[category] if category else "-",
                    effect.title() if effect else "-",
                ]
            )
    return path
