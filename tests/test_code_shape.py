"""Issue 38: no public function outside ``interp.cli`` takes more than 10 parameters (settings
go in a frozen options dataclass) or runs over 110 lines (long bodies are split into named steps).

Parameters and lines are counted as ``bench/code_shape.py`` counts them (its :func:`functions`,
loaded from the repository): named parameters (positional and keyword-only, not ``self`` /
``cls``, not ``*args`` / ``**kwargs``), lines from ``def`` to the body's end; "public" means the
name does not start with ``_``, nested functions and methods included. The functions still over
are listed in :data:`ALLOWED` with the reason; an entry that no longer exceeds a limit (or no
longer exists) fails the test, so the list only shrinks.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_PARAMS = 10
MAX_LINES = 110

#: qualified name → why it is still over a limit (none now: every job's body is split into named stages)
ALLOWED: dict[str, str] = {}


def _code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "bench" / "code_shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("code_shape", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def offenders(root: Path) -> dict[str, str]:
    """Public functions outside ``interp/cli`` of the package under ``root`` over either limit:
    qualified name → what is over."""
    cs = _code_shape()
    out = {}
    for path in sorted((root / "interp").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for f in cs.functions(rel, path.read_text(encoding="utf-8")):
            if f.private or f.room == "cli":
                continue
            over = [f"{f.params} parameters"] * (f.params > MAX_PARAMS) + [f"{f.lines} lines"] * (f.lines > MAX_LINES)
            if over:
                out[f.qualname] = ", ".join(over)
    return out


def test_no_public_function_over_the_limits_outside_the_cli():
    found = offenders(ROOT)
    new = {q: why for q, why in found.items() if q not in ALLOWED}
    assert not new, (
        f"public functions over {MAX_PARAMS} parameters or {MAX_LINES} lines: {new}; group the settings "
        "in a frozen options dataclass (interp.config.merge_options keeps old keywords working) and "
        "split the body into named steps"
    )


def test_the_allowlist_has_no_stale_entries():
    stale = sorted(set(ALLOWED) - set(offenders(ROOT)))
    assert not stale, f"within the limits now (or gone): remove from ALLOWED: {stale}"


def test_the_checker_catches_a_planted_function(tmp_path):
    params = lambda k: ", ".join(f"a{i}" for i in range(k))  # noqa: E731
    long_body = "\n".join(f"    x{i} = {i}" for i in range(110))  # def + 110 lines = 111
    (tmp_path / "interp" / "cli").mkdir(parents=True)
    (tmp_path / "interp" / "planted.py").write_text(
        textwrap.dedent(
            f"""\
            def eleven({params(11)}):
                pass


            def ten({params(10)}, *args, **kwargs):
                pass


            def _private({params(12)}):
                pass


            class Holder:
                def method(self, {params(10)}):
                    pass

                def crowded(self, *, {params(11)}):
                    pass

                @classmethod
                def make(cls, {params(10)}):
                    pass


            def outer():
                def inner({params(11)}):
                    pass

                return inner
            """
        )
        + f"\n\ndef long():\n{long_body}\n\n\ndef just_fits():\n"
        + long_body.split("\n", 1)[1]
        + "\n"
    )
    (tmp_path / "interp" / "cli" / "main.py").write_text(f"def wide({params(20)}):\n    pass\n")
    assert offenders(tmp_path) == {
        "interp.planted.eleven": "11 parameters",
        "interp.planted.Holder.crowded": "11 parameters",
        "interp.planted.outer.<locals>.inner": "11 parameters",
        "interp.planted.long": "111 lines",
    }
