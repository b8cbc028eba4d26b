"""One training loop for pre-training and fine-tuning: :func:`train`.

AdamW (weight decay on ≥2-D parameters only), linear warmup then cosine decay, gradient clipping,
padding masked out of the loss, periodic held-out evaluation, the best checkpoint kept, a tqdm bar
with loss and tokens/s, optional data parallelism, and exact resumption.

**Every token weighs the same.** Rows are grouped by length (``length_bucketing``), so one batch
holds 3-turn routes and another 99-turn ones. Dividing each step's summed loss by the batch's own
token count (the usual per-batch mean) would give a token of a 3-turn route (6 scored tokens)
~17× the weight of one of a 99-turn route (102) — training a different distribution than the
data's (on the demo's random walks the model then says ``end`` at its destination with 0.44
where the data's rate is 0.35). By default
(``loss_weighting = "token"``) the summed loss is divided by the *expected* count of an average
batch (:func:`expected_scored_tokens`), so the expected gradient is the data's per-token mean;
``"batch"`` keeps the per-batch mean. The log shows the batch's mean loss either way.

**Loss terms.** Extra objectives (the HLS / ULA regularisers of PragWorld §6.3,
:mod:`interp.train.regularisers`) plug in as :class:`LossTerm` objects: each installs hooks for
the whole run, collects what it needs during the ordinary forward pass, and returns ``(sum,
count)`` after it — no second forward. A term that is an ``nn.Module`` (ULA's heads) trains with
the model: :class:`Objective` holds both, so the optimizer, data parallelism and the saved state
see every trained parameter.

**Per-row data.** ``labels`` (one class id per training row, for ULA) and ``loss_from`` (per row,
the first token the next-token loss counts: the answer of a QA row; the terms still see every
real token) travel with the rows of each batch.

**Data parallelism.** With an ``accelerate`` ``accelerator`` running N processes (see
:mod:`interp.models.parallel`) every process draws the same global batch for a step, keeps its
contiguous shard, and normalises the summed next-token loss (``batch`` weighting; ``token``: by
the constant expected count) and each term's sum by the counts summed over all processes, so the
averaged gradient is the single-process gradient of the global batch: a 2-process run ends with
the weights of a 1-process run (a test checks it). Evaluation and
checkpoints are written by the main process. Without an accelerator the loop runs plainly on the
model's device (a device-mapped model stays where it is).

**Half precision trains on float32 master weights.** A model loaded in bfloat16 or float16
(``--dtype``, a GPU user's ``auto``) would lose most AdamW updates to rounding: a weight of size
0.05 is stored to 2⁻¹² ≈ 2.4e-4 in bfloat16, so an update of ``lr = 1e-5`` leaves it unchanged
(measured on a tiny Llama: 88 % of the weights did not move in one step; ``tests/test_precision.py``).
So, as mixed-precision training does, :func:`train` holds the *trainable* parameters of a
half-precision model in float32 for the run (the optimizer and its moments too), runs the
forward pass under ``torch.autocast`` in the model's half dtype (the matrix products stay fast),
scales the loss (``torch.amp.GradScaler``) for float16, whose gradients would otherwise
underflow, and casts those parameters back to their dtype at the end. Frozen parameters (a
LoRA model's base weights) stay as they are; the checkpoints written during the run hold the
float32 weights.

**Exact resumption.** ``out_dir/last`` holds the model, the terms' modules (ULA heads), the
optimizer moments, the step, each process's RNG state and the log (safetensors + JSON, no
pickles); the learning rate and each step's batch are pure functions of (config, seed, step), so
an interrupted run resumed from ``last`` ends with the weights of an uninterrupted one (tests
check it for pre-training and for a fine-tune with HLS and ULA).
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
from torch import Tensor, nn

from interp.config import TrainConfig, merge_options
from interp.models.lm import logits_of, takes_logits_to_keep
from interp.train.data import Batch, LengthBucketedBatches, batch_indices, iterate_batches, make_batch


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

    def partial(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """``(sum, count)`` of the (unweighted) term for the forward pass that just ran; clears
        collected state. The loop adds ``weight · sum / count`` (count summed over the processes)."""


def next_token_loss(logits: Float[Tensor, "batch pos vocab"], targets: Int[Tensor, "batch pos"]) -> Tensor:
    """Mean cross-entropy over the non-padding positions (targets == -100 are ignored), in float32
    whatever the logits' dtype (a bfloat16 mean of a loss near 4.6 is rounded to 2⁻⁶ ≈ 0.016)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def expected_scored_tokens(
    train_ids: Int[Tensor, "n pos"], pad_id: int, batch_size: int, loss_from: Int[Tensor, " n"] | None = None
) -> float:
    """Scored next-token targets in an average batch: rows per step × the mean per training row.

    The ``token`` loss weighting (:attr:`TrainConfig.loss_weighting`) divides each step's summed
    loss by this constant instead of by the batch's own count, so a token weighs the same in a
    batch of short rows as in one of long rows: the expected gradient is that of the data's
    per-token mean loss, however the rows are grouped. Row ``r`` scores its tokens ``j ≥
    max(1, loss_from[r])`` (token 0 is never a target), the rule the loop applies.
    """
    lengths = (train_ids != pad_id).sum(dim=1).cpu()
    first = torch.ones_like(lengths) if loss_from is None else loss_from.cpu().clamp(min=1)
    per_row = (lengths - first).clamp(min=0).double().mean()
    return max(float(per_row) * min(batch_size, len(train_ids)), 1.0)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices/embeddings (≥2-D) only; biases and norms are not decayed.

    The fused kernel is used when every parameter lives on one device type that supports it
    (CPU and CUDA in current torch): one kernel per step instead of a loop over tensors.
    """
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    devices = {p.device.type for p in params}
    fused = len(devices) == 1 and devices <= {"cpu", "cuda"} and all(p.is_floating_point() for p in params)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None)


_HALF_DTYPES = (torch.bfloat16, torch.float16)


@contextlib.contextmanager
def master_weights(model: nn.Module) -> Any:
    """Float32 master weights for the trainable parameters of a half-precision model (see the
    module docstring); yields the dtype to autocast the forward pass to (the parameters' half
    dtype), or None when every trainable parameter is already float32 (nothing changes). The
    parameters are cast back, and their gradients dropped, on exit."""
    params = list({id(p): p for p in model.parameters() if p.requires_grad}.values())
    half = sorted({p.dtype for p in params if p.dtype in _HALF_DTYPES}, key=str)
    if not half:
        yield None
        return
    if len(half) > 1:
        raise ValueError(f"the trainable parameters mix {half}: load the model in one dtype")
    upcast = [p for p in params if p.dtype == half[0]]
    for p in upcast:
        p.data = p.data.float()
    try:
        yield half[0]
    finally:
        for p in upcast:
            p.grad = None
            p.data = p.data.to(half[0])


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

    out_dir: Path | None
    steps: int
    final_train_loss: float
    best_eval_loss: float
    best_step: int
    tokens_per_second: float
    history: pd.DataFrame = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "history"}
        d["out_dir"] = None if self.out_dir is None else str(self.out_dir)
        return d


class TrainingInterrupted(RuntimeError):
    """Raised after Ctrl-C once the resumable checkpoint is safely written."""


class Objective(nn.Module):
    """The model and its loss terms in one module, so the optimizer and data parallelism see (and
    synchronise) every trained parameter, the ULA heads included. ``forward`` returns the *summed*
    next-token loss, the number of scored tokens, and each term's ``(sum, count)``."""

    def __init__(self, model: nn.Module, terms: Sequence[LossTerm] = ()):
        super().__init__()
        self.model = model
        self.terms = list(terms)
        self.term_modules = nn.ModuleList([t for t in self.terms if isinstance(t, nn.Module)])
        #: the unembedding runs only at the positions the loss counts, where the forward can: the same
        #: loss, and on a large vocabulary most of a step's time and memory saved (Gemma 3 270M: 2.5×, bench/last_logits.py)
        self.few_logits = takes_logits_to_keep(model)

    def forward(
        self,
        inputs: Int[Tensor, "batch pos"],
        targets: Int[Tensor, "batch pos"],
        labels: Int[Tensor, " batch"],
        loss_targets: Int[Tensor, "batch pos"] | None = None,
    ) -> tuple[Tensor, ...]:
        """``loss_targets``: the targets the next-token loss counts (e.g. the answer only), when
        they differ from ``targets`` (every real token: what the terms see)."""
        from interp.train.regularisers import LabelledBatch

        scored = targets if loss_targets is None else loss_targets
        keep = None
        if loss_targets is not None and self.few_logits:  # logits only where the loss counts (the answer)
            keep = (scored != -100).any(dim=0).nonzero()[:, 0]
            scored = scored[:, keep]
        logits = logits_of(self.model, inputs, keep)
        ce = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), scored.reshape(-1), ignore_index=-100, reduction="sum"
        )
        batch = LabelledBatch(inputs=inputs, targets=targets, labels=labels)
        parts: list[Tensor] = [ce, (scored != -100).sum().to(torch.float32)]
        for term in self.terms:
            parts.extend(term.partial(batch))
        return tuple(parts)


