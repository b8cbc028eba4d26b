"""Regularised fine-tuning (PragWorld §6.3) end to end: the orchestrator behind ``interp finetune``.

:func:`run_finetune` loads a checkpoint and its :class:`~interp.train.finetune_data.Task`, builds
the objective of each run — ``plain`` (next-token loss only), ``hls`` or ``ula``
(:mod:`interp.train.regularisers`) — fine-tunes a copy of the model per (objective, seed) with the
one training loop, :func:`interp.train.train` (full fine-tuning, or LoRA through ``peft``; under
``accelerate`` with N processes, see :mod:`interp.train.trainer`), evaluates the model before and
every fine-tuned model after (:func:`interp.analysis.evaluation.finetune.evaluate`), and writes one table
(:mod:`interp.stats`) and one figure (:func:`interp.viz.finetune.draw_finetune`). Its settings:
:class:`interp.config.FinetuneConfig`.

Outputs (``out/``, default ``runs/finetune/<name>``): ``<objective>_s<seed>/model/`` (the
fine-tuned checkpoint; ULA adds ``ula_heads.safetensors`` + ``ula_heads.json``),
``<objective>_s<seed>/train_log.csv``, ``eval_<model>.json``, ``finetune_table.csv`` (long:
metric × model × seed), ``finetune_table.md`` (wide: before vs after per objective, mean over
seeds with a 95 % interval), ``finetune.png`` and ``results.json``.

**Caching and resumption.** A finished run (its model and ``train.json`` present with the same
settings) is not retrained. An interrupted one (Ctrl-C, a killed process) resumes mid-run from
``<objective>_s<seed>/last`` — model, ULA heads, optimizer, step, RNG — when rerun with the same
settings, and ends with the weights of an uninterrupted run; that state is removed once the run's
model is saved. ``fresh=True`` retrains and re-evaluates everything.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from interp.config import (
    ConfigError,
    FinetuneConfig,
    LoraSettings,
    RegulariserConfig,
    load_finetune_config,
    to_dict,
)
from interp.config.flags import run_record
from interp.train.finetune_data import Task, load_task


def train_placement(cfg: FinetuneConfig) -> Any:
    """Where the model to fine-tune is loaded (:class:`interp.models.device.Placement`): on the CPU
    in ``cfg.dtype`` (``auto`` resolved for ``cfg.device``), for accelerate to move to its device;
    or spread over devices by ``cfg.device_map`` / ``cfg.n_devices``."""
    from interp.models.device import Placement, resolve_device, resolve_dtype

    if cfg.device_map is not None or (cfg.n_devices or 1) > 1:
        return Placement.resolve(None, cfg.dtype, cfg.device_map, cfg.n_devices)
    return Placement("cpu", resolve_dtype(cfg.dtype, resolve_device(cfg.device)))


def eval_placement(cfg: FinetuneConfig, device: Any) -> Any:
    """Where the evaluation before and after fine-tuning loads the model: where it trains. A device
    map (or ``n_devices``) is kept as is; otherwise the training process's device (``device``:
    the accelerator's) in the training dtype."""
    from interp.models.device import Placement

    train = train_placement(cfg)
    return train if train.mapped else Placement(str(device), train.dtype)


# ---- objectives, layers, LoRA ------------------------------------------------------------------


def resolve_layers(cfg: RegulariserConfig, objective: str, n_layers: int, bridge: Any | None = None) -> list[int]:
    """The layers of ``objective`` (``hls``: harmful, ``ula``: useful) from the explicit list or the
    verdict file of the removal ``cfg.ablation`` (default zero, the paper's); errors name the problem (out of range, empty with a nonzero weight, a verdict
    file of another model)."""
    from interp.train.regularisers import check_layers, layers_from_verdicts

    which, explicit, weight = (
        ("harmful", cfg.harmful, cfg.beta) if objective == "hls" else ("useful", cfg.useful, cfg.alpha)
    )
    what = f"regulariser.{which} ({objective.upper()})"
    if explicit is not None:
        return check_layers(explicit, n_layers, what, weight)
    if cfg.verdicts is None:
        raise ConfigError(f"{objective}: give regulariser.{which} = [layers] or regulariser.verdicts = a verdict file")
    layers = layers_from_verdicts(cfg.verdicts, which, bridge=bridge, n_layers=n_layers, ablation=cfg.ablation)
    return check_layers(layers, n_layers, f"{what} from {cfg.verdicts}", weight)


