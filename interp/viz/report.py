"""The run report: one self-contained ``report.html`` per run folder.

:func:`write_report` collects whatever a run folder holds — ``results.json`` as the summary, every
CSV as a table (long per-example tables cut to their first rows, with a "N more rows" note),
every PNG/SVG/JPEG inlined as base64, JSON summaries as key/value tables, Markdown/text tables as
preformatted text, subfolders (``sweep_*``, fine-tuning, …) as their own sections — plus
CircuitsVis views (:mod:`interp.viz.circuits`): attention patterns of a few held-out sequences
under the run's checkpoint, and the activation-patching maps it finds. Nothing it needs is
fetched: no ``<link>``, no external ``src``/``href``, the CircuitsVis bundle inlined once, so the
file opens from disk with no network. What is absent (no checkpoint, no sweep, …) is said in the
report rather than raised.

The report is generic on purpose: ``interp run`` calls it last, whatever that run wrote.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

REPORT_NAME = "report.html"
IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
TEXT_TYPES = {".md", ".txt"}
MAX_IMAGE_BYTES = 8_000_000
MAX_JSON_BYTES = 200_000
MAX_TEXT_LINES = 80
MAX_COLUMNS = 40

#: titles of files interp writes (by stem); others get their stem, humanised
TITLES: dict[str, str] = {
    "results": "Summary",
    "run": "Settings and per-layer summary",
    "train_log": "Training log",
    "next_token": "Next-token test",
    "sweep": "Layer sweep (per example)",
    "verdicts": "Layer verdicts",
    "layers": "Per-layer effects",
    "patching_resid_pre": "Activation patching: residual stream (layer × position)",
    "patching_attn_out": "Activation patching: attention output (layer × position)",
    "patching_mlp_out": "Activation patching: MLP output (layer × position)",
    "patching_heads": "Activation patching: attention heads (layer × head)",
    "verify": "Attribution patching: the top sites measured exactly",
    "attribution_scatter": "Attribution patching vs exact (the verified sites)",
    "myhill_nerode": "Myhill–Nerode metrics",
    "probe": "Current-state probes",
    "probes": "Current-state probes",
    "navigation": "Navigation",
    "detours": "Detours",
}
#: the order of known groups within a folder (others follow alphabetically)
ORDER = [
    "results",
    "run",
    "train_log",
    "next_token",
    "probe",
    "probes",
    "myhill_nerode",
    "navigation",
    "detours",
    "layers",
    "verdicts",
    "patching_resid_pre",
    "patching_attn_out",
    "patching_mlp_out",
    "patching_heads",
    "sweep",
]
#: the order of known subfolders (by name prefix); others follow alphabetically
FOLDER_ORDER = ["sweep_mlp-zero", "sweep_direct-effect", "sweep_activation-patching", "sweep", "finetune", "metrics"]
SKIP_DIRS = {"data", "__pycache__", ".git", "artifacts"}

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


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _humanise(stem: str) -> str:
    text = stem.replace("_", " ").strip()
    return text[:1].upper() + text[1:] if text else stem


def _anchor(text: str) -> str:
    return "s-" + (re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x")


# ---------------------------------------------------------------- renderers


def _rows_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "data") -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{html.escape(_fmt(v))}</td>' if _is_num(v) else f"<td>{html.escape(_fmt(v))}</td>"
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
    return _rows_table([str(c) for c in shown], rows) + note, n_rows


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
                rows = [
                    [json.dumps(x.get(c)) if isinstance(x.get(c), list) else x.get(c) for c in cols] for x in obj[:50]
                ]
                more = f'<p class="note">… {len(obj) - 50} more</p>' if len(obj) > 50 else ""
                return _rows_table(cols, rows) + more
        if all(not isinstance(x, (dict, list)) for x in obj):
            shown = ", ".join(html.escape(_fmt(x)) for x in obj[:30])
            return f"[{shown}{f', … {len(obj) - 30} more' if len(obj) > 30 else ''}]"
        text = json.dumps(obj)
        return f"<code>{html.escape(text[:400])}{'…' if len(text) > 400 else ''}</code>"
    if isinstance(obj, str):
        return html.escape(obj)
    return html.escape(_fmt(obj))


def image_html(path: Path, rel: str) -> str:
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
    lines = path.read_text(errors="replace").splitlines()
    more = (
        f'<p class="note">… {len(lines) - MAX_TEXT_LINES} more lines in <code>{html.escape(rel)}</code></p>'
        if len(lines) > MAX_TEXT_LINES
        else ""
    )
    return f"<pre>{html.escape(chr(10).join(lines[:MAX_TEXT_LINES]))}</pre>{more}"


# ---------------------------------------------------------------- collecting a folder


@dataclass
class Section:
    """A titled part of the report (an ``<h2>``) with its HTML body."""

    title: str
    body: str
    anchor: str = ""

    def __post_init__(self) -> None:
        self.anchor = self.anchor or _anchor(self.title)


@dataclass
class _Collected:
    sections: list[Section] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    patching: list[tuple[Path, str]] = field(default_factory=list)  # (folder, stem) of PatchingMaps


def is_checkpoint(folder: Path) -> bool:
    """A Hugging Face model folder (``config.json`` + weights), e.g. ``best/`` or ``last/``."""
    return (folder / "config.json").is_file() and (
        any(folder.glob("*.safetensors")) or (folder / "interp.json").is_file() or any(folder.glob("*.bin"))
    )


def _group_key(stem: str, stems: set[str]) -> str:
    """Files share a group with the longest other stem that prefixes theirs at an ``_``
    (``patching_heads_mean`` → ``patching_heads``; ``sweep_layers`` → ``sweep``)."""
    best = stem
    for s in stems:
        if s != stem and stem.startswith(s + "_") and (best == stem or len(s) > len(best)):
            best = s
    return best


def _sort_key(name: str, order: Sequence[str]) -> tuple[int, str]:
    for i, known in enumerate(order):
        if name == known or name.startswith(known + "_") or name.startswith(known + "-"):
            return (i, name)
    return (len(order), name)


def _group_html(files: list[Path], root: Path, max_rows: int, coll: _Collected, skip_json: set[str]) -> str:
    """One group of files: JSON summaries, then figures, then short tables, then long ones."""
    parts: list[str] = []
    jsons = sorted(f for f in files if f.suffix == ".json")
    images = sorted(f for f in files if f.suffix.lower() in IMAGE_TYPES)
    csvs = sorted((f for f in files if f.suffix == ".csv"), key=lambda f: (f.stem.count("_"), f.name))
    texts = sorted(f for f in files if f.suffix.lower() in TEXT_TYPES)
    for f in jsons:
        rel = f.relative_to(root).as_posix()
        if rel in skip_json:
            continue
        if f.stat().st_size > MAX_JSON_BYTES:
            parts.append(f'<p class="note">{html.escape(rel)}: {f.stat().st_size / 1e3:.0f} kB of JSON, not shown</p>')
            continue
        try:
            data = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            parts.append(f'<p class="note missing">{html.escape(rel)}: unreadable JSON ({html.escape(str(e))})</p>')
            continue
        if isinstance(data, dict) and data.get("kind") == "activation_patching" and (f.with_suffix(".csv")).is_file():
            coll.patching.append((f.parent, f.stem))
        parts.append(f'<p class="note"><code>{html.escape(rel)}</code></p>{json_html(data)}')
    for f in images:
        parts.append(image_html(f, f.relative_to(root).as_posix()))
    tables = []
    for f in csvs:
        rel = f.relative_to(root).as_posix()
        table, n = csv_table(f, max_rows)
        tables.append((n > max_rows, f'<p class="note"><code>{html.escape(rel)}</code> ({n:,} rows)</p>{table}'))
    parts += [t for long, t in tables if not long] + [t for long, t in tables if long]
    for f in texts:
        parts.append(text_html(f, f.relative_to(root).as_posix()))
    return "\n".join(parts)


def _folder_body(folder: Path, root: Path, max_rows: int, coll: _Collected, skip_json: set[str], heading: int) -> str:
    files = [
        f
        for f in folder.iterdir()
        if f.is_file()
        and f.name != REPORT_NAME
        and (f.suffix in (".csv", ".json") or f.suffix.lower() in IMAGE_TYPES or f.suffix.lower() in TEXT_TYPES)
    ]
    stems = {f.stem for f in files}
    groups: dict[str, list[Path]] = {}
    for f in files:
        groups.setdefault(_group_key(f.stem, stems), []).append(f)
    parts = []
    for key in sorted(groups, key=lambda k: _sort_key(k, ORDER)):
        body = _group_html(groups[key], root, max_rows, coll, skip_json)
        if body:
            title = TITLES.get(key, _humanise(key))
            parts.append(f"<h{heading}>{html.escape(title)}</h{heading}>\n{body}")
    return "\n".join(parts)


def _checkpoints_and_data(run_dir: Path, checkpoints: list[Path]) -> str:
    rows = []
    for ck in checkpoints:
        size = sum(f.stat().st_size for f in ck.rglob("*") if f.is_file())
        meta = ck / "interp.json"
        world = ""
        if meta.is_file():
            try:
                world = str(json.loads(meta.read_text()).get("world", {}).get("kind", ""))
            except (json.JSONDecodeError, AttributeError):
                world = ""
        rows.append(
            [
                ck.relative_to(run_dir).as_posix() + "/",
                f"{size / 1e6:.2f} MB",
                ", ".join(sorted(f.name for f in ck.iterdir() if f.is_file())),
                world,
            ]
        )
    out = _rows_table(["checkpoint", "size", "files", "world"], rows) if rows else ""
    data = run_dir / "data"
    if data.is_dir():
        drows = []
        for f in sorted(data.iterdir()):
            if f.is_file():
                with f.open("rb") as fh:
                    lines = sum(1 for _ in fh)
                drows.append(
                    [f"data/{f.name}", lines if f.suffix == ".txt" else "", f"{f.stat().st_size / 1e3:.1f} kB"]
                )
        out += _rows_table(["data file", "lines (sequences)", "size"], drows)
    return out


def collect(run_dir: Path, max_rows: int = 20) -> _Collected:
    """The run folder's sections (summary, top-level files, subfolders, checkpoints) and what is missing."""
    coll = _Collected()
    results = run_dir / "results.json"
    skip = set()
    data: Any = None
    if results.is_file():
        skip.add("results.json")
        try:
            data = json.loads(results.read_text())
            config = data.pop("config", None) if isinstance(data, dict) else None
            body = json_html(data)
            if config is not None:
                body += (
                    f"<details><summary>the run's configuration</summary>{json_html(config, collapse=10**9)}</details>"
                )
                skip.add("config.json")  # the same configuration, written beside it
            coll.sections.append(Section("Summary", body))
        except json.JSONDecodeError as e:
            coll.sections.append(
                Section("Summary", f'<p class="missing">results.json is not valid JSON: {html.escape(str(e))}</p>')
            )
    else:
        coll.missing.append("results.json (the run's summary) — the run may not have finished")
    world_job = not (isinstance(data, dict) and data.get("job") == "pragworld")  # a PragWorld job trains nothing
    for name, what in (("train_log.csv", "training log"), ("next_token.csv", "next-token test")):
        if world_job and not (run_dir / name).is_file():
            coll.missing.append(f"{name} ({what})")

    top = _folder_body(run_dir, run_dir, max_rows, coll, skip, heading=3)
    if top:
        coll.sections.append(Section("Results of the run", top, "s-run-results"))
    checkpoints, subfolders = [], []
    for d in sorted(p for p in run_dir.rglob("*") if p.is_dir()):
        rel = d.relative_to(run_dir)
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel.parts):
            continue
        if any(c in d.parents for c in checkpoints):
            continue
        if is_checkpoint(d):
            checkpoints.append(d)
        else:
            subfolders.append(d)
    for d in sorted(subfolders, key=lambda p: _sort_key(p.relative_to(run_dir).as_posix(), FOLDER_ORDER)):
        if any(c in d.parents for c in checkpoints):
            continue
        body = _folder_body(d, run_dir, max_rows, coll, set(), heading=3)
        if body:
            rel = d.relative_to(run_dir).as_posix()
            title = f"Sweep: {rel[len('sweep_') :]}" if rel.startswith("sweep_") else _humanise(rel)
            coll.sections.append(Section(f"{title} ({rel}/)", body, _anchor(rel)))
    if not any(d.name.startswith("sweep") for d in subfolders):
        coll.missing.append("layer sweeps (no sweep_* folder; `interp sweep --model RUN/best`)")
    ck_body = _checkpoints_and_data(run_dir, checkpoints)
    if ck_body:
        coll.sections.append(Section("Checkpoints and data", ck_body))
    if not checkpoints and world_job:
        coll.missing.append("checkpoints (no best/ or last/ model folder)")
    return coll


