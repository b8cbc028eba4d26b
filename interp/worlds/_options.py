"""Small parsing helpers shared by the built-in worlds (private).

CLI arguments for worlds without a file look like ``connect4:n=4,max_len=10``: comma-separated
``key=value`` pairs, each key known to the world and each value an integer.
"""

from __future__ import annotations

from typing import Any

from interp.worlds.base import WorldError


def parse_int_options(arg: str, allowed: tuple[str, ...], kind: str) -> dict[str, int]:
    """Parse ``"k=v,k=v"`` into ``{k: int(v)}``; unknown keys and non-integers raise."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in arg.split(","))):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise WorldError(f"{kind}: expected key=value, got {part!r} (keys: {', '.join(allowed)})")
        if key not in allowed:
            raise WorldError(f"{kind}: unknown option {key!r} (keys: {', '.join(allowed)})")
        if key in out:
            raise WorldError(f"{kind}: option {key!r} given twice")
        try:
            out[key] = int(value.strip())
        except ValueError:
            raise WorldError(f"{kind}: option {key!r} must be an integer, got {value!r}") from None
    return out


def check_spec_keys(spec: dict[str, Any], allowed: tuple[str, ...], kind: str) -> None:
    """Reject a spec whose ``kind`` is wrong or that carries keys the world does not know."""
    if spec.get("kind", kind) != kind:
        raise WorldError(f"expected a {kind!r} spec, got kind {spec.get('kind')!r}")
    unknown = sorted(set(spec) - set(allowed) - {"kind"})
    if unknown:
        raise WorldError(f"{kind} spec: unknown keys {unknown} (allowed: {', '.join(allowed)})")


def check_int(value: Any, name: str, kind: str, minimum: int) -> int:
    """``value`` as an int ≥ ``minimum`` (bools rejected), else a :class:`WorldError`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorldError(f"{kind}: {name} must be an integer, got {value!r}")
    if value < minimum:
        raise WorldError(f"{kind}: {name} must be >= {minimum}, got {value}")
    return value


def check_length_range(lo: Any, hi: Any, kind: str) -> tuple[int, int]:
    """A generation length range ``1 <= lo <= hi`` (inclusive on both ends)."""
    lo = check_int(lo, "min_len", kind, 1)
    hi = check_int(hi, "max_len", kind, 1)
    if lo > hi:
        raise WorldError(f"{kind}: min_len ({lo}) must not exceed max_len ({hi})")
    return lo, hi