def build_terms(
    objective: str, cfg: RegulariserConfig, layers: list[int], task: Task, d_model: int, seed: int
) -> list[Any]:
    """The loss terms of ``objective``: none (plain), HLS on ``layers``, or ULA with fresh heads
    (initialised from ``seed`` alone) on ``layers``."""
    from interp.train.regularisers import HLS, ULA, ULAHeads

    if objective == "plain":
        return []
    if objective == "hls":
        return [HLS(layers, cfg.beta, reduction=cfg.hls_reduction)]
    heads = ULAHeads(layers, d_model, task.classes, hidden=cfg.head_hidden, seed=seed, task=task.label_name)
    return [ULA(heads, cfg.alpha)]


def _apply_lora(model: nn.Module, lora: LoraSettings) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("lora.enabled needs peft: pip install 'interp[lora]'") from None
    kwargs: dict[str, Any] = {
        "r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "task_type": "CAUSAL_LM",
    }
    if lora.target_modules:
        kwargs["target_modules"] = list(lora.target_modules)
    return get_peft_model(model, LoraConfig(**kwargs))


def _merged(model: nn.Module) -> nn.Module:
    # a peft model: torch types an nn.Module's unknown attributes as Tensor | Module
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model  # type: ignore[operator]


# ---- the run ------------------------------------------------------------------------------------


@dataclass
class FinetuneReport:
    """What :func:`run_finetune` wrote in ``out``: the long ``table`` (metric × model × seed), the
    ``wide`` summary (:func:`interp.stats.summarise`), the figure and ``results.json``'s ``info``."""

    out: Path
    table: pd.DataFrame
    wide: pd.DataFrame
    figure: Path | None
    info: dict[str, Any] = field(default_factory=dict)

    def markdown(self) -> str:
        from interp.stats import markdown_table

        return markdown_table(self.wide)


def _settings(cfg: FinetuneConfig, objective: str, seed: int, layers: list[int]) -> dict[str, Any]:
    settings = {
        "checkpoint": str(Path(cfg.checkpoint).resolve()),
        "objective": objective,
        "seed": seed,
        "layers": layers,
        "data": to_dict(cfg.data),
        "regulariser": to_dict(cfg.regulariser),
        "lora": to_dict(cfg.lora),
        "train": asdict(replace(cfg.train, seed=seed)),
    }
    return json.loads(json.dumps(settings))  # as read back from train.json (tuples → lists)


def run_finetune(
    cfg: FinetuneConfig,
    *,
    fresh: bool = False,
    progress: bool = True,
    accelerator: Any = None,
    log: Callable[[str], Any] | None = None,
) -> FinetuneReport | None:
    """Fine-tune and evaluate every (objective, seed) of ``cfg``; the report on the main process
    (None on the others). Stages: the layers of each objective (:func:`_objective_layers`), the
    model before, then each run trained (resumed or skipped when finished: :meth:`_Run.train`) and
    evaluated, then the table, figure and ``results.json`` (:meth:`_Run.report`)."""
    from interp.models.checkpoint import check_folder, hf_dims, local_model
    from interp.models.parallel import make_accelerator
    from interp.results import write_json

    acc = accelerator or make_accelerator(cfg.device)
    placement = train_placement(cfg)
    if placement.mapped and acc.num_processes > 1:
        what = f"device_map = {cfg.device_map!r}" if cfg.device_map is not None else f"n_devices = {cfg.n_devices}"
        raise ConfigError(
            f"{what} places one model over several devices; it needs one process, not {acc.num_processes}"
        )
    main = acc.is_main_process
    say = (log or (lambda s: print(s, file=sys.stderr))) if main else (lambda s: None)
    ckpt = Path(local_model(cfg.checkpoint))  # a .gguf: its converted folder
    check_folder(ckpt)
    n_layers, d_model = hf_dims(ckpt)
    task = load_task(ckpt, cfg.data)
    say(
        f"fine-tuning {ckpt} ({n_layers} layers, d_model {d_model}) on {task.kind} data: {len(task.train_ids)} "
        f"training rows from {task.source.get('train')}; {len(task.eval_ids)} held-out rows; "
        f"{acc.num_processes} process(es) on {acc.device}"
    )
    # evaluation (and the verdict check) load where training runs
    run = _Run(cfg, task, ckpt, d_model, placement, eval_placement(cfg, acc.device), acc, fresh, progress, say)
    layers = _objective_layers(cfg, ckpt, n_layers, run)
    if main:
        cfg.out_dir.mkdir(parents=True, exist_ok=True)
        write_json(cfg.out_dir / "run.json", run_record(cfg))  # FinetuneConfig.from_run reads it back
        say("evaluating the model before fine-tuning …")
        run.evaluate("before", None, cfg.out_dir / "eval_before.json", ckpt, fresh)
    for objective in cfg.objectives:
        for seed in cfg.seeds:
            run_dir = cfg.out_dir / f"{objective}_s{seed}"
            finished = run.train(objective, seed, layers[objective], run_dir)
            if main:
                say(f"evaluating {objective} seed {seed} …")
                run.evaluate(objective, seed, run_dir / "eval.json", run_dir / "model", fresh or not finished)
                run.runs_info.append(
                    {"objective": objective, "seed": seed, "dir": str(run_dir), "layers": layers[objective]}
                )
    return run.report(layers) if main else None


