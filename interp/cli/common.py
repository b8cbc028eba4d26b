"""Arguments and helpers shared by the ``interp`` commands: model placement, checkpoints, ablations."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any


def ablations_from_args(args: argparse.Namespace) -> list:
    """``--ablate SITE`` (repeatable) → zero-ablation interventions; parsed before any model loads."""
    if not getattr(args, "ablate", None):
        return []
    from interp.hooks import zero

    return [zero(site) for site in args.ablate]


def intervened(model, interventions: list, name: str, out=None):
    """A ``with`` block running ``model`` (a bridge or BridgeLM) under ``interventions``; says which."""
    import contextlib

    if not interventions:
        return contextlib.nullcontext(None)
    if not hasattr(getattr(model, "bridge", model), "hook_dict"):
        raise ValueError(f"--ablate needs a checkpoint model; {name!r} has no layers to ablate")
    from interp.hooks import intervene

    for iv in interventions:
        print(f"intervention active: {iv.describe()}", file=out or sys.stdout)
    return intervene(model, interventions)


def add_placement(
    parser: argparse.ArgumentParser, device_map: bool = False, device: str = "auto", attention: str = "eager"
) -> None:
    """``--device`` / ``--dtype`` / ``--attention`` (and ``--device-map`` / ``--n-devices``): where
    and in what precision the model runs; resolved by
    :meth:`interp.models.device.Placement.resolve`. ``attention``: the default of ``--attention``
    (``auto`` on ``interp sweep``, whose kinds read no pattern). ``interp finetune``'s placement
    flags are its config's fields instead (:class:`~interp.config.FinetuneConfig`)."""
    from interp.config import DEVICE_HELP, DTYPE_HELP

    parser.add_argument("--device", default=device, help=f"{DEVICE_HELP} (default {device})")
    parser.add_argument("--dtype", default="float32", help=f"{DTYPE_HELP} (default float32)")
    parser.add_argument(
        "--attention",
        choices=("auto", "eager", "fused"),
        default=attention,
        help="the model's attention: fused (one scaled_dot_product_attention call; hook_attn_scores and "
        "hook_pattern never fire, a hook on them is refused), eager (TransformerLens's own), or auto "
        f"(fused unless a hook reads the pattern, then eager for that forward) (default {attention})",
    )
    if device_map:
        parser.add_argument(
            "--device-map",
            metavar="MAP",
            help="split a model larger than one GPU over several devices (Hugging Face / accelerate "
            "placement, instead of --device): auto, balanced, sequential, or a JSON object or "
            "file {module name: device}",
        )
        parser.add_argument(
            "--n-devices",
            type=int,
            metavar="N",
            help="split the model evenly over this many CUDA GPUs (instead of --device)",
        )


def placement_from_args(args: argparse.Namespace):
    """The :class:`~interp.models.device.Placement` of a command's ``--device/--dtype/--device-map``."""
    from interp.models.device import Placement

    return Placement.resolve(
        args.device,
        args.dtype,
        getattr(args, "device_map", None),
        getattr(args, "n_devices", None),
        attention=getattr(args, "attention", "eager"),
    )


def add_checkpoint(parser: argparse.ArgumentParser) -> None:
    """``--model CHECKPOINT`` and ``--world`` (override the world the checkpoint carries)."""
    parser.add_argument(
        "--model",
        required=True,
        help="checkpoint folder (e.g. runs/demo/best); with a PragWorld CSV any Hugging Face model "
        "folder or a .gguf file (converted once into the cache, see interp models)",
    )
    parser.add_argument("--world", help="override the checkpoint's world (vocabularies must match)")


def add_ablate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ablate",
        action="append",
        metavar="SITE",
        help="zero-ablate SITE while the metric runs (repeatable), e.g. mlp_out:3, attn_out:0, "
        "resid_post:1, z:2.1 (layer 2 head 1); compare with a run without it",
    )


def add_fields(
    parser: argparse.ArgumentParser,
    flags: list[tuple[str, Any, Any]],
    before: dict[str, Callable[[argparse.ArgumentParser], None]] | None = None,
) -> None:
    """One flag per setting of a dataclass, from its fields' metadata
    (:class:`~interp.config.flags.Flag`; ``flags``: ``(field name, Flag, field default)`` in order,
    as :meth:`~interp.config.flags.FlagFields.flags` or
    :meth:`~interp.analysis.config.sweep_job.SweepJob.flags` give them); ``before``: a setting's name → a
    function adding other flags just before it (the ``--help`` order)."""
    from interp.config.flags import dest, flag_default, flag_name

    for name, how, default in flags:
        if before and name in before:
            before[name](parser)
        kwargs: dict[str, Any] = {"default": flag_default(how, default), "help": how.help}
        for key in ("type", "choices", "metavar", "action"):
            if getattr(how, key) is not None:
                kwargs[key] = getattr(how, key)
        names = how.names or (flag_name(name),)
        parser.add_argument(*names, dest=dest(name, how), **kwargs)


def add_verdict_rule(p: argparse.ArgumentParser) -> None:
    """The layer-verdict flags (docs/concepts/verdicts.md): margin, confidence, family, resampling
    (generated from :class:`~interp.analysis.config.sweep_config.VerdictRule`'s fields)."""
    from interp.analysis.config.sweep_config import VerdictRule

    add_fields(p, VerdictRule.flags())
