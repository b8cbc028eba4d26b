"""Regularised fine-tuning (PragWorld §6.3) end to end: the code behind ``interp finetune``.

:func:`run_finetune` loads a checkpoint, builds the objective of each run — ``plain`` (next-token
loss only), ``hls`` or ``ula`` (:mod:`interp.train.regularisers`) — fine-tunes a copy of the model
per (objective, seed) with :func:`finetune_model` (full fine-tuning, or LoRA through ``peft``),
evaluates the model before and every fine-tuned model after, and writes one table and one figure.

The data is either

- ``world`` sequences (any interp checkpoint): the run's ``data/train.txt`` / ``data/test.txt``
  beside the checkpoint by default; ULA labels are the world's current-state label at each row's
  last input position; the evaluation is the held-out next-token loss, the next-token test, the
  mean squared MLP output per layer (what HLS pushes down), the MLP zero-out layer sweep with
  bootstrap intervals (the regularised layers' effect should shrink), and the Myhill–Nerode metrics;
  for the ``dialogue`` world, ULA's label is the probe's gold answer and the evaluation adds the
  QA accuracy at the answer position on the held-out probes and PragWorld accuracies on a
  generated benchmark (``eval.qa``, ``eval.qa_groups``);
- ``pragworld`` QA rows (a user's HF model with its own tokenizer): each row asked exactly as
  ``interp sweep`` and ``interp pragworld eval --prompt label`` ask it
  (:class:`interp.tasks.YesNoTask`: the label prompt ending in ``Label:``, the model's own BOS
  rule), followed by the gold answer's token; the next-token loss is on that answer token only
  (``data.loss_on = "answer"``, the default: supervised fine-tuning with the prompt masked, as the
  reference's LLaMA-Factory SFT ran it) or on every token (``"all"``); the regularisers see every
  real token either way. ULA labels are the gold; the evaluation is the PragWorld accuracies
  (robust / yes / no / …, :func:`interp.metrics.pragworld.score_pragworld`) on the held-out
  alterations, the layer sweep with the two-way P(gold) metric, and the mean squared MLP output.

**Data parallelism.** :func:`finetune_model` runs under ``accelerate`` (see
:mod:`interp.train.distributed`): every process draws the same global batch for a step (the same
seeded, length-bucketed schedule as :func:`interp.train.train`), keeps its contiguous shard, and
normalises the summed next-token loss and each term's sum by the counts summed over all processes,
so the averaged gradient is the single-process gradient of the global batch: a 2-process run ends
with the weights of a 1-process run (a test checks it). Evaluation runs on the main process.

Outputs (``out/``, default ``runs/finetune/<name>``): ``<objective>_s<seed>/model/`` (the
fine-tuned checkpoint; ULA adds ``ula_heads.safetensors`` + ``ula_heads.json``),
``<objective>_s<seed>/train_log.csv``, ``eval_<model>.json``, ``finetune_table.csv`` (long:
metric × model × seed), ``finetune_table.md`` (wide: before vs after per objective, mean over
seeds with a 95 % interval), ``finetune.png`` and ``results.json``. A finished run (its model and
``train.json`` present with the same settings) is not retrained.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from interp.config import ConfigError, load_toml, to_dict
from interp.train.trainer import TrainConfig

OBJECTIVES = ("plain", "hls", "ula")


# ---- config ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FinetuneData:
    #: ``world``: token sequences of the checkpoint's world; ``pragworld``: yes/no QA rows (CSV)
    kind: Literal["world", "pragworld"] = "world"
    #: world: a sequence file (default ``<checkpoint>/../data/train.txt``); pragworld: a CSV
    train: str | None = None
    #: world: held-out sequences (default ``<checkpoint>/../data/test.txt``); pragworld: a CSV of
    #: held-out alterations
    test: str | None = None
    #: at most this many training rows (0: all)
    n_train: int = 0
    #: at most this many held-out rows in every evaluation (0: all)
    n_eval: int = 200
    #: pragworld: the next-token loss on the gold ``answer`` token only (the default: supervised
    #: fine-tuning as the reference ran it, prompt masked) or on ``all`` tokens of prompt + answer;
    #: world data always trains on every token (unset or ``"all"``)
    loss_on: Literal["answer", "all"] | None = None
    #: pragworld: BOS as the model's tokenizer adds it (unset), always (true) or never (false);
    #: see :mod:`interp.tasks.tokens`
    prepend_bos: bool | None = None

    def __post_init__(self) -> None:
        if self.loss_on not in (None, "answer", "all"):
            raise ValueError(f"data.loss_on must be 'answer' or 'all', got {self.loss_on!r}")
        if self.kind == "world" and self.loss_on == "answer":
            raise ValueError("data.loss_on = 'answer' needs pragworld data (world sequences have no answer "
                             "token): use 'all' or leave it unset")
        if self.kind == "world" and self.prepend_bos is not None:
            raise ValueError("data.prepend_bos applies to pragworld data (world sequences always start with <bos>)")


@dataclass(frozen=True)
class RegulariserConfig:
    #: HLS layers (explicit); or take the verdict file's ``harmful`` list
    harmful: tuple[int, ...] | None = None
    #: ULA layers (explicit); or take the verdict file's ``useful`` list
    useful: tuple[int, ...] | None = None
    #: a verdict file of ``interp sweep`` (``verdicts.json``), checked against the model
    verdicts: str | None = None
    #: HLS weight: β · Σ over the harmful layers of each layer's mean squared MLP output (paper §6.3)
    beta: float = 1e-3
    #: ``"sum"`` over the harmful layers (the paper's and the reference code's HLS) or ``"mean"``
    #: (the sum / number of layers)
    hls_reduction: Literal["sum", "mean"] = "sum"
    alpha: float = 1e-3
    #: width of each ULA head's hidden layer
    head_hidden: int = 128


@dataclass(frozen=True)
class LoraSettings:
    """LoRA through ``peft`` (``pip install 'interp[lora]'``); merged into the weights on save."""

    enabled: bool = False
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    #: module names to adapt (empty: peft's default for the architecture)
    target_modules: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinetuneEval:
    next_token: bool = True
    mlp_sq: bool = True
    sweep: bool = True
    #: layers of the sweep (None: all)
    sweep_layers: tuple[int, ...] | None = None
    mn: bool = True
    #: Myhill–Nerode: states / state pairs and suffix depth (the exact estimator's cost grows
    #: fast with the depth: depth 5 on the demo model is ~1.4 s a pair on 2 cores)
    mn_pairs: int = 200
    mn_depth: int = 3
    n_boot: int = 1000
    seed: int = 0
    #: dialogue-world checkpoints: QA accuracy at the answer position (two-way yes/no softmax) on
    #: every probe of the held-out file (all of it, not capped by ``data.n_eval``), and the
    #: PragWorld accuracies on a generated benchmark of ``qa_groups`` groups (0: none) drawn with
    #: ``qa_bench_seed``
    qa: bool = True
    qa_groups: int = 200
    qa_bench_seed: int = 1000


@dataclass(frozen=True)
class FinetuneConfig:
    name: str = "finetune"
    #: the checkpoint to fine-tune (relative paths: from the current directory)
    checkpoint: str = "runs/demo/best"
    #: output folder (default ``runs/finetune/<name>``)
    out: str | None = None
    objectives: tuple[str, ...] = ("hls",)
    seeds: tuple[int, ...] = (0,)
    #: where the model trains (one device; a device map is ``device_map``): ``auto`` (CUDA, then
    #: MPS, then the CPU), ``cpu``, ``cuda``, ``cuda:N`` (that GPU; one process) or ``mps`` — the
    #: names :func:`interp.models.device.resolve_device` accepts, checked against the machine when
    #: the run starts
    device: str = "auto"
    #: parameter dtype of the model being trained: float32 | bfloat16 | float16 | auto (float32 on
    #: CPU, bfloat16 on CUDA when supported)
    dtype: str = "float32"
    #: a Hugging Face device map for a model larger than one GPU (auto, balanced, sequential, or a
    #: JSON {module: device}): accelerate keeps that placement (one process only); the evaluation
    #: before/after loads the model on the same placement
    device_map: str | None = None
    #: split the model evenly over this many CUDA GPUs (``balanced`` with a memory budget on each,
    #: as ``TransformerBridge.boot_transformers``); instead of, or beside, ``device_map``
    n_devices: int | None = None
    data: FinetuneData = field(default_factory=FinetuneData)
    regulariser: RegulariserConfig = field(default_factory=RegulariserConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        steps=200, batch_size=32, lr=3e-4, min_lr=3e-5, warmup_steps=20, eval_every=0, checkpoint_every=0))
    eval: FinetuneEval = field(default_factory=FinetuneEval)

    def __post_init__(self) -> None:
        bad = [o for o in self.objectives if o not in OBJECTIVES]
        if bad or not self.objectives:
            raise ValueError(f"objectives must be among {OBJECTIVES}, got {list(self.objectives)}")
        if not self.seeds:
            raise ValueError("seeds: give at least one seed")
        if self.n_devices is not None and self.n_devices < 1:
            raise ValueError(f"n_devices must be >= 1, got {self.n_devices}")
        if not re.fullmatch(r"auto|(cpu|cuda|mps)(:\d+)?", self.device):
            raise ValueError(f"device must be one of auto, cpu, cuda, mps or cuda:N, got {self.device!r}")

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else Path("runs") / "finetune" / self.name


def load_finetune_config(path: str | Path) -> FinetuneConfig:
    return load_toml(FinetuneConfig, path)


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


# ---- tasks: what is trained on and how it is evaluated ----------------------------------------


@dataclass
class Task:
    """Training rows (token ids, one ULA label per row), and what evaluation needs."""

    kind: str
    train_ids: Tensor
    labels: Tensor
    classes: tuple[str, ...]
    pad_id: int
    eval_ids: Tensor
    world: Any = None
    eval_sequences: list[list[str]] | None = None
    qa: dict[str, Any] | None = None
    source: dict[str, str] = field(default_factory=dict)
    #: what ULA's labels are (names the heads' task)
    label_name: str = "yes/no gold"
    #: world data: every held-out sequence (uncapped; dialogue QA accuracy reads them)
    heldout_sequences: list[list[str]] | None = None
    #: dialogue QA benchmarks already drawn, by (groups, seed)
    benchmarks: dict[Any, Any] = field(default_factory=dict)
    #: per training row, the first token position the next-token loss counts (the answer's);
    #: None: every token
    loss_from: Tensor | None = None

    def save_model(self, model: nn.Module, path: Path) -> Path:
        if self.world is not None:
            from interp.models.checkpoint import save_checkpoint

            return save_checkpoint(model, self.world, path)
        model.save_pretrained(path, safe_serialization=True)
        self.qa["tokenizer"].save_pretrained(path)
        return path


def _cap(items: Any, n: int) -> Any:
    return items if n <= 0 else items[:n]


def world_task(checkpoint: Path, data: FinetuneData) -> Task:
    """Sequences of the checkpoint's world; labels: the current state at each row's last position
    (the dialogue world: the gold answer there, :func:`~interp.train.regularisers.ula_labels`)."""
    from interp.models.checkpoint import read_meta, run_data_dir
    from interp.worlds.encoding import encode_sequences
    from interp.train.regularisers import LabelCoding, ula_labels
    from interp.worlds import world_from_spec
    from interp.worlds.io import read_sequences

    meta = read_meta(checkpoint)
    if meta is None:
        raise ConfigError(f"{checkpoint} carries no world (no interp.json): world data needs an interp checkpoint")
    world = world_from_spec(meta["world"])
    train_path = Path(data.train) if data.train else run_data_dir(checkpoint) / "train.txt"
    test_path = Path(data.test) if data.test else run_data_dir(checkpoint) / "test.txt"
    for what, p in (("train", train_path), ("test", test_path)):
        if not p.is_file():
            raise FileNotFoundError(f"data.{what}: {p} does not exist (give data.{what} = a sequence file)")
    train = _cap(read_sequences(train_path, world), data.n_train)
    heldout = read_sequences(test_path, world)
    test = _cap(heldout, data.n_eval)
    config = json.loads((checkpoint / "config.json").read_text())
    n_ctx = config.get("n_positions") or config.get("max_position_embeddings")
    raw, label_name = ula_labels(world, train)
    coding = LabelCoding.fit(raw)
    return Task(kind="world", train_ids=encode_sequences(train, world.vocab, n_ctx), labels=coding.encode(raw),
                classes=coding.classes, pad_id=world.vocab.pad_id,
                eval_ids=encode_sequences(test, world.vocab, n_ctx), world=world, eval_sequences=test,
                source={"train": str(train_path), "test": str(test_path)}, label_name=label_name,
                heldout_sequences=heldout)


def _unused_id(rows: list[list[int]], preferred: int | None, vocab_size: int) -> int:
    used = {t for r in rows for t in r}
    if preferred is not None and preferred not in used:
        return int(preferred)
    for i in range(vocab_size):
        if i not in used:
            return i
    raise ValueError("every token id occurs in the data: no id is free to mark padding")


def _whole_groups(rows: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first groups of ``rows`` that fit in ``n`` rows (0: all): robust accuracy needs whole groups."""
    if n <= 0 or len(rows) <= n:
        return rows.reset_index(drop=True)
    sizes = rows.groupby("group", sort=False).size()
    keep = sizes.index[sizes.cumsum() <= n]
    if not len(keep):
        keep = sizes.index[:1]
    return rows[rows["group"].isin(set(keep))].reset_index(drop=True)


