"""GGUF files as model inputs, through transformers' own GGUF support.

A GGUF file (llama.cpp's format: weights, often quantized, with the tokenizer and chat template
in its metadata) loads in transformers with ``from_pretrained(folder, gguf_file=NAME)``, which
dequantizes every tensor to float (the ``gguf`` package's ``gguf.quants.dequantize``) and undoes
llama.cpp's reordering of the Llama query/key rows. Such a model refuses ``save_pretrained``
("quantized with gguf and is not serializable"), and loading dequantizes again every time
(~20 s for SmolLM2-135M here). So interp converts a GGUF file once into an ordinary Hugging Face
folder and loads that everywhere:

- :func:`convert_gguf` ``(file, out)``: a fresh model of the file's architecture built from its
  config (the GGUF ``quantization_config`` removed), the dequantized state dict loaded into it
  (strictly: every tensor accounted for), saved as safetensors with the config, generation
  config, tokenizer and chat template, plus ``gguf.json`` (where it came from: the file's name,
  size and content key, its tensor types, the library versions). ``interp models convert``.
- :func:`gguf_folder` ``(file)``: that conversion kept in the user cache
  (:func:`interp.models.cache.cache_dir` ``/gguf/<stem>-<key>``), made on first use. This is what
  ``--model FILE.gguf`` resolves to wherever a model loads
  (:func:`interp.models.checkpoint.resolve_model`, :func:`interp.tasks.own_tokenizer`), so the
  bridge, the raw HF model and the tokenizer all come from one folder.
- :func:`inspect_gguf`: the checks made before any load, each a :class:`GGUFError` that says what
  to do — the ``gguf`` package missing, not a GGUF file, a truncated file (its tensors reach past
  its end), an architecture transformers cannot read, a tensor type the ``gguf`` package cannot
  dequantize.

The weights are the *dequantized* ones: a Q4_1 file gives a float32 model whose logits differ
from the unquantized original's; they equal the GGUF-loaded model's (``tests/test_real_model.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from interp.models.cache import cache_dir

GGUF_MAGIC = b"GGUF"
#: format of ``gguf.json`` in a converted folder
RECORD = "gguf.json"
_KEY_BYTES = 1 << 24  # the content key reads the first and last 16 MiB (and the size)


class GGUFError(ValueError):
    """A GGUF file interp cannot read, and why (the message says what to do)."""


def is_gguf(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a GGUF file (by its suffix; the file itself is checked on load)."""
    return str(path).lower().endswith(".gguf")


def _gguf_package():
    try:
        import gguf
    except ImportError:
        raise GGUFError(
            "reading a .gguf file needs the gguf package: pip install 'interp[gguf]' (or pip install gguf)"
        ) from None
    return gguf


@dataclass(frozen=True)
class GGUFInfo:
    """What :func:`inspect_gguf` read from a file's header."""

    path: Path
    size: int
    architecture: str
    name: str | None
    n_tensors: int
    tensor_types: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        types = ", ".join(f"{n} {t}" for t, n in sorted(self.tensor_types.items(), key=lambda kv: -kv[1]))
        return (
            f"{self.path.name}: {self.architecture} ({self.name or 'unnamed'}), {self.n_tensors} tensors "
            f"({types}), {self.size / 1e6:.0f} MB"
        )


def content_key(path: str | os.PathLike) -> str:
    """A 16-hex-digit key of a file's content: SHA-256 of its size and its first and last 16 MiB
    (cheap on multi-GB files; a re-downloaded or edited file gets another key)."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as f:
        h.update(f.read(_KEY_BYTES))
        if size > _KEY_BYTES:
            f.seek(max(_KEY_BYTES, size - _KEY_BYTES))
            h.update(f.read())
    return h.hexdigest()[:16]


def inspect_gguf(path: str | os.PathLike) -> GGUFInfo:
    """Read and check a GGUF file's header (see the module docstring for what is checked)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise GGUFError(f"GGUF file {path} does not exist")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    gguf = _gguf_package()
    size = path.stat().st_size
    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, IndexError, EOFError, OSError) as e:
        raise GGUFError(
            f"{path} ({size:,} bytes) is truncated or corrupt: the gguf reader stopped with "
            f"{type(e).__name__}: {e}. Fetch or copy the file again"
        ) from None
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise GGUFError(
            f"{path} is truncated: its tensors reach byte {end:,} but the file has {size:,}; fetch or copy it again"
        )

    def field_str(key: str) -> str | None:
        f = reader.fields.get(key)
        return None if f is None else str(f.contents())

    arch = field_str("general.architecture")
    if arch is None:
        raise GGUFError(f"{path} has no general.architecture field: not a model file transformers can read")
    types = Counter(t.tensor_type.name for t in reader.tensors)
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        raise GGUFError(
            f"{path}: architecture {arch!r} is not one transformers can load from GGUF (it reads "
            f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}); convert the original model instead"
        )
    from gguf.quants import _type_traits  # the dequantizers the gguf package implements

    readable = {"F32", "F16"} | {q.name for q in _type_traits}
    bad = sorted(set(types) - readable)
    if bad:
        raise GGUFError(
            f"{path}: tensor type(s) {', '.join(bad)} cannot be dequantized by the installed gguf "
            f"package {getattr(gguf, '__version__', '')} (it reads {', '.join(sorted(readable))}); "
            "upgrade gguf or use another quantization of the model"
        )
    return GGUFInfo(path, size, arch, field_str("general.name"), len(reader.tensors), dict(types))