# ---------------------------------------------------------------- the findings (first screen)

#: world-model table columns shown first: (key in results.json, heading)
_WM_COLUMNS = (
    ("next_token", "next-token"),
    ("probe", "probe"),
    ("compression_precision", "compression prec."),
    ("distinction_precision", "distinction prec."),
    ("distinction_recall", "distinction recall"),
)
#: repair metrics shown first: (metric, heading, lower is better)
_REPAIR_COLUMNS = (
    ("heldout_loss", "held-out loss", True),
    ("next_token_position", "next-token (position)", False),
    ("next_token_sequence", "next-token (sequence)", False),
    ("mn_compression_precision", "compression prec.", False),
    ("mn_distinction_precision", "distinction prec.", False),
    ("mn_distinction_recall", "distinction recall", False),
    ("routes_valid", "greedy routes valid", False),
    ("routes_illegal_turn", "greedy routes with an illegal turn", True),
)


def _num_ok(v: Any) -> bool:
    return _is_num(v) and not math.isnan(float(v))


def _est(v: Any, se: Any = None, lo: Any = None, hi: Any = None, digits: int = 3) -> str:
    """``value [lo, hi]`` (the interval given, else ±1.96 SE), or ``–``."""
    if not _num_ok(v):
        return "–"
    text = f"{v:.{digits}g}"
    if _num_ok(lo) and _num_ok(hi):
        return f"{text} [{lo:.{digits}g}, {hi:.{digits}g}]"
    if _num_ok(se) and se > 0:
        return f"{text} [{v - 1.96 * se:.{digits}g}, {v + 1.96 * se:.{digits}g}]"
    return text


