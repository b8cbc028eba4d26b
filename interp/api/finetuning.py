"""``interp.finetune``: fine-tune a model on a task — plain, or with harmful-layer suppression (HLS)
or useful-layer amplification (ULA), PragWorld §6.3 — and return the fine-tuned model beside its
before / after table; :func:`hls_penalty`, the HLS term for a training loop of your own.

HLS adds β · Σ over the suppressed layers of the mean squared MLP output over the scored positions;
ULA trains a small classifier head on each useful layer's MLP output to predict the correct answer
(:mod:`interp.train.regularisers` says how these follow the paper and where they depart). Both read
the MLP outputs the training forward itself computes (forward hooks on the Hugging Face modules),
removed when training ends, also on error."""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from jaxtyping import Int, Shaped
from torch import Tensor

from interp.analysis.config.sweep_config import ConfigError
from interp.api.model import Model, as_model, load_model
from interp.results import as_json, write_json

#: the fine-tuning objectives
METHODS = ("plain", "hls", "ula")


@dataclass(frozen=True)
class TuneConfig:
    """One fine-tuning run: ``method`` (``plain``, ``hls``, ``ula``), ``steps`` of AdamW at ``lr``
    (cosine to lr/10, one warm-up step) on batches of ``batch_size`` rows, the regulariser's
    ``weight`` (β for HLS, α for ULA), ``seed``. The loss is the next-token loss on the answer token
    (prompt + correct answer)."""

    method: str = "hls"
    steps: int = 16
    lr: float = 2e-5
    weight: float = 1e-3
    batch_size: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.steps < 1 or self.batch_size < 1:
            raise ConfigError(f"steps and batch_size must be ≥ 1, got {self.steps} and {self.batch_size}")
        if not self.lr > 0 or not self.weight >= 0:
            raise ConfigError(f"lr must be > 0 and weight ≥ 0, got {self.lr} and {self.weight}")


@dataclass
class Finetuned:
    """A fine-tuning's outcome: ``model`` (the fine-tuned :class:`~interp.api.model.Model`, saved as
    a Hugging Face folder at ``folder``), ``layers`` suppressed or amplified, ``table`` (rows
    ``before`` / ``after``: accuracy and mean logit difference correct − foil with their intervals on
    the evaluation task), ``config``."""

    model: Model
    folder: Path
    layers: list[int]
    table: pd.DataFrame
    config: TuneConfig

    def __str__(self) -> str:
        return f"{self.config.method} on layers {self.layers} ({self.config.steps} steps):\n{self.table.to_string()}"


def suppressed_layers(suppress: Any, method: str, n_layers: int) -> list[int]:
    """The layers ``suppress`` names for ``method``: a list of layers, or verdicts (a
    :class:`~interp.analysis.verdicts.layers.LayerVerdicts` or an :class:`~interp.api.sweeping.Sweep`),
    whose harmful layers HLS suppresses and whose useful layers ULA amplifies; checked in range."""
    if method == "plain":
        return []
    if suppress is None:
        raise ConfigError(f"method {method!r} needs layers: suppress=[...] or suppress=sweep.verdicts()")
    if hasattr(suppress, "verdicts") and callable(suppress.verdicts):  # a Sweep
        suppress = suppress.verdicts()
    if hasattr(suppress, "harmful") and hasattr(suppress, "useful"):
        layers = list(suppress.harmful if method == "hls" else suppress.useful)
        if not layers:
            which = "harmful" if method == "hls" else "useful"
            raise ConfigError(f"the verdicts name no {which} layer, so {method.upper()} has nothing to act on")
    else:
        layers = [int(x) for x in suppress]
    bad = [x for x in layers if not 0 <= x < n_layers]
    if bad or not layers:
        raise ConfigError(
            f"layer {bad[0] if bad else layers} is out of range: the model has {n_layers} layers (valid: 0..{n_layers - 1})"
        )
    return sorted(set(layers))


def _evaluate(model: Model, task: Any, seed: int) -> dict[str, Any]:
    from interp.analysis.evaluation.contrast import evaluate_contrast

    s = evaluate_contrast(model.bridge, task, n_boot=1000, seed=seed).summary()
    return {k: s[k] for k in s if k in ("accuracy", "accuracy_ci", "logit_diff", "logit_diff_ci", "n")}


