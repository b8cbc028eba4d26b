"""Hooks: sites (layer × component → TransformerLens hook name) and interventions (zero, mean,
resample, patch, scale) as small frozen dataclasses, compiled into hooks and applied in a ``with``
block (:func:`intervene`) that leaves nothing registered behind. Every hooked forward of the
project goes through :func:`hooked` (TransformerLens hook points) or :func:`module_hooks` (PyTorch
hooks on HF modules), which remove exactly the hooks they added."""

from interp.hooks.capture import capturing
from interp.hooks.hooked import bridge_of, hooked, module_hooks
from interp.hooks.interventions import (
    KINDS,
    ActiveInterventions,
    Alignment,
    Intervention,
    InterventionError,
    Source,
    compile,
    compile_interventions,
    from_json,
    intervene,
    last_positions,
    mean,
    patch,
    resample,
    scale,
    to_json,
    zero,
)
from interp.hooks.sites import (
    COMPONENTS,
    HookNames,
    Site,
    SiteError,
    available_components,
    canonical_name,
    check_site,
    hook_alias,
    parse_site,
)

__all__ = [
    "COMPONENTS",
    "KINDS",
    "ActiveInterventions",
    "Alignment",
    "HookNames",
    "Intervention",
    "InterventionError",
    "Site",
    "SiteError",
    "Source",
    "available_components",
    "bridge_of",
    "capturing",
    "canonical_name",
    "check_site",
    "compile",
    "compile_interventions",
    "from_json",
    "hook_alias",
    "hooked",
    "intervene",
    "last_positions",
    "mean",
    "module_hooks",
    "parse_site",
    "patch",
    "resample",
    "scale",
    "to_json",
    "zero",
]