def _layers_text(layers: Sequence[int]) -> str:
    if not layers:
        return "no layer"
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(str(x) for x in layers)


def _world_model_part(wm: dict[str, Any]) -> str:
    table = wm.get("table") or []
    if not table:
        return ""
    rows = {r.get("model"): r for r in table}
    trained = rows.get("trained model", {})
    bits = [f"{h} {trained[k]:.3g}" for k, h in _WM_COLUMNS if _num_ok(trained.get(k))]
    lead = (
        f"<p>The trained model: {html.escape(', '.join(bits))}; the true world model scores 1 on each "
        "Myhill–Nerode metric, so the gap to 1 is how far the model's implicit map is from the world's.</p>"
        if bits
        else ""
    )
    body = [[r.get("model"), *[_est(r.get(k), r.get(f"{k}_se")) for k, _ in _WM_COLUMNS]] for r in table]
    settings = wm.get("settings") or {}
    note = (
        f'<p class="note">95 % intervals (±1.96 SE); Myhill–Nerode: {settings.get("pairs")} state pairs, depth '
        f"{settings.get('depth')}, {html.escape(str(settings.get('estimator')))} estimator.</p>"
        if settings
        else ""
    )
    return "<h3>World model</h3>" + lead + _rows_table(["model", *[h for _, h in _WM_COLUMNS]], body, "findings") + note


