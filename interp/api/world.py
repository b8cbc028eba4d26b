"""``interp.world_model``: the Myhill–Nerode compression and distinction metrics (Vafa et al.,
NeurIPS 2024, §2) of a model trained on a world, with or without interventions active — the
before / after comparison of any layer removal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from interp.api.model import Model


def world_model(
    model: Model | str,
    world: Any = None,
    *,
    interventions: Sequence[Any] = (),
    pairs: int | str = 100,
    depth: int = 5,
    seed: int = 0,
) -> Any:
    """Compression and distinction precision / recall of ``model`` against ``world`` (default: the
    world the checkpoint was trained on, from its folder), under ``interventions``
    (:class:`interp.hooks.Intervention`, e.g. ``zero("mlp_out:3")``, the MLP output of layer 3; removed afterwards).
    ``pairs``: state pairs sampled (or ``"all"``), ``depth``: suffix depth of the boundary. Returns
    :func:`interp.metrics.myhill_nerode`'s result (``.summary()``, ``.frame``)."""
    from interp.hooks import intervene
    from interp.metrics import myhill_nerode
    from interp.models import load_checkpoint
    from interp.models.lm import BridgeLM

    if isinstance(model, Model):
        bridge, source = model.bridge, model.source
    else:
        bridge, source = None, str(model)
    if world is None:
        ckpt = load_checkpoint(source)
        world = ckpt.world
        bridge = bridge if bridge is not None else ckpt.bridge
    if bridge is None:
        from interp.api.model import load_model

        bridge = load_model(source).bridge
    lm = BridgeLM(bridge, world.vocab)
    if not interventions:
        return myhill_nerode(world, lm, pairs=pairs, depth=depth, seed=seed)
    with intervene(bridge, list(interventions)) as active:
        result = myhill_nerode(world, lm, pairs=pairs, depth=depth, seed=seed)
    if 0 in active.calls:
        raise RuntimeError(f"an intervention never fired (calls per intervention: {active.calls}): {active.describe()}")
    return result


__all__ = ["world_model"]
