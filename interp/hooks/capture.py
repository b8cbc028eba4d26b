"""Activations kept from a forward: one hook per hook name that stores what passes through it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from torch import Tensor


def capturing(
    store: MutableMapping[str, Tensor], names: Iterable[str], *, clone: bool = True
) -> list[tuple[str, Callable[..., None]]]:
    """``fwd_hooks`` for :func:`~interp.hooks.hooked.hooked` that store each named hook's activation, detached
    (and cloned: a later in-place edit of the forward cannot change it), under its name in
    ``store``; the activation passes on unchanged."""

    def keeper(name: str) -> Callable[..., None]:
        def keep(act: Tensor, hook: Any) -> None:
            store[name] = act.detach().clone() if clone else act.detach()

        return keep

    return [(name, keeper(name)) for name in names]


__all__ = ["capturing"]
