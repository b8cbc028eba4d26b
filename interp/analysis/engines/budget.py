"""How many rows one forward of a sweep takes: the batch chosen from a memory budget.

A sweep that runs every row in one forward holds memory in proportion to the dataset (measured
on SmolLM2-135M with the manual PragWorld split: 17 rows 1.5 GB, 120 rows 4.3 GB, 500 rows past
17 GB). :func:`choose_batch` picks instead the largest batch whose *estimate* fits a budget, so
peak memory grows with the batch and not with the dataset:

- the budget: ``--max-memory`` (``"4GB"``, ``"512MB"``, ``"30%"`` of the free memory, or bytes),
  else :data:`DEFAULT_SHARE` of the memory free once the model is loaded (RAM on CPU, the GPU's
  free memory on CUDA);
- the estimate per row of ``width`` tokens, counting what each strategy holds beside one forward's
  activations (the residual stream, one layer's eager attention ``[heads, w, w]``, its MLP hidden
  state, the logits): ``reuse`` / ``prefix`` the clean cache of every swept layer (4 tensors
  ``[w, d_model]`` on the first batch, where the additivity check needs them), ``batched`` one
  copy of everything per swept layer, ``loop`` nothing more, activation patching the clean run's
  residual at every layer; ``prefix`` adds one pack's attention ``[heads, P, P]`` and scores only
  the last position's logits;
- a CPU gains no throughput past a few thousand tokens per forward (the 120-row run above took
  327 s at once and 131 s with ``--batch-size 8``), so the batch is also capped at
  :data:`CPU_TOKENS` tokens there (:data:`GPU_TOKENS` on a GPU).

An explicit ``--batch-size`` always wins; the plan (:class:`BatchPlan`) is printed and written to
``run.json`` either way. The estimate is deliberately coarse (an upper bound up to the allocator's
slack); ``bench/sweep_memory.py`` measures peak RSS against it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

#: the share of free memory a sweep plans for when ``--max-memory`` is not given
DEFAULT_SHARE = 0.5
#: tokens per forward past which a CPU gains no throughput (the batch cap on CPU)
CPU_TOKENS = 4096
#: the same cap on a GPU
GPU_TOKENS = 65536
#: the largest pack of the prefix method (tokens); cut further to the batch's tokens
PACK_TOKENS = 2048

_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def parse_memory(text: str | int | float, free: int | None = None) -> int:
    """Bytes of a ``--max-memory`` value: ``"4GB"``, ``"512MiB"``, ``"30%"`` (of ``free``), or a number
    of bytes."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z%]*)\s*", str(text))
        unit = m.group(2).lower() if m else None
        if m is None or (unit not in _UNITS and unit != "%"):
            raise ValueError(f"--max-memory must be a size such as 4GB, 512MiB or 30% (of free memory), got {text!r}")
        if unit == "%":
            share = float(m.group(1)) / 100
            if not 0 < share <= 1:
                raise ValueError(f"--max-memory {text}: a share of free memory must be in (0, 100] %")
            return int(share * (free if free is not None else free_memory()))
        value = float(m.group(1)) * _UNITS[unit]
    if value <= 0:
        raise ValueError(f"--max-memory must be positive, got {text!r}")
    return int(value)


def free_memory(device: Any = None) -> int:
    """Bytes free now: the GPU's free memory when ``device`` is a CUDA device, else available RAM."""
    import torch

    if device is not None and str(device).startswith("cuda") and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import psutil  # type: ignore[import-untyped]  # (accelerate requires it)

    return int(psutil.virtual_memory().available)


def human(n: int | float) -> str:
    """``1.2 GB``-style text for a byte count."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


@dataclass
class BatchPlan:
    """The batch of a sweep and why: ``batch_size`` rows per forward, the memory ``estimate`` at that
    batch (bytes: ``fixed`` + ``batch_size × per_row``), the ``budget`` and where it came from
    (``source``), ``pack_tokens`` for the prefix method, and ``capped`` when the token cap, not
    the budget, set the batch."""

    batch_size: int
    estimate: int
    budget: int | None
    source: str
    per_row: int
    fixed: int
    pack_tokens: int | None = None
    capped: bool = False

    def line(self) -> str:
        """One line for the terminal."""
        if self.budget is None:
            return f"batch: {self.batch_size} rows per forward ({self.source}; memory estimate {human(self.estimate)})"
        why = f"; capped at {self.batch_size} rows: a CPU gains nothing from more tokens" if self.capped else ""
        return (
            f"batch: {self.batch_size} rows per forward (memory estimate {human(self.estimate)} of a "
            f"{human(self.budget)} budget, {self.source}{why}; --batch-size or --max-memory to change)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``run.json["batch"]`` holds)."""
        return asdict(self)


