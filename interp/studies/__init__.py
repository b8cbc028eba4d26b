"""Studies: a paper's question asked of real models end to end, over the public API (:mod:`interp.api`).

Each is a config dataclass and a ``run`` function writing a results folder; the scripts of
``experiments/`` are their command lines. The room sits above the API and below the CLI.
"""