def pragworld_task(checkpoint: Path, data: FinetuneData) -> Task:
    """PragWorld rows asked as everywhere else (:class:`interp.tasks.YesNoTask`: the label prompt,
    the model's own tokenizer settings); trained on prompt + gold answer token, with the loss on
    the answer (``data.loss_on = "answer"``, the default) or on every token (``"all"``)."""
    from interp.benchmarks.pragworld import load_pragworld
    from interp.tasks import YesNoTask

    if not data.train or not data.test:
        raise ConfigError("pragworld data needs data.train and data.test (CSV files)")
    train_rows = _cap(load_pragworld(data.train).rows, data.n_train)
    test_rows = _whole_groups(load_pragworld(data.test).rows, data.n_eval)
    train = YesNoTask.pragworld(checkpoint, train_rows, prompt="label", prepend_bos=data.prepend_bos)
    test = YesNoTask.pragworld(checkpoint, test_rows, prompt="label", prepend_bos=data.prepend_bos,
                               tokenizer=train.tokenization.tokenizer)
    tr, answer_start = train.training_rows()
    te = test.ids
    config = json.loads((checkpoint / "config.json").read_text())
    pad = _unused_id(tr + te, train.pad_id, int(config["vocab_size"]))

    def pad_rows(rows: list[list[int]]) -> Tensor:
        width = max(len(r) for r in rows)
        t = torch.full((len(rows), width), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            t[i, : len(r)] = torch.tensor(r)
        return t

    loss_on = data.loss_on or "answer"
    return Task(kind="pragworld", train_ids=pad_rows(tr), labels=torch.tensor(train.gold, dtype=torch.long),
                classes=("no", "yes"), pad_id=pad, eval_ids=pad_rows(te),
                qa={"tokenizer": train.tokenization.tokenizer, "yes_id": train.yes_id, "no_id": train.no_id,
                    "rows": test.rows, "task": test},
                source={"train": str(data.train), "test": str(data.test)},
                loss_from=torch.tensor(answer_start, dtype=torch.long) if loss_on == "answer" else None)


def load_task(checkpoint: Path, data: FinetuneData) -> Task:
    return world_task(checkpoint, data) if data.kind == "world" else pragworld_task(checkpoint, data)


# ---- the objective and the loop ----------------------------------------------------------------


class Objective(nn.Module):
    """The model and its loss terms in one module, so data parallelism sees (and synchronises)
    every trained parameter, the ULA heads included. ``forward`` returns the *summed* next-token
    loss, the number of scored tokens, and each term's ``(sum, count)``."""

    def __init__(self, model: nn.Module, terms: Sequence[Any] = ()):
        super().__init__()
        self.model = model
        self.terms = list(terms)
        self.term_modules = nn.ModuleList([t for t in self.terms if isinstance(t, nn.Module)])

    def forward(self, inputs: Tensor, targets: Tensor, labels: Tensor,
                loss_targets: Tensor | None = None) -> tuple[Tensor, ...]:
        """``loss_targets``: the targets the next-token loss counts (e.g. the answer only), when
        they differ from ``targets`` (every real token: what the terms see)."""
        from interp.train.regularisers import LabelledBatch

        out = self.model(inputs)
        logits = out if isinstance(out, Tensor) else out.logits
        scored = targets if loss_targets is None else loss_targets
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), scored.reshape(-1),
                             ignore_index=-100, reduction="sum")
        batch = LabelledBatch(inputs=inputs, targets=targets, labels=labels)
        parts: list[Tensor] = [ce, (scored != -100).sum().to(torch.float32)]
        for term in self.terms:
            parts.extend(term.partial(batch))
        return tuple(parts)


