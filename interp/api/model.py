"""A model as the Python API holds it: the TransformerBridge, the model's own tokenizer, where it
came from and its fingerprint — loaded in one call from a pinned name, a folder, a ``.gguf`` file
or a Hugging Face hub id (:func:`load_model`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.analysis.engines.fingerprint import model_fingerprint
from interp.models.checkpoint import CheckpointError, load_bridge
from interp.models.registry import PINNED, get_model
from interp.tasks import own_tokenizer


class UnknownModelError(CheckpointError):
    """A model name that is neither a pinned name, an existing folder or file, nor a hub id that
    can be had (named, with what is allowed)."""


@dataclass(eq=False)
class Model:
    """A loaded model: ``bridge`` (TransformerBridge, eval mode), ``tokenizer`` (the model's own,
    :func:`interp.tasks.own_tokenizer`), ``name`` as given, ``source`` (the folder or hub id it was
    loaded from). Every API call takes one."""

    bridge: Any
    tokenizer: Any
    name: str
    source: str

    @property
    def n_layers(self) -> int:
        return int(self.bridge.cfg.n_layers)

    @property
    def n_heads(self) -> int:
        return int(self.bridge.cfg.n_heads)

    @property
    def folder(self) -> Path | None:
        """The local folder of the weights (None for a hub id not in a folder)."""
        p = Path(self.source)
        return p if p.is_dir() else None

    def fingerprint(self) -> dict[str, Any]:
        """The architecture's hash and where it was loaded from
        (:func:`interp.analysis.engines.fingerprint.model_fingerprint`): what a saved result is checked against."""
        return model_fingerprint(self.bridge, self.source)

    def __repr__(self) -> str:
        cfg = self.bridge.cfg
        return f"Model({self.name!r}: {cfg.n_layers} layers, {cfg.n_heads} heads, d_model {cfg.d_model})"


def resolve_name(name: str | os.PathLike) -> str:
    """Where ``name`` loads from, checked before anything is loaded: a pinned name
    (:data:`interp.models.registry.PINNED`: fetched once, then cached), an existing folder or
    ``.gguf`` file, or a hub id (``owner/name`` or a bare hub name). Raises
    :class:`UnknownModelError` for a path that does not exist."""
    text = str(name)
    if text in PINNED:
        return str(get_model(text))
    path = Path(text).expanduser()
    if path.exists():
        return str(path)
    if text.startswith((".", "/", "~")) or text.endswith((".gguf", "/")) or text.count("/") > 1:
        raise UnknownModelError(
            f"model {text!r} does not exist: give an existing model folder or .gguf file, a pinned name "
            f"({', '.join(sorted(PINNED))}) or a Hugging Face hub id (owner/name)"
        )
    return text


def load_model(name: str | os.PathLike, *, device: str | None = None, dtype: Any = None) -> Model:
    """Load a causal LM for the API: ``name`` a pinned name (``"smollm2-135m-instruct"``), a
    Hugging Face folder, a ``.gguf`` file or a hub id; ``device`` (default CPU; ``"auto"``: CUDA,
    MPS, CPU) and ``dtype`` (default float32; a name, a ``torch.dtype`` or ``"auto"``) as
    :func:`interp.models.load_bridge` takes them. Offline, a hub id must be in the local cache.

    >>> model = interp.load_model("smollm2-135m-instruct")  # doctest: +SKIP
    """
    source = resolve_name(name)
    try:
        bridge = load_bridge(source, device=device, dtype=dtype)
    except CheckpointError as e:
        if str(name) in PINNED or Path(source).exists():
            raise
        raise UnknownModelError(f"{e} (pinned names: {', '.join(sorted(PINNED))})") from None
    return Model(bridge=bridge, tokenizer=own_tokenizer(source), name=str(name), source=source)


def as_model(model: Any) -> Model:
    """``model`` as a :class:`Model` (a Model, or a name / folder loaded with :func:`load_model`)."""
    if isinstance(model, Model):
        return model
    if isinstance(model, (str, os.PathLike)):
        return load_model(model)
    raise TypeError(f"expected an interp Model (interp.load_model(...)) or a model name, got {type(model).__name__}")


__all__ = ["Model", "UnknownModelError", "as_model", "load_model", "resolve_name"]
