"""Sphinx pieces that build interp's reference pages from the sources, so no page copies them.

- ``interp-cli``: the command-line reference, read from :func:`interp.cli.build_parser` (every
  command and sub-command, its usage, and a table of its options with defaults and help). An
  option without help is a build warning.
- ``interp-api MODULE``: the API reference of one room: the room's own docstring and its public
  names, then every module under it through autodoc, each object documented once, where it is
  defined (a package's re-exports are listed, not documented twice). Use it inside
  ``{eval-rst}``: autodoc writes reStructuredText.
- ``interp-rooms [ANALYSIS_ROOMS]``: the architecture table, read from ``ROOMS`` (or the sub-rooms
  of ``interp.analysis``, ``ANALYSIS_ROOMS``) in ``tests/test_imports.py`` (the
  order the import test enforces) with each room's comment there.
- Cross-references: a Python name a docstring writes through a re-export
  (``interp.hooks.intervene``), relative to its module (``WorldError``) or through a type-only
  import is resolved by importing it and linking the object's documented home. References that
  land outside interp (torch, pandas, transformers, …: no inventory offline) are not warned about;
  an interp name that resolves to nothing, or to an undocumented object, still is.
- The walkthrough notebooks of ``experiments/notebooks/`` are copied into
  ``docs/tutorials/notebooks/`` (ignored by git) for myst-nb to render.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import inspect
import logging as pylogging
import pkgutil
import re
import shutil
import typing
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.directives.other import TocTree
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_refnode

LOG = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "experiments" / "notebooks"
NOTEBOOK_COPY = REPO / "docs" / "tutorials" / "notebooks"


# ---------------------------------------------------------------------------------------------
# small node builders


def _para(*children: nodes.Node | str) -> nodes.paragraph:
    p = nodes.paragraph()
    for c in children:
        p += nodes.Text(c) if isinstance(c, str) else c
    return p


def _table(header: list[str], rows: list[list[nodes.Node | str]], widths: list[int]) -> nodes.table:
    table = nodes.table(classes=["interp-table"])
    group = nodes.tgroup(cols=len(header))
    table += group
    for w in widths:
        group += nodes.colspec(colwidth=w)
    head = nodes.thead()
    group += head
    row = nodes.row()
    for h in header:
        row += nodes.entry("", _para(h))
    head += row
    body = nodes.tbody()
    group += body
    for cells in rows:
        row = nodes.row()
        for c in cells:
            entry = nodes.entry()
            entry += c if isinstance(c, nodes.Element) and not isinstance(c, nodes.Inline) else _para(c)
            row += entry
        body += row
    return table


def _section(document, title: str, name: str) -> nodes.section:
    sec = nodes.section(ids=[nodes.make_id(name)], names=[nodes.fully_normalize_name(name)])
    sec += nodes.title(title, title)
    document.note_explicit_target(sec)
    return sec


# ---------------------------------------------------------------------------------------------
# a toctree in reading order that also takes the pages other branches add


class OrderedTocTree(TocTree):
    """A toctree of the pages named, in that order, then every other page of the same folder
    (alphabetically): index pages fix the reading order of their own pages and still pick up the
    pages added later (``docs/concepts/*.md`` …) without a glob that matches nothing meanwhile."""

    def run(self) -> list[nodes.Node]:
        here = self.env.docname
        folder = here.rsplit("/", 1)[0] + "/" if "/" in here else ""
        named = [line.strip() for line in self.content if line.strip()]
        rest = sorted(
            d[len(folder) :]
            for d in self.env.found_docs
            if d.startswith(folder) and d != here and "/" not in d[len(folder) :] and d[len(folder) :] not in named
        )
        self.content = StringList(named + rest, source=self.content.source(0) if self.content else here)
        return super().run()


# ---------------------------------------------------------------------------------------------
# the command line


def option_rows(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options and positionals a user types (``-h`` and sub-command groups left out)."""
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def commands(parser: argparse.ArgumentParser, prefix: str = "interp"):
    """``(full command, help, parser)`` for every sub-command under ``parser``, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix} {name}", helps.get(name), sub
                yield from commands(sub, f"{prefix} {name}")


def undocumented_options(parser: argparse.ArgumentParser) -> list[str]:
    """``"interp CMD --option"`` for every option or command without help text."""
    missing = []
    for full, text, sub in commands(parser):
        if not text:
            missing.append(full)
        for a in option_rows(sub):
            if not (a.help or "").strip() or a.help == argparse.SUPPRESS:
                missing.append(f"{full} {a.option_strings[0] if a.option_strings else a.dest}")
    return missing


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off" if isinstance(action, argparse._StoreTrueAction) else "on"
    if action.default in (None, argparse.SUPPRESS):
        return ""
    return repr(action.default) if isinstance(action.default, str) else str(action.default)


def _option_name(action: argparse.Action) -> nodes.paragraph:
    p = nodes.paragraph()
    names = action.option_strings or [action.metavar or action.dest]
    for i, n in enumerate(names):
        if i:
            p += nodes.Text(", ")
        p += nodes.literal(n, n)
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        p += nodes.Text(" {" + ", ".join(map(str, action.choices)) + "}")
    elif action.option_strings and action.nargs != 0:
        meta = action.metavar or action.dest.upper()
        p += nodes.Text(" " + (" ".join(meta) if isinstance(meta, tuple) else meta))
    return p


class CliDirective(SphinxDirective):
    """The reference of every ``interp`` command, generated from the argparse parsers."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from interp.cli import build_parser

        parser = build_parser()
        out: list[nodes.Node] = [_para(parser.description or "")]
        out.append(nodes.literal_block(text=parser.format_usage().strip()))
        for full, text, sub in commands(parser):
            sec = _section(self.state.document, full, full.replace(" ", "-"))
            sec += _para(text or "")
            if sub.description and sub.description != text:
                sec += _para(sub.description)
            sec += nodes.literal_block(text=sub.format_usage().strip())
            rows = []
            for a in option_rows(sub):
                if not (a.help or "").strip():
                    LOG.warning(
                        "CLI option without help: %s %s",
                        full,
                        a.option_strings[0] if a.option_strings else a.dest,
                        location=(self.env.docname, self.lineno),
                    )
                rows.append([_option_name(a), _default(a), a.help or ""])
            if rows:
                sec += _table(["option", "default", "what"], rows, [30, 12, 58])
            out.append(sec)
        return out


# ---------------------------------------------------------------------------------------------
# the Python API


def room_modules(room: str) -> list[str]:
    """``room`` and every module under it (``__main__`` modules, which run on import, left out)."""
    mod = importlib.import_module(room)
    names = [room]
    if hasattr(mod, "__path__"):
        names += sorted(
            m.name for m in pkgutil.walk_packages(mod.__path__, room + ".") if not m.name.endswith("__main__")
        )
    return names


@functools.cache
def _assigned_names(module) -> set[str]:
    """Names a module assigns at top level (its own constants, as opposed to imported ones)."""
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return set()
    out = set()
    for node in tree.body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.add(n.id)
    return out


def defined_here(module, name: str) -> bool:
    """Whether ``module.name`` is defined in ``module`` (not a re-export of another module's)."""
    obj = getattr(module, name, None)
    if inspect.ismodule(obj):
        return False
    home = getattr(obj, "__module__", None) if (inspect.isclass(obj) or callable(obj)) else None
    if home is not None:
        return home == module.__name__
    return name in _assigned_names(module)


def public_names(module) -> list[str]:
    """A module's public names: its ``__all__``, else what ``import *`` would give."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return list(names)


def undocumented_constants(module) -> list[str]:
    """Public constants a module defines without a ``#:`` comment, which autodoc leaves out (it
    documents module data only with a doc comment); they are documented with their value so that
    references to them resolve. Type variables and loggers are not constants."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
    except Exception:  # noqa: BLE001 - no source to analyse: nothing to add
        return []
    out = []
    for n in public_names(module):
        obj = getattr(module, n, None)
        if (
            obj is None
            or inspect.ismodule(obj)
            or inspect.isclass(obj)
            or callable(obj)
            or isinstance(obj, (typing.TypeVar, pylogging.Logger))
        ):
            continue
        if defined_here(module, n) and ("", n) not in docs:
            out.append(n)
    return out


class ApiDirective(SphinxDirective):
    """autodoc for a room and every module under it; each object once, in its defining module."""

    required_arguments = 1
    option_spec = {"no-submodules": directives.flag}

    def run(self) -> list[nodes.Node]:
        room = self.arguments[0]
        out: list[nodes.Node] = []
        mods = [room] if "no-submodules" in self.options else room_modules(room)
        for name in mods:
            module = importlib.import_module(name)
            reexports = [n for n in getattr(module, "__all__", ()) if not defined_here(module, n)]
            lines = [
                f".. automodule:: {name}",
                "   :members:",
                "   :undoc-members:",
                "   :imported-members:",
                "   :show-inheritance:",
                "   :member-order: bysource",
                "",
            ]
            for const in undocumented_constants(module):
                lines += [f".. autodata:: {name}.{const}"]
                if len(repr(getattr(module, const))) > 80:
                    lines.append("   :no-value:")
                lines.append("")
            if reexports:
                lines += ["", ".. rubric:: Re-exported here", ""]
                lines += [f"- :py:obj:`{name}.{n}`" for n in reexports] + [""]
            target = out
            if name != room:
                sec = _section(self.state.document, name, name)
                out.append(sec)
                target = sec
            holder = nodes.container()
            self.state.nested_parse(StringList(lines, source=f"<interp-api {name}>"), self.content_offset, holder)
            target_node = target if isinstance(target, nodes.Element) else None
            if target_node is not None:
                target_node.extend(holder.children)
            else:
                out.extend(holder.children)
        return out


# ---------------------------------------------------------------------------------------------
# the architecture

ROOMS_FILE = REPO / "tests" / "test_imports.py"


def read_rooms(path: Path = ROOMS_FILE, name: str = "ROOMS") -> list[tuple[str, str]]:
    """``(room, comment)`` from the ``ROOMS`` tuple of the import test (or another tuple of it, e.g.
    ``ANALYSIS_ROOMS``: the sub-rooms of ``interp.analysis``), bottom up."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            lines = source.splitlines()[node.lineno - 1 : node.end_lineno]
            rooms = [elt.value for elt in node.value.elts]
            comments: dict[str, str] = {}
            for line in lines:
                found = re.findall(r'"([a-z_]+)"', line.split("#")[0])
                comment = line.split("#", 1)[1].strip() if "#" in line else ""
                for r in found:
                    comments[r] = comment
            return [(r, comments.get(r, "")) for r in rooms]
    raise ValueError(f"no {name} in {path}")


class RoomsDirective(SphinxDirective):
    """The rooms in import order, each linked to its API page; with the argument ``ANALYSIS_ROOMS``,
    the sub-rooms of ``interp.analysis`` instead, each linked to its section of the analysis page."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0] if self.arguments else "ROOMS"
        sub = name != "ROOMS"
        rows = []
        for i, (room, comment) in enumerate(read_rooms(name=name), start=1):
            module = f"interp.analysis.{room}" if sub else f"interp.{room}"
            domain, kind, target = ("py", "mod", module) if sub else ("std", "doc", f"/api/{room}")
            ref = addnodes.pending_xref(
                "", refdomain=domain, reftype=kind, reftarget=target, refexplicit=True, refdoc=self.env.docname
            )
            ref += nodes.literal(module, module)
            mod = importlib.import_module(module)
            first = (inspect.getdoc(mod) or "").split("\n\n")[0].replace("\n", " ")
            shown = comment if not rows or comment != rows[-1][-1] else ""
            rows.append([str(i), _para(ref), first, shown, comment])
        header = "what it holds (ANALYSIS_ROOMS)" if sub else "layer of the flow (ROOMS)"
        return [_table(["#", "room", "its docstring", header], [r[:4] for r in rows], [3, 18, 50, 29])]


# ---------------------------------------------------------------------------------------------
# docstrings as the sources write them

_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+\.)\s")
_LITERAL = re.compile(r"(``.*?``)")


def _escape_bars(line: str) -> str:
    """``|x|`` is an absolute value in these docstrings, never a reST substitution."""
    parts = _LITERAL.split(line)
    return "".join(p if i % 2 else re.sub(r"(?<!\\)\|", r"\\|", p) for i, p in enumerate(parts))


_FIELD = re.compile(r"^(\s*)([A-Za-z_][\w, ]*):(\s.*|)$")


def parameter_sections(lines: list[str]) -> list[str]:
    """``Parameters`` over a dashed line, then ``name: text`` entries (interp's own numpy-like
    style) → a rubric and a field list (``:name: text``), which reST renders as a table."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if (
            i + 1 < len(lines)
            and line.strip() in ("Parameters", "Returns", "Raises")
            and set(lines[i + 1].strip()) == {"-"}
        ):
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}.. rubric:: {line.strip()}", ""]
            i += 2
            while i < len(lines) and lines[i].strip():
                field = _FIELD.match(lines[i])
                if field and field.group(1) == indent:
                    out.append(f"{indent}:{field.group(2)}:{field.group(3)}")
                else:
                    out.append(lines[i])
                i += 1
            continue
        out.append(line)
        i += 1
    return out


def normalise_docstring(lines: list[str]) -> list[str]:
    """Lines as reST reads them: interp's docstrings start a list right under its lead-in line
    (``Kinds\n- ``zero``: …``) and end it the same way, which plain reST calls a block-quote
    error; a blank line is put at both places. Literal blocks (after ``::``) are left as they are.
    """
    out: list[str] = []
    list_indent: int | None = None
    literal_indent: int | None = None
    for line in parameter_sections(lines):
        indent = len(line) - len(line.lstrip())
        blank = not line.strip()
        if literal_indent is not None:
            if blank or indent > literal_indent:
                out.append(line)
                continue
            literal_indent = None
        prev = out[-1] if out else ""
        bullet = _BULLET.match(line)
        if bullet:
            if prev.strip() and indent != list_indent:
                out.append("")
            list_indent = indent
        elif not blank and list_indent is not None and indent <= list_indent:
            if prev.strip():
                out.append("")
            list_indent = None
        line = _escape_bars(line)
        out.append(line)
        if line.rstrip().endswith("::"):
            literal_indent = indent
    return out


def _inherited_from_outside(name: str, obj: Any) -> bool:
    """A method without its own docstring whose inherited one comes from outside interp (torch's
    ``Module.forward``), which would speak of torch's objects, not interp's."""
    if getattr(obj, "__doc__", None) or "." not in name:
        return False
    owner = _import_path(name.rsplit(".", 1)[0])
    if not inspect.isclass(owner):
        return False
    attr = name.rsplit(".", 1)[1]
    for cls in owner.__mro__[1:]:
        if attr in vars(cls) and getattr(vars(cls)[attr], "__doc__", None):
            return not cls.__module__.startswith("interp")
    return False


def on_process_docstring(app, what, name, obj, options, lines):
    if not name.startswith("interp"):
        return
    if what in ("method", "property", "attribute") and _inherited_from_outside(name, obj):
        lines[:] = []
    type_doc = inspect.getdoc(type(obj)) if what in ("data", "attribute") else None
    if type_doc and " ".join("\n".join(lines).split()) == " ".join(type_doc.split()):
        lines[:] = []  # a constant without a doc comment: not its type's docstring (``dict()``, …)
    lines[:] = normalise_docstring(lines)


def on_skip_member(app, what, name, obj, skip, options):
    """A module's member is documented in the module that defines it, not where it is re-exported
    (``__all__`` of a package names what it re-exports; the room page lists those)."""
    if what != "module" or skip:
        return None
    current = getattr(app.env, "current_document", None)
    modname = getattr(current, "autodoc_module", None) or app.env.temp_data.get("autodoc:module")
    if not modname:
        return None
    module = importlib.import_module(modname)
    return True if not defined_here(module, name) else None


# ---------------------------------------------------------------------------------------------
# cross-references through re-exports, module context and type-only imports


def _import_path(dotted: str) -> Any:
    """The object a dotted path names, importing its longest module prefix; ``None`` if none."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except Exception:  # noqa: BLE001 - any failure to import means "not this prefix"
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            return None
        return obj
    return None


@functools.cache
def _type_only_imports(modname: str) -> dict[str, str]:
    """``name → module.name`` for every ``from X import name`` in a module's source, at any depth."""
    try:
        tree = ast.parse(inspect.getsource(importlib.import_module(modname)))
    except Exception:  # noqa: BLE001 - no source: nothing to read
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _key(obj: Any) -> int:
    """Identity of an object however it was reached (a bound method is its function)."""
    return id(inspect.unwrap(getattr(obj, "__func__", obj)))


class Resolver:
    """Documented Python objects by identity, so any path that reaches one links to it."""

    def __init__(self, env):
        self.env = env
        self._by_id: dict[int, list[str]] | None = None

    @property
    def objects(self):
        return self.env.get_domain("py").objects

    def index(self) -> dict[int, list[str]]:
        if self._by_id is None:
            self._by_id = {}
            for name in self.objects:
                obj = _import_path(name)
                if obj is not None:
                    self._by_id.setdefault(_key(obj), []).append(name)
        return self._by_id

    def candidates(self, target: str, modname: str | None, classname: str | None) -> list[str]:
        out = []
        if modname and classname:
            out.append(f"{modname}.{classname}.{target}")
        if modname:
            out.append(f"{modname}.{target}")
        out.append(target)
        out.append("builtins." + target)
        if modname:
            head, _, rest = target.partition(".")
            via = _type_only_imports(modname).get(head)
            if via:
                out.append(via + ("." + rest if rest else ""))
        return out

    def find(self, target: str, modname: str | None, classname: str | None) -> tuple[str | None, Any, str | None]:
        """``(documented name, object, the path that reached it)``; the name is ``None`` when the
        object is not documented, the object and path ``None`` when nothing of that name exists."""
        for cand in self.candidates(target, modname, classname):
            obj = _import_path(cand)
            if obj is None:
                continue
            names = self.index().get(_key(obj), [])
            last = target.rsplit(".", 1)[-1]
            names = [n for n in names if n.rsplit(".", 1)[-1] == last]
            return (names[0] if names else None), obj, cand
        if not target.startswith("interp."):
            # a bare name (``sample_prefix``) or ``Class.member``: the one documented object of
            # that name, in the module first, then anywhere in interp (Sphinx's ``.name`` search)
            ends = [n for n in self.objects if n.endswith("." + target)]
            for pool in ([n for n in ends if modname and n.startswith(modname + ".")], ends):
                if len(pool) == 1:
                    return pool[0], _import_path(pool[0]), pool[0]
        for ext in _EXTERNAL:
            obj = _import_path(f"{ext}.{target}")
            if obj is not None:
                return None, obj, f"{ext}.{target}"
        return None, None, None


#: where a bare type name in a signature (``ndarray`` of ``Float[ndarray, "n"]``) comes from
_EXTERNAL = ("numpy", "torch", "torch.nn", "pandas", "typing", "collections.abc", "pathlib")


def _let_pass(path: str | None, obj: Any) -> bool:
    """Whether an unresolved reference is one not to warn about: an object outside interp (no
    inventory offline), a type variable, or a private interp object (not part of the API). A
    constant reached through an interp module is interp's: it must be documented."""
    if obj is None or path is None:
        return False
    if isinstance(obj, typing.TypeVar) or any(p.startswith("_") for p in path.split(".")):
        return True
    if inspect.ismodule(obj):
        return not obj.__name__.startswith("interp")
    if inspect.isclass(obj) or callable(obj):
        return not str(getattr(obj, "__module__", "") or "").startswith("interp")
    return not path.startswith("interp")


#: what the Python domain leaves of a type annotation it could not parse (``dict[str``, ``'tuple[int``)
_FRAGMENT = re.compile(r"^['\"]?([\w.]+)[\[,'\"]")


def on_missing_reference(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    resolver: Resolver = env.interp_resolver
    target = node["reftarget"]
    fragment = _FRAGMENT.match(target)
    if fragment:
        target = fragment.group(1)
    name, obj, path = resolver.find(target, node.get("py:module"), node.get("py:class"))
    if name is None:
        node["interp_let_pass"] = _let_pass(path, obj)
        return None
    entry = resolver.objects[name]
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, name)


def on_warn_missing_reference(app, domain, node):
    """Silence references that land outside interp (no inventory offline); interp ones still warn."""
    if domain.name == "py" and node.get("interp_let_pass"):
        return True
    return None


def on_env_before_read(app, env, docnames):
    env.interp_resolver = Resolver(env)


def on_env_updated(app, env):
    env.interp_resolver = Resolver(env)


def copy_notebooks(app) -> None:
    """``experiments/notebooks/*.ipynb`` → ``docs/tutorials/notebooks/`` (only what changed)."""
    NOTEBOOK_COPY.mkdir(parents=True, exist_ok=True)
    wanted = {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    for stale in NOTEBOOK_COPY.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for src in sorted(NOTEBOOKS.glob("*.ipynb")):
        dst = NOTEBOOK_COPY / src.name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)


def setup(app):
    app.add_directive("interp-toctree", OrderedTocTree)
    app.add_directive("interp-cli", CliDirective)
    app.add_directive("interp-api", ApiDirective)
    app.add_directive("interp-rooms", RoomsDirective)
    app.connect("builder-inited", copy_notebooks)
    app.connect("env-before-read-docs", on_env_before_read)
    app.connect("env-updated", on_env_updated)
    app.connect("autodoc-process-docstring", on_process_docstring)
    app.connect("autodoc-skip-member", on_skip_member)
    app.connect("missing-reference", on_missing_reference)
    app.connect("warn-missing-reference", on_warn_missing_reference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