# ---- resumable state ----------------------------------------------------------------------------

_STATE_JSON = "trainer_state.json"
_STATE_TENSORS = "trainer_state.safetensors"
_MODEL_TENSORS = "trainer_model.safetensors"
_TERMS_TENSORS = "trainer_terms.safetensors"


def _rng_file(rank: int) -> str:
    return "trainer_rng.safetensors" if rank == 0 else f"trainer_rng_{rank}.safetensors"


def _has_term_params(objective: Objective) -> bool:
    return any(True for _ in objective.term_modules.parameters())


def _save_state(
    path: Path,
    objective: Objective,
    opt: torch.optim.Optimizer,
    step: int,
    meta: dict[str, Any],
    rank: int,
    device: torch.device,
) -> None:
    """Every process writes its RNG state; the main one also the weights, the moments and the log."""
    path.mkdir(parents=True, exist_ok=True)
    rng = {"rng": torch.get_rng_state()}
    if device.type == "cuda":
        rng["cuda_rng"] = torch.cuda.get_rng_state(device)
    save_file(rng, str(path / _rng_file(rank)))
    if rank != 0:
        return
    save_model(objective.model, str(path / _MODEL_TENSORS))
    if _has_term_params(objective):
        save_model(objective.term_modules, str(path / _TERMS_TENSORS))
    tensors = {}
    for i, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            tensors[f"opt.{i}.{k}"] = v if isinstance(v, Tensor) else torch.tensor(v)
    save_file(tensors, str(path / _STATE_TENSORS))
    (path / _STATE_JSON).write_text(json.dumps({**meta, "step": step}, indent=1))