def finetune_model(
    model: nn.Module,
    train_ids: Tensor,
    cfg: TrainConfig,
    *,
    terms: Sequence[Any] = (),
    labels: Tensor | None = None,
    pad_id: int = 0,
    accelerator: Any = None,
    eval_ids: Tensor | None = None,
    progress: bool = True,
    loss_from: Tensor | None = None,
) -> pd.DataFrame:
    """Fine-tune ``model`` (an HF causal LM, or a peft model) in place; returns the log.

    ``terms``: :class:`~interp.train.regularisers.HLS` / :class:`~interp.train.regularisers.ULA`
    objects (the ULA heads train with the model). ``labels``: one class id per row of
    ``train_ids`` (ULA). Batches, learning-rate schedule, optimizer (fused AdamW, decay on ≥2-D
    parameters), clipping: as :func:`interp.train.train`. With ``accelerator`` running N processes,
    each computes its shard of every global batch (see the module docstring). ``loss_from``: per
    row, the first token the next-token loss counts (the answer of a QA row); the regularisers
    still see every real token.
    """
    from tqdm.auto import tqdm

    from interp.train.data import LengthBucketedBatches, batch_indices, make_batch
    from interp.train.distributed import all_sum, make_accelerator, shard
    from interp.train.trainer import evaluate_loss, learning_rate, make_optimizer

    acc = accelerator or make_accelerator()
    size = int(acc.num_processes)
    if cfg.batch_size < size:
        raise ValueError(f"train.batch_size ({cfg.batch_size}) must be ≥ the number of processes ({size})")
    if labels is None:
        if any(getattr(t, "name", "") == "ula" for t in terms):
            raise ValueError("ULA needs labels: one class id per training row")
        labels = torch.full((len(train_ids),), -100, dtype=torch.long)
    if len(labels) != len(train_ids):
        raise ValueError(f"{len(labels)} labels for {len(train_ids)} training rows")
    if loss_from is not None and len(loss_from) != len(train_ids):
        raise ValueError(f"{len(loss_from)} loss_from entries for {len(train_ids)} training rows")
    objective = Objective(model, terms)
    opt = make_optimizer(objective, cfg)
    with contextlib.ExitStack() as stack:
        for term in terms:
            stack.enter_context(term.install(model))
        wrapped, opt = acc.prepare(objective, opt)
        if cfg.length_bucketing:
            rows_at = LengthBucketedBatches((train_ids != pad_id).sum(dim=1), cfg.batch_size, cfg.seed)
        else:
            def rows_at(step: int) -> Tensor:
                return batch_indices(len(train_ids), cfg.batch_size, cfg.seed, step)
        device = acc.device
        params = [p for p in objective.parameters() if p.requires_grad]
        weights = [float(t.weight) for t in terms]
        history: list[dict[str, Any]] = []
        wrapped.train()
        t0, tokens = time.perf_counter(), 0
        bar = tqdm(total=cfg.steps, disable=not (progress and acc.is_main_process), desc="finetune", unit="step",
                   dynamic_ncols=True)
        for step in range(cfg.steps):
            rows = shard(rows_at(step), acc)
            batch = make_batch(train_ids[rows], pad_id)
            lr = learning_rate(cfg, step)
            for g in opt.param_groups:
                g["lr"] = lr
            scored = None
            if loss_from is not None:  # input position p predicts token p + 1: keep p + 1 >= loss_from
                pos = torch.arange(batch.targets.shape[1])[None]
                scored = batch.targets.masked_fill(pos + 1 < loss_from[rows][:, None], -100).to(device)
            parts = wrapped(batch.inputs.to(device), batch.targets.to(device), labels[rows].to(device), scored)
            counts = all_sum(torch.stack([parts[1]] + [parts[3 + 2 * i] for i in range(len(terms))]), acc)
            ce = parts[0] / counts[0].clamp(min=1)
            loss = ce
            values = {}
            for i, (term, w) in enumerate(zip(terms, weights)):
                value = parts[2 + 2 * i] / counts[1 + i].clamp(min=1)
                values[term.name] = value
                loss = loss + w * value
            opt.zero_grad(set_to_none=True)
            acc.backward(loss * size)  # DDP averages gradients over the processes: undo the 1/size
            if cfg.grad_clip > 0:
                acc.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            tokens += int(counts[0])
            done = step + 1
            if done % 10 == 0 or done == cfg.steps:
                # each process holds its share of the global means (normalised by global counts)
                reduced = all_sum(torch.stack([ce.detach()] + [v.detach() for v in values.values()]), acc)
                elapsed = time.perf_counter() - t0
                row = {"step": done, "lr": lr, "elapsed_s": elapsed, "tokens_per_s": tokens / max(elapsed, 1e-9),
                       "next_token_loss": float(reduced[0])}
                row.update({k: float(v) for k, v in zip(values, reduced[1:])})
                if eval_ids is not None and acc.is_main_process and (
                        (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps):
                    row["eval_loss"] = evaluate_loss(acc.unwrap_model(wrapped).model, eval_ids.to(device), pad_id)
                history.append(row)
                bar.set_postfix(loss=f"{row['next_token_loss']:.3f}", refresh=False)
            bar.update(1)
        bar.close()
        acc.free_memory()  # drop accelerate's references to this run's model and optimizer
    return pd.DataFrame(history)


# ---- building the runs --------------------------------------------------------------------------


def resolve_layers(cfg: RegulariserConfig, objective: str, n_layers: int, bridge: Any | None = None) -> list[int]:
    """The layers of ``objective`` (``hls``: harmful, ``ula``: useful) from the explicit list or the
    verdict file; errors name the problem (out of range, empty with a nonzero weight, a verdict
    file of another model)."""
    from interp.train.regularisers import check_layers, layers_from_verdicts

    which, explicit, weight = (("harmful", cfg.harmful, cfg.beta) if objective == "hls"
                               else ("useful", cfg.useful, cfg.alpha))
    what = f"regulariser.{which} ({objective.upper()})"
    if explicit is not None:
        return check_layers(explicit, n_layers, what, weight)
    if cfg.verdicts is None:
        raise ConfigError(f"{objective}: give regulariser.{which} = [layers] or regulariser.verdicts = a verdict file")
    layers = layers_from_verdicts(cfg.verdicts, which, bridge=bridge, n_layers=n_layers)
    return check_layers(layers, n_layers, f"{what} from {cfg.verdicts}", weight)


def build_terms(objective: str, cfg: RegulariserConfig, layers: list[int], task: Task, d_model: int,
                seed: int) -> list[Any]:
    from interp.train.regularisers import HLS, ULA, ULAHeads

    if objective == "plain":
        return []
    if objective == "hls":
        return [HLS(layers, cfg.beta, reduction=cfg.hls_reduction)]
    heads = ULAHeads(layers, d_model, task.classes, hidden=cfg.head_hidden, seed=seed,
                     task=task.label_name)
    return [ULA(heads, cfg.alpha)]


def _apply_lora(model: nn.Module, lora: LoraSettings) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("lora.enabled needs peft: pip install 'interp[lora]'") from None
    kwargs: dict[str, Any] = {"r": lora.r, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
                              "task_type": "CAUSAL_LM"}
    if lora.target_modules:
        kwargs["target_modules"] = list(lora.target_modules)
    return get_peft_model(model, LoraConfig(**kwargs))


def _merged(model: nn.Module) -> nn.Module:
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def hf_dims(checkpoint: Path) -> tuple[int, int]:
    """(n_layers, d_model) from an HF config.json."""
    c = json.loads((checkpoint / "config.json").read_text())
    n = c.get("n_layer") or c.get("num_hidden_layers")
    d = c.get("n_embd") or c.get("hidden_size")
    if n is None or d is None:
        raise ConfigError(f"{checkpoint}/config.json names neither n_layer/num_hidden_layers nor n_embd/hidden_size")
    return int(n), int(d)


# ---- evaluation ---------------------------------------------------------------------------------


def _est(values: Any) -> dict[str, float]:
    from interp.results import mean_se

    e = mean_se(values)
    return {"value": e.mean, "se": e.se, "n": e.n}


def evaluate(path: Path, task: Task, ev: FinetuneEval, sweep_layers: Sequence[int] | None = None,
             log: Callable[[str], Any] = print, *,
             placement: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evaluate the checkpoint at ``path`` on the task's held-out rows, loaded on ``placement``
    (:class:`~interp.models.device.Placement`; default CPU, float32).

    Returns long rows ``{metric, layer, value, se, ci_low, ci_high, n}`` and extra JSON."""
    from interp.models.checkpoint import load_bridge, load_hf_model
    from interp.models.device import model_device
    from interp.train.data import make_batch
    from interp.train.regularisers import mean_squared_mlp_out

    rows: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    t0 = time.perf_counter()
    hf = load_hf_model(path, placement).eval()
    device = model_device(hf)  # where the inputs go (under a device map: the first module's device)
    n_layers, _ = hf_dims(path)

    def add(metric: str, est: dict[str, float], layer: int | None = None, **kw: Any) -> None:
        rows.append({"metric": metric, "layer": layer, "value": est["value"], "se": est.get("se", math.nan),
                     "ci_low": kw.get("ci_low", math.nan), "ci_high": kw.get("ci_high", math.nan),
                     "n": est.get("n", 0)})

    ids, pad = task.eval_ids, task.pad_id
    if task.kind == "world":
        per_row = []
        with torch.no_grad():
            for i in range(0, len(ids), 128):
                b = make_batch(ids[i : i + 128].to(device), pad)
                lg = hf(b.inputs).logits
                nll = F.cross_entropy(lg.transpose(1, 2).float(), b.targets.to(lg.device), ignore_index=-100,
                                      reduction="none")
                per_row.append((nll.sum(1) / b.mask.to(lg.device).sum(1).clamp(min=1)).cpu())
        add("heldout_loss", _est(torch.cat(per_row).numpy()))
    if ev.mlp_sq:
        sq = mean_squared_mlp_out(hf, ids.to(device), pad, list(range(n_layers)))
        for layer, v in sq.items():
            add("mlp_out_sq", _est(v.numpy()), layer)
    del hf
    dialogue_qa = ev.qa and task.kind == "world" and _is_dialogue(task.world)
    need_bridge = (ev.sweep or (task.kind == "world" and (ev.next_token or ev.mn)) or task.kind == "pragworld"
                   or dialogue_qa)
    bridge = load_bridge(path, placement=placement) if need_bridge else None
    if task.kind == "world" and ev.next_token:
        from interp.metrics.next_token import next_token_test

        s = next_token_test(bridge, task.world, task.eval_sequences).summary()
        add("next_token_position", {"value": s["next_token_position"], "se": s["next_token_position_se"],
                                    "n": s["sequences"]})
        add("next_token_sequence", {"value": s["next_token_sequence"], "se": s["next_token_sequence_se"],
                                    "n": s["sequences"]})
    if task.kind == "pragworld":
        extra["pragworld"] = _pragworld_scores(bridge, task, add)
    if dialogue_qa:
        extra["dialogue_qa"] = _dialogue_qa(bridge, task, ev, add)
    if ev.sweep:
        extra["sweep"] = _sweep(bridge, task, ev, sweep_layers, add)
    if task.kind == "world" and ev.mn:
        from interp.metrics.myhill_nerode import myhill_nerode
        from interp.models.lm import BridgeLM

        r = myhill_nerode(task.world, BridgeLM(bridge, task.world.vocab), pairs=ev.mn_pairs, depth=ev.mn_depth,
                          seed=ev.seed)
        for name, e in (("mn_compression_precision", r.compression_precision),
                        ("mn_distinction_precision", r.distinction_precision),
                        ("mn_distinction_recall", r.distinction_recall)):
            add(name, {"value": e.mean, "se": e.se, "n": e.n})
        extra["myhill_nerode"] = {k: v for k, v in r.summary().items() if not isinstance(v, dict)}
    extra["seconds"] = round(time.perf_counter() - t0, 2)
    return rows, extra


def _pragworld_scores(bridge: Any, task: Task, add: Callable[..., None]) -> dict[str, Any]:
    from interp.analysis.scoring import Batch, forward
    from interp.metrics.pragworld import score_pragworld

    qa, ids, pad = task.qa, task.eval_ids, task.pad_id
    mask = (ids != pad).long()
    probs = []
    for i in range(0, len(ids), 64):
        b = Batch(ids[i : i + 64], mask[i : i + 64], torch.arange(i, min(i + 64, len(ids))))
        lg = forward(bridge, b.tokens, b.attention_mask)[torch.arange(len(b.tokens)), b.last()]
        probs.append(qa["task"].p_yes(lg).cpu())
    p_yes = torch.cat(probs).numpy()
    preds = (p_yes > 0.5).astype(int)
    summary = dict(score_pragworld(qa["rows"], preds.tolist(), n_boot=1000).summary)
    _add_pragworld_summary(summary, add, len(preds))
    return {"summary": summary, "p_yes": p_yes.tolist()}


def _add_pragworld_summary(summary: dict[str, Any], add: Callable[..., None], n_rows: int) -> None:
    from interp.metrics.pragworld import SUMMARY_KEYS

    for key in SUMMARY_KEYS:
        value = summary.get(key)
        if key in ("groups", "rows") or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        ci = ({"ci_low": summary.get("robust_ci_low", math.nan), "ci_high": summary.get("robust_ci_high", math.nan)}
              if key == "robust" else {})
        add(f"pragworld_{key}", {"value": float(value), "se": summary.get(f"{key}_se", math.nan),
                                 "n": int(summary.get("groups" if key == "robust" else "rows", n_rows))}, **ci)


def _is_dialogue(world: Any) -> bool:
    from interp.worlds.dialogue import DialogueWorld

    return isinstance(world, DialogueWorld)


def _dialogue_qa(bridge: Any, task: Task, ev: FinetuneEval, add: Callable[..., None]) -> dict[str, Any]:
    """Dialogue world: accuracy at the answer position on every held-out probe
    (:func:`interp.worlds.dialogue.qa.probe_accuracy`, metrics ``qa_probe_*``) and, with
    ``ev.qa_groups``, the PragWorld accuracies on a generated benchmark (``pragworld_*``)."""
    import tempfile

    from interp.benchmarks.pragworld import load_pragworld
    from interp.metrics.pragworld import score_pragworld
    from interp.worlds.dialogue.export import prompt_tokens, write_benchmark
    from interp.worlds.dialogue.qa import p_yes, probe_accuracy

    world = task.world
    h = probe_accuracy(bridge, world, task.heldout_sequences or task.eval_sequences)
    add("qa_probe_accuracy", {"value": h["accuracy"], "se": h["accuracy_se"], "n": h["probes"]})
    for key in ("yes", "no"):
        add(f"qa_probe_{key}", {"value": h[key], "n": h["probes"]})
    out: dict[str, Any] = {"held_out_probes": h}
    if ev.qa_groups > 0:
        key = (ev.qa_groups, ev.qa_bench_seed)
        if key not in task.benchmarks:
            with tempfile.TemporaryDirectory() as tmp:
                path = write_benchmark(world, Path(tmp) / "bench.csv", ev.qa_groups, ev.qa_bench_seed)
                task.benchmarks[key] = load_pragworld(path).rows
        rows = task.benchmarks[key]
        p = p_yes(bridge, world, [prompt_tokens(c, q) for c, q in zip(rows["context"], rows["question"])])
        summary = dict(score_pragworld(rows, ["yes" if x > 0.5 else "no" for x in p], n_boot=ev.n_boot,
                                       seed=ev.seed).summary)
        _add_pragworld_summary(summary, add, len(p))
        out["benchmark"] = {"groups": ev.qa_groups, "seed": ev.qa_bench_seed, "summary": summary}
    return out


def _sweep(bridge: Any, task: Task, ev: FinetuneEval, layers: Sequence[int] | None,
           add: Callable[..., None]) -> dict[str, Any]:
    from interp.analysis.scoring import token_loss
    from interp.analysis.sweeps import mlp_zero_sweep
    from interp.analysis.verdicts import layer_verdicts

    ids, pad = task.eval_ids, task.pad_id
    mask = (ids != pad).long()
    if task.kind == "world":
        metric, hib, name = token_loss, False, "sweep_effect_token_loss"
        cats = None
    else:
        metric, hib, name = task.qa["task"].metric(), True, "sweep_effect_p_gold"
        cats = [str(c) for c in task.qa["rows"]["category"]]
    sweep = mlp_zero_sweep(bridge, ids, metric, mask, list(layers) if layers else None, categories=cats,
                           batch_size=64, method="batched", higher_is_better=hib)
    verdicts = layer_verdicts(sweep, n_boot=ev.n_boot, seed=ev.seed)
    out = verdicts.layer_rows()
    for r in out:
        n = int(verdicts.frame.loc[verdicts.frame.layer == r["layer"], "n"].iloc[0])
        se = float(sweep.summary.loc[sweep.summary.layer == r["layer"], "se"].iloc[0])
        add(name, {"value": r["effect"], "se": se, "n": n}, r["layer"], ci_low=r["ci"][0], ci_high=r["ci"][1])
    return {"metric": name, "layers": out}


# ---- the run ------------------------------------------------------------------------------------


@dataclass
class FinetuneReport:
    out: Path
    table: pd.DataFrame
    wide: pd.DataFrame
    figure: Path | None
    info: dict[str, Any] = field(default_factory=dict)

    def markdown(self) -> str:
        return _markdown(self.wide)


def _settings(cfg: FinetuneConfig, objective: str, seed: int, layers: list[int]) -> dict[str, Any]:
    settings = {"checkpoint": str(Path(cfg.checkpoint).resolve()), "objective": objective, "seed": seed,
                "layers": layers, "data": to_dict(cfg.data), "regulariser": to_dict(cfg.regulariser),
                "lora": to_dict(cfg.lora), "train": asdict(replace(cfg.train, seed=seed))}
    return json.loads(json.dumps(settings))  # as read back from train.json (tuples → lists)


def run_finetune(cfg: FinetuneConfig, *, fresh: bool = False, progress: bool = True, accelerator: Any = None,
                 log: Callable[[str], Any] | None = None) -> FinetuneReport | None:
    """Fine-tune and evaluate every (objective, seed) of ``cfg``; the report on the main process
    (None on the others)."""
    from interp.models.checkpoint import _check_folder, load_bridge, load_hf_model
    from interp.results import write_json
    from interp.train.distributed import gather, make_accelerator
    from interp.train.regularisers import describe_terms

    acc = accelerator or make_accelerator(cfg.device)
    placement = train_placement(cfg)
    if placement.mapped and acc.num_processes > 1:
        what = f"device_map = {cfg.device_map!r}" if cfg.device_map is not None else f"n_devices = {cfg.n_devices}"
        raise ConfigError(f"{what} places one model over several devices; it needs one process, not "
                          f"{acc.num_processes}")
    at = eval_placement(cfg, acc.device)  # evaluation (and the verdict check) load where training runs
    main = acc.is_main_process
    say = (log or (lambda s: print(s, file=sys.stderr))) if main else (lambda s: None)
    ckpt = Path(cfg.checkpoint)
    _check_folder(ckpt)
    out = cfg.out_dir
    n_layers, d_model = hf_dims(ckpt)
    task = load_task(ckpt, cfg.data)
    say(f"fine-tuning {ckpt} ({n_layers} layers, d_model {d_model}) on {task.kind} data: {len(task.train_ids)} "
        f"training rows from {task.source.get('train')}; {len(task.eval_ids)} held-out rows; "
        f"{acc.num_processes} process(es) on {acc.device}")

    # layers: every process checks ranges; the main one also checks the verdict file's fingerprint
    error = ""
    layers: dict[str, list[int]] = {}
    bridge = None
    try:
        if main and cfg.regulariser.verdicts is not None and any(o != "plain" for o in cfg.objectives):
            bridge = load_bridge(ckpt, placement=at)
        for objective in cfg.objectives:
            layers[objective] = [] if objective == "plain" else resolve_layers(
                cfg.regulariser, objective, n_layers, bridge)
    except Exception as e:  # shared with the other processes so none waits forever
        error = f"{type(e).__name__}: {e}"
        if acc.num_processes == 1:
            raise
    errors = [x for x in gather([error], acc) if x]
    if errors:
        raise ConfigError(errors[0])
    del bridge

    if main:
        out.mkdir(parents=True, exist_ok=True)
    focus = {x: "H" for x in layers.get("hls", [])}
    for x in layers.get("ula", []):
        focus[x] = focus.get(x, "") + "U"
    sweep_layers = list(cfg.eval.sweep_layers) if cfg.eval.sweep_layers else None
    table_rows: list[dict[str, Any]] = []
    extras: dict[str, Any] = {}
    if main:
        say("evaluating the model before fine-tuning …")
        rows, extra = _cached_eval(out / "eval_before.json", ckpt, task, cfg, sweep_layers, fresh, say, at)
        table_rows += [{**r, "model": "before", "seed": None} for r in rows]
        extras["before"] = extra

    runs_info = []
    for objective in cfg.objectives:
        for seed in cfg.seeds:
            run_dir = out / f"{objective}_s{seed}"
            model_dir = run_dir / "model"
            settings = _settings(cfg, objective, seed, layers[objective])
            done_file = run_dir / "train.json"
            finished = (not fresh and done_file.is_file() and (model_dir / "config.json").is_file()
                        and json.loads(done_file.read_text()).get("settings") == settings)
            if finished:
                say(f"{objective} seed {seed}: already fine-tuned in {run_dir}, not retrained")
            else:
                torch.manual_seed(seed)
                model = load_hf_model(ckpt, placement)
                if cfg.lora.enabled:
                    model = _apply_lora(model, cfg.lora)
                terms = build_terms(objective, cfg.regulariser, layers[objective], task, d_model, seed)
                for line in describe_terms(terms, model):
                    say(f"  {line}")
                t0 = time.perf_counter()
                # the log's held-out loss: world sequences only (QA held-out rows are bare prompts;
                # their evaluation is the PragWorld accuracies below, not a loss on prompt tokens)
                hist = finetune_model(model, task.train_ids, replace(cfg.train, seed=seed), terms=terms,
                                      labels=task.labels, pad_id=task.pad_id, accelerator=acc,
                                      eval_ids=task.eval_ids if task.kind == "world" else None,
                                      progress=progress, loss_from=task.loss_from)
                seconds = time.perf_counter() - t0
                if main:
                    run_dir.mkdir(parents=True, exist_ok=True)
                    task.save_model(_merged(model), model_dir)
                    for t in terms:
                        if hasattr(t, "heads"):
                            t.heads.save(model_dir)
                    hist.to_csv(run_dir / "train_log.csv", index=False)
                    last = hist.iloc[-1].to_dict() if len(hist) else {}
                    write_json(done_file, {"settings": settings, "seconds": round(seconds, 2), "last": last,
                                           "processes": int(acc.num_processes)})
                    say(f"{objective} seed {seed}: {cfg.train.steps} steps in {seconds:.1f} s; last: "
                        + ", ".join(f"{k} {v:.4g}" for k, v in last.items() if k not in ("step", "lr", "elapsed_s")))
                acc.wait_for_everyone()
            if main:
                say(f"evaluating {objective} seed {seed} …")
                rows, extra = _cached_eval(run_dir / "eval.json", model_dir, task, cfg, sweep_layers,
                                           fresh or not finished, say, at)
                table_rows += [{**r, "model": objective, "seed": seed} for r in rows]
                extras[f"{objective}_s{seed}"] = extra
                runs_info.append({"objective": objective, "seed": seed, "dir": str(run_dir),
                                  "layers": layers[objective]})
    if not main:
        return None
    table = pd.DataFrame(table_rows, columns=["model", "seed", "metric", "layer", "value", "se", "ci_low",
                                              "ci_high", "n"])
    table.to_csv(out / "finetune_table.csv", index=False)
    wide = summarise(table, list(cfg.objectives))
    (out / "finetune_table.md").write_text(_markdown(wide) + "\n")
    figure = draw_finetune(table, list(cfg.objectives), out / "finetune.png", focus=focus,
                           title=f"{cfg.name}: {', '.join(cfg.objectives)} × {len(cfg.seeds)} seed(s), "
                                 f"{cfg.train.steps} steps")
    info = {"config": to_dict(cfg), "layers": layers, "task": task.kind, "source": task.source,
            "processes": int(acc.num_processes), "runs": runs_info, "evaluations": extras,
            "summary": wide.to_dict(orient="records")}
    write_json(out / "results.json", info)
    return FinetuneReport(out, table, wide, figure, info)


def _cached_eval(path: Path, model: Path, task: Task, cfg: FinetuneConfig, sweep_layers: Any, fresh: bool,
                 say: Callable[[str], Any], placement: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Evaluate on ``placement``, or reuse ``path`` when it was written with the same evaluation
    settings and placement."""
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


# ---- table and figure ---------------------------------------------------------------------------


def _t_quantile(n: int) -> float:
    if n < 2:
        return math.nan
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, n - 1))
    except ImportError:  # pragma: no cover - scipy is a dependency of our dependencies
        return 1.96


