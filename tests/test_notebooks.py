"""The walkthrough notebooks (experiments/notebooks): stored without outputs, equal to what their
generator writes, and executed headless (nbclient) with a kernel of this interpreter in a temp
working folder; a failing cell fails the test with its source and traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time

import pytest
from conftest import REPO

NOTEBOOKS = REPO / "experiments" / "notebooks"
NAMES = ["world_model.ipynb", "layer_analysis.ipynb", "ioi_real_model.ipynb"]
#: notebooks that need the real model SmolLM2-135M-Instruct (fetched once, then cached)
REAL_MODEL = {"ioi_real_model.ipynb": "smollm2-135m-instruct"}
CELL_TIMEOUT_S = 600


def _generator():
    spec = importlib.util.spec_from_file_location("make_notebooks", NOTEBOOKS / "make_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", NAMES)
def test_stored_notebook_is_generated_and_has_no_outputs(name):
    stored = (NOTEBOOKS / name).read_text(encoding="utf-8")
    nb = json.loads(stored)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, f"{name}: clear the outputs"
    assert nb == json.loads(_generator().render(name)), (
        f"{name} differs from what experiments/notebooks/make_notebooks.py writes: edit the generator and rerun it"
    )


def _kernel_manager(tmp_path):
    """A kernel of *this* interpreter (not whatever 'python3' kernelspec the machine has), with the
    repository importable and one thread."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = tmp_path / "kernels" / "interp-test"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "interp test",
                "language": "python",
            }
        )
    )
    ksm = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="interp-test", kernel_spec_manager=ksm)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name, tmp_path):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    if name in REAL_MODEL:
        from interp.models.pinned import NoCopyError, get_model

        try:
            get_model(REAL_MODEL[name])
        except NoCopyError as e:
            pytest.skip(f"{name} needs {REAL_MODEL[name]}: no network and no cached copy ({e})")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env.update(HF_HUB_OFFLINE="1", TMPDIR=str(tmp_path), MPLBACKEND="module://matplotlib_inline.backend_inline")
    km = _kernel_manager(tmp_path)
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, resources={"metadata": {"path": str(work)}})
    t0 = time.perf_counter()
    try:
        client.execute(env=env)
    except CellExecutionError as e:
        pytest.fail(f"{name}: a cell failed\n" + re.sub(r"\x1b\[[0-9;]*m", "", str(e)), pytrace=False)
    finally:  # a kernel manager passed in is the caller's to stop: no kernel outlives its notebook
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    elapsed = time.perf_counter() - t0
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert "all checks passed" in text, text
    print(f"{name}: {elapsed:.0f} s")
