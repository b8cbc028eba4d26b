"""The public Python API: a model, a task, a sweep, patching, fine-tuning and world-model metrics,
each one call; every result an object with a DataFrame, ``plot`` / ``show``, ``save`` and
:func:`load`. The calls run the same code as the ``interp`` command and write the same folders.

>>> import interp                                                   # doctest: +SKIP
>>> model = interp.load_model("smollm2-135m-instruct")
>>> result = interp.sweep(model, interp.ioi(model, n=80))
>>> print(result.verdicts().frame)
"""

from interp.analysis.config.sweep_config import ConfigError, SweepConfig, VerdictRule
from interp.api.finetuning import Finetuned, TuneConfig, finetune, hls_penalty
from interp.api.loading import load
from interp.api.model import Model, UnknownModelError, load_model
from interp.api.patching import Patching, patch
from interp.api.provenance import provenance
from interp.api.results import Figure, ResultFolderError
from interp.api.sweeping import Sweep, sweep
from interp.api.tasks import contrast, dialogue, ioi, pragworld
from interp.api.world import world_model

__all__ = [
    "ConfigError",
    "Figure",
    "Finetuned",
    "Model",
    "Patching",
    "ResultFolderError",
    "Sweep",
    "SweepConfig",
    "TuneConfig",
    "UnknownModelError",
    "VerdictRule",
    "contrast",
    "dialogue",
    "finetune",
    "hls_penalty",
    "ioi",
    "load",
    "load_model",
    "patch",
    "pragworld",
    "provenance",
    "sweep",
    "world_model",
]
