"""Hooks: sites (layer × component → TransformerLens hook name) and interventions (zero, mean,
resample, patch, scale) as small frozen dataclasses, compiled into hooks and applied in a ``with``
block (:func:`intervene`) that leaves nothing registered behind."""

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
    "COMPONENTS", "KINDS", "ActiveInterventions", "Alignment", "HookNames", "Intervention", "InterventionError",
    "Site", "SiteError", "Source", "available_components", "canonical_name", "check_site", "compile",
    "compile_interventions", "from_json", "hook_alias", "intervene", "last_positions", "mean", "parse_site",
    "patch", "resample", "scale", "to_json", "zero",
]
