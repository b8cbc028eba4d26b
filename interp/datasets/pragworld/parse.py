"""The PragWorld yes/no parser (the published evaluation, ``src/metrics.py`` of SachinVashisth/PRAGWORLD).

The benchmark prompt asks for "(yes)" or "(no)" on the first line and an explanation after it. A
response is read as:

1. the first line of the stripped response, lower-cased, commas removed; if it is one of
   ``(yes)``, ``yes)``, ``yes`` / ``(no)``, ``no)``, ``no`` that is the answer;
2. else the first word of that line with full stops also removed, checked against the same forms
   (so ``Yes.`` and ``(No) Bob never said that`` are read);
3. anything else is unparseable (``None``) and is scored as wrong.

Difference from the published code: an empty response there raises ``IndexError``; here it is
unparseable. Every non-empty response is read identically (tested on the released outputs).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

YES_FORMS = ("(yes)", "yes)", "yes")
NO_FORMS = ("(no)", "no)", "no")


def parse_yes_no(response: Any) -> str | None:
    """``'yes'`` | ``'no'`` | ``None`` (unparseable) for a model's benchmark response."""
    if not isinstance(response, str):
        return None
    line = response.strip().split("\n")[0].strip().lower().replace(",", "")
    if line not in YES_FORMS + NO_FORMS:
        words = line.split()
        line = words[0].strip().replace(".", "") if words else ""
    if line in YES_FORMS:
        return "yes"
    if line in NO_FORMS:
        return "no"
    return None


def normalise_prediction(value: Any) -> str | None:
    """A prediction (``yes`` / ``no`` in any case and spacing; or a 1 / 0 integer or boolean, 1 =
    yes) → ``'yes'`` | ``'no'``; anything else (other words, empty, NaN, None) → ``None``
    (unparseable, scored as wrong)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    dtype_kind = getattr(getattr(value, "dtype", None), "kind", None)  # numpy scalars: np.bool_, np.int64
    if isinstance(value, numbers.Integral) or dtype_kind in ("b", "i", "u"):
        return {1: "yes", 0: "no"}.get(int(value))
    text = str(value).strip().lower()
    return text if text in ("yes", "no") else None


# ---- response and prediction files ---------------------------------------------------------------


def read_responses(path: Any, n_rows: int, gold: Any = None) -> list[Any]:
    """The ``response`` field of each record of a JSONL file (the released outputs' format: one
    JSON object per data row, in data-row order). Blank lines are ignored; a line that is not a
    JSON object, a record without ``response``, or a record count other than ``n_rows`` is an
    error. When ``gold`` (0/1 per row) is given and a record has ``expected_response``, the two
    must agree (catches responses written for another file or order); a ``row`` field must equal
    the record's position.
    """
    import json
    from pathlib import Path

    from interp.datasets.pragworld.data import parse_answer

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"responses file {path} does not exist")
    records: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {lineno}: not valid JSON ({e.msg})") from None
            if not isinstance(rec, dict) or "response" not in rec:
                raise ValueError(f"{path}, line {lineno}: a record needs a 'response' field")
            i = len(records)
            if "row" in rec and rec["row"] != i:
                raise ValueError(f"{path}, line {lineno}: record for row {rec['row']} where row {i} was expected")
            exp = rec.get("expected_response")
            if gold is not None and i < len(gold) and isinstance(exp, str):
                try:
                    g = parse_answer(exp)[1]
                except ValueError:
                    g = None
                if g is not None and g != int(gold[i]):
                    raise ValueError(
                        f"{path}, line {lineno}: expected_response {exp!r} but data row {i} has gold "
                        f"{'yes' if gold[i] else 'no'}: are these responses for this data file, "
                        f"in this order?"
                    )
            records.append(rec["response"])
    if len(records) != n_rows:
        raise ValueError(
            f"{path} has {len(records)} response records but the data has {n_rows} rows: "
            f"the file needs one record per data row, in order"
        )
    return records


def read_predictions(path: Any, n_rows: int) -> list[str | None]:
    """The ``prediction`` column of a CSV (yes / no / anything else = unparseable), in data-row order."""
    import csv
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {path} does not exist")
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        names = list(reader.fieldnames or [])
        fields = [(h or "").strip().lower() for h in names]
        if "prediction" not in fields:
            raise ValueError(f"{path}: no 'prediction' column (columns: {reader.fieldnames})")
        key = names[fields.index("prediction")]
        values = [row[key] for row in reader]
    if len(values) != n_rows:
        raise ValueError(
            f"{path} has {len(values)} predictions but the data has {n_rows} rows: "
            f"one prediction per data row, in order"
        )
    return [normalise_prediction(v) for v in values]