def summarise(table: pd.DataFrame, objectives: list[str]) -> pd.DataFrame:
    """One row per (metric, layer): ``before`` and, per objective, the mean over seeds with a 95 %
    interval (t over seeds when there are several, else the metric's own interval: bootstrap for
    the sweep, ±1.96 SE otherwise) and the change from before; and, per regularised objective run
    beside ``plain``, ``<objective>_vs_plain``: the mean over seeds of (objective − plain) on the
    same seed (same batches), with a t interval over seeds.

    The ``before`` interval is the evaluation's sampling uncertainty (held-out examples); an
    interval over seeds is the fine-tuning's variability on the same held-out examples. They
    answer different questions: compare objectives with each other through ``_vs_plain``."""
    out = []
    keys = table[["metric", "layer"]].drop_duplicates()
    for metric, layer in keys.itertuples(index=False):
        sel = table[(table.metric == metric) & (table.layer.isna() if pd.isna(layer) else table.layer == layer)]
        row: dict[str, Any] = {"metric": metric, "layer": None if pd.isna(layer) else int(layer)}
        b = sel[sel.model == "before"]
        if len(b):
            row["before"], row["before_lo"], row["before_hi"] = _interval(b.iloc[0])
        for obj in objectives:
            s = sel[sel.model == obj]
            if not len(s):
                continue
            if len(s) == 1:
                m, lo, hi = _interval(s.iloc[0])
            else:
                v = s.value.to_numpy(dtype=float)
                m = float(v.mean())
                h = _t_quantile(len(v)) * float(v.std(ddof=1)) / math.sqrt(len(v))
                lo, hi = m - h, m + h
            row[obj], row[f"{obj}_lo"], row[f"{obj}_hi"] = m, lo, hi
            row[f"{obj}_seeds"] = int(len(s))
            if "before" in row:
                row[f"{obj}_change"] = m - row["before"]
        plain = sel[sel.model == "plain"].set_index("seed").value
        for obj in objectives:
            if obj == "plain" or not len(plain):
                continue
            mine = sel[sel.model == obj].set_index("seed").value
            seeds = sorted(set(plain.index) & set(mine.index))
            if not seeds:
                continue
            d = np.array([float(mine[k]) - float(plain[k]) for k in seeds])
            m = float(d.mean())
            h = _t_quantile(len(d)) * float(d.std(ddof=1)) / math.sqrt(len(d)) if len(d) > 1 else math.nan
            row[f"{obj}_vs_plain"], row[f"{obj}_vs_plain_lo"], row[f"{obj}_vs_plain_hi"] = m, m - h, m + h
        out.append(row)
    return pd.DataFrame(out)