def _verdict_cell(r: dict[str, Any] | None) -> str:
    if not r:
        return "–"
    ci = r.get("ci") or [None, None]
    return f"{r.get('verdict')} ({_est(r.get('effect'), lo=ci[0], hi=ci[1])})"


def verdict_note(rule: dict[str, Any]) -> str:
    """The sentence under the verdict table: what was measured and the rule, from a sweep summary's
    ``verdict_rule`` (a /1-era results file without one: the old rule, said as such)."""
    what = "Mean effect of zeroing the layer's MLP on the per-token next-token loss (nats), with its interval. "
    if not rule or rule.get("min_effect") is None:
        return what + (
            "95 % per-layer percentile interval over rows (the interp.layer_verdicts/1 rule): "
            "harmful when the interval lies below 0, useful above."
        )
    conf = int(round(100 * float(rule.get("confidence") or 0.95)))
    family = "per layer" if rule.get("per_layer") else "simultaneous over all layers"
    unit = (
        f"{rule.get('n_groups')} groups resampled ({rule.get('groups')})"
        if rule.get("resample") == "groups"
        else "rows resampled"
    )
    d = rule["min_effect"]
    return what + (
        f"{conf} % intervals, {family}; {unit}. Harmful: removing the MLP lowers the loss by more "
        f"than the margin {d:g} ({rule.get('min_effect_reason')}) — the whole interval below −{d:g}; "
        f"useful: the whole interval above +{d:g}; negligible: inside ±{d:g}; inconclusive: otherwise."
    )


