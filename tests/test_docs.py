"""The documentation site (docs/, ``make docs``): it builds strictly and offline, its internal
links land, and what it is generated from is complete.

- The build: Sphinx with ``-W --keep-going -n`` (every warning an error, every cross-reference
  resolved; references into other packages are let pass by ``docs/_ext/interp_docs.py``, since no
  inventory is fetched offline), into a fresh folder, with the network off (``HF_HUB_OFFLINE``;
  nothing in the build fetches).
- Links: every relative ``href`` / ``src`` of the built HTML names a file that exists, and every
  ``#fragment`` an id in that file — checked on the output, independently of Sphinx.
- Sources: every public class and function has a docstring (public = ``interp.__all__`` and every
  module's ``__all__``, or what ``import *`` gives where a module has none; the command modules
  of ``interp.cli`` are documented by their parsers instead), every command-line option has help,
  and every room of ``tests/test_imports.py``'s ``ROOMS`` has an API page.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import REPO

DOCS = REPO / "docs"
sys.path.insert(0, str(DOCS / "_ext"))


# ---- the build ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("sphinx", reason="the docs extra is not installed (pip install -e '.[docs]')")
    pytest.importorskip("myst_nb", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-W",
            "--keep-going",
            "-n",
            "-q",
            "-E",
            "-d",
            str(out / "doctrees"),
            str(DOCS),
            str(out / "html"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, f"the strict docs build failed:\n{proc.stderr[-6000:]}"
    return out / "html"


def test_site_has_every_section(site):
    for page in (
        "index",
        "getting-started",
        "concepts/index",
        "guides/index",
        "tutorials/index",
        "reproductions/index",
        "benchmarks/index",
        "cli",
        "api/index",
        "architecture",
        "tutorials/notebooks/world_model",
        "tutorials/notebooks/layer_analysis",
    ):
        assert (site / f"{page}.html").is_file(), f"{page}.html was not built"


def test_cli_page_lists_every_command_and_option(site):
    from interp.cli import build_parser

    html = (site / "cli.html").read_text(encoding="utf-8")
    for full, _, parser in _commands(build_parser()):
        assert f'id="{full.replace(" ", "-")}"' in html, f"no section for {full}"
        for action in _options(parser):
            for name in action.option_strings:
                assert f">{name}<" in html, f"{full} {name} missing from cli.html"


def test_api_pages_document_the_public_names(site):
    """Every public class and function has an entry (an HTML id) on its room's API page."""
    pages: dict[str, str] = {}
    for home, obj in public_objects().items():
        room = obj.__module__.split(".")[1] if "." in obj.__module__ else "index"
        if room not in pages:
            pages[room] = (site / "api" / f"{room}.html").read_text(encoding="utf-8")
        assert f'id="{home}"' in pages[room], f"{home} is not documented on api/{room}.html"


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and not (tag == "link" and key == "href" and attrs.get("rel") == ["preconnect"]):
                self.refs.append(attrs[key])