def _sizes(cfg: Any) -> dict[str, int]:
    d = int(cfg.d_model)
    return {
        "d": d,
        "heads": int(getattr(cfg, "n_heads", 1) or 1),
        "mlp": int(getattr(cfg, "d_mlp", None) or 4 * d),
        "vocab": int(getattr(cfg, "d_vocab", 0) or 0),
        "layers": int(cfg.n_layers),
    }


def row_bytes(cfg: Any, width: int, swept: int, method: str, kind: str = "mlp-zero", dtype_bytes: int = 4) -> int:
    """The estimated bytes one row of ``width`` tokens adds to a sweep's peak (module docstring):
    ``swept`` layers, ``method`` (``reuse``, ``loop``, ``batched``, ``prefix``, ``attribution``),
    ``kind`` (``mlp-zero``, ``direct-effect``, ``activation-patching``)."""
    s, w, b = _sizes(cfg), int(width), int(dtype_bytes)
    logits_w = 1 if method == "prefix" else w
    forward = b * (8 * w * s["d"] + 2 * s["heads"] * w * w + 3 * w * s["mlp"]) + 4 * 3 * logits_w * s["vocab"]
    if method == "prefix":
        forward -= 2 * b * s["heads"] * w * w  # the attention is a pack's, counted once (fixed)
    if kind == "activation-patching" or method == "attribution":
        return forward * 2 + 3 * b * s["layers"] * w * s["d"]  # a clean cache of every layer (+ gradients)
    if kind == "direct-effect":
        return forward * 2 + b * s["layers"] * w * s["d"]
    if method == "batched":
        return forward * max(1, swept)
    if method == "loop":
        return forward
    return forward + 4 * b * max(1, swept) * w * s["d"]  # reuse / prefix: the clean cache of each swept layer


def choose_batch(
    bridge: Any,
    *,
    width: int,
    n_rows: int,
    swept: int,
    method: str,
    kind: str = "mlp-zero",
    max_memory: str | int | float | None = None,
    batch_size: int | None = None,
) -> BatchPlan:
    """The :class:`BatchPlan` of a sweep on ``n_rows`` rows of at most ``width`` tokens: ``batch_size``
    when given (it wins), else the largest batch whose estimate fits the budget (``max_memory``, else
    :data:`DEFAULT_SHARE` of the free memory), capped by the device's tokens per forward and by
    ``n_rows``; at least 1 (the plan then says the estimate exceeds the budget)."""
    cfg = bridge.cfg
    param = next(bridge.parameters(), None)
    device = param.device if param is not None else None
    b = int(param.element_size()) if param is not None else 4
    per_row = row_bytes(cfg, width, swept, method, kind, b)
    s = _sizes(cfg)
    pack = None
    fixed = 0
    n_rows = max(1, int(n_rows))
    if batch_size is not None:
        if int(batch_size) < 1:
            raise ValueError(f"--batch-size must be ≥ 1, got {batch_size}")
        bs = min(int(batch_size), n_rows)
        if method == "prefix":
            pack = min(PACK_TOKENS, max(width, bs * width))
            fixed = 2 * b * s["heads"] * pack * pack
        return BatchPlan(bs, fixed + bs * per_row, None, "--batch-size", per_row, fixed, pack)
    on_gpu = device is not None and device.type == "cuda"
    free = free_memory(device)
    if max_memory is not None:
        budget, source = parse_memory(max_memory, free), f"--max-memory {max_memory}"
    else:
        budget = int(DEFAULT_SHARE * free)
        source = f"{int(round(100 * DEFAULT_SHARE))} % of the {human(free)} free {'GPU memory' if on_gpu else 'RAM'}"
    if method == "prefix":  # one pack's attention, cut so it takes at most a quarter of the budget
        pack = max(width, min(PACK_TOKENS, int((budget / 4 / (2 * b * s["heads"])) ** 0.5)))
        fixed = 2 * b * s["heads"] * pack * pack
    fit = max(1, (budget - fixed) // max(1, per_row))
    cap = max(1, (GPU_TOKENS if on_gpu else CPU_TOKENS) // max(1, width))
    bs = int(min(fit, cap, n_rows))
    if method == "prefix" and pack is not None:  # a pack is never longer than the batch's tokens
        pack = min(pack, max(width, bs * width))
        fixed = 2 * b * s["heads"] * pack * pack
    return BatchPlan(bs, fixed + bs * per_row, budget, source, per_row, fixed, pack, capped=cap < min(fit, n_rows))


__all__ = [
    "CPU_TOKENS",
    "DEFAULT_SHARE",
    "GPU_TOKENS",
    "PACK_TOKENS",
    "BatchPlan",
    "choose_batch",
    "free_memory",
    "human",
    "parse_memory",
    "row_bytes",
]