def _load_state(
    path: Path, objective: Objective, opt: torch.optim.Optimizer, rank: int, device: torch.device
) -> dict[str, Any]:
    meta = json.loads((path / _STATE_JSON).read_text())
    load_model(objective.model, str(path / _MODEL_TENSORS))
    if _has_term_params(objective):
        if not (path / _TERMS_TENSORS).is_file():
            raise ValueError(f"{path} holds no {_TERMS_TENSORS}: it was written by a run without these loss terms")
        load_model(objective.term_modules, str(path / _TERMS_TENSORS))
    rng_path = path / _rng_file(rank)
    if not rng_path.is_file():
        raise ValueError(f"{path} has no RNG state of process {rank}: resume with as many processes as wrote it")
    rng = load_file(str(rng_path))
    torch.set_rng_state(rng["rng"])
    if "cuda_rng" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda_rng"], device)
    tensors = load_file(str(path / _STATE_TENSORS))
    sd = opt.state_dict()
    state: dict[int, dict[str, Tensor]] = {}
    for key, v in tensors.items():
        _, i, k = key.split(".", 2)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
    return meta


def saved_run_info(out_dir: str | Path) -> dict[str, Any] | None:
    """The ``run_info`` recorded with the resumable state in ``out_dir/last`` (None: no state)."""
    path = Path(out_dir) / "last" / _STATE_JSON
    return json.loads(path.read_text()).get("run_info") if path.is_file() else None


