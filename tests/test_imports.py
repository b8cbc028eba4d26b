"""Imports run down the flow: rooms form a DAG, and no module cycle exists.

A *room* is a package or a top-level module under ``interp/`` (``interp.worlds``, ``interp.config``,
``interp.cli`` …). :data:`ROOMS` lists them from the bottom up; a module may import its own room
and the rooms listed *before* it, never one after. Every ``import`` / ``from … import`` counts,
at module level, inside a function, and under ``if TYPE_CHECKING:`` (a type-only import still
says which room knows which), as do ``importlib.import_module("interp…")`` calls with a literal
name. The package ``interp`` itself (its lazy public API) is the only module that may name
every room. One level down, the sub-packages of ``interp.analysis`` are ranked the same
way (:data:`ANALYSIS_ROOMS`: engines, config, verdicts, evaluation, planted; the package
``interp.analysis`` itself may import any of them).

Module cycles are checked on the same edges: no module may reach itself through imports, even
through a function-level or type-only one (annotate with a lower protocol instead, as
``interp.worlds.streets.process`` does with :class:`~interp.worlds.base.World`).

The checker reads source with :mod:`ast` (nothing is imported), so it also runs on a planted
tree (the last tests), which is how it is known to catch what it claims to.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the rooms, bottom up (docs/architecture.md). Plumbing (imports nothing of interp) first, then the flow: files →
#: worlds → models → tasks → hooks → metrics → analysis → figures → training → the jobs → the CLI.
ROOMS = (
    "results",
    "config",
    "stats",  # plumbing: result protocol, TOML configs, intervals
    "hardware",  # machine facts quoted beside timings (CPU, threads, matmul peak)
    "datasets",  # published files (PragWorld CSVs, prompts, yes/no parser), contrast JSONL, IOI
    "worlds",  # World protocol, vocabulary and its encoding, the worlds
    "models",  # GPT-2 build, checkpoints, the LM view, devices, processes
    "tasks",  # a dataset meets a model's tokenizer
    "hooks",  # sites and interventions as data
    "metrics",  # world-model metrics, PragWorld evaluation and scoring
    "analysis",  # sweep and patching engines, sweep configs, verdicts, evaluation, plantings judged
    "viz",  # figures and the report, drawn from results
    "train",  # the one loop, regularisers, planting, fine-tuning
    "jobs",  # each job end to end: sweep, train, the main job, PragWorld (called by the CLI)
    "api",  # the public Python API: load_model, tasks, sweep, patch, finetune, world_model, load
    "studies",  # a paper's question asked of real models end to end over the API (experiments/ call them)
    "cli",  # the ``interp`` command
)
RANK = {room: i for i, room in enumerate(ROOMS)}

#: the sub-rooms of ``interp.analysis`` (its sub-packages), bottom up, by the same rule one level down:
#: a module of ``interp.analysis`` imports its own sub-room and those listed before it, never a later one.
ANALYSIS_ROOMS = (
    "engines",  # how a sweep or patching run is executed: strategies, scoring, batching, units
    "config",  # a sweep's settings as frozen dataclasses, checked when made (no torch)
    "verdicts",  # effects → useful / harmful / negligible / inconclusive, and the checks beside them
    "evaluation",  # how well a model does a task (contrast, dialogue, probes, the fine-tuning suite)
    "planted",  # a planting judged against its known answer
)
SUB_RANK = {room: i for i, room in enumerate(ANALYSIS_ROOMS)}


@dataclass(frozen=True)
class Edge:
    source: str  # importing module
    target: str  # imported interp module
    line: int
    type_only: bool


def modules(root: Path) -> dict[str, Path]:
    """Dotted name → file, for every module of the ``interp`` package under ``root``."""
    out = {}
    for p in sorted((root / "interp").rglob("*.py")):
        parts = p.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
            ):
                for sub in node.body:
                    lines.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return lines


def _targets(mods: dict[str, Path], cur: str, node: ast.AST) -> list[str]:
    """Dotted names an import node brings in (before resolving to a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            pkg = cur.split(".") if mods[cur].name == "__init__.py" else cur.split(".")[:-1]
            pkg = pkg[: len(pkg) - (node.level - 1)]
            base = ".".join(pkg + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        return [f"{base}.{a.name}" for a in node.names]
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name == "import_module":
            return [node.args[0].value]
    return []


def import_edges(root: Path) -> list[Edge]:
    """Every import of one interp module by another (see the module docstring for what counts)."""
    mods = modules(root)
    edges = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        typed = _type_checking_lines(tree)
        for node in ast.walk(tree):
            for t in _targets(mods, name, node):
                while t and t not in mods:  # `from pkg.mod import name` → pkg.mod
                    t = t.rpartition(".")[0]
                if t and t != name and not name.startswith(t + "."):  # a package's own __init__ aside
                    edges.append(Edge(name, t, node.lineno, node.lineno in typed))
    return edges


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "interp"


def back_imports(edges: list[Edge]) -> list[Edge]:
    """Imports of a room listed after the importer's (the package ``interp`` may import any)."""
    return [
        e
        for e in edges
        if room_of(e.source) != "interp"
        and room_of(e.source) != room_of(e.target)
        and RANK[room_of(e.target)] > RANK[room_of(e.source)]
    ]


def sub_room_of(module: str) -> str | None:
    """The sub-room of a module of ``interp.analysis`` (``interp.analysis.verdicts.bands`` →
    ``verdicts``); ``""`` for the package itself, whose lazy table names every sub-room; None
    outside ``interp.analysis``."""
    parts = module.split(".")
    if parts[:2] != ["interp", "analysis"]:
        return None
    return parts[2] if len(parts) > 2 else ""


def sub_room_back_imports(edges: list[Edge]) -> list[Edge]:
    """Imports between sub-rooms of ``interp.analysis`` that run up :data:`ANALYSIS_ROOMS` (the package
    itself may import any)."""
    bad = []
    for e in edges:
        source, target = sub_room_of(e.source), sub_room_of(e.target)
        if not source or not target or source == target:
            continue
        if SUB_RANK.get(target, len(ANALYSIS_ROOMS)) > SUB_RANK.get(source, -1):
            bad.append(e)
    return bad


def _explain_sub(e: Edge) -> str:
    target = sub_room_of(e.target)
    return (
        f"{e.source.replace('.', '/')}.py:{e.line} imports {e.target}: sub-room {sub_room_of(e.source)!r} sits "
        f"below {target!r} (ANALYSIS_ROOMS in tests/test_imports.py, docs/architecture.md)"
    )


def module_cycles(edges: list[Edge]) -> list[list[str]]:
    """Strongly connected groups of modules (every import counts)."""
    g = nx.DiGraph((e.source, e.target) for e in edges)
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def _explain(e: Edge) -> str:
    return (
        f"{e.source.replace('.', '/')}.py:{e.line} imports {e.target}: room {room_of(e.source)!r} sits below "
        f"{room_of(e.target)!r} (ROOMS in tests/test_imports.py, docs/architecture.md)"
    )


# ---------------------------------------------------------------- the checks on interp itself


def test_every_room_is_placed():
    rooms = {room_of(m) for m in modules(ROOT)} - {"interp"}
    missing = sorted(rooms - set(ROOMS))
    assert not missing, f"rooms not placed in ROOMS (tests/test_imports.py): {missing}"
    gone = sorted(set(ROOMS) - rooms)
    assert not gone, f"ROOMS names rooms that no longer exist: {gone}"


def test_no_import_runs_back_up():
    bad = back_imports(import_edges(ROOT))
    assert not bad, f"{len(bad)} import(s) run back up the flow:\n" + "\n".join(map(_explain, bad))


def test_no_module_cycle():
    cycles = module_cycles(import_edges(ROOT))
    assert not cycles, "module cycles (imports inside functions count):\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_the_room_graph_is_a_dag():
    g = nx.DiGraph()
    for e in import_edges(ROOT):
        if room_of(e.source) not in ("interp", room_of(e.target)):
            g.add_edge(room_of(e.source), room_of(e.target))
    assert nx.is_directed_acyclic_graph(g), f"room cycles: {list(nx.simple_cycles(g))[:10]}"


def test_every_analysis_module_sits_in_a_placed_sub_room():
    subs = {sub_room_of(m) for m in modules(ROOT)} - {None}
    assert "" in subs  # the package itself
    here = ROOT / "interp" / "analysis"
    loose = sorted(m for m, p in modules(ROOT).items() if p.parent == here and p.name != "__init__.py")
    assert not loose, f"modules of interp.analysis outside its sub-rooms (move each where its job is): {loose}"
    missing = sorted(subs - {""} - set(ANALYSIS_ROOMS))
    assert not missing, f"sub-rooms of interp.analysis not placed in ANALYSIS_ROOMS (tests/test_imports.py): {missing}"
    gone = sorted(set(ANALYSIS_ROOMS) - subs)
    assert not gone, f"ANALYSIS_ROOMS names sub-rooms that no longer exist: {gone}"


def test_no_import_runs_back_up_between_analysis_sub_rooms():
    bad = sub_room_back_imports(import_edges(ROOT))
    assert not bad, f"{len(bad)} import(s) run back up interp.analysis's sub-rooms:\n" + "\n".join(
        map(_explain_sub, bad)
    )


def test_plumbing_imports_nothing_of_interp():
    low = {"results", "config", "stats", "datasets"}
    bad = [e for e in import_edges(ROOT) if room_of(e.source) in low and room_of(e.target) != room_of(e.source)]
    assert not bad, "\n".join(map(_explain, bad)) or "plumbing imports another room"


#: the most lines one module may have: past it a module holds more than one job (split it by job)
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_size_limit():
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "interp").rglob("*.py")}
    big = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {big}"
    assert len(sizes) > 100  # the walk found the package


