"""How one run of a job goes, beside its config, and what its folder records.

The run-control flags of ``interp run`` / ``interp train`` (:class:`MainRun`) and of
``interp finetune`` (:class:`FinetuneRun`) are these dataclasses' fields: the parser is generated
from them (:func:`interp.cli.common.add_fields`) and the commands read them back
(:meth:`~interp.config.flags.FlagFields.from_args`). They say how a run goes (start over,
progress bars, processes), not what it computes — that is the config file's
(:class:`~interp.config.FinetuneConfig`, the main job's
:class:`~interp.jobs.experiment.ExperimentConfig`).

A run folder records its config in ``run.json`` under ``config``
(:func:`~interp.config.flags.run_record`), as a sweep folder does;
:func:`~interp.config.flags.recorded_config` reads it back (``from_run`` of each config), so
rerunning the recorded config from Python reproduces the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from interp.config import ConfigError
from interp.config.flags import FlagFields, flag

#: ``--no-progress`` (every job with progress bars)
NO_PROGRESS = "no progress bars"


@dataclass(frozen=True, kw_only=True)
class MainRun(FlagFields):
    """How one ``interp run`` or ``interp train`` goes (its flags; the config file is the
    command's ``CONFIG`` / ``--config``): the arguments ``fresh``, ``progress`` (= not
    ``no_progress``) and ``retrain`` of :func:`interp.jobs.pipeline.run_main_job` and
    :func:`interp.jobs.experiment.run_experiment`."""

    fresh: bool = field(
        default=False, metadata=flag("delete the run folder first instead of resuming", action="store_true")
    )
    no_progress: bool = field(default=False, metadata=flag(NO_PROGRESS, action="store_true"))
    retrain: bool = field(
        default=False,
        metadata=flag(
            "train from scratch even when the config's recipe is the shipped demo model's "
            "(default: start from the shipped checkpoint)",
            action="store_true",
        ),
    )


@dataclass(frozen=True, kw_only=True)
class FinetuneRun(FlagFields):
    """How one ``interp finetune`` goes (its flags beside ``--config`` and the placement flags of
    :class:`~interp.config.FinetuneConfig`): local processes, starting over, progress bars."""

    processes: int = field(
        default=1,
        metadata=flag(
            "data-parallel local processes (gloo on CPU); or keep 1 and run under `accelerate launch` / `torchrun`",
            type=int,
        ),
    )
    fresh: bool = field(default=False, metadata=flag("retrain and re-evaluate finished runs", action="store_true"))
    no_progress: bool = field(default=False, metadata=flag(NO_PROGRESS, action="store_true"))

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ConfigError(f"--processes must be ≥ 1, got {self.processes}")


__all__ = ["FinetuneRun", "MainRun", "NO_PROGRESS"]
