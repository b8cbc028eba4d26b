"""World-model metrics: the next-token test (more in later issues: probes, Myhill–Nerode)."""

from interp.metrics.next_token import NextTokenResult, next_token_test
from interp.metrics.probes import ProbeResult, probe_layers

__all__ = ["NextTokenResult", "ProbeResult", "next_token_test", "probe_layers"]