def _verdicts_part(results: dict[str, Any]) -> str:
    mlp = (results.get("layers") or {}).get("mlp_zero") or {}
    rows = mlp.get("layers") or []
    if not rows:
        return ""
    plant = results.get("plant") or {}
    planted = [int(x) for x in plant.get("layers") or []] if plant.get("enabled", True) else []
    found = [r["layer"] for r in rows if r.get("verdict") == "harmful"]
    useful = [r["layer"] for r in rows if r.get("verdict") == "useful"]
    control = {r["layer"]: r for r in (plant.get("unplanted_sweep") or {}).get("layers") or []}
    parts = []
    if planted:
        parts.append(
            f"Harm was planted in the MLP of {_layers_text(planted)} "
            f"({html.escape(str(plant.get('corruption')))}, share {plant.get('share')}, {plant.get('steps')} "
            f"steps, everything else frozen)."
        )
        missed, extra = sorted(set(planted) - set(found)), sorted(set(found) - set(planted))
        verdict = (
            "exactly the planted layers"
            if not missed and not extra
            else "; ".join(
                x
                for x in (
                    f"missed {_layers_text(missed)}" if missed else "",
                    f"false alarm on {_layers_text(extra)}" if extra else "",
                )
                if x
            )
        )
        parts.append(
            f"The MLP zero-out sweep of the planted model calls {_layers_text(found)} harmful — "
            f"{verdict} — and {_layers_text(useful)} useful."
        )
        if control:
            ctrl = [k for k, r in control.items() if r.get("verdict") == "harmful"]
            parts.append(f"On the unplanted model it calls {_layers_text(ctrl)} harmful.")
    elif plant.get("why"):
        parts.append(
            f"No harm was planted ({html.escape(str(plant['why']))}). The MLP zero-out sweep calls "
            f"{_layers_text(found)} harmful and {_layers_text(useful)} useful."
        )
    else:
        parts.append(f"The MLP zero-out sweep calls {_layers_text(found)} harmful and {_layers_text(useful)} useful.")
    rest = {v: [r["layer"] for r in rows if r.get("verdict") == v] for v in ("negligible", "inconclusive")}
    if any(rest.values()):
        parts.append("The others: " + "; ".join(f"{_layers_text(ls)} {v}" for v, ls in rest.items() if ls) + ".")
    head = ["layer", "planted"] + (["unplanted model"] if control else []) + ["analysed model"]
    body = [
        [r["layer"], "yes" if r["layer"] in planted else ""]
        + ([_verdict_cell(control.get(r["layer"]))] if control else [])
        + [_verdict_cell(r)]
        for r in rows
    ]
    note = f'<p class="note">{html.escape(verdict_note(mlp.get("verdict_rule") or {}))}</p>'
    return (
        "<h3>Layer verdicts: planted vs found</h3><p>"
        + " ".join(parts)
        + "</p>"
        + _rows_table(head, body, "findings")
        + note
    )


