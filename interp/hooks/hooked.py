"""The one door for hooked forwards: every hook interp adds goes through this module.

- :func:`hooked` adds TransformerLens hooks (``(hook name, fn)`` pairs, the ``fwd_hooks`` of
  ``bridge.hooks``) to a bridge for a ``with`` block;
- :func:`module_hooks` adds PyTorch forward (pre-)hooks to modules of a raw Hugging Face model (or
  of a bridge's blocks), for code that must run without TransformerLens (fine-tuning penalties,
  the HF oracle).

Both remove **exactly the hooks they added** when the block ends, also when it raises, and leave
every other hook alone — a hook the user registered before (``bridge.add_hook``, an outer
``with bridge.hooks(...)``, a ``register_forward_hook``) is still there, and still fires, after.
(TransformerLens 4.3's ``bridge.hooks`` removes its own handles one by one; a helper that called
``reset_hooks()`` instead would also remove the user's — TransformerLens issues #1323 / #1636.
``tests/test_hook_discipline.py`` holds both to it, and fails on any hooked forward written
outside ``interp/hooks``.)

::

    from interp.hooks import hooked
    with torch.no_grad(), hooked(bridge, [("blocks.0.hook_mlp_out", keep)]):
        bridge(tokens)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch import nn

HookFn = Callable[..., Any]


def bridge_of(model: Any) -> Any:
    """The TransformerBridge of ``model`` (a bridge, or a BridgeLM, which carries its bridge)."""
    bridge = getattr(model, "bridge", model)
    if not (hasattr(bridge, "hooks") and hasattr(bridge, "hook_dict")):
        raise TypeError(f"hooks need a TransformerBridge (or a BridgeLM), got {type(model).__name__}")
    return bridge


@contextlib.contextmanager
def hooked(
    model: Any,
    fwd_hooks: Iterable[tuple[Any, HookFn]] = (),
    bwd_hooks: Iterable[tuple[Any, HookFn]] = (),
) -> Iterator[Any]:
    """Every forward (and backward) of ``model`` inside the block runs with these hooks; yields
    the bridge. A hook name may be an alias (``blocks.0.hook_mlp_out``), a canonical name, or a
    name filter ``(str) -> bool``, as in ``bridge.hooks``. On exit the hooks added here, and only
    those, are removed — also when the block (or adding a later hook) raises."""
    bridge, bwd = bridge_of(model), list(bwd_hooks)
    with bridge.hooks(fwd_hooks=list(fwd_hooks), **({"bwd_hooks": bwd} if bwd else {})):
        yield bridge


@contextlib.contextmanager
def module_hooks(
    hooks: Iterable[tuple[nn.Module, HookFn]], *, pre: bool = False, with_kwargs: bool = False
) -> Iterator[None]:
    """PyTorch forward hooks (``fn(module, args, output)``), or forward pre-hooks with ``pre``
    (``fn(module, args)``), on the given modules for the block; ``with_kwargs`` as in
    ``register_forward_hook``. Exactly these handles are removed on exit, also on error."""
    handles = []
    try:
        for module, fn in hooks:
            register = module.register_forward_pre_hook if pre else module.register_forward_hook
            handles.append(register(fn, with_kwargs=with_kwargs))
        yield
    finally:
        for handle in reversed(handles):
            handle.remove()


__all__ = ["bridge_of", "hooked", "module_hooks"]
