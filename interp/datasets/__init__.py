"""Data sets: published files and generated examples, before any model's tokenizer sees them.

- :mod:`.pragworld` — PragWorld (AAAI 2026) yes/no conversations: loads the two CSV splits, builds
  the benchmark and interpretability prompts and parses yes/no answers; asking a language model is
  :mod:`interp.metrics.pragworld_eval` and the accuracies :mod:`interp.metrics.pragworld`;
- :mod:`.contrast` — contrast examples (a prompt, a correct and a foil next token, an optional
  corrupted prompt, a group): :class:`~interp.datasets.contrast.ContrastExample` and their JSONL
  file (:func:`~interp.datasets.contrast.load_contrast`, :func:`~interp.datasets.contrast.write_contrast`);
  :func:`~interp.datasets.contrast.data_file_kind` says which kind of data file a ``--data`` path holds;
- :mod:`.ioi` — indirect-object identification prompts (Wang et al. 2022) as contrast examples
  (:func:`~interp.datasets.ioi.ioi_examples`).

A task (:mod:`interp.tasks`) turns examples into a model's token ids. Importing this package needs
only pandas (no torch), and it imports nothing else of interp (the lowest room beside the plumbing).
"""