def broken_links(root: Path) -> list[str]:
    """``"page -> target"`` for every relative link of the HTML under ``root`` whose file, or
    whose ``#fragment`` in that file, does not exist. External links (a scheme) are not checked."""
    parsed: dict[Path, _Links] = {}

    def parse(path: Path) -> _Links:
        if path not in parsed:
            p = _Links()
            p.feed(path.read_text(encoding="utf-8"))
            parsed[path] = p
        return parsed[path]

    bad = []
    for page in sorted(root.rglob("*.html")):
        for ref in parse(page).refs:
            parts = urlsplit(ref)
            if parts.scheme or parts.netloc or ref.startswith("data:") or ref.startswith("javascript:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if parts.path.endswith("/"):
                target = target / "index.html"
            if not target.exists():
                bad.append(f"{page.relative_to(root)} -> {ref}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in parse(target).ids:
                bad.append(f"{page.relative_to(root)} -> {ref} (no such id)")
    return bad


def test_no_broken_internal_link(site):
    assert broken_links(site) == []


def test_the_link_checker_finds_what_it_claims(tmp_path):
    (tmp_path / "a.html").write_text(
        '<p id="here"><a href="b.html#there">x</a><a href="#here">y</a>'
        '<a href="missing.html">z</a><img src="img/x.png">'
        '<a href="https://example.org/nowhere">w</a></p>'
    )
    (tmp_path / "b.html").write_text('<p id="elsewhere"><a href="a.html#here">back</a></p>')
    assert broken_links(tmp_path) == [
        "a.html -> b.html#there (no such id)",
        "a.html -> missing.html",
        "a.html -> img/x.png",
    ]


# ---- the sources the site is generated from ---------------------------------------------------


def public_objects() -> dict[str, object]:
    """``home name → object`` for every public class and function defined in interp."""
    import interp

    names = ["interp"] + [
        m.name
        for m in pkgutil.walk_packages(interp.__path__, "interp.")
        if not m.name.endswith("__main__") and not m.name.startswith("interp.cli.")
    ]
    out = {}
    for name in names:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        for n in exported if exported is not None else [n for n in vars(module) if not n.startswith("_")]:
            obj = getattr(module, n)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not obj.__module__.startswith("interp"):
                continue
            if exported is None and obj.__module__ != name:
                continue  # imported, not exported: public where it is defined
            out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return out


def has_docstring(obj) -> bool:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not (doc or "").strip():
        return False
    # a dataclass without a docstring gets its signature as one: "Name(field: type, ...)"
    return not (dataclasses.is_dataclass(obj) and re.fullmatch(rf"{re.escape(obj.__name__)}\(.*\)", doc.strip(), re.S))


def test_every_public_symbol_has_a_docstring():
    objects = public_objects()
    assert len(objects) > 300  # the walk found the package
    missing = sorted(name for name, obj in objects.items() if not has_docstring(obj))
    assert missing == [], "public classes/functions without a docstring:\n" + "\n".join(missing)


def test_the_docstring_rule_catches_a_dataclass_without_one():
    @dataclasses.dataclass
    class Bare:
        x: int

    @dataclasses.dataclass
    class Told:
        """Says what it is."""

        x: int

    def bare():
        pass

    assert not has_docstring(Bare) and has_docstring(Told) and not has_docstring(bare)


def _commands(parser: argparse.ArgumentParser, prefix: str = "interp"):
    """Every sub-command, walked here on purpose rather than taken from the docs extension: the
    CLI page is checked against an enumeration that is not the one that wrote it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name), sub
                yield from _commands(sub, f"{prefix} {name}")


def _options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def test_every_cli_command_and_option_has_help():
    from interp.cli import build_parser

    commands = list(_commands(build_parser()))
    assert len(commands) > 10
    missing = [full for full, text, _ in commands if not (text or "").strip()]
    missing += [
        f"{full} {a.option_strings[0] if a.option_strings else a.dest}"
        for full, _, sub in commands
        for a in _options(sub)
        if not (a.help or "").strip() or a.help == argparse.SUPPRESS
    ]
    assert missing == [], "commands/options without help:\n" + "\n".join(missing)


def test_every_room_has_an_api_page():
    from test_imports import ROOMS

    missing = [
        r
        for r in ROOMS
        if f"interp-api:: interp.{r}"
        not in ((DOCS / "api" / f"{r}.md").read_text(encoding="utf-8") if (DOCS / "api" / f"{r}.md").is_file() else "")
    ]
    assert missing == [], f"rooms without docs/api/<room>.md: {missing}"


def test_docstring_normaliser_keeps_interp_style_valid_rest():
    """Lists under a lead-in line, ``|x|`` and ``Parameters`` blocks, as interp's docstrings write
    them, become valid reST; literal blocks and inline literals are left as they are."""
    from interp_docs import normalise_docstring

    lines = [
        "Kinds",
        "- ``zero``: 0,",
        "  continued",
        "- ``mean``",
        "After the list |x| and ``|y|``.",
        "",
        "Example::",
        "",
        "    a | b",
        "",
        "Parameters",
        "----------",
        "rule: the rule,",
        "    continued.",
        "depth: k.",
    ]
    assert normalise_docstring(lines) == [
        "Kinds",
        "",
        "- ``zero``: 0,",
        "  continued",
        "- ``mean``",
        "",
        r"After the list \|x\| and ``|y|``.",
        "",
        "Example::",
        "",
        "    a | b",
        "",
        ".. rubric:: Parameters",
        "",
        ":rule: the rule,",
        "    continued.",
        ":depth: k.",
    ]
