"""One trainer for pre-training and fine-tuning.

AdamW (weight decay on ≥2-D parameters only), linear warmup then cosine decay, gradient clipping,
padding masked out of the loss, periodic held-out evaluation, the best checkpoint kept, a tqdm bar
with loss and tokens/s, and exact resumption: the model, optimizer moments, step and RNG state are
saved to ``out_dir/last`` (safetensors + JSON, no pickles) and each step's batch is a pure function
of (seed, step), so an interrupted run resumed from ``last`` ends with the same weights as an
uninterrupted one.

Extra loss terms (the HLS / ULA regularisers of PragWorld §6.3) plug in as :class:`LossTerm`
objects: each installs hooks for the whole run, collects what it needs during the ordinary forward
pass, and returns a scalar after it — no second forward.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pandas as pd
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import Tensor

from interp.models.lm import logits_of
from interp.train.data import Batch, LengthBucketedBatches, batch_indices, iterate_batches, make_batch


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    #: evaluate on the held-out set every this many steps (0: only at the end)
    eval_every: int = 250
    #: held-out sequences used per evaluation (0: all)
    eval_sequences: int = 1024
    #: save a resumable checkpoint every this many steps (0: only at the end)
    checkpoint_every: int = 500
    #: group rows of similar length into batches (less compute spent on padding)
    length_bucketing: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("train.steps and train.batch_size must be ≥ 1")
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ValueError(f"need 0 ≤ train.min_lr ≤ train.lr and lr > 0 (lr={self.lr}, min_lr={self.min_lr})")
        if self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError("train.warmup_steps and train.grad_clip must be ≥ 0")


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Linear warmup to ``lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``steps``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


@runtime_checkable
class LossTerm(Protocol):
    """An extra objective computed from hooks during the training forward pass."""

    name: str
    weight: float

    def install(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Register hooks for the whole run; they must be removed when the context exits."""

    def compute(self, batch: Batch) -> Tensor:
        """The (unweighted) scalar for the forward pass that just ran; clears collected state."""


def next_token_loss(logits: Float[Tensor, "batch pos vocab"], targets: Int[Tensor, "batch pos"]) -> Tensor:
    """Mean cross-entropy over the non-padding positions (targets == -100 are ignored)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices/embeddings (≥2-D) only; biases and norms are not decayed.

    The fused kernel is used when every parameter lives on one device type that supports it
    (CPU and CUDA in current torch): one kernel per step instead of a loop over tensors.
    """
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    devices = {p.device.type for p in params}
    fused = len(devices) == 1 and devices <= {"cpu", "cuda"} and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, ids: Int[Tensor, "n pos"], pad_id: int, batch_size: int = 128) -> float:
    """Token-weighted mean next-token loss of ``model`` on ``ids`` (eval mode, restored after)."""
    from interp.models.device import model_device

    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for batch in iterate_batches(ids.to(model_device(model)), batch_size, pad_id):
            logits = logits_of(model, batch.inputs)
            n = batch.n_tokens
            total += float(next_token_loss(logits, batch.targets)) * n
            count += n
    finally:
        model.train(was_training)
    return total / max(count, 1)


@dataclass
class TrainResult:
    """What a training run produced. ``history`` has one row per logged step."""

    out_dir: Path
    steps: int
    final_train_loss: float
    best_eval_loss: float
    best_step: int
    tokens_per_second: float
    history: pd.DataFrame = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "history"}
        d["out_dir"] = str(self.out_dir)
        return d


class TrainingInterrupted(RuntimeError):
    """Raised after Ctrl-C once the resumable checkpoint is safely written."""


# ---- resumable state ----------------------------------------------------------------------------

_STATE_JSON = "trainer_state.json"
_STATE_TENSORS = "trainer_state.safetensors"
_MODEL_TENSORS = "trainer_model.safetensors"


