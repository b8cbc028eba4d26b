"""Data parallelism with ``accelerate``: the small glue the fine-tuning loop and the sweeps share.

It lives in :mod:`interp.models`, beside :mod:`interp.models.device` (one process's placement,
which it uses): the lowest room that needs it is analysis (sweeps shard their examples), and train
and the CLI use it too, so it sits below them all.

The engine is Hugging Face ``accelerate`` (what users of 7B-class models already run): the same
script runs on one process, on several CPU processes (``gloo``) or on several GPUs (``nccl``),
launched by any of

- ``accelerate launch --multi_gpu --num_processes N -m interp.cli finetune --config X.toml``
  (GPUs; on a machine without GPUs the processes run on the CPU over gloo),
- ``torchrun --nproc_per_node N -m interp.cli finetune --config X.toml``,
- ``interp finetune --config X.toml --processes N`` (:func:`launch_local`: N local processes over
  gloo, no launcher needed — how the tests run it offline).

(``accelerate launch --cpu --num_processes N`` starts *one* process in accelerate 1.15: ``--cpu``
disables its multi-process launch.)

Three helpers, each a pure function of its inputs so results do not depend on the number of
processes:

- :func:`shard` — a process's contiguous slice of a list of indices (every index in exactly one
  slice, slices in rank order);
- :func:`gather` — per-example results of every process, back in the original order (the inverse
  of :func:`shard`);
- :func:`all_sum` — sums of small tensors over the processes (e.g. token counts, so a loss can be
  normalised by the *global* count and a data-parallel run equals a single-process run with the
  same global batch).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import torch
from torch import Tensor

T = TypeVar("T")


def make_accelerator(device: str = "auto"):
    """An ``accelerate.Accelerator`` for ``device``: a name :func:`interp.models.device.resolve_device`
    accepts (``auto``: CUDA, then MPS, then the CPU — under a launcher CUDA, else the CPU; ``cpu``;
    ``cuda``; ``cuda:N``; ``mps``).

    Run under a launcher (``WORLD_SIZE`` > 1) it joins the process group: gloo on CPU, nccl on
    CUDA, each process on its local rank's GPU — so ``cuda:N`` (one GPU) needs one process; it
    becomes the current CUDA device, which accelerate's single-process default (``cuda``) then
    names. No mixed precision, no gradient accumulation: the caller's loop decides those.
    """
    from accelerate import Accelerator

    from interp.models.device import DeviceError, resolve_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if device == "auto" and world > 1:  # MPS has no multi-process backend: CUDA, else gloo on the CPU
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(resolve_device(device))
    if dev.type == "cuda" and dev.index is not None:
        if world > 1:
            raise DeviceError(
                f"device {device!r} names one GPU, but {os.environ['WORLD_SIZE']} processes run: "
                f"use device cuda (each process takes its local rank's GPU)"
            )
        torch.cuda.set_device(dev)
    acc = Accelerator(cpu=dev.type == "cpu")
    got = torch.device(acc.device)
    if got.type != dev.type or (dev.index is not None and got.index not in (None, dev.index)):
        raise DeviceError(f"device {device!r}: accelerate placed this process on {acc.device}")
    return acc


def rank_and_size(accelerator: Any | None) -> tuple[int, int]:
    """(process index, number of processes); (0, 1) without an accelerator."""
    if accelerator is None:
        return 0, 1
    return int(accelerator.process_index), int(accelerator.num_processes)


def shard_bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """[start, stop) of process ``rank``'s contiguous share of ``n`` items: the first ``n % size``
    processes take one item more (``numpy.array_split``'s rule)."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in 0..{size - 1}")
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


@overload
def shard(
    items: Tensor, accelerator: Any | None = None, *, rank: int | None = None, size: int | None = None
) -> Tensor: ...
@overload
def shard(
    items: Sequence[T], accelerator: Any | None = None, *, rank: int | None = None, size: int | None = None
) -> Sequence[T]: ...
def shard(
    items: Sequence[T] | Tensor, accelerator: Any | None = None, *, rank: int | None = None, size: int | None = None
) -> Sequence[T] | Tensor:
    """This process's contiguous slice of ``items`` (a list of example indices, a tensor of rows …).

    ``rank``/``size`` override the accelerator's (for tests and for planning). Slices are in rank
    order, so concatenating every process's slice gives ``items`` back (see :func:`gather`).
    """
    r, s = rank_and_size(accelerator)
    r = r if rank is None else rank
    s = s if size is None else size
    start, stop = shard_bounds(len(items), r, s)
    return items[start:stop]


def gather(local: Sequence[T], accelerator: Any | None = None) -> list[T]:
    """Every process's ``local`` results (picklable objects, e.g. per-example dicts), concatenated
    in rank order — the original order when ``local`` was computed on :func:`shard` of a list.
    Every process receives the whole list. Without an accelerator (or one process): ``list(local)``."""
    _, size = rank_and_size(accelerator)
    if size == 1:
        return list(local)
    import torch.distributed as dist

    parts: list[Any] = [None] * size
    dist.all_gather_object(parts, list(local))
    return [x for part in parts for x in part]


def gather_frame(local: Any, accelerator: Any | None = None) -> Any:
    """:func:`gather` for a pandas DataFrame of per-example rows (index reset)."""
    import pandas as pd

    _, size = rank_and_size(accelerator)
    if size == 1:
        return local.reset_index(drop=True)
    rows = gather(local.to_dict(orient="records"), accelerator)
    return pd.DataFrame(rows, columns=list(local.columns))


def all_sum(values: Tensor, accelerator: Any | None = None) -> Tensor:
    """Element-wise sum of ``values`` over the processes (no gradient; a copy on one process)."""
    _, size = rank_and_size(accelerator)
    values = values.detach()
    if size == 1:
        return values.clone()
    import torch.distributed as dist

    out = values.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, size: int, port: int, fn: Callable[..., Any], args: tuple, threads: int) -> None:
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_WORLD_SIZE": str(size),
            "OMP_NUM_THREADS": str(threads),
        }
    )
    torch.set_num_threads(threads)
    fn(*args)


def launch_local(
    fn: Callable[..., Any], processes: int, *args: Any, threads: int = 1, timeout: float | None = None
) -> None:
    """Run ``fn(*args)`` in ``processes`` fresh local processes that form one process group
    (``torch.multiprocessing`` with the spawn method; each builds its own ``Accelerator``, which
    joins the group through the ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables set here).

    ``fn`` must be importable (a module-level function). A failure in any process raises here.
    ``timeout``: seconds to wait for the processes (None: no limit).
    """
    import torch.multiprocessing as mp

    if processes < 1:
        raise ValueError(f"processes must be ≥ 1, got {processes}")
    if processes == 1:
        fn(*args)
        return
    ctx = mp.start_processes(
        _entry, args=(processes, _free_port(), fn, args, threads), nprocs=processes, join=False, start_method="spawn"
    )
    import time

    deadline = None if timeout is None else time.monotonic() + timeout
    while not ctx.join(timeout=1.0):
        if deadline is not None and time.monotonic() > deadline:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
            raise TimeoutError(f"{processes} processes did not finish within {timeout:.0f} s")


__all__ = [
    "all_sum",
    "gather",
    "gather_frame",
    "launch_local",
    "make_accelerator",
    "rank_and_size",
    "shard",
    "shard_bounds",
]
