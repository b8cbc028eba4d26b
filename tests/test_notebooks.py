"""The walkthrough notebooks (experiments/notebooks): each ``<name>.py`` (jupytext percent format)
is the source, each ``<name>.ipynb`` the same cells stored with their outputs (what the docs
render). Checked here: the two agree cell for cell, every stored code cell has run and shows an
output, the sources use the public API only (no ``_private`` interp names, no hand-written hooks),
and each source executes headless (nbclient, a kernel of this interpreter, one thread, offline,
in a temp folder, by ``experiments/notebooks/execute.py``'s own :func:`execute`) through its
closing checks; a failing cell fails the test with its source and traceback."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import time

import pytest
from conftest import REPO

NOTEBOOKS = REPO / "experiments" / "notebooks"
NAMES = ["world_model", "layer_analysis", "ioi_real_model", "pragworld_real"]
#: notebooks that need the real model SmolLM2-135M-Instruct (fetched once, then cached)
REAL_MODEL = {"ioi_real_model": "smollm2-135m-instruct", "pragworld_real": "smollm2-135m-instruct"}


def _execute_module():
    spec = importlib.util.spec_from_file_location("notebooks_execute", NOTEBOOKS / "execute.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _source(name: str):
    return _execute_module().read_source(NOTEBOOKS / f"{name}.py")


def _stored(name: str) -> dict:
    return json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))


def _text(source) -> str:
    return source if isinstance(source, str) else "".join(source)


def test_the_notebooks_are_the_sources_beside_them():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb")) == sorted(NAMES)
    assert sorted(NAMES) == sorted(_execute_module().NAMES)
    assert not (NOTEBOOKS / "make_notebooks.py").exists()


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_has_the_cells_of_its_source(name):
    source, stored = _source(name), _stored(name)
    want = [(c.cell_type, c.source) for c in source.cells]
    got = [(c["cell_type"], _text(c["source"])) for c in stored["cells"]]
    assert len(got) == len(want), f"{name}.ipynb has {len(got)} cells, {name}.py {len(want)}: rerun execute.py"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, (
            f"cell {i} of {name}.ipynb differs from {name}.py: run python experiments/notebooks/execute.py {name}"
        )


@pytest.mark.parametrize("name", NAMES)
def test_every_stored_code_cell_ran_and_shows_an_output(name):
    code = [c for c in _stored(name)["cells"] if c["cell_type"] == "code"]
    assert code
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{name}: cells not run in order from a fresh kernel: {counts}"
    for i, c in enumerate(code):
        assert c["outputs"], f"{name}: code cell {i} shows nothing"
        errors = [o for o in c["outputs"] if o["output_type"] == "error"]
        assert not errors, f"{name}: code cell {i} stored an error: {errors[0].get('ename')}"
    kinds = {k for c in code for o in c["outputs"] for k in o.get("data", {})}
    assert {"image/png", "text/html"} <= kinds, f"{name}: no figure or no table / attention view stored"
    html = "".join(_text(o["data"].get("text/html", "")) for c in code for o in c["outputs"] if "data" in o)
    assert "CircuitsVis" in html, f"{name}: no CircuitsVis attention view stored"
    last = "".join(_text(o.get("text", "")) for o in code[-1]["outputs"] if o["output_type"] == "stream")
    assert "all checks passed" in last, last
    widgets = [k for k in kinds if "widget" in k]
    assert not widgets, f"{name}: widget outputs stored ({widgets}); they do not render offline"


def _names_used(tree: ast.AST):
    """(imported interp module, imported name) and attribute names, for the privacy check."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("interp"):
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("interp"):
                    yield alias.name, None


@pytest.mark.parametrize("name", NAMES)
def test_notebook_uses_the_public_api_only(name):
    code = "\n".join(c.source for c in _source(name).cells if c.cell_type == "code")
    tree = ast.parse(code)
    private = [
        f"{mod}.{item}" if item else mod
        for mod, item in _names_used(tree)
        if any(part.startswith("_") for part in mod.split(".")) or (item or "").startswith("_")
    ]
    private += [
        f"interp.{n.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "interp"
        if n.attr.startswith("_")
    ]
    assert not private, f"{name} imports private names: {private}"
    hooks = re.findall(r"register_forward(?:_pre)?_hook|register_full_backward_hook|\.hooks\(|run_with_hooks\(", code)
    assert not hooks, f"{name} writes its own hooks ({hooks}): use interp.sweep / interp.patch / interp.hooks"
    assert "import interp" in code and "interp.load_model(" in code


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in REAL_MODEL else n for n in NAMES])
def test_notebook_source_runs(name, tmp_path):
    from nbclient.exceptions import CellExecutionError

    if name in REAL_MODEL:
        from interp.models.registry import NoCopyError, get_model

        try:
            get_model(REAL_MODEL[name])
        except NoCopyError as e:
            pytest.skip(f"{name} needs {REAL_MODEL[name]}: no network and no cached copy ({e})")
    run = _execute_module()
    nb = run.read_source(NOTEBOOKS / f"{name}.py")
    t0 = time.perf_counter()
    try:
        run.execute(nb, tmp_path)
    except CellExecutionError as e:
        pytest.fail(f"{name}: a cell failed\n" + re.sub(r"\x1b\[[0-9;]*m", "", str(e)), pytrace=False)
    elapsed = time.perf_counter() - t0
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert "all checks passed" in text, text
    print(f"{name}: {elapsed:.0f} s")
