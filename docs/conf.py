"""Sphinx configuration of interp's documentation (``make docs``; strict in ``tests/test_docs.py``).

Pages are MyST markdown; the API is autodoc over the docstrings, the CLI reference comes from the
argparse parsers, the tutorials are the notebooks of ``experiments/notebooks`` rendered with their
stored outputs, without executing them (``experiments/notebooks/execute.py`` stores the outputs,
``tests/test_notebooks.py`` runs the sources). Nothing is fetched: the build is offline.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # this tree's interp, ahead of any installed one
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

project = "interp"
author = "the interp authors"
copyright = "the interp authors, MIT licence"
release = version = "0.1.0"

extensions = [
    "myst_nb",  # MyST markdown pages and .ipynb notebooks (includes myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "interp_docs",  # docs/_ext: CLI reference, API pages, rooms table, cross-references
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# MyST
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3
# notebooks: rendered with the outputs stored in them (figures, tables, CircuitsVis views);
# running them takes minutes and is experiments/notebooks/execute.py's and tests/test_notebooks.py's job
nb_execution_mode = "off"

# autodoc
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = True
autodoc_preserve_defaults = True
add_module_names = False
python_display_short_literal_types = True

# strict: every cross-reference must resolve (those into other packages are let pass by
# interp_docs, since no inventory is fetched offline)
nitpicky = True

html_theme = "furo"
html_title = "interp"
html_static_path: list[str] = []
html_show_sourcelink = False