def load_gguf(path: str | os.PathLike, dtype: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` read from a GGUF file by transformers (``gguf_file=``), dequantized
    to ``dtype`` (default float32), in eval mode. The model cannot be saved as is: see
    :func:`convert_gguf`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    info = inspect_gguf(path)
    folder, name = str(info.path.parent), info.path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype or torch.float32)
    return model.eval(), tok


def _plain_config(config: Any) -> Any:
    """A copy of a GGUF-loaded model's config without its ``quantization_config`` (so the saved
    folder loads as an ordinary float model)."""
    import copy

    cfg = copy.deepcopy(config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    return cfg


def convert_gguf(path: str | os.PathLike, out: str | os.PathLike, dtype: Any = None, log: Any = None) -> Path:
    """Write the GGUF file at ``path`` as a Hugging Face folder ``out`` (see the module docstring);
    returns ``out``. Written into a temporary folder beside ``out`` and renamed, so an interrupted
    conversion leaves no half folder; an existing ``out`` is replaced."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    log = log or sys.stderr
    info = inspect_gguf(path)
    out = Path(out).expanduser()
    print(f"converting {info.describe()} to {out} (dequantized to {dtype or torch.float32}) …", file=log)
    model, tok = load_gguf(info.path, dtype)
    config = _plain_config(model.config)
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    missing, unexpected = fresh.load_state_dict(model.state_dict(), strict=False, assign=True)
    tied = set(getattr(fresh, "_tied_weights_keys", None) or ())
    missing = [k for k in missing if k not in tied and not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise GGUFError(
            f"{info.path}: the dequantized weights do not fit {type(fresh).__name__} (missing "
            f"{missing[:5]}, unexpected {unexpected[:5]})"
        )
    if config.tie_word_embeddings:
        fresh.tie_weights()
    fresh.eval()
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    import gguf

    record = {
        "format": 1,
        "source": info.path.name,
        "source_path": str(info.path.resolve()),
        "size": info.size,
        "key": content_key(info.path),
        "architecture": info.architecture,
        "name": info.name,
        "tensor_types": info.tensor_types,
        "dtype": str(fresh.dtype).removeprefix("torch."),
        "transformers": transformers.__version__,
        "gguf": getattr(gguf, "__version__", None),
    }
    (tmp / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    print(f"wrote {out}", file=log)
    return out


def read_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The ``gguf.json`` of a converted folder, or None."""
    f = Path(folder) / RECORD
    return json.loads(f.read_text()) if f.is_file() else None


def gguf_folder(path: str | os.PathLike, cache: str | os.PathLike | None = None, log: Any = None) -> Path:
    """The converted folder of a GGUF file in the cache, converting it on first use (said on
    ``log``, default stderr). A folder whose ``gguf.json`` names another content key (the file
    changed) is converted again."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise GGUFError(f"GGUF file {path} does not exist")
    key = content_key(path)
    folder = cache_dir(cache) / "gguf" / f"{path.stem}-{key}"
    rec = read_record(folder)
    if rec is not None and rec.get("key") == key and (folder / "config.json").is_file():
        return folder
    return convert_gguf(path, folder, log=log)


__all__ = [
    "GGUFError",
    "GGUFInfo",
    "content_key",
    "convert_gguf",
    "gguf_folder",
    "inspect_gguf",
    "is_gguf",
    "load_gguf",
    "read_record",
]