def private_imports(root: Path) -> list[str]:
    """``importer: module.name`` for every ``_private`` name one module of ``root/interp`` imports
    from another (a helper two modules share is public in a module of its own, not borrowed)."""
    found = []
    for path in sorted((root / "interp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "interp":
                found += [
                    f"{path.relative_to(root).as_posix()}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    return found


def test_no_private_helper_is_imported_across_modules():
    bad = private_imports(ROOT)
    assert not bad, (
        "private names imported from another module (make them public where they are shared):\n" + "\n".join(bad)
    )


def test_the_private_import_checker_finds_a_planted_one(tmp_path):
    root = _tree(
        tmp_path, {"interp/a.py": "def _h():\n    pass\n", "interp/b.py": "def f():\n    from interp.a import _h\n"}
    )
    assert private_imports(root) == ["interp/b.py: interp.a._h"]


# ---------------------------------------------------------------- the checker on planted trees


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_checker_finds_a_planted_back_import_inside_a_function(tmp_path):
    root = _tree(
        tmp_path,
        {
            "interp/__init__.py": "",
            "interp/worlds/__init__.py": "",
            "interp/worlds/base.py": "def f():\n    from interp.train.data import make_batch\n",
            "interp/train/__init__.py": "",
            "interp/train/data.py": "from interp.worlds.base import f\n",
            "interp/metrics/__init__.py": "",
            "interp/metrics/x.py": "from ..viz import layers\nimport importlib\nimportlib.import_module('interp.analysis.y')\n",
            "interp/viz/__init__.py": "",
            "interp/viz/layers.py": "",
            "interp/analysis/__init__.py": "",
            "interp/analysis/y.py": "",
        },
    )
    bad = {(e.source, e.target, e.line) for e in back_imports(import_edges(root))}
    assert bad == {
        ("interp.worlds.base", "interp.train.data", 2),
        ("interp.metrics.x", "interp.viz.layers", 1),
        ("interp.metrics.x", "interp.analysis.y", 3),
    }
    # worlds.base ↔ train.data is also a module cycle (one side inside a function)
    assert module_cycles(import_edges(root)) == [["interp.train.data", "interp.worlds.base"]]


def test_checker_counts_type_checking_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "interp/__init__.py": "",
            "interp/worlds/__init__.py": "",
            "interp/worlds/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from interp.worlds.b import B\n"
            "    from interp.models.m import M\n",
            "interp/worlds/b.py": "from interp.worlds.a import *\n",
            "interp/models/__init__.py": "",
            "interp/models/m.py": "",
        },
    )
    edges = import_edges(root)
    assert [(e.source, e.target) for e in back_imports(edges)] == [("interp.worlds.a", "interp.models.m")]
    assert module_cycles(edges) == [["interp.worlds.a", "interp.worlds.b"]]
    assert {e.target: e.type_only for e in edges if e.source == "interp.worlds.a"} == {
        "interp.worlds.b": True,
        "interp.models.m": True,
    }


@pytest.mark.parametrize("room", ["results", "worlds", "analysis", "cli"])
def test_a_room_may_import_below_itself(tmp_path, room):
    below = ROOMS[: RANK[room]]
    files = {"interp/__init__.py": "", f"interp/{room}.py": "".join(f"import interp.{r}\n" for r in below)}
    files.update({f"interp/{r}.py": "" for r in below})
    assert back_imports(import_edges(_tree(tmp_path, files))) == []


def test_checker_finds_a_planted_back_import_between_analysis_sub_rooms(tmp_path):
    """Up the sub-rooms of ``interp.analysis`` (inside a function, type-only, relative, by
    ``import_module``) is caught; down them, within one, and from the package itself is not."""
    pkg = "interp/analysis"
    root = _tree(
        tmp_path,
        {
            "interp/__init__.py": "",
            f"{pkg}/__init__.py": "import importlib\nimportlib.import_module('interp.analysis.planted.judge')\n",
            f"{pkg}/engines/__init__.py": "",
            f"{pkg}/engines/sweeps.py": "def f():\n    from interp.analysis.verdicts.layers import layer_verdicts\n",
            f"{pkg}/engines/scoring.py": "from interp.analysis.engines.sweeps import f\n",
            f"{pkg}/config/__init__.py": "",
            f"{pkg}/config/sweep_config.py": "import importlib\nimportlib.import_module('interp.analysis.evaluation.contrast')\n",
            f"{pkg}/verdicts/__init__.py": "",
            f"{pkg}/verdicts/layers.py": "from typing import TYPE_CHECKING\nfrom interp.analysis.engines import scoring\n"
            "from interp.analysis.config.sweep_config import *\nif TYPE_CHECKING:\n    from ..planted.judge import J\n",
            f"{pkg}/evaluation/__init__.py": "",
            f"{pkg}/evaluation/contrast.py": "import interp.analysis.verdicts.bands\n",
            f"{pkg}/planted/__init__.py": "",
            f"{pkg}/planted/judge.py": "from interp.analysis.evaluation import contrast\n",
        },
    )
    bad = {(e.source, e.target, e.line) for e in sub_room_back_imports(import_edges(root))}
    assert bad == {
        ("interp.analysis.engines.sweeps", "interp.analysis.verdicts.layers", 2),
        ("interp.analysis.config.sweep_config", "interp.analysis.evaluation.contrast", 2),
        ("interp.analysis.verdicts.layers", "interp.analysis.planted.judge", 5),
    }
    assert back_imports(import_edges(root)) == []  # all inside one room: the room check alone sees nothing


@pytest.mark.parametrize("sub", ANALYSIS_ROOMS)
def test_an_analysis_sub_room_may_import_below_itself(tmp_path, sub):
    below = ANALYSIS_ROOMS[: SUB_RANK[sub]]
    files = {"interp/__init__.py": "", "interp/analysis/__init__.py": ""}
    files.update({f"interp/analysis/{s}/__init__.py": "" for s in ANALYSIS_ROOMS})
    files.update({f"interp/analysis/{s}/m.py": "" for s in below})
    files[f"interp/analysis/{sub}/m.py"] = "".join(f"import interp.analysis.{s}.m\n" for s in below)
    assert sub_room_back_imports(import_edges(_tree(tmp_path, files))) == []
