"""The shape of the package at a git revision (issue 38's before / after table): files and lines
per room, the largest function, the most parameters, functions over 80 lines and over 10
parameters, and the room-to-room import arrows.

    python bench/code_shape.py [REV ...]      # default: HEAD; e.g. e340e59 HEAD
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass


def files_at(rev: str) -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "interp"], capture_output=True, text=True, check=True
    ).stdout.split()
    return {
        n: subprocess.run(["git", "show", f"{rev}:{n}"], capture_output=True, text=True, check=True).stdout
        for n in names
        if n.endswith(".py")
    }


def room(path: str) -> str:
    parts = path.split("/")
    return parts[1].removesuffix(".py") if len(parts) > 2 or parts[1] != "__init__.py" else "(package)"


@dataclass(frozen=True)
class Func:
    """One function or method of the package, as this script counts it."""

    lines: int  # from the ``def`` line to the last line of its body
    params: int  # named parameters (positional, keyword-only), not ``self`` / ``cls``, not ``*args`` / ``**kw``
    where: str  # ``path:name``
    private: bool  # the name starts with ``_``
    room: str
    qualname: str  # ``interp.module.Class.name`` (nested functions: ``outer.<locals>.name``)


def functions(path: str, text: str) -> list[Func]:
    """Every function and method defined in one file of the package (nested ones too)."""
    module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    out: list[Func] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                k = len(a.args) + len(a.kwonlyargs) + len(a.posonlyargs)
                k -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                n = (child.end_lineno or child.lineno) - child.lineno + 1
                q = f"{prefix}.{child.name}"
                out.append(Func(n, k, f"{path}:{child.name}", child.name.startswith("_"), room(path), q))
                visit(child, f"{q}.<locals>")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    visit(ast.parse(text), module)
    return out


def shape(rev: str) -> dict[str, object]:
    files = files_at(rev)
    lines: Counter[str] = Counter()
    count: Counter[str] = Counter()
    funcs = []
    arrows = set()
    for path, text in files.items():
        r = room(path)
        lines[r] += len(text.splitlines())
        count[r] += 1
        funcs += [(f.lines, f.params, f.where, f.private, f.room) for f in functions(path, text)]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("interp."):
                target = node.module.split(".")[1]
                if target != r and r != "(package)":
                    arrows.add((r, target))
    public_outside_cli = [f for f in funcs if not f[3] and f[4] != "cli"]
    return {
        "rooms": {r: (count[r], lines[r]) for r in sorted(lines)},
        "files": sum(count.values()),
        "lines": sum(lines.values()),
        "largest": max(funcs),
        "most_params": max(funcs, key=lambda f: f[1]),
        "over_80_lines": sum(f[0] > 80 for f in funcs),
        "public_over_10_params_outside_cli": sum(f[1] > 10 for f in public_outside_cli),
        "public_over_100_lines_outside_cli": sum(f[0] > 100 for f in public_outside_cli),
        "arrows": len(arrows),
    }


def main(revs: list[str]) -> None:
    got = {rev: shape(rev) for rev in revs}
    rooms = sorted({r for s in got.values() for r in s["rooms"]})  # type: ignore[attr-defined]
    print("| room | " + " | ".join(f"{rev} files / lines" for rev in revs) + " |")
    print("|---|" + "---|" * len(revs))
    for r in rooms:
        cells = [
            "{} / {}".format(*s["rooms"].get(r, (0, 0)))  # type: ignore[attr-defined]
            for s in got.values()
        ]
        print(f"| {r} | " + " | ".join(cells) + " |")
    for key in (
        "files",
        "lines",
        "largest",
        "most_params",
        "over_80_lines",
        "public_over_10_params_outside_cli",
        "public_over_100_lines_outside_cli",
        "arrows",
    ):
        vals = []
        for s in got.values():
            v = s[key]
            vals.append(f"{v[2]} ({v[0]} lines, {v[1]} params)" if isinstance(v, tuple) else str(v))
        print(f"| {key} | " + " | ".join(vals) + " |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["HEAD"])
