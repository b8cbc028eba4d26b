"""Where a model runs and in what precision: one resolver for every command that loads a model.

- :func:`resolve_device`: ``"auto"`` is the first of CUDA, Apple MPS, CPU that this machine has;
  any other name (``cpu``, ``cuda``, ``cuda:1``, ``mps``) is checked and returned as is.
- :func:`resolve_dtype`: ``float32 | float16 | bfloat16 | auto``. ``auto`` is bfloat16 on a CUDA
  device that supports it, else float16 (MPS, older CUDA); on a CPU it is bfloat16 where the CPU
  multiplies bfloat16 matrices natively (AVX-512 BF16 or AMX, :func:`cpu_native_bf16`) and float32
  elsewhere (there bfloat16 is emulated and slower than float32). Measured on a 2-core AVX-512 BF16
  EPYC (``bench/bf16_verdicts.py``, docs/benchmarks/precision.md): bfloat16 sweeps took 0.19–0.54×
  float32's time, and every layer verdict clear of the rounding tolerance was float32's.
- :func:`resolve_device_map`: ``--device-map auto`` / an explicit JSON map (module → device) /
  ``--n-devices N``, for a model larger than one GPU: Hugging Face's ``device_map`` placement
  (accelerate dispatches each module to its device and moves activations between them). It is
  mutually exclusive with a single ``device``, exactly as ``TransformerBridge.boot_transformers``
  requires.

:class:`Placement` carries the resolved choice to the loaders
(:func:`interp.models.checkpoint.load_bridge`, :func:`~interp.models.checkpoint.load_hf_model`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")
DTYPE_CHOICES = ("float32", "float16", "bfloat16", "auto")


class DeviceError(ValueError):
    """A device, dtype or device map that this machine or the loader cannot use."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str | torch.device | None = "auto") -> str:
    """``"auto"``/None → ``"cuda"``, else ``"mps"``, else ``"cpu"``; another name is validated
    (a CUDA index must exist) and returned as a string."""
    if name is None or str(name) == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "mps" if _mps_available() else "cpu"
    try:
        dev = torch.device(str(name))
    except RuntimeError as e:
        raise DeviceError(
            f"device {name!r} is not a torch device ({e}); use one of {DEVICE_CHOICES} or e.g. cuda:1"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {name!r}: this machine has no CUDA device (use --device auto or cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    elif dev.type == "mps" and not _mps_available():
        raise DeviceError(f"device {name!r}: MPS is not available on this machine")
    return str(dev)


def cpu_native_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix instructions (``avx512_bf16`` or ``amx_bf16`` among the
    flags of ``/proc/cpuinfo``; False where that file is absent: macOS, Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return False
    return False


def resolve_dtype(name: str | torch.dtype | None, device: str | None = "cpu") -> torch.dtype:
    """A dtype name (or None = float32) → ``torch.dtype``; ``"auto"`` depends on ``device`` (see the
    module docstring; a device map counts as CUDA)."""
    if isinstance(name, torch.dtype):
        return name
    if name is None or name == "float32":
        return torch.float32
    if name in ("float16", "bfloat16"):
        return getattr(torch, name)
    if name != "auto":
        raise DeviceError(f"dtype must be one of {DTYPE_CHOICES}, got {name!r}")
    kind = torch.device(device).type if device else "cuda"
    if kind == "cpu":
        return torch.bfloat16 if cpu_native_bf16() else torch.float32
    if kind == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16


def resolve_device_map(device_map: str | dict | None) -> str | dict[str, Any] | None:
    """``None``; a strategy name (``auto``, ``balanced``, ``balanced_low_0``, ``sequential``); or a
    JSON object ``{"module.name": device}`` (a file path or the JSON text itself)."""
    if device_map is None or isinstance(device_map, dict):
        return device_map
    text = str(device_map).strip()
    if text in ("auto", "balanced", "balanced_low_0", "sequential"):
        return text
    if text.startswith("{"):
        raw = text
    else:
        from pathlib import Path

        path = Path(text)
        if not path.is_file():
            raise DeviceError(
                f"device map {text!r}: expected auto, balanced, balanced_low_0, sequential, a JSON "
                f"object or a JSON file"
            )
        raw = path.read_text()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DeviceError(f"device map {text!r} is not valid JSON ({e})") from None
    if not isinstance(value, dict) or not value:
        raise DeviceError(f"device map {text!r} must be a non-empty JSON object (module name → device)")
    return value


@dataclass(frozen=True)
class Placement:
    """A resolved placement: one ``device``, or a ``device_map`` / ``n_devices`` (then ``device``
    is None and Hugging Face/accelerate place the modules), plus the parameter ``dtype``."""

    device: str | None = "cpu"
    dtype: torch.dtype = torch.float32
    device_map: str | dict[str, Any] | None = None
    n_devices: int | None = None
    max_memory: dict[Any, Any] | None = None
    #: where accelerate keeps the weights of modules a device map sends to ``"disk"``
    offload_folder: str | None = None
    #: the bridge's attention: ``eager`` (TransformerLens's own, the default), ``fused`` or ``auto``
    #: (fused unless a pattern is read; :mod:`interp.models.attention`)
    attention: str = "eager"

    @classmethod
    def resolve(
        cls,
        device: str | None = "auto",
        dtype: str | torch.dtype | None = None,
        device_map: str | dict | None = None,
        n_devices: int | None = None,
        max_memory: dict | None = None,
        offload_folder: str | os.PathLike | None = None,
        attention: str = "eager",
    ) -> Placement:
        """Resolve the CLI/config names. ``device_map``/``n_devices`` take over placement; passing
        them with an explicit (non-``auto``) device is an error, as in ``boot_transformers``.
        ``attention``: :attr:`attention` (checked)."""
        from interp.models.attention import check_mode

        check_mode(attention)
        dmap = resolve_device_map(device_map)
        if n_devices is not None and n_devices < 1:
            raise DeviceError(f"n_devices must be >= 1, got {n_devices}")
        if dmap is not None or (n_devices or 1) > 1:
            if device not in (None, "auto"):
                raise DeviceError(
                    f"--device {device} and --device-map/--n-devices both place the model: give one of them"
                )
            if n_devices is not None and n_devices > torch.cuda.device_count():
                raise DeviceError(
                    f"n_devices={n_devices} needs that many CUDA devices; this machine has {torch.cuda.device_count()}"
                )
            kinds = _map_kinds(dmap) or ({"cuda"} if torch.cuda.is_available() else {"cpu"})
            return cls(
                None,
                resolve_dtype(dtype, "cpu" if kinds <= {"cpu", "disk"} else "cuda"),
                dmap,
                n_devices,
                max_memory,
                None if offload_folder is None else str(offload_folder),
                attention,
            )
        dev = resolve_device(device)
        return cls(dev, resolve_dtype(dtype, dev), None, None, None, attention=attention)

    def boot_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``TransformerBridge.boot_transformers``."""
        kw: dict[str, Any] = {"dtype": self.dtype}
        if not self.mapped:
            kw["device"] = self.device
        else:
            kw.update(
                device_map=self.device_map,
                n_devices=self.n_devices,
                max_memory=self.max_memory,
                offload_folder=self.offload_folder,
            )
        return kw

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AutoModelForCausalLM.from_pretrained``, resolved as the bridge
        resolves them (``transformer_lens.utilities.multi_gpu.resolve_device_map``: ``n_devices``
        becomes ``"balanced"`` with a memory budget on each of that many GPUs). Without a map the
        caller moves the model to ``device``."""
        from transformer_lens.utilities.multi_gpu import resolve_device_map as tl_resolve

        kw: dict[str, Any] = {"dtype": self.dtype}
        dmap, mem = tl_resolve(self.n_devices, self.device_map, None, self.max_memory)
        if dmap is not None:
            kw["device_map"] = dmap
        if mem is not None:
            kw["max_memory"] = mem
        if self.offload_folder is not None:
            kw["offload_folder"] = self.offload_folder
        return kw

    def record(self) -> dict[str, Any] | None:
        """What of this placement can change results (device or map, dtype), JSON-able, for a
        results file or a cache key; None for the default (the CPU, float32), so records written
        before placements were recorded still match."""
        if not self.mapped and self.device == "cpu" and self.dtype == torch.float32:
            return None
        return {
            "device": self.device,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device_map": self.device_map,
            "n_devices": self.n_devices,
        }

    @property
    def mapped(self) -> bool:
        """Whether Hugging Face/accelerate place the modules (a device map or several GPUs)."""
        return self.device_map is not None or (self.n_devices or 1) > 1


def _map_kinds(dmap: Any) -> set[str]:
    """Device types named by an explicit map (empty for a strategy name)."""
    if not isinstance(dmap, dict):
        return set()
    out = set()
    for module, v in dmap.items():
        if isinstance(v, int):
            out.add("cuda")
        elif str(v) == "disk":
            out.add("disk")
        else:
            try:
                out.add(torch.device(str(v)).type)
            except RuntimeError:
                raise DeviceError(
                    f"device map: {module!r} → {v!r} is not a device (cpu, cuda:N, N, mps, disk)"
                ) from None
    return out


def model_device(model: Any) -> torch.device:
    """Where a model's inputs go: the device of its input embedding (under a device map, the
    first module accelerate dispatches), else of its first parameter not offloaded (``meta``)."""
    get = getattr(model, "get_input_embeddings", None)
    try:
        emb = get() if callable(get) else None
    except (NotImplementedError, AttributeError):
        emb = None
    for m in (emb, model):
        for p in m.parameters() if isinstance(m, torch.nn.Module) else ():
            if p.device.type != "meta":
                return p.device
    return torch.device("cpu")


__all__ = [
    "DEVICE_CHOICES",
    "DTYPE_CHOICES",
    "DeviceError",
    "cpu_native_bf16",
    "Placement",
    "model_device",
    "resolve_device",
    "resolve_device_map",
    "resolve_dtype",
]