# ---- the loop -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainRunOptions:
    """How one :func:`train` run is carried out — not what it learns (that is :class:`TrainConfig`,
    which a resumed run must match).

    ``save_model_fn(model, folder)`` writes the model into ``last`` / ``best`` (e.g.
    :func:`save_checkpoint` bound to a world; None: only the resumable state). ``accelerator``: an
    ``accelerate`` accelerator for data parallelism (None: one process). ``resume``: continue an
    existing ``out_dir/last``. ``stop_at``: end early at that step, after saving ``last`` (an
    interruption on purpose: time budgets, resumption tests). ``progress``: the tqdm bar.
    ``run_info``: recorded in the saved state."""

    save_model_fn: Callable[[torch.nn.Module, Path], Any] | None = None
    accelerator: Any = None
    resume: bool = True
    stop_at: int | None = None
    progress: bool = True
    run_info: dict[str, Any] | None = None


def train(
    model: torch.nn.Module,
    train_ids: Int[Tensor, "n pos"],
    eval_ids: Int[Tensor, "m eval_pos"] | None,
    cfg: TrainConfig,
    out_dir: str | Path | None = None,
    *,
    pad_id: int = 0,
    loss_terms: Sequence[LossTerm] = (),
    labels: Int[Tensor, " n"] | None = None,
    loss_from: Int[Tensor, " n"] | None = None,
    run: TrainRunOptions | None = None,
    **run_settings: Any,
) -> TrainResult:
    """Train ``model`` in place on ``train_ids`` (right-padded rows); see the module docstring.

    ``out_dir/last`` always holds the latest resumable state; ``out_dir/best`` the checkpoint with
    the lowest held-out loss (written with ``save_model_fn``); ``out_dir/train_log.csv`` the log.
    ``out_dir=None``: nothing is written or resumed. ``run``: a :class:`TrainRunOptions`, whose
    fields may also be given as keywords (``progress=False``, ``stop_at=5``). With ``resume`` an
    existing ``last`` state is continued — its recorded config must equal ``cfg``. A
    half-precision model trains on float32 master weights under autocast (see the module
    docstring) and gets its dtype back.
    """
    from interp.models.parallel import rank_and_size

    opts = merge_options(TrainRunOptions, run, run_settings, "train")
    rank, size = rank_and_size(opts.accelerator)
    if cfg.batch_size < size:
        raise ValueError(f"train.batch_size ({cfg.batch_size}) must be ≥ the number of processes ({size})")
    terms = list(loss_terms)
    if labels is None:
        if any(getattr(t, "name", "") == "ula" for t in terms):
            raise ValueError("ULA needs labels: one class id per training row")
        labels = torch.full((len(train_ids),), -100, dtype=torch.long)
    if len(labels) != len(train_ids):
        raise ValueError(f"{len(labels)} labels for {len(train_ids)} training rows")
    if loss_from is not None and len(loss_from) != len(train_ids):
        raise ValueError(f"{len(loss_from)} loss_from entries for {len(train_ids)} training rows")
    out = Path(out_dir) if out_dir is not None else None
    last, best = (out / "last", out / "best") if out is not None else (None, None)
    with master_weights(model) as amp_dtype:
        return _train(
            model,
            train_ids,
            eval_ids,
            cfg,
            out,
            last,
            best,
            pad_id,
            terms,
            labels,
            loss_from,
            opts,
            rank,
            size,
            amp_dtype,
        )


