"""The report page put together — findings, contents, sections, CircuitsVis views, what is missing —
and written as one self-contained ``report.html`` (:func:`write_report`)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interp.viz.report.files import REPORT_NAME
from interp.viz.report.findings import findings_html, sweep_findings
from interp.viz.report.folder import collect
from interp.viz.report.interactive import circuits_sections

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 24px 48px;color:#1d1d1f;line-height:1.45}
h1{margin-top:28px}h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:40px}h3{margin-top:28px}
table{border-collapse:collapse;margin:8px 0 4px;font-size:13px}
th,td{border:1px solid #d0d0d0;padding:3px 8px;vertical-align:top}th{background:#f3f3f3;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:1%;white-space:nowrap;font-weight:600}
.note{color:#555;font-size:13px;margin:2px 0 12px}.missing{color:#8a4b00}
.table-wrap{overflow-x:auto}figure{margin:12px 0}figcaption,.caption{color:#555;font-size:13px}
img.fig{max-width:100%;height:auto;border:1px solid #eee}
pre{background:#f7f7f7;padding:8px;overflow-x:auto;font-size:12px}
nav ul{columns:2}details summary{cursor:pointer;color:#333}
"""


def render_report(
    run_dir: str | Path,
    *,
    model: Any = None,
    sequences: Sequence[Any] | None = None,
    max_rows: int = 20,
    n_sequences: int = 2,
    max_tokens: int = 24,
    title: str | None = None,
    placement: Any = None,
) -> str:
    """The report's HTML (see :func:`write_report`)."""
    from interp.viz.circuits import bundle_script

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    coll = collect(run_dir, max_rows)
    cv_sections, components = circuits_sections(run_dir, coll, model, sequences, n_sequences, max_tokens, placement)
    sections = coll.sections[:1] + [s for s in coll.sections[1:] if s.anchor != "s-checkpoints-and-data"]
    sections += cv_sections + [s for s in coll.sections if s.anchor == "s-checkpoints-and-data"]
    name = title or f"interp run: {run_dir.resolve().name}"
    findings = ""
    if (run_dir / "results.json").is_file():
        try:
            data = json.loads((run_dir / "results.json").read_text())
            findings = findings_html(data) if isinstance(data, dict) else ""
        except json.JSONDecodeError:
            findings = ""  # the Summary section says the file is unreadable
    elif (run_dir / "run.json").is_file() and (run_dir / "verdicts.json").is_file():  # an `interp sweep` folder
        try:
            data = json.loads((run_dir / "run.json").read_text())
            findings = sweep_findings(data) if isinstance(data, dict) else ""
        except json.JSONDecodeError:
            findings = ""
    missing = "".join(f"<li>{html.escape(m)}</li>" for m in coll.missing)
    missing_html = (
        f'<section id="s-missing"><h2>Not in this run</h2><ul class="missing">{missing}</ul></section>'
        if coll.missing
        else ""
    )
    toc = '<li><a href="#s-findings">Findings</a></li>' if findings else ""
    toc += "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    if missing_html:
        toc += '<li><a href="#s-missing">Not in this run</a></li>'
    body = "\n".join(
        f'<section id="{s.anchor}"><h2>{html.escape(s.title)}</h2>\n{s.body}\n</section>' for s in sections
    )
    from interp import __version__ as interp_version

    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(name)}</title>\n<style>{CSS}</style>\n{bundle_script(components)}\n</head>\n<body>\n"
        f"<h1>{html.escape(name)}</h1>\n"
        f'<p class="note">Run folder <code>{html.escape(str(run_dir.resolve()))}</code>; '
        f"written by interp {html.escape(str(interp_version))}. Self-contained: opens from disk with no network.</p>\n"
        + (f'<section id="s-findings"><h2>Findings</h2>\n{findings}\n</section>\n' if findings else "")
        + f"<nav><h2>Contents</h2><ul>{toc}</ul></nav>\n{missing_html}\n{body}\n</body>\n</html>\n"
    )


def write_report(
    run_dir: str | Path,
    *,
    model: Any = None,
    sequences: Sequence[Any] | None = None,
    max_rows: int = 20,
    n_sequences: int = 2,
    max_tokens: int = 24,
    out: str | Path | None = None,
    title: str | None = None,
    placement: Any = None,
) -> Path:
    """Write ``run_dir/report.html`` (or ``out``): everything the run folder holds, in one file.

    ``model``: the checkpoint for the attention patterns — a folder, a loaded ``Checkpoint``, a
    ``(bridge, vocab)`` pair, None for the run's ``best/`` (else ``last/``), or False for none.
    ``sequences``: token lists (or space-separated strings) to show; default the first
    ``n_sequences`` of ``data/test.txt``, cut to ``max_tokens`` tokens. ``max_rows``: rows shown
    of each CSV. ``placement``: where a checkpoint given as a folder is loaded
    (:class:`~interp.models.device.Placement`; default the CPU, float32). Returns the path written."""
    text = render_report(
        run_dir,
        model=model,
        sequences=sequences,
        max_rows=max_rows,
        n_sequences=n_sequences,
        max_tokens=max_tokens,
        title=title,
        placement=placement,
    )
    path = Path(out) if out else Path(run_dir) / REPORT_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
