"""Benchmarks read from published files: PragWorld (AAAI 2026) yes/no conversations.

``interp.benchmarks.pragworld`` loads the two CSV splits, builds the benchmark and interpretability
prompts and parses yes/no answers; asking a language model is :mod:`interp.metrics.pragworld_eval`
and the accuracies :mod:`interp.metrics.pragworld`. Importing this package needs only pandas (no
torch), and it imports nothing else of interp (the lowest room beside the plumbing).
"""