def _interval(r: pd.Series) -> tuple[float, float, float]:
    v = float(r.value)
    if not (pd.isna(r.ci_low) or pd.isna(r.ci_high)):
        return v, float(r.ci_low), float(r.ci_high)
    se = float(r.se) if not pd.isna(r.se) else math.nan
    return v, v - 1.96 * se, v + 1.96 * se


def _fmt(m: float, lo: float, hi: float) -> str:
    if pd.isna(m):
        return "–"
    if pd.isna(lo) or pd.isna(hi):
        return f"{m:.4g}"
    return f"{m:.4g} [{lo:.4g}, {hi:.4g}]"


def _markdown(wide: pd.DataFrame) -> str:
    cols = [c for c in wide.columns if f"{c}_lo" in wide.columns]
    models = [c for c in cols if not c.endswith("_vs_plain")]
    models = ["before"] + [c for c in models if c != "before"] + [c for c in cols if c.endswith("_vs_plain")]
    names = [c.replace("_vs_plain", " − plain") for c in models]
    head = "| metric | layer | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (2 + len(models))]
    for r in wide.to_dict(orient="records"):
        layer = "" if r.get("layer") is None or pd.isna(r.get("layer")) else str(int(r["layer"]))
        cells = []
        for m in models:
            cell = _fmt(r.get(m, math.nan), r.get(f"{m}_lo", math.nan), r.get(f"{m}_hi", math.nan))
            change = r.get(f"{m}_change")
            if change is not None and not pd.isna(change):
                cell += f" (Δ {change:+.3g})"
            cells.append(cell)
        lines.append(f"| {r['metric']} | {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw_finetune(table: pd.DataFrame, objectives: list[str], path: Path, focus: dict[int, str] | None = None,
                  title: str | None = None) -> Path:
    """Three panels, before vs after per objective (mean over seeds, 95 % intervals): the layer
    sweep's per-layer effect, the mean squared MLP output per layer, and the scalar metrics.
    ``focus`` tags layers on the axis (``H``: suppressed by HLS, ``U``: amplified by ULA)."""
    focus = focus or {}
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    wide = summarise(table, objectives)
    models = ["before"] + objectives
    colours = {"before": "#777777", "plain": "#4c72b0", "hls": "#d1372b", "ula": "#2a9d3f"}
    sweep_metric = next((m for m in wide.metric.unique() if str(m).startswith("sweep_effect")), None)
    panels = [p for p in (sweep_metric, "mlp_out_sq") if p in set(wide.metric)]
    scalars = wide[wide.layer.isna()]
    n = len(panels) + (1 if len(scalars) else 0)
    fig = Figure(figsize=(5.2 * max(n, 1), 4.0), dpi=120)
    FigureCanvasAgg(fig)
    width = 0.8 / len(models)
    for k, metric in enumerate(panels):
        ax = fig.add_subplot(1, n, k + 1)
        sub = wide[wide.metric == metric].sort_values("layer")
        x = np.arange(len(sub))
        for j, m in enumerate(models):
            if m not in sub:
                continue
            v = sub[m].to_numpy(dtype=float)
            err = np.vstack([np.clip(v - sub[f"{m}_lo"].to_numpy(dtype=float), 0, None),
                             np.clip(sub[f"{m}_hi"].to_numpy(dtype=float) - v, 0, None)])
            ax.bar(x + (j - (len(models) - 1) / 2) * width, v, width, yerr=np.nan_to_num(err), capsize=2,
                   color=colours.get(m, None), label=m)
        ax.set_xticks(x)
        ax.set_xticklabels([f"{int(v)}{' ' + focus[int(v)] if int(v) in focus else ''}" for v in sub.layer])
        ax.set_xlabel("layer (H: HLS-suppressed, U: ULA-amplified)" if focus else "layer")
        ax.axhline(0, color="0.3", linewidth=0.6)
        vals = sub[[m for m in models if m in sub]].to_numpy(dtype=float)
        spread = np.nanmin(vals) > 0 and np.nanmax(vals) / np.nanmin(vals) > 50
        if metric == "mlp_out_sq" or spread:
            ax.set_yscale("log")
        if metric == "mlp_out_sq":
            ax.set_ylabel("mean squared MLP output")
        else:
            ax.set_ylabel("effect of zeroing the MLP\n(ablated − clean " + metric.removeprefix("sweep_effect_") + ")")
        ax.legend(fontsize=7, frameon=False)
    if len(scalars):
        ax = fig.add_subplot(1, n, n)
        x = np.arange(len(scalars))
        for j, m in enumerate(models):
            if m not in scalars:
                continue
            v = scalars[m].to_numpy(dtype=float)
            err = np.vstack([np.clip(v - scalars[f"{m}_lo"].to_numpy(dtype=float), 0, None),
                             np.clip(scalars[f"{m}_hi"].to_numpy(dtype=float) - v, 0, None)])
            ax.barh(x + (j - (len(models) - 1) / 2) * width, v, width, xerr=np.nan_to_num(err), capsize=2,
                    color=colours.get(m, None), label=m)
        ax.set_yticks(x)
        ax.set_yticklabels([str(s) for s in scalars.metric], fontsize=7)
        ax.invert_yaxis()
        ax.legend(fontsize=7, frameon=False)
        ax.set_title("held-out metrics (95 % intervals)", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", bbox_inches="tight")
    return path


# ---- processes ---------------------------------------------------------------------------------


def _worker(config_path: str, fresh: bool, progress: bool) -> None:
    """Entry point of one process of ``interp finetune --processes N``."""
    run_finetune(load_finetune_config(config_path), fresh=fresh, progress=progress)


__all__ = ["FinetuneConfig", "FinetuneData", "FinetuneEval", "FinetuneReport", "LoraSettings", "OBJECTIVES",
           "Objective", "RegulariserConfig", "Task", "build_terms", "draw_finetune", "evaluate", "finetune_model",
           "load_finetune_config", "load_task", "resolve_layers", "run_finetune", "summarise"]
