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
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                k = len(a.args) + len(a.kwonlyargs) + len(a.posonlyargs)
                k -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                funcs.append((n, k, f"{path}:{node.name}", node.name.startswith("_"), r))
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
