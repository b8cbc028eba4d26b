"""interp: does a sequence model carry a coherent world model, which layers help or hurt it?

The public API is re-exported here lazily (``import interp`` stays fast; torch and
transformer_lens load on first use).
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

try:  # the installed distribution's version (pyproject.toml's, as built); `interp --version` prints it
    __version__ = metadata.version("interp")
except metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    # the Python API (interp.api): a model, a task, one call per analysis, results that save and load
    **{
        name: "interp.api"
        for name in (
            "load_model",
            "Model",
            "ioi",
            "contrast",
            "pragworld",
            "dialogue",
            "sweep",
            "SweepConfig",
            "VerdictRule",
            "Sweep",
            "patch",
            "Patching",
            "finetune",
            "TuneConfig",
            "Finetuned",
            "hls_penalty",
            "world_model",
            "load",
        )
    },
    "World": "interp.worlds",
    "Vocab": "interp.worlds",
    "parse_world": "interp.worlds",
    "world_from_spec": "interp.worlds",
    "ModelConfig": "interp.models",
    "build_gpt2": "interp.models",
    "save_checkpoint": "interp.models",
    "load_checkpoint": "interp.models",
    "load_bridge": "interp.models",
    # the training loop itself is `interp.train.train` (the name `interp.train` is its package)
    "TrainConfig": "interp.train",
    "encode_sequences": "interp.worlds.encoding",
    "next_token_test": "interp.metrics",
    "myhill_nerode": "interp.metrics",
    "probe_layers": "interp.metrics",
    "Epsilon": "interp.metrics",
    "TopK": "interp.metrics",
    "TopP": "interp.metrics",
    "BridgeLM": "interp.models.lm",
    "WorldLM": "interp.models.lm",
    "UniformLM": "interp.models.lm",
    "DFALM": "interp.models.lm",
    "lm_from_arg": "interp.models.lm",
    "ExperimentConfig": "interp.jobs.experiment",
    "run_experiment": "interp.jobs.experiment",
    "Site": "interp.hooks",
    "parse_site": "interp.hooks",
    "Intervention": "interp.hooks",
    "intervene": "interp.hooks",
    "compile_interventions": "interp.hooks",
    "YesNoTask": "interp.tasks",
    "Tokenization": "interp.tasks",
    "own_tokenizer": "interp.tasks",
    "ContrastTask": "interp.tasks",
    "ContrastExample": "interp.datasets.contrast",
    "load_contrast": "interp.datasets.contrast",
    "ioi_examples": "interp.datasets.ioi",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'interp' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
