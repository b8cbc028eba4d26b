"""Machine facts a measured figure is quoted with: the CPU, its cores, torch's threads, and the fp32
matmul peak measured in the same process (timings differ 2× between machines; a ratio to the
peak measured beside them does not)."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` where there is one, else the platform's)."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def matmul_peak(sizes: tuple[int, ...] = (1024, 2048), repeats: int = 10) -> float:
    """The best FLOP/s of fp32 square ``torch.mm`` over a few sizes (a generous peak), on the
    threads torch uses now."""
    import torch

    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(repeats):
            t = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - t))
    return best


def machine(peak: bool = True) -> dict[str, Any]:
    """``cpu``, ``cores``, ``threads`` (torch's), versions and, with ``peak``, ``matmul_peak_gflops``."""
    import torch

    out: dict[str, Any] = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if peak:
        out["matmul_peak_gflops"] = round(matmul_peak(repeats=5) / 1e9, 1)
    return out


__all__ = ["cpu_name", "machine", "matmul_peak"]
