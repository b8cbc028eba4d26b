"""Benchmarks read from published files: PragWorld (AAAI 2026) yes/no conversations.

``interp.benchmarks.pragworld`` loads the two CSV splits, builds the benchmark and interpretability
prompts, parses yes/no answers and evaluates a language model on them; the accuracies live in
:mod:`interp.metrics.pragworld`. Importing this package needs only pandas (no torch).
"""
