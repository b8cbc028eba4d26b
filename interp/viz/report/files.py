"""One file of a run folder as HTML: a CSV as a table of its first rows, JSON as nested
key/value tables, an image inlined as base64, a text file preformatted — each cut to a size a page
can hold, with a note of what was left out."""

from __future__ import annotations

import base64
import html
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPORT_NAME = "report.html"
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
TEXT_TYPES = {".md", ".txt"}
MAX_IMAGE_BYTES = 8_000_000
MAX_JSON_BYTES = 200_000
MAX_TEXT_LINES = 80
MAX_COLUMNS = 40


def _fmt(v: Any) -> str:
    """A cell: floats to 4 significant digits, the rest as text."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-4):
            return f"{v:.3e}"
        return f"{v:.4g}"
    return str(v)


def is_num(v: Any) -> bool:
    """Whether a table cell is a number (right-aligned); booleans are not."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def humanise(stem: str) -> str:
    """A file stem as a heading: underscores to spaces, the first letter upper-case."""
    text = stem.replace("_", " ").strip()
    return text[:1].upper() + text[1:] if text else stem


def heading_anchor(text: str) -> str:
    """An HTML id for a section heading: lower-case words joined by hyphens, prefixed ``s-``."""
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")


def rows_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "data") -> str:
    """An escaped HTML table of ``rows`` under ``columns`` (numbers right-aligned), in a scrolling wrapper."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{html.escape(_fmt(v))}</td>' if is_num(v) else f"<td>{html.escape(_fmt(v))}</td>"
            for v in row
        )
        body.append(f"<tr>{cells}</tr>")
    return (
        f'<div class="table-wrap"><table class="{cls}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def csv_table(path: Path, max_rows: int = 20) -> tuple[str, int]:
    """A CSV as an HTML table of its first ``max_rows`` rows (and at most ``MAX_COLUMNS``
    columns), with a note of what was left out; returns (html, number of data rows)."""
    import pandas as pd

    with path.open("rb") as f:
        n_rows = max(sum(1 for _ in f) - 1, 0)
    try:
        frame = pd.read_csv(path, nrows=max_rows)
    except pd.errors.EmptyDataError:
        return '<p class="note missing">empty file</p>', 0
    cols = list(frame.columns)
    shown = cols[:MAX_COLUMNS]
    rows = [
        [None if (isinstance(v, float) and math.isnan(v)) else (v.item() if hasattr(v, "item") else v) for v in rec]
        for rec in frame[shown].itertuples(index=False, name=None)
    ]
    notes = []
    if n_rows > len(frame):
        notes.append(f"{n_rows - len(frame):,} more rows (first {len(frame)} of {n_rows:,} shown)")
    if len(cols) > len(shown):
        notes.append(f"{len(cols) - len(shown)} more columns")
    note = f'<p class="note">… {"; ".join(notes)} in <code>{html.escape(path.name)}</code></p>' if notes else ""
    return rows_table([str(c) for c in shown], rows) + note, n_rows


def _leaves(obj: Any) -> int:
    if isinstance(obj, dict):
        return sum(_leaves(v) for v in obj.values())
    if isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        return sum(_leaves(v) for v in obj)
    return 1


def json_html(obj: Any, depth: int = 0, collapse: int = 12) -> str:
    """A JSON value as nested key/value tables: lists of like records as tables, long lists and
    deep values shortened, nested objects with more than ``collapse`` values folded."""
    if isinstance(obj, dict):
        if not obj:
            return "<i>{}</i>"
        rows = []
        for k, v in obj.items():
            inner = json_html(v, depth + 1, collapse)
            if isinstance(v, (dict, list)) and depth >= 0 and _leaves(v) > collapse:
                inner = f"<details><summary>{_leaves(v)} values</summary>{inner}</details>"
            rows.append(f"<tr><th>{html.escape(str(k))}</th><td>{inner}</td></tr>")
        return f'<table class="kv">{"".join(rows)}</table>'
    if isinstance(obj, list):
        if obj and all(isinstance(x, dict) for x in obj) and depth < 4:
            cols: list[str] = []
            for x in obj:
                cols += [k for k in x if k not in cols]
            if len(cols) <= MAX_COLUMNS and all(not isinstance(x.get(c), dict) for x in obj for c in cols):
                cells = [
                    [json.dumps(x.get(c)) if isinstance(x.get(c), list) else x.get(c) for c in cols] for x in obj[:50]
                ]
                more = f'<p class="note">… {len(obj) - 50} more</p>' if len(obj) > 50 else ""
                return rows_table(cols, cells) + more
        if all(not isinstance(x, (dict, list)) for x in obj):
            shown = ", ".join(html.escape(_fmt(x)) for x in obj[:30])
            return f"[{shown}{f', … {len(obj) - 30} more' if len(obj) > 30 else ''}]"
        text = json.dumps(obj)
        return f"<code>{html.escape(text[:400])}{'…' if len(text) > 400 else ''}</code>"
    if isinstance(obj, str):
        return html.escape(obj)
    return html.escape(_fmt(obj))


def image_html(path: Path, rel: str) -> str:
    """An image inlined as a base64 ``<img>`` with ``rel`` as its caption; over ``MAX_IMAGE_BYTES``, a note."""
    size = path.stat().st_size
    if size > MAX_IMAGE_BYTES:
        return f'<p class="note missing">{html.escape(rel)}: {size / 1e6:.1f} MB, too large to embed</p>'
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    mime = IMAGE_TYPES[path.suffix.lower()]
    return (
        f'<figure><img class="fig" src="data:{mime};base64,{data}" alt="{html.escape(rel)}">'
        f"<figcaption>{html.escape(rel)}</figcaption></figure>"
    )


def text_html(path: Path, rel: str) -> str:
    """A Markdown or text file preformatted, cut to its first ``MAX_TEXT_LINES`` lines with a note."""
    lines = path.read_text(errors="replace").splitlines()
    more = (
        f'<p class="note">… {len(lines) - MAX_TEXT_LINES} more lines in <code>{html.escape(rel)}</code></p>'
        if len(lines) > MAX_TEXT_LINES
        else ""
    )
    return f"<pre>{html.escape(chr(10).join(lines[:MAX_TEXT_LINES]))}</pre>{more}"