def _train(
    model: torch.nn.Module,
    train_ids: Int[Tensor, "n pos"],
    eval_ids: Int[Tensor, "m eval_pos"] | None,
    cfg: TrainConfig,
    out: Path | None,
    last: Path | None,
    best: Path | None,
    pad_id: int,
    terms: list[LossTerm],
    labels: Int[Tensor, " n"],
    loss_from: Int[Tensor, " n"] | None,
    run: TrainRunOptions,
    rank: int,
    size: int,
    amp_dtype: torch.dtype | None,
) -> TrainResult:
    """The loop of :func:`train`, on float32 master weights; ``amp_dtype``: the half dtype its
    forward passes autocast to (None: plain float32)."""
    save_model_fn, accelerator, resume, stop_at = run.save_model_fn, run.accelerator, run.resume, run.stop_at
    progress, run_info, main = run.progress, run.run_info, rank == 0
    from tqdm.auto import tqdm

    from interp.models.device import model_device
    from interp.models.parallel import all_sum, shard

    objective = Objective(model, terms)
    device = accelerator.device if accelerator is not None else model_device(model)
    if accelerator is None:
        objective.term_modules.to(device)  # the heads go where the model is (accelerate moves both)
    opt = raw_opt = make_optimizer(objective, cfg)
    start, best_loss, best_step, history = 0, math.inf, -1, []
    cfg_dict = asdict(cfg)
    if resume and last is not None and (last / _STATE_JSON).exists():
        saved = json.loads((last / _STATE_JSON).read_text()).get("config")
        if saved != cfg_dict:  # checked before any weight is overwritten
            raise ValueError(
                f"{last} was written by a run with another training config; use a new out_dir "
                f"or resume=False (saved: {saved}, now: {cfg_dict})"
            )
        meta = _load_state(last, objective, raw_opt, rank, device)
        start, best_loss, best_step = meta["step"], meta["best_eval_loss"], meta["best_step"]
        history = meta["history"]
    end = cfg.steps if stop_at is None else min(cfg.steps, stop_at)
    eval_sub = None
    if eval_ids is not None and main:
        eval_sub = eval_ids if cfg.eval_sequences == 0 else eval_ids[: cfg.eval_sequences]

    def checkpoint(step: int) -> None:
        if last is None:
            return
        meta = {
            "config": cfg_dict,
            "best_eval_loss": best_loss,
            "best_step": best_step,
            "history": history,
            "run_info": run_info or {},
            "processes": size,
        }
        _save_state(last, objective, raw_opt, step, meta, rank, device)
        if save_model_fn is not None and main:
            save_model_fn(model, last)

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=torch.device(device).type, dtype=amp_dtype)

    # float16 gradients underflow without loss scaling (bfloat16 has float32's exponent range)
    scaler = torch.amp.GradScaler(torch.device(device).type) if amp_dtype == torch.float16 else None

    def run_eval(step: int) -> float:
        nonlocal best_loss, best_step
        if eval_sub is None:
            raise RuntimeError("run_eval: this run has no held-out rows to evaluate")
        with autocast():
            loss = evaluate_loss(model, eval_sub, pad_id)
        if loss < best_loss:
            best_loss, best_step = loss, step
            if save_model_fn is not None and best is not None:
                save_model_fn(model, best)
        return loss

    def uniform_rows(step: int) -> Tensor:
        return batch_indices(len(train_ids), cfg.batch_size, cfg.seed, step)

    rows_at: Callable[[int], Tensor] = (
        LengthBucketedBatches((train_ids != pad_id).sum(dim=1).cpu(), cfg.batch_size, cfg.seed)
        if cfg.length_bucketing
        else uniform_rows
    )

    norm = (
        None if cfg.loss_weighting == "batch" else expected_scored_tokens(train_ids, pad_id, cfg.batch_size, loss_from)
    )
    params = [p for p in objective.parameters() if p.requires_grad]
    weights = [float(t.weight) for t in terms]
    completed, loss_value, tokens_seen, t0 = start, float("nan"), 0, time.perf_counter()
    bar = tqdm(
        total=cfg.steps, initial=start, disable=not (progress and main), desc="train", unit="step", dynamic_ncols=True
    )
    with contextlib.ExitStack() as stack:
        for term in terms:
            stack.enter_context(term.install(model))
        wrapped = objective
        if accelerator is not None:
            wrapped, opt = accelerator.prepare(objective, opt)
            stack.callback(accelerator.free_memory)  # drop accelerate's references to this run's objects
        wrapped.train()
        try:
            for step in range(start, end):
                rows = rows_at(step)
                if size > 1:
                    rows = shard(rows, accelerator)
                batch = make_batch(train_ids[rows].cpu(), pad_id)  # lengths on the CPU, then to the device
                scored = None
                if loss_from is not None:  # input position p predicts token p + 1: keep p + 1 >= loss_from
                    pos = torch.arange(batch.targets.shape[1])[None]
                    scored = batch.targets.masked_fill(pos + 1 < loss_from[rows].cpu()[:, None], -100).to(device)
                lr = learning_rate(cfg, step)
                for g in opt.param_groups:
                    g["lr"] = lr
                with autocast():
                    parts = wrapped(batch.inputs.to(device), batch.targets.to(device), labels[rows].to(device), scored)
                counts = all_sum(torch.stack([parts[1]] + [parts[3 + 2 * i] for i in range(len(terms))]), accelerator)
                ce_mean = parts[0] / counts[0].clamp(min=1)  # the batch's mean, what the log shows
                ce = ce_mean if norm is None else parts[0] / norm  # what the gradient follows
                loss, values = ce, []
                for i, w in enumerate(weights):
                    values.append(parts[2 + 2 * i] / counts[1 + i].clamp(min=1))
                    loss = loss + w * values[-1]
                opt.zero_grad(set_to_none=True)
                scaled = loss if scaler is None else scaler.scale(loss)
                if accelerator is None:
                    scaled.backward()
                else:
                    accelerator.backward(scaled * size)  # DDP averages gradients over processes: undo the 1/size
                if scaler is not None:
                    scaler.unscale_(opt)
                if cfg.grad_clip > 0:
                    if accelerator is None:
                        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                    else:
                        accelerator.clip_grad_norm_(params, cfg.grad_clip)
                if scaler is None:
                    opt.step()
                else:  # skips the step when a gradient overflowed, and adapts the scale
                    scaler.step(opt)
                    scaler.update()
                completed = done = step + 1
                tokens_seen += int(counts[0])
                eval_now = eval_sub is not None and (
                    (cfg.eval_every and done % cfg.eval_every == 0) or done == cfg.steps
                )
                if done % 10 == 0 or done == end or eval_now:
                    # each process holds its share of the global means (normalised by global counts)
                    shown = ce_mean.detach() + sum(w * v.detach() for w, v in zip(weights, values))
                    reduced = all_sum(
                        torch.stack([shown, ce_mean.detach()] + [v.detach() for v in values]), accelerator
                    )
                    loss_value = float(reduced[0])
                    elapsed = time.perf_counter() - t0
                    row = {
                        "step": done,
                        "loss": loss_value,
                        "next_token_loss": float(reduced[1]),
                        "lr": lr,
                        "elapsed_s": elapsed,
                        "tokens_per_s": tokens_seen / max(elapsed, 1e-9),
                    }
                    row.update({t.name: float(v) for t, v in zip(terms, reduced[2:])})
                    if eval_now:
                        row["eval_loss"] = run_eval(done)
                    history.append(row)
                    bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{row['tokens_per_s']:,.0f}", refresh=False)
                bar.update(1)
                if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < end:
                    checkpoint(done)
        except KeyboardInterrupt:
            checkpoint(completed)
            bar.close()
            raise TrainingInterrupted(
                f"interrupted after step {completed}; state saved in {last}, run the same command to resume"
            ) from None
    bar.close()
    checkpoint(end)
    if completed == start and history:  # resumed at the end: the last step's loss is in the log
        loss_value = float(history[-1]["loss"])
    elapsed = time.perf_counter() - t0
    hist = pd.DataFrame(history)
    if out is not None and main:
        hist.to_csv(out / "train_log.csv", index=False)
    return TrainResult(
        out_dir=out,
        steps=end,
        final_train_loss=loss_value,
        best_eval_loss=best_loss,
        best_step=best_step,
        tokens_per_second=tokens_seen / max(elapsed, 1e-9),
        history=hist,
    )