def _objective_layers(cfg: FinetuneConfig, ckpt: Path, n_layers: int, run: _Run) -> dict[str, list[int]]:
    """The layers each objective acts on; every process checks the ranges, the main one also the
    verdict file's fingerprint; an error is shared with the other processes so none waits forever."""
    from interp.models.checkpoint import load_bridge
    from interp.models.parallel import gather

    error = ""
    layers: dict[str, list[int]] = {}
    bridge = None
    try:
        if run.main and cfg.regulariser.verdicts is not None and any(o != "plain" for o in cfg.objectives):
            bridge = load_bridge(ckpt, placement=run.at)
        for objective in cfg.objectives:
            layers[objective] = (
                [] if objective == "plain" else resolve_layers(cfg.regulariser, objective, n_layers, bridge)
            )
    except Exception as e:  # shared with the other processes so none waits forever
        error = f"{type(e).__name__}: {e}"
        if run.acc.num_processes == 1:
            raise
    errors = [x for x in gather([error], run.acc) if x]
    if errors:
        raise ConfigError(errors[0])
    return layers


@dataclass
class _Run:
    """One :func:`run_finetune`'s shared state: what every (objective, seed) trains and is judged
    with, and the rows gathered so far."""

    cfg: FinetuneConfig
    task: Task
    ckpt: Path
    d_model: int
    placement: Any  # where training loads the model
    at: Any  # where evaluation loads it
    acc: Any
    fresh: bool
    progress: bool
    say: Callable[[str], Any]
    table_rows: list[dict[str, Any]] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    runs_info: list[dict[str, Any]] = field(default_factory=list)

    @property
    def main(self) -> bool:
        return bool(self.acc.is_main_process)

    def train(self, objective: str, seed: int, layers: list[int], run_dir: Path) -> bool:
        """Fine-tune one (objective, seed) into ``run_dir/model`` — resumed from ``last/`` when
        interrupted, skipped when finished with the same settings. Returns whether it was finished."""
        import torch

        from interp.models.checkpoint import load_hf_model
        from interp.results import write_json
        from interp.train.regularisers import describe_terms
        from interp.train.trainer import saved_run_info, train

        cfg, task, say = self.cfg, self.task, self.say
        model_dir, done_file = run_dir / "model", run_dir / "train.json"
        settings = _settings(cfg, objective, seed, layers)
        finished = (
            not self.fresh
            and done_file.is_file()
            and (model_dir / "config.json").is_file()
            and json.loads(done_file.read_text()).get("settings") == settings
        )
        if finished:
            say(f"{objective} seed {seed}: already fine-tuned in {run_dir}, not retrained")
            return True
        torch.manual_seed(seed)
        model = load_hf_model(self.ckpt, self.placement)
        if cfg.lora.enabled:
            model = _apply_lora(model, cfg.lora)
        terms = build_terms(objective, cfg.regulariser, layers, task, self.d_model, seed)
        for line in describe_terms(terms, model):
            say(f"  {line}")
        resume = not self.fresh and saved_run_info(run_dir) == settings
        if resume:
            say(f"{objective} seed {seed}: resuming the interrupted run in {run_dir / 'last'}")
        t0 = time.perf_counter()
        # the log's held-out loss: world sequences only (QA held-out rows are bare prompts;
        # their evaluation is the PragWorld accuracies below, not a loss on prompt tokens)
        result = train(
            model,
            task.train_ids,
            task.eval_ids if task.kind == "world" else None,
            replace(cfg.train, seed=seed),
            run_dir,
            pad_id=task.pad_id,
            loss_terms=terms,
            labels=task.labels,
            loss_from=task.loss_from,
            accelerator=self.acc,
            resume=resume,
            progress=self.progress,
            run_info=settings,
        )
        seconds = time.perf_counter() - t0
        self.acc.wait_for_everyone()
        if self.main:
            task.save_model(_merged(model), model_dir)
            for t in terms:
                if hasattr(t, "heads"):
                    t.heads.save(model_dir)
            hist = result.history
            last = hist.iloc[-1].to_dict() if len(hist) else {}
            record = {"settings": settings, "seconds": round(seconds, 2), "last": last}
            write_json(done_file, {**record, "processes": int(self.acc.num_processes)})
            shutil.rmtree(run_dir / "last")  # the resumable state: the run is complete
            say(
                f"{objective} seed {seed}: {cfg.train.steps} steps in {seconds:.1f} s; last: "
                + ", ".join(f"{k} {v:.4g}" for k, v in last.items() if k not in ("step", "loss", "lr", "elapsed_s"))
            )
        self.acc.wait_for_everyone()
        return False

    def evaluate(self, name: str, seed: int | None, cache: Path, model_dir: Path, fresh: bool) -> None:
        """The evaluation suite of one model (cached in ``cache``), its rows added as ``name`` / ``seed``."""
        sweep_layers = list(self.cfg.eval.sweep_layers) if self.cfg.eval.sweep_layers else None
        rows, extra = _cached_eval(cache, model_dir, self.task, self.cfg, sweep_layers, fresh, self.say, self.at)
        self.table_rows += [{**r, "model": name, "seed": seed} for r in rows]
        self.extras[name if seed is None else f"{name}_s{seed}"] = extra

    def report(self, layers: dict[str, list[int]]) -> FinetuneReport:
        """The table (``finetune_table.csv`` / ``.md``), the figure and ``results.json``."""
        from interp.results import write_json
        from interp.stats import markdown_table, summarise
        from interp.viz.finetune import draw_finetune

        cfg, out = self.cfg, self.cfg.out_dir
        focus = {x: "H" for x in layers.get("hls", [])}
        for x in layers.get("ula", []):
            focus[x] = focus.get(x, "") + "U"
        table = pd.DataFrame(
            self.table_rows, columns=["model", "seed", "metric", "layer", "value", "se", "ci_low", "ci_high", "n"]
        )
        table.to_csv(out / "finetune_table.csv", index=False)
        wide = summarise(table, list(cfg.objectives))
        (out / "finetune_table.md").write_text(markdown_table(wide) + "\n")
        figure = draw_finetune(
            table,
            list(cfg.objectives),
            out / "finetune.png",
            focus=focus,
            title=f"{cfg.name}: {', '.join(cfg.objectives)} × {len(cfg.seeds)} seed(s), {cfg.train.steps} steps",
        )
        info = {
            "config": to_dict(cfg),
            "layers": layers,
            "task": self.task.kind,
            "source": self.task.source,
            "processes": int(self.acc.num_processes),
            "runs": self.runs_info,
            "evaluations": self.extras,
            "summary": wide.to_dict(orient="records"),
        }
        write_json(out / "results.json", info)
        return FinetuneReport(out, table, wide, figure, info)