def _repair_part(fix: dict[str, Any]) -> str:
    if not fix:
        return ""
    if fix.get("skipped") or not fix.get("layers"):
        return f"<h3>Repair</h3><p>{html.escape(str(fix.get('why', 'nothing was suppressed')))}.</p>"
    comp = {r["metric"]: r for r in fix.get("comparison") or []}
    models = [
        m for m in ("before", "zeroed", "plain", "hls", "unplanted") if any(_num_ok(r.get(m)) for r in comp.values())
    ]
    names = {
        "before": "before (the analysed model)",
        "zeroed": "zeroed at inference",
        "plain": "plain fine-tuning",
        "hls": f"HLS β={fix.get('beta')}",
        "unplanted": "unplanted (the target)",
    }
    parts = [
        f"Suppressed {_layers_text(fix['layers'])} — {html.escape(str(fix.get('why', '')))} — three ways: "
        f"zeroing the MLP at inference, HLS fine-tuning (β = {fix.get('beta')}, {fix.get('steps')} steps, seeds "
        f"{fix.get('seeds')}) and plain fine-tuning on the same clean data and steps."
    ]
    loss = comp.get("heldout_loss")
    if loss:
        bits = [
            f"{names[m].split(' (')[0]} {_est(loss.get(m), lo=loss.get(f'{m}_lo'), hi=loss.get(f'{m}_hi'))}"
            for m in models
        ]
        parts.append("Held-out loss: " + "; ".join(bits) + ".")
    closest = fix.get("closest") or {}
    if closest:
        tally: dict[str, int] = {}
        for c in closest.values():
            for m in [c["closest"]] if isinstance(c["closest"], str) else c["closest"]:
                tally[m] = tally.get(m, 0) + 1
        best = sorted(tally.items(), key=lambda kv: -kv[1])
        parts.append(
            "Closest to the unplanted model: "
            + ", ".join(f"{names.get(m, m).split(' (')[0]} on {n} of {len(closest)} metrics" for m, n in best)
            + " (ties counted for each)."
        )
    body = []
    for key, head, lower in _REPAIR_COLUMNS:
        r = comp.get(key)
        if r:
            body.append(
                [head + (" ↓" if lower else " ↑")]
                + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            )
    for key, r in comp.items():
        if key == "mlp_out_sq":
            body.append(
                [f"mean MLP_out² (layer {r.get('layer')})"]
                + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            )
    note = (
        '<p class="note">95 % intervals: over seeds (t) for several fine-tuning seeds, else the evaluation\'s '
        "(±1.96 SE over held-out sequences or states). ↓ lower is better, ↑ higher is better.</p>"
    )
    return (
        "<h3>Repair</h3><p>"
        + " ".join(parts)
        + "</p>"
        + _rows_table(["metric", *[names[m] for m in models]], body, "findings")
        + note
    )


_T1_KEYS = ("robust", "yes", "no", "original", "altered", "flip", "invariant")
_BA_MODELS = ("before", "plain", "hls", "ula", "hls_vs_plain", "ula_vs_plain")
_BA_NAMES = {
    "before": "before",
    "plain": "plain",
    "hls": "HLS",
    "ula": "ULA",
    "hls_vs_plain": "HLS − plain",
    "ula_vs_plain": "ULA − plain",
}


