"""``interp.sweep``: one call from a model and a task to per-example layer effects and calibrated
verdicts, as a :class:`Sweep` result; ``interp.load`` reads back any sweep folder, written by the
API or by ``interp sweep`` (the same files: the API runs the CLI's job,
:func:`interp.jobs.task_sweep.run_task_sweep`, on the model already loaded)."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from interp.analysis.config.sweep_config import SweepConfig, VerdictRule
from interp.analysis.config.sweep_job import SweepJob
from interp.analysis.engines.batching import choose_method
from interp.analysis.engines.sweeps import SweepResult
from interp.analysis.verdicts.layers import LayerVerdicts, layer_verdicts, load_verdicts
from interp.api.model import Model, as_model
from interp.api.provenance import provenance
from interp.api.results import Figure, ResultFolderError, SavedResult, describe_task
from interp.jobs.run_records import SweepRun
from interp.jobs.task_sweep import run_task_sweep
from interp.models.attention import attention
from interp.tasks import ContrastTask, YesNoTask


@dataclass
class Sweep(SavedResult):
    """A layer sweep's result.

    ``frame``: one tidy row per (removal, layer, example) — ``removal``, ``site``, ``layer``,
    ``example``, ``group``, ``category``, ``metric``, ``clean``, ``ablated``, ``effect`` (ablated −
    clean; positive = the model does better without the layer). :meth:`verdicts`: useful /
    harmful / negligible / inconclusive per layer with intervals. :meth:`plot`, :meth:`save`;
    :attr:`info` the run's settings with ``config`` and ``provenance``; :attr:`folder` where its
    files are (``interp sweep``'s layout)."""

    sweeps: dict[str, SweepResult]
    info: dict[str, Any]
    folder: Path
    _verdicts: dict[str, LayerVerdicts] = field(default_factory=dict, repr=False)

    @property
    def config(self) -> SweepConfig:
        return SweepConfig.from_dict(self.info["config"])

    @property
    def removals(self) -> list[str]:
        return list(self.sweeps)

    @property
    def frame(self) -> pd.DataFrame:
        parts = []
        metric = self.info.get("metric_name") or self.info.get("metric")
        site = "mlp_out" if self.info.get("kind") == "mlp-zero" else "direct_path"
        for name, s in self.sweeps.items():
            f = s.frame.copy()
            f.insert(0, "removal", name)
            f.insert(1, "site", site)
            f["metric"] = metric
            parts.append(f)
        return pd.concat(parts, ignore_index=True)

    def verdicts(self, rule: VerdictRule | None = None, removal: str | None = None) -> LayerVerdicts:
        """Per layer: ``mean_effect``, ``ci_low`` / ``ci_high`` and ``verdict`` in ``.frame``; the
        lists ``.useful`` / ``.harmful``. ``removal``: which (default the first); ``rule``: judge
        again under another rule (default: the run's, with its prior-shift / direct / confirmation
        notes)."""
        name = removal or self.removals[0]
        if name not in self.sweeps:
            raise KeyError(f"no removal {name!r} in this sweep; it has {', '.join(self.removals)}")
        if rule is not None:
            return layer_verdicts(
                self.sweeps[name],
                seed=int(self.info.get("seed", 0)),
                threshold=self.info.get("threshold"),
                **rule.kwargs(),
            )
        if name not in self._verdicts:
            stem = "verdicts.json" if name == self.removals[0] else f"verdicts_{name}.json"
            self._verdicts[name] = load_verdicts(self.folder / stem)
        return self._verdicts[name]

    def plot(self, removal: str | None = None) -> Figure:
        """The per-layer effects with their band and verdicts (``layers.png`` of the folder; another
        removal's drawn beside it as ``layers_<removal>.png``)."""
        name = removal or self.removals[0]
        path = self.folder / ("layers.png" if name == self.removals[0] else f"layers_{name}.png")
        if not path.is_file():
            from interp.viz.layers import draw_layer_effects

            draw_layer_effects(self.verdicts(removal=name), path, title=f"{name} removal, {self.info.get('model')}")
        return Figure(path)

    def recorded_model(self) -> dict[str, Any] | None:
        """The fingerprint of the model the sweep ran on, as its files record it."""
        return next(iter(self.sweeps.values())).meta.get("model")

    def table(self) -> str:
        """The verdicts as text: one line per layer with its interval."""
        v = self.verdicts()
        cols = [c for c in ("layer", "mean_effect", "ci_low", "ci_high", "verdict") if c in v.frame.columns]
        return v.frame[cols].to_string(index=False, float_format=lambda x: f"{x:+.4f}")

    def __str__(self) -> str:
        v = self.verdicts()
        return (
            f"{self.info.get('kind')} sweep of {self.info.get('model')} on {self.info.get('n_rows')} rows "
            f"({', '.join(self.removals)}); harmful {v.harmful}, useful {v.useful}\n{self.table()}"
        )


def sweep(
    model: Model | str,
    task: Any,
    config: SweepConfig | None = None,
    *,
    out: str | Path | None = None,
    overwrite: bool = False,
    **settings: Any,
) -> Sweep:
    """Sweep every layer of ``model`` on ``task`` and judge each (PragWorld §6.2's MLP zero-out and
    the removals of :doc:`/concepts/interventions`; verdicts of :doc:`/concepts/verdicts`).

    ``config`` or keyword ``settings`` (the fields of :class:`SweepConfig`: ``removals``,
    ``layers``, ``metric``, ``method``, ``batch_size``, ``folds``, ``seed``, ``rule`` …), all
    checked before anything runs. ``out``: the folder to write (``interp sweep``'s files); default
    a fresh temporary folder (:meth:`Sweep.save` copies it). Finished units are written as they go:
    the same call into the same ``out`` resumes (:doc:`/guides/resuming`); a folder of another
    config or model is refused naming the difference, unless ``overwrite``."""
    config = (config or SweepConfig()).with_(**settings) if settings else (config or SweepConfig())
    m = as_model(model)
    if config.layers is not None:
        bad = [x for x in config.layers if x >= m.n_layers]
        if bad:
            raise ValueError(
                f"layer {bad[0]} is out of range: {m.name} has {m.n_layers} layers (valid: 0..{m.n_layers - 1})"
            )
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="interp-sweep-"))
    extra: dict[str, Any] = {
        "config": config.to_dict(),  # as asked ("auto" stays auto: a rerun chooses again, alike)
        "task": describe_task(task),
        "provenance": provenance(model=m.fingerprint(), seed=config.seed),
    }
    if config.method == "auto":  # the strategy from the task's rows
        # every built-in metric of a contrast or yes/no task reads each row's last position only
        packable = isinstance(task, (ContrastTask, YesNoTask))
        rows = task.ids if packable else []
        method, why = choose_method(rows, config.removals, kind=config.kind, reads_last=packable)
        config, extra["method_choice"] = config.with_(method=method), why
    with attention(m.bridge, config.attention):
        run = _run(m, task, config, folder, extra, overwrite)
    sweeps = run.sweeps or {"zero": run.sweep}
    out_sweep = Sweep(sweeps=dict(sweeps), info=json.loads((folder / "run.json").read_text()), folder=folder)
    out_sweep._verdicts[out_sweep.removals[0]] = run.verdicts
    return out_sweep