def _cached_eval(
    path: Path,
    model: Path,
    task: Task,
    cfg: FinetuneConfig,
    sweep_layers: Any,
    fresh: bool,
    say: Callable[[str], Any],
    placement: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evaluate on ``placement``, or reuse ``path`` when it was written with the same evaluation
    settings and placement."""
    from interp.analysis.evaluation.finetune import evaluate
    from interp.results import write_json

    key = {"eval": to_dict(cfg.eval), "data": to_dict(cfg.data), "model": str(model.resolve())}
    where = placement.record() if placement is not None else None
    if where is not None:  # absent for the CPU float32 default: files written before stay valid
        key["placement"] = where
    key = json.loads(json.dumps(key))
    if not fresh and path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved["rows"], saved["extra"]
    rows, extra = evaluate(model, task, cfg.eval, sweep_layers, log=say, placement=placement)
    write_json(path, {"key": key, "rows": rows, "extra": extra})
    return rows, extra


# ---- processes ---------------------------------------------------------------------------------


def finetune_worker(config_path: str, fresh: bool, progress: bool) -> None:
    """Entry point of one process of ``interp finetune --processes N``."""
    run_finetune(load_finetune_config(config_path), fresh=fresh, progress=progress)


__all__ = ["FinetuneReport", "build_terms", "eval_placement", "resolve_layers", "run_finetune", "train_placement"]