def _save_state(path: Path, model, opt, step: int, meta: dict[str, Any]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    save_model(model, str(path / _MODEL_TENSORS))
    tensors = {"rng": torch.get_rng_state()}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            tensors[f"opt.{i}.{k}"] = v if isinstance(v, Tensor) else torch.tensor(v)
    save_file(tensors, str(path / _STATE_TENSORS))
    (path / _STATE_JSON).write_text(json.dumps({**meta, "step": step}, indent=1))


def _load_state(path: Path, model, opt) -> dict[str, Any]:
    meta = json.loads((path / _STATE_JSON).read_text())
    load_model(model, str(path / _MODEL_TENSORS))
    tensors = load_file(str(path / _STATE_TENSORS))
    torch.set_rng_state(tensors.pop("rng"))
    sd = opt.state_dict()
    state: dict[int, dict[str, Tensor]] = {}
    for key, v in tensors.items():
        _, i, k = key.split(".", 2)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
    return meta


# ---- the loop -----------------------------------------------------------------------------------

def train(
    model: torch.nn.Module,
    train_ids: Int[Tensor, "n pos"],
    eval_ids: Int[Tensor, "m pos"] | None,
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    pad_id: int = 0,
    save_model_fn: Callable[[torch.nn.Module, Path], Any] | None = None,
    loss_terms: Sequence[LossTerm] = (),
    resume: bool = True,
    stop_at: int | None = None,
    progress: bool = True,
    run_info: dict[str, Any] | None = None,
) -> TrainResult:
    """Train ``model`` on ``train_ids`` (``<bos>``-prefixed, right-padded rows).

    ``out_dir/last`` always holds the latest resumable state; ``out_dir/best`` the checkpoint with
    the lowest held-out loss (written with ``save_model_fn``, e.g. :func:`save_checkpoint` bound to
    a world). With ``resume=True`` an existing ``last`` state is continued — its recorded config
    must equal ``cfg``. ``stop_at`` ends the run early at that step (after saving ``last``): the
    same as an interruption, used to budget time and in the resumption test.
    """
    from tqdm.auto import tqdm

    from interp.models.device import model_device

    out_dir = Path(out_dir)
    last, best = out_dir / "last", out_dir / "best"
    device = model_device(model)  # each batch goes where the model lives (lengths stay on the CPU)
    opt = make_optimizer(model, cfg)
    start, best_loss, best_step, history = 0, math.inf, -1, []
    cfg_dict = asdict(cfg)
    if resume and (last / _STATE_JSON).exists():
        meta = _load_state(last, model, opt)
        if meta.get("config") != cfg_dict:
            raise ValueError(
                f"{last} was written by a run with another training config; use a new out_dir "
                f"or resume=False (saved: {meta.get('config')}, now: {cfg_dict})")
        start, best_loss, best_step = meta["step"], meta["best_eval_loss"], meta["best_step"]
        history = meta["history"]
    end = cfg.steps if stop_at is None else min(cfg.steps, stop_at)
    eval_sub = None
    if eval_ids is not None:
        eval_sub = eval_ids if cfg.eval_sequences == 0 else eval_ids[: cfg.eval_sequences]

    def checkpoint(step: int) -> None:
        meta = {"config": cfg_dict, "best_eval_loss": best_loss, "best_step": best_step,
                "history": history, "run_info": run_info or {}}
        _save_state(last, model, opt, step, meta)
        if save_model_fn is not None:
            save_model_fn(model, last)

    def run_eval(step: int) -> float:
        nonlocal best_loss, best_step
        loss = evaluate_loss(model, eval_sub, pad_id)
        if loss < best_loss:
            best_loss, best_step = loss, step
            if save_model_fn is not None:
                save_model_fn(model, best)
        return loss

    if cfg.length_bucketing:
        rows_at = LengthBucketedBatches((train_ids != pad_id).sum(dim=1).cpu(), cfg.batch_size, cfg.seed)
    else:
        def rows_at(step: int) -> Tensor:
            return batch_indices(len(train_ids), cfg.batch_size, cfg.seed, step)

    model.train()
    completed, loss_value, tokens_seen, t0 = start, float("nan"), 0, time.perf_counter()
    bar = tqdm(total=cfg.steps, initial=start, disable=not progress, desc="train", unit="step",
               dynamic_ncols=True)
    with contextlib.ExitStack() as stack:
        for term in loss_terms:
            stack.enter_context(term.install(model))
        try:
            for step in range(start, end):
                batch = make_batch(train_ids[rows_at(step)].to(device), pad_id)
                lr = learning_rate(cfg, step)
                for g in opt.param_groups:
                    g["lr"] = lr
                logits = logits_of(model, batch.inputs)
                loss = next_token_loss(logits, batch.targets)
                extras = {}
                for term in loss_terms:
                    value = term.compute(batch)
                    extras[term.name] = value.detach()
                    loss = loss + term.weight * value
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                opt.step()
                completed = done = step + 1
                tokens_seen += batch.n_tokens
                log_now = done % 10 == 0 or done == end
                eval_now = eval_sub is not None and (
                    (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps)
                if log_now or eval_now:
                    loss_value = loss.detach().item()
                    rate = tokens_seen / max(time.perf_counter() - t0, 1e-9)
                    row = {"step": done, "loss": loss_value, "lr": lr, "tokens_per_s": rate}
                    row.update({k: float(v) for k, v in extras.items()})
                    if eval_now:
                        row["eval_loss"] = run_eval(done)
                    history.append(row)
                    bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
                bar.update(1)
                if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < end:
                    checkpoint(done)
        except KeyboardInterrupt:
            checkpoint(completed)
            bar.close()
            raise TrainingInterrupted(
                f"interrupted after step {completed}; state saved in {last}, "
                "run the same command to resume") from None
    bar.close()
    step = end
    checkpoint(step)
    elapsed = time.perf_counter() - t0
    hist = pd.DataFrame(history)
    hist.to_csv(out_dir / "train_log.csv", index=False)
    return TrainResult(out_dir=out_dir, steps=step, final_train_loss=loss_value, best_eval_loss=best_loss,
                       best_step=best_step, tokens_per_second=tokens_seen / max(elapsed, 1e-9), history=hist)