def _pragworld_part(pw: dict[str, Any]) -> str:
    """The PragWorld job's findings (:mod:`interp.pragworld_job`): Table 1 beside the paper, the
    layer verdicts and the before/after table, each led by a sentence."""
    if not pw:
        return ""
    name = html.escape(str(pw.get("model_name", "the model")))
    rows = pw.get("rows") or {}
    t1 = pw.get("table1") or []
    ours = [r for r in t1 if "(paper)" not in str(r.get("model"))]
    lead = []
    for r in ours:
        lead.append(
            f"{html.escape(str(r['model']))}: robust {_est(r.get('robust'), lo=r.get('robust_lo'), hi=r.get('robust_hi'))}, "
            f"yes {_est(r.get('yes'), lo=r.get('yes_lo'), hi=r.get('yes_hi'))}, "
            f"no {_est(r.get('no'), lo=r.get('no_lo'), hi=r.get('no_hi'))}"
        )
    body = [
        [
            r.get("model"),
            *[_est(r.get(k), lo=r.get(f"{k}_lo"), hi=r.get(f"{k}_hi")) for k in _T1_KEYS],
            _est(r.get("unparseable")),
        ]
        for r in t1
    ]
    out = [
        f"<h3>PragWorld Table 1 (manual split, first {rows.get('eval')} rows)</h3><p>"
        + "; ".join(lead)
        + ".</p>"
        + _rows_table(["model", *_T1_KEYS, "unparseable"], body, "findings")
        + '<p class="note">%; brackets: 95 % cluster bootstrap over PragWorld groups. The paper\'s rows: all 500 '
        "rows, generation prompt, reference grouping (98 groups).</p>"
    ]
    lay = pw.get("layers") or {}
    mz = lay.get("mlp_zero") or {}
    if mz:
        de = lay.get("direct_effect") or {}
        text = (
            f"MLP zero-out over {len(mz.get('layers') or [])} layers on {rows.get('sweep')} rows calls "
            f"{_layers_text(mz.get('harmful') or [])} harmful and {_layers_text(mz.get('useful') or [])} useful. "
            f"HLS suppresses {_layers_text(lay.get('hls_layers') or [])} ({html.escape(str(lay.get('hls_why')))}); "
            f"ULA amplifies {_layers_text(lay.get('ula_layers') or [])} ({html.escape(str(lay.get('ula_why')))}). "
        )
        if de.get("layers"):
            text += (
                f"Direct-effect patching of {de.get('patched')} pairs ({html.escape(str(de.get('rule')))}; the "
                f"reference's filter kept {de.get('reference_pairs')}, skipped {html.escape(str(de.get('skipped')))}) "
                f"calls {_layers_text(de.get('harmful') or [])} harmful and {_layers_text(de.get('useful') or [])} useful."
            )
        dl = {r["layer"]: r for r in de.get("layers") or []}
        body = [
            [r["layer"], _verdict_cell(r), r.get("raw_verdict"), _verdict_cell(dl.get(r["layer"]))]
            for r in mz["layers"]
        ]
        out.append(
            "<h3>Layer verdicts</h3><p>"
            + text
            + "</p>"
            + _rows_table(
                [
                    "layer",
                    "MLP zero-out: verdict (effect on P(gold))",
                    "paper's raw rule (accuracy)",
                    "direct effect: verdict",
                ],
                body,
                "findings",
            )
        )
    ba = pw.get("before_after") or []
    if ba:
        ft = pw.get("finetune") or {}
        keep = [
            r
            for r in ba
            if str(r.get("metric")).startswith(("label_", "benchmark_"))
            or (r.get("metric") in ("sweep_effect_p_gold", "direct_effect_p_gold"))
            or (
                r.get("metric") == "mlp_out_sq"
                and r.get("layer") in set(lay.get("hls_layers") or []) | set(lay.get("ula_layers") or [])
            )
        ]
        models = [m for m in _BA_MODELS if any(_num_ok(r.get(m)) for r in keep)]
        body = [
            [r["metric"] + ("" if r.get("layer") is None else f" (layer {r['layer']})")]
            + [_est(r.get(m), lo=r.get(f"{m}_lo"), hi=r.get(f"{m}_hi")) for m in models]
            for r in keep
        ]
        out.append(
            f"<h3>Before / after fine-tuning</h3><p>{', '.join(ft.get('objectives') or [])} × seeds "
            f"{ft.get('seeds')}, {ft.get('steps')} steps of {ft.get('batch_size')} synthetic rows "
            f"(lr {ft.get('lr')}, LoRA {'on' if (ft.get('lora') or {}).get('enabled') else 'off'}, "
            f"β = {ft.get('beta')}, α = {ft.get('alpha')}); evaluated on the first {rows.get('eval_after')} "
            f"manual rows (prompts) and {rows.get('sweep_after')} rows (sweep).</p>"
            + _rows_table(["metric", *[_BA_NAMES[m] for m in models]], body, "findings")
            + '<p class="note">before: its 95 % cluster-bootstrap interval; an objective: mean over seeds '
            "with a t interval over seeds; − plain: the per-seed difference (same batches).</p>"
        )
    return "\n".join(out)


