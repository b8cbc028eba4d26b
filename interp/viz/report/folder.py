"""A run folder gathered into the report's sections: the summary (``results.json``), the files at
the top, each subfolder (``sweep_*``, fine-tuning, …), the checkpoints and data — files grouped
by stem and ordered as interp writes them — and a list of what the run lacks."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interp.viz.report.files import (
    IMAGE_TYPES,
    MAX_JSON_BYTES,
    REPORT_NAME,
    TEXT_TYPES,
    csv_table,
    heading_anchor,
    humanise,
    image_html,
    json_html,
    rows_table,
    text_html,
)

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


@dataclass
class Section:
    """A titled part of the report (an ``<h2>``) with its HTML body."""

    title: str
    body: str
    anchor: str = ""

    def __post_init__(self) -> None:
        self.anchor = self.anchor or heading_anchor(self.title)


@dataclass
class Collected:
    """What the report found in a run folder: its ``sections``, the files it expected but did not
    find (``missing``), and the activation-patching maps (``patching``) for the interactive views."""

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


def _group_html(files: list[Path], root: Path, max_rows: int, coll: Collected, skip_json: set[str]) -> str:
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


def _folder_body(folder: Path, root: Path, max_rows: int, coll: Collected, skip_json: set[str], heading: int) -> str:
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
            title = TITLES.get(key, humanise(key))
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
    out = rows_table(["checkpoint", "size", "files", "world"], rows) if rows else ""
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
        out += rows_table(["data file", "lines (sequences)", "size"], drows)
    return out


def collect(run_dir: Path, max_rows: int = 20) -> Collected:
    """The run folder's sections (summary, top-level files, subfolders, checkpoints) and what is missing."""
    coll = Collected()
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
                skip.update(("config.json", "run.json"))  # the same configuration, written beside it
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
    checkpoints: list[Path] = []
    subfolders: list[Path] = []
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
        name = d.relative_to(run_dir).as_posix()  # a fine-tuning folder's run.json: the config its results.json holds
        same = {f"{name}/run.json"} if (d / "results.json").is_file() and (d / "run.json").is_file() else set()
        body = _folder_body(d, run_dir, max_rows, coll, same, heading=3)
        if body:
            title = f"Sweep: {name[len('sweep_') :]}" if name.startswith("sweep_") else humanise(name)
            coll.sections.append(Section(f"{title} ({name}/)", body, heading_anchor(name)))
    if not any(d.name.startswith("sweep") for d in subfolders):
        coll.missing.append("layer sweeps (no sweep_* folder; `interp sweep --model RUN/best`)")
    ck_body = _checkpoints_and_data(run_dir, checkpoints)
    if ck_body:
        coll.sections.append(Section("Checkpoints and data", ck_body))
    if not checkpoints and world_job:
        coll.missing.append("checkpoints (no best/ or last/ model folder)")
    return coll
