"""World-model metrics: the next-token test, current-state probes, Myhill–Nerode compression and distinction."""

from interp.metrics.acceptance import Epsilon, TopK, TopP
from interp.metrics.mn_boundary import BoundaryOptions
from interp.metrics.myhill_nerode import MyhillNerodeOptions, MyhillNerodeResult, myhill_nerode, pair_boundaries
from interp.metrics.next_token import NextTokenResult, next_token_test
from interp.metrics.probes import ProbeResult, probe_layers

__all__ = [
    "BoundaryOptions",
    "Epsilon",
    "MyhillNerodeOptions",
    "MyhillNerodeResult",
    "NextTokenResult",
    "ProbeResult",
    "TopK",
    "TopP",
    "myhill_nerode",
    "next_token_test",
    "pair_boundaries",
    "probe_layers",
]
