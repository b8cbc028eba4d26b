"""The run report: one self-contained ``report.html`` per run folder.

:func:`~interp.viz.report.page.write_report` collects whatever a run folder holds —
``results.json`` as the summary, every CSV as a table (long per-example tables cut to their first
rows, with a "N more rows" note), every PNG/SVG/JPEG inlined as base64, JSON summaries as
key/value tables, Markdown/text tables as preformatted text, subfolders (``sweep_*``,
fine-tuning, …) as their own sections — plus CircuitsVis views (:mod:`interp.viz.circuits`):
attention patterns of a few held-out sequences under the run's checkpoint, and the
activation-patching maps it finds. Nothing it needs is fetched: no ``<link>``, no external
``src``/``href``, the CircuitsVis bundle inlined once, so the file opens from disk with no
network. What is absent (no checkpoint, no sweep, …) is said in the report rather than raised.

The report is generic on purpose: ``interp run`` calls it last, whatever that run wrote. One
module per part of the page:

- :mod:`~interp.viz.report.files` — one file as HTML (CSV table, JSON key/value tables, inlined
  image, text);
- :mod:`~interp.viz.report.folder` — a run folder gathered into titled sections, and what is missing;
- :mod:`~interp.viz.report.findings` — the first screen, from ``results.json`` (world-model table,
  layer verdicts, repair, PragWorld);
- :mod:`~interp.viz.report.interactive` — the CircuitsVis views (patching maps, attention patterns);
- :mod:`~interp.viz.report.page` — the page put together and written.
"""

from interp.viz.report.files import REPORT_NAME, csv_table, json_html
from interp.viz.report.findings import findings_html
from interp.viz.report.folder import collect
from interp.viz.report.page import render_report, write_report

__all__ = ["REPORT_NAME", "collect", "csv_table", "findings_html", "json_html", "render_report", "write_report"]