def findings_html(results: dict[str, Any]) -> str:
    """The report's first screen, from ``results.json``: the world-model table, the layer verdicts
    (planted vs found) and the repair result with intervals — or, for a PragWorld job on a
    pretrained model, its Table 1, layer verdicts and before/after table — each led by a
    sentence; empty when the run has none of them."""
    parts = [
        _pragworld_part(results.get("pragworld") or {}),
        _world_model_part(results.get("world_model") or {}),
        _verdicts_part(results),
        _repair_part(results.get("fix") or {}),
    ]
    return "\n".join(p for p in parts if p)


# ---------------------------------------------------------------- CircuitsVis


def _default_model(run_dir: Path) -> Path | None:
    for name in ("best", "last"):
        if is_checkpoint(run_dir / name):
            return run_dir / name
    return None


def _default_sequences(run_dir: Path, model: Any, n: int) -> list[list[str]]:
    test = run_dir / "data" / "test.txt"
    if test.is_file():
        out = []
        with test.open() as f:
            for line in f:
                if line.split():
                    out.append(line.split())
                if len(out) == n:
                    break
        return out
    world = getattr(model, "world", None)
    if world is not None:
        import numpy as np

        return [list(s) for s in world.generate(n, np.random.default_rng(0))]
    return []


def _circuits_sections(
    run_dir: Path,
    coll: _Collected,
    model: Any,
    sequences: Any,
    n_sequences: int,
    max_tokens: int,
    placement: Any = None,
) -> tuple[list[Section], list[Any]]:
    from interp.viz import circuits

    sections, components = [], []
    # activation patching maps found in the folder
    patch_views = []
    for i, (folder, stem) in enumerate(coll.patching):
        try:
            pmap = circuits.load_patching_map(folder, stem)
            rel = (folder / stem).relative_to(run_dir).as_posix()
            patch_views.append(
                circuits.patching_view(
                    pmap, id=f"interp-cv-patching-{i}", title=f"{TITLES.get(stem, _humanise(stem))} — {rel}"
                )
            )
        except Exception as e:  # a report states what it could not show
            coll.missing.append(f"CircuitsVis view of {folder.name}/{stem}: {type(e).__name__}: {e}")
    if patch_views:
        sections.append(Section("Activation patching (CircuitsVis)", circuits.fragment(patch_views), "s-cv-patching"))
        components += patch_views
    # attention patterns of chosen sequences
    if model is False:
        return sections, components
    source = model if model is not None else _default_model(run_dir)
    if source is None:
        coll.missing.append("attention patterns (no checkpoint in the run folder and no model given)")
        return sections, components
    try:
        if isinstance(source, (str, Path)):
            from interp.models.checkpoint import load_checkpoint

            source = load_checkpoint(source, placement=placement)
        seqs = list(sequences) if sequences is not None else _default_sequences(run_dir, source, n_sequences)
        if not seqs:
            coll.missing.append("attention patterns (no sequences: no data/test.txt and none given)")
            return sections, components
        views = circuits.attention_views(source, seqs, max_tokens=max_tokens)
    except Exception as e:  # a report states what it could not show
        coll.missing.append(f"attention patterns: {type(e).__name__}: {e}")
        return sections, components
    where = getattr(source, "path", None)
    from_test = sequences is None and (run_dir / "data" / "test.txt").is_file()
    note = (
        f'<p class="note">Attention patterns (<code>blocks.L.attn.hook_pattern</code>) of {len(seqs)} '
        f"sequence(s){' from data/test.txt' if from_test else ''}"
        f"{f' under {html.escape(str(where))}' if where else ''}, cut to {max_tokens} tokens; one view per layer: "
        f"hover a head to see its pattern, click to fix it.</p>"
    )
    sections.append(Section("Attention patterns (CircuitsVis)", note + circuits.fragment(views), "s-cv-attention"))
    components += views
    return sections, components


# ---------------------------------------------------------------- the page


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
    cv_sections, components = _circuits_sections(run_dir, coll, model, sequences, n_sequences, max_tokens, placement)
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


__all__ = ["REPORT_NAME", "collect", "csv_table", "findings_html", "json_html", "render_report", "write_report"]