def finetune(
    model: Model | str,
    task: Any,
    config: TuneConfig | None = None,
    *,
    suppress: Any = None,
    eval_task: Any = None,
    out: str | Path | None = None,
    progress: bool = True,
    **settings: Any,
) -> Finetuned:
    """Fine-tune ``model`` on ``task`` (a contrast or PragWorld task: prompt + correct answer) by
    ``config`` or keyword ``settings`` (:class:`TuneConfig`: ``method``, ``steps``, ``lr``,
    ``weight``, ``batch_size``, ``seed``); ``suppress``: the layers, or verdicts (HLS their harmful,
    ULA their useful layers). Scored before and after on ``eval_task`` (default ``task``; give a
    held-out one). ``out``: where the fine-tuned Hugging Face folder goes (default temporary);
    ``progress``: the training bar (off in a notebook whose outputs are stored). The model you pass
    is not changed. A fine-tuning that finished in ``out`` with the same settings, base weights and
    tasks (``out/finetune.json``, written last) is read back instead of run again: a script of
    several arms, each with its own ``out``, resumes after an interruption at the arm it was in."""
    from interp.config import TrainConfig
    from interp.models.checkpoint import load_hf_model
    from interp.train.finetune_data import free_pad_id
    from interp.train.regularisers import HLS, ULA, LabelCoding, ULAHeads
    from interp.train.trainer import train
    from interp.worlds.encoding import pad_right

    config = TuneConfig(**{**(config.__dict__ if config else {}), **settings})
    m = as_model(model)
    layers = suppressed_layers(suppress, config.method, m.n_layers)
    eval_task = eval_task if eval_task is not None else task
    key = _run_key(m, task, eval_task, config, layers)
    done = _finished(out, key)
    if done is not None:
        return done
    rows, start = task.training_rows("correct")
    vocab = int(m.bridge.cfg.d_vocab)
    pad = free_pad_id(rows + list(eval_task.ids), task.pad_id, vocab)
    ids, _, _ = pad_right(rows, pad)
    tok = m.tokenizer
    answers = tok.convert_ids_to_tokens([int(i) for i in task.correct_ids])
    coding = LabelCoding.fit(answers)
    hf = load_hf_model(m.source)
    terms: list[Any] = []
    if config.method == "hls":
        terms = [HLS(layers, config.weight)]
    elif config.method == "ula":
        heads = ULAHeads(layers, int(m.bridge.cfg.d_model), coding.classes, seed=config.seed, task="the correct token")
        terms = [ULA(heads, config.weight)]
    cfg = TrainConfig(
        steps=config.steps,
        batch_size=min(config.batch_size, len(rows)),
        lr=config.lr,
        min_lr=config.lr / 10,
        warmup_steps=1,
        eval_every=0,
        checkpoint_every=0,
        seed=config.seed,
    )
    train(
        hf,
        ids,
        None,
        cfg,
        None,
        pad_id=pad,
        loss_terms=terms,
        labels=coding.encode(answers),
        loss_from=torch.tensor(start),
        progress=progress,
    )
    folder = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="interp-finetune-"))
    hf.save_pretrained(folder)
    tok.save_pretrained(folder)
    tuned = load_model(folder)
    table = pd.DataFrame(
        [
            {"model": "before", **_evaluate(m, eval_task, config.seed)},
            {"model": "after", **_evaluate(tuned, eval_task, config.seed)},
        ]
    ).set_index("model")
    write_json(folder / RECORD, {"key": key, "table": table.reset_index().to_dict("records")})
    return Finetuned(model=tuned, folder=folder, layers=layers, table=table, config=config)


#: the record a finished fine-tuning leaves in its ``out`` (written last: its presence means done)
RECORD = "finetune.json"


def _run_key(m: Model, task: Any, eval_task: Any, config: TuneConfig, layers: list[int]) -> dict[str, Any]:
    """What decides a fine-tuning's outcome: the config, the layers, the base model's weights and
    the training and evaluation tasks' ids."""
    from interp.analysis.engines.unitstore import weights_hash
    from interp.jobs.task_sweep import task_sha256

    return as_json(
        {
            "config": asdict(config),
            "layers": layers,
            "weights": weights_hash(m.bridge),
            "task": task_sha256(task),
            "eval_task": task_sha256(eval_task),
        }
    )


def _finished(out: str | Path | None, key: dict[str, Any]) -> Finetuned | None:
    """The fine-tuning already finished in ``out`` with this ``key`` (read back, said), else None."""
    if out is None or not (Path(out) / RECORD).is_file():
        return None
    try:
        record = json.loads((Path(out) / RECORD).read_text())
    except (OSError, ValueError):
        return None  # unreadable: run again (the record is written whole, so this is a foreign file)
    if record.get("key") != key:
        return None
    print(f"fine-tuning already finished in {out} with these settings: read back", file=sys.stderr)
    table = pd.DataFrame(record["table"]).set_index("model")
    config = TuneConfig(**key["config"])
    return Finetuned(model=load_model(out), folder=Path(out), layers=list(key["layers"]), table=table, config=config)


@contextlib.contextmanager
def hls_penalty(
    model: torch.nn.Module, layers: Sequence[int], weight: float = 1e-3
) -> Iterator[Callable[[Int[Tensor, "batch pos"], Shaped[Tensor, "batch pos"]], Tensor]]:
    """HLS as a loss term for your own training loop (or a Hugging Face ``Trainer``'s
    ``compute_loss``): inside the block, every forward of the Hugging Face ``model`` records the
    MLP outputs of ``layers``; ``penalty(input_ids, attention_mask)`` after a forward returns
    β · Σ_layers mean over the unmasked positions of the mean squared MLP output — add it to the
    loss. The hooks are removed on exit, also on error.

    >>> with interp.hls_penalty(hf_model, [3], weight=1e-3) as penalty:  # doctest: +SKIP
    ...     out = hf_model(ids, attention_mask=mask, labels=ids)
    ...     (out.loss + penalty(ids, mask)).backward()
    """
    from interp.train.data import Batch
    from interp.train.regularisers import HLS, n_layers_of

    term = HLS(layers, weight, n_layers=n_layers_of(model))

    def penalty(input_ids: Int[Tensor, "batch pos"], attention_mask: Shaped[Tensor, "batch pos"]) -> Tensor:
        targets = torch.where(attention_mask.bool(), input_ids, torch.full_like(input_ids, -100))
        return term.weight * term.compute(Batch(inputs=input_ids, targets=targets))

    with term.install(model):
        yield penalty


__all__ = ["METHODS", "Finetuned", "TuneConfig", "finetune", "hls_penalty", "suppressed_layers"]