def _run(m: Model, task: Any, config: SweepConfig, folder: Path, extra: dict[str, Any], overwrite: bool) -> SweepRun:
    from interp.analysis.engines.unitstore import LongRun

    run = run_task_sweep(
        m.source,
        getattr(task, "source", None),
        lambda _: task,
        extra,
        SweepJob.of_config(config, n=None),
        bridge=m.bridge,
        out=folder,
        control=LongRun(overwrite=overwrite),
    )
    assert isinstance(run, SweepRun)  # the layer-sweep kinds return one (patching: interp.patch)
    return run


def read_sweep(folder: Path, info: dict[str, Any]) -> Sweep:
    """The sweep a folder holds (``sweep.csv`` and, for each further removal, ``sweep_<removal>.csv``)."""
    names = info.get("ablation") or ["zero"]
    sweeps = {name: _read_sweep_file(folder, "sweep" if i == 0 else f"sweep_{name}") for i, name in enumerate(names)}
    return Sweep(sweeps=sweeps, info=info, folder=folder)


def _read_sweep_file(folder: Path, stem: str) -> SweepResult:
    csv, meta = folder / f"{stem}.csv", folder / f"{stem}.json"
    if not csv.is_file() or not meta.is_file():
        raise ResultFolderError(f"{folder} has no {stem}.csv / {stem}.json: the sweep's files are incomplete")
    info = json.loads(meta.read_text())
    info.pop("summary", None)
    return SweepResult(pd.read_csv(csv), info)


__all__ = ["Sweep", "read_sweep", "sweep"]
