"""Execute the walkthrough notebooks from their source and store them with their outputs.

The source of each notebook is the jupytext percent-format ``.py`` beside it (edit, review and
diff that); the ``.ipynb`` is the same cells with their outputs (figures, tables, the CircuitsVis
views), which the documentation renders::

    python experiments/notebooks/execute.py                       # all four (SmolLM2 needed for the last two)
    python experiments/notebooks/execute.py world_model.py        # one

Each runs headless (nbclient) in a kernel of *this* interpreter, with this checkout importable, one
CPU thread, offline, in a fresh temporary folder. ``tests/test_notebooks.py`` runs the same
:func:`execute` on the sources and checks that each stored ``.ipynb`` has the source's cells and an
output for every code cell.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NAMES = ("world_model", "layer_analysis", "ioi_real_model", "pragworld_real")
#: per cell, seconds
CELL_TIMEOUT_S = 900


def read_source(path: str | Path) -> Any:
    """The notebook a percent-format ``.py`` holds (cells without outputs), as jupytext reads it."""
    import jupytext

    return jupytext.read(Path(path), fmt="py:percent")


def _kernel_manager(folder: Path) -> Any:
    """A kernel of this interpreter (not whatever ``python3`` kernelspec the machine has)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = folder / "kernels" / "interp-notebook"
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "interp",
                "language": "python",
            }
        )
    )
    ksm = KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="interp-notebook", kernel_spec_manager=ksm)


def execute(nb: Any, folder: str | Path, timeout: int = CELL_TIMEOUT_S) -> Any:
    """Run every cell of ``nb`` in place (``folder``: the working and temporary folder; the kernel
    is always shut down). A failing cell raises nbclient's ``CellExecutionError`` naming it."""
    from nbclient import NotebookClient

    folder = Path(folder)
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env.update(
        HF_HUB_OFFLINE="1",
        TQDM_DISABLE="1",
        TMPDIR=str(folder),
        MPLBACKEND="module://matplotlib_inline.backend_inline",
    )
    km = _kernel_manager(folder)
    client = NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(work)}})
    try:
        client.execute(env=env)
    finally:  # a kernel manager passed in is the caller's to stop: no kernel outlives its notebook
        if km.has_kernel:
            km.shutdown_kernel(now=True)
    return nb


def store(name: str) -> Path:
    """Execute ``<name>.py`` and write ``<name>.ipynb`` with its outputs; returns the path."""
    import nbformat

    nb = read_source(HERE / f"{name}.py")
    with tempfile.TemporaryDirectory(prefix=f"interp-nb-{name}-") as tmp:
        execute(nb, tmp)
    nb.metadata.pop("jupytext", None)  # the pairing lives in the .py header
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # stable ids: a rerun changes outputs only
    nbformat.validate(nb)
    out = HERE / f"{name}.ipynb"
    out.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return out


def main(argv: list[str]) -> int:
    names = [Path(a).stem for a in argv] or list(NAMES)
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        print(f"unknown notebook {unknown[0]!r}; the notebooks: {', '.join(NAMES)}", file=sys.stderr)
        return 2
    for name in names:
        print("wrote", store(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
