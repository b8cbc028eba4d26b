"""World-model metrics: the next-token test (more in later issues: probes, Myhill–Nerode)."""

from interp.metrics.next_token import NextTokenResult, next_token_test

__all__ = ["NextTokenResult", "next_token_test"]
