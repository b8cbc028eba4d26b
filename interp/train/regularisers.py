"""HLS and ULA: the regularised fine-tuning objectives of PragWorld §6.3, as trainer loss terms.

Both read MLP outputs of chosen layers **in the training forward pass** — a forward hook on each
layer's MLP module keeps its output (with its gradient) — so no second forward runs, unlike the
reference code, which runs one per step.

- **HLS** (harmful-layer suppression), as the paper writes it (§6.3) and the reference code
  computes it (``weight · Σ_layers mean(mlp_out²)``)::

      loss = L_next-token + β · Σ_{ℓ ∈ H} mean_{non-padding positions, features} MLP_out_ℓ²

  a *sum* over the penalised layers, each term the layer's mean squared MLP output over the real
  tokens (the reference also averages over padding: not here). ``reduction = "mean"`` divides the
  sum by |H| (interp's earlier definition: with 5 layers its β acts 5× weaker).

- **ULA** (useful-layer amplification): a two-layer classification head (Linear → GELU → Linear)
  on each useful layer's MLP output, pooled at each row's last position; labels from the task (the
  yes/no gold for QA data, the current-state label for world sequences)::

      loss = L_next-token + α · mean_{ℓ ∈ U} cross-entropy(head_ℓ(MLP_out_ℓ[last]), label)

β and α default to 1e-3 (the paper's).

**Positions.** Training rows are ``<bos>``-prefixed and right-padded; a :class:`~interp.train.data.Batch`
marks the input positions whose next token is scored (``batch.mask``). Those are the non-padding
positions that count: every real token of a row except its final one (which is only ever a
target). Padding never counts — the reference averages over it — and every row contributes the
same positions whatever the width of its batch. ULA pools at each row's *last* such position: the
one that predicts the final token (for QA text ending in the answer, the position before the
answer, i.e. ``Label:``).

**Which module is hooked**: the HF module whose output is ``blocks.{ℓ}.hook_mlp_out``,
``Site(ℓ, "mlp_out").module(model)`` — one contract with the sweeps' hook names, with its
architecture table in :mod:`interp.hooks.sites` (``transformer.h.{ℓ}.mlp`` on GPT-2,
``model.layers.{ℓ}.mlp`` on Llama-style models, ``gpt_neox.layers.{ℓ}.mlp`` on GPT-NeoX). A
``peft`` (LoRA) model or a ``DistributedDataParallel`` wrapper is looked through; the hooks sit on
the same modules (LoRA adapters live inside them).

:meth:`HLS.partial` / :meth:`ULA.partial` return ``(sum, count)`` so the training loop
(:func:`interp.train.train`) can divide by the count summed over all processes — a data-parallel
run then equals a single-process run with the same global batch (``compute`` is ``sum / count``
of one batch, for use outside the loop).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from interp.hooks.hooked import module_hooks
from interp.hooks.sites import Site, hf_blocks
from interp.train.data import Batch

DEFAULT_WEIGHT = 1e-3
HEADS_TENSORS = "ula_heads.safetensors"
HEADS_JSON = "ula_heads.json"
HEADS_FORMAT = "interp.ula_heads/1"


class LayerSpecError(ValueError):
    """A regulariser's layer list is empty with a nonzero weight, out of range, or inconsistent."""


# ---- the HF modules ------------------------------------------------------------------------------


def n_layers_of(model: nn.Module) -> int:
    """Number of decoder blocks of an HF model (or a bridge, or a peft / DDP wrapper)."""
    return len(hf_blocks(model)[0])


def mlp_modules(model: nn.Module, layers: Sequence[int]) -> list[nn.Module]:
    """The module of ``Site(ℓ, "mlp_out")`` for each of ``layers`` (its output is ``blocks.{ℓ}.hook_mlp_out``)."""
    check_layers(layers, n_layers_of(model), "layers", weight=1.0)
    return [Site(int(x), "mlp_out").module(model) for x in layers]


def mlp_module_names(model: nn.Module, layers: Sequence[int]) -> list[str]:
    """Attribute paths of the hooked modules, e.g. ``transformer.h.3.mlp`` (for logs and docs)."""
    return [Site(int(x), "mlp_out").module_path(model) for x in layers]


# ---- layers: lists, verdict files, checks -------------------------------------------------------


def check_layers(layers: Sequence[int], n_layers: int, what: str, weight: float) -> list[int]:
    """Sorted unique layers, each in ``0..n_layers-1``; empty only when ``weight`` is 0.

    Raises :class:`LayerSpecError` with the valid range, or saying the weight needs layers.
    """
    out = sorted({int(x) for x in layers})
    bad = [x for x in out if not 0 <= x < n_layers]
    if bad:
        raise LayerSpecError(
            f"{what}: layer {bad[0]} is out of range; the model has {n_layers} layers (valid: 0..{n_layers - 1})"
        )
    if not out and weight != 0:
        raise LayerSpecError(
            f"{what}: no layers given but the weight is {weight:g}; name the layers (or set the weight to 0)"
        )
    return out


def layers_from_verdicts(
    path: str | Path, which: str, bridge: Any | None = None, n_layers: int | None = None, ablation: str = "zero"
) -> list[int]:
    """The ``which`` (``harmful`` / ``useful``) layers of a verdict file (``interp sweep`` writes
    ``verdicts.json``) made with the removal ``ablation`` (``zero``, ``mean``, ``resample``,
    ``scale0.5`` …; :mod:`interp.analysis.engines.removals`). ``path`` may be the sweep's folder: then
    ``verdicts_<ablation>.json`` when the sweep ran several removals, else ``verdicts.json``. The
    file must say it holds that removal's verdicts (files from before the removal kinds are zero-out).
    With ``bridge`` the file's model fingerprint must match it
    (:class:`~interp.analysis.engines.fingerprint.ModelMismatchError` otherwise); with only ``n_layers``
    its layer count must."""
    from interp.analysis.verdicts.layers import load_verdicts

    path = Path(path)
    if path.is_dir():
        path = (
            path / f"verdicts_{ablation}.json"
            if (path / f"verdicts_{ablation}.json").is_file()
            else path / "verdicts.json"
        )
    if not path.is_file():
        raise FileNotFoundError(f"verdict file {path} does not exist (run `interp sweep` to make one)")
    verdicts = load_verdicts(path, bridge)
    got = (verdicts.meta.get("ablation") or {}).get("name", "zero")
    if got != ablation:
        raise ValueError(
            f"{path} holds the verdicts of the {got!r} removal, not {ablation!r} (regulariser.ablation): "
            f"point regulariser.verdicts at verdicts_{ablation}.json of a sweep run with "
            f"--ablation {ablation.rstrip('0123456789.') or ablation}, or set ablation = {got!r}"
        )
    if bridge is None and n_layers is not None:
        from interp.analysis.engines.fingerprint import ModelMismatchError

        got_n = int((verdicts.meta.get("model") or {}).get("n_layers", -1))
        if got_n != n_layers:
            raise ModelMismatchError(f"{path} was computed on a model with {got_n} layers; this model has {n_layers}")
    return verdicts.layers(which)


# ---- collecting MLP outputs ---------------------------------------------------------------------


class _Collector:
    """Forward hooks that keep the latest output of each hooked module (with its gradient)."""

    def __init__(self) -> None:
        self.outputs: dict[int, Tensor] = {}

    @contextlib.contextmanager
    def hooks(self, model: nn.Module, layers: Sequence[int]) -> Iterator[None]:
        try:
            with module_hooks(
                [(module, self._hook(layer)) for layer, module in zip(layers, mlp_modules(model, layers))]
            ):
                yield
        finally:
            self.outputs.clear()

    def _hook(self, layer: int) -> Callable[..., None]:
        def fn(module: nn.Module, args: Any, output: Any) -> None:
            self.outputs[layer] = output[0] if isinstance(output, tuple) else output

        return fn

    def take(self, layers: Sequence[int], batch: Batch, what: str) -> list[Tensor]:
        missing = [x for x in layers if x not in self.outputs]
        if missing:
            raise RuntimeError(
                f"{what}: no MLP output collected for layer {missing[0]}: call install() "
                "and run the forward pass before compute()"
            )
        outs = [self.outputs.pop(x) for x in layers]
        want = tuple(batch.inputs.shape)
        if tuple(outs[0].shape[:2]) != want:
            raise RuntimeError(
                f"{what}: the collected MLP output has shape {tuple(outs[0].shape)}, not that of "
                f"the batch {want}: compute() must follow the batch's own forward"
            )
        return outs


def last_positions(mask: Tensor) -> Int[Tensor, " batch"]:
    """Index of each row's last scored position (-1 for a row with none)."""
    n = mask.sum(dim=1)
    pos = torch.arange(mask.shape[1], device=mask.device)
    return torch.where(n > 0, (mask * (pos + 1)).max(dim=1).values - 1, torch.full_like(n, -1))


# ---- HLS ----------------------------------------------------------------------------------------


HLS_REDUCTIONS = ("sum", "mean")


class HLS:
    """Harmful-layer suppression: β · Σ over ``layers`` of each layer's mean squared MLP output
    over the non-padding positions (``reduction="sum"``, the paper's; ``"mean"`` divides by the
    number of layers). See the module docstring. A :class:`~interp.train.trainer.LossTerm`."""

    name = "hls"

    def __init__(
        self, layers: Sequence[int], weight: float = DEFAULT_WEIGHT, n_layers: int | None = None, reduction: str = "sum"
    ):
        if reduction not in HLS_REDUCTIONS:
            raise ValueError(f"HLS reduction must be one of {HLS_REDUCTIONS}, got {reduction!r}")
        self.reduction = reduction
        if n_layers is not None:
            layers = check_layers(layers, n_layers, "HLS harmful layers", weight)
        elif not layers and weight != 0:
            raise LayerSpecError(f"HLS harmful layers: no layers given but β = {weight:g}")
        self.layers = sorted({int(x) for x in layers})
        self.weight = float(weight)
        self._collector = _Collector()

    def install(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        check_layers(self.layers, n_layers_of(model), "HLS harmful layers", self.weight)
        return self._collector.hooks(model, self.layers)

    def partial(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """``(Σ_ℓ Σ_{positions, features} out² / d, number of positions)`` (``/ |H|`` more with
        ``reduction="mean"``); ``compute = sum / count``."""
        mask = batch.mask
        count = mask.sum().to(torch.float32)
        if not self.layers:
            return torch.zeros((), device=mask.device), count
        outs = self._collector.take(self.layers, batch, "HLS")
        m = mask.to(outs[0].dtype)[..., None]
        # under a device map each layer's output lives on its layer's device: the mask goes there,
        # each layer's sum comes back to the batch's device (where the count is)
        total = sum(
            (((o * m.to(o.device)) * o).sum(dtype=torch.float32).to(mask.device) for o in outs),
            torch.zeros((), device=mask.device),
        )
        per = outs[0].shape[-1] * (len(outs) if self.reduction == "mean" else 1)
        return total / per, count

    def compute(self, batch: Batch) -> Tensor:
        total, count = self.partial(batch)
        return total / count.clamp(min=1)


# ---- ULA ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledBatch(Batch):
    """A :class:`Batch` with one class id per row (``-100``: no label) for ULA."""

    labels: Int[Tensor, " batch"] | None = None


class ULAHeads(nn.Module):
    """One two-layer classification head (Linear → GELU → Linear) per useful layer.

    ``classes`` names the class ids (e.g. ``["no", "yes"]`` or the intersections of a city).
    Saved beside a checkpoint as ``ula_heads.safetensors`` + ``ula_heads.json`` (:meth:`save` /
    :meth:`load`); no pickles.
    """

    def __init__(
        self,
        layers: Sequence[int],
        d_model: int,
        classes: Sequence[str],
        hidden: int = 128,
        seed: int = 0,
        task: str = "",
    ):
        super().__init__()
        if len(classes) < 2:
            raise ValueError(f"ULA needs at least 2 classes, got {list(classes)}")
        if hidden < 1:
            raise ValueError(f"ULA head width must be ≥ 1, got {hidden}")
        self.layers = [int(x) for x in layers]
        self.d_model, self.hidden, self.seed, self.task = int(d_model), int(hidden), int(seed), task
        self.classes = [str(c) for c in classes]
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)  # the heads' init depends on the seed only, not on the global RNG
        try:
            self.heads = nn.ModuleList(
                nn.Sequential(nn.Linear(self.d_model, hidden), nn.GELU(), nn.Linear(hidden, len(self.classes)))
                for _ in self.layers
            )
        finally:
            torch.random.set_rng_state(gen_state)

    def forward(self, pooled: Sequence[Float[Tensor, "batch d_model"]]) -> list[Float[Tensor, "batch n_classes"]]:
        return [head(x) for head, x in zip(self.heads, pooled)]

    def config(self) -> dict[str, Any]:
        return {
            "format": HEADS_FORMAT,
            "layers": self.layers,
            "d_model": self.d_model,
            "hidden": self.hidden,
            "classes": self.classes,
            "seed": self.seed,
            "task": self.task,
            "architecture": "per layer: Linear(d_model, hidden) → GELU → Linear(hidden, n_classes), "
            "on the MLP output at each row's last position",
        }

    def save(self, folder: str | Path) -> Path:
        from safetensors.torch import save_model

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_model(self, str(folder / HEADS_TENSORS))
        (folder / HEADS_JSON).write_text(json.dumps(self.config(), indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> "ULAHeads":
        from safetensors.torch import load_model

        folder = Path(folder)
        meta_path = folder / HEADS_JSON
        if not meta_path.is_file():
            raise FileNotFoundError(f"{folder} has no {HEADS_JSON}: no ULA heads were saved there")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != HEADS_FORMAT:
            raise ValueError(f"{meta_path}: format {meta.get('format')!r}, expected {HEADS_FORMAT!r}")
        heads = cls(
            meta["layers"], meta["d_model"], meta["classes"], meta["hidden"], meta.get("seed", 0), meta.get("task", "")
        )
        load_model(heads, str(folder / HEADS_TENSORS))
        return heads


class ULA(nn.Module):
    """Useful-layer amplification: α · mean over the heads of the cross-entropy of each head on its
    layer's MLP output at the row's last position. A :class:`~interp.train.trainer.LossTerm` and an
    ``nn.Module`` (the heads are trained with the model; the training loop hands them to the
    optimizer and to data parallelism). Labels come from ``batch.labels`` (:class:`LabelledBatch`;
    the loop builds it from its ``labels``).
    """

    name = "ula"

    def __init__(self, heads: ULAHeads, weight: float = DEFAULT_WEIGHT):
        super().__init__()
        if not heads.layers and weight != 0:
            raise LayerSpecError(f"ULA useful layers: no layers given but α = {weight:g}")
        self.heads = heads
        self.weight = float(weight)
        self._collector = _Collector()

    @property
    def layers(self) -> list[int]:
        return self.heads.layers

    def install(self, model: nn.Module) -> contextlib.AbstractContextManager[None]:
        check_layers(self.layers, n_layers_of(model), "ULA useful layers", self.weight)
        return self._collector.hooks(model, self.layers)

    def _labels(self, batch: Batch) -> Tensor:
        labels = getattr(batch, "labels", None)
        if labels is None:
            raise ValueError("ULA needs a label per row: pass a LabelledBatch (train(..., labels=...))")
        return labels

    def partial(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """``(Σ_heads Σ_rows cross-entropy / |U|, number of labelled rows)``; ``compute = sum / count``."""
        labels = self._labels(batch).to(batch.inputs.device)
        last = last_positions(batch.mask)
        labels = torch.where(last >= 0, labels, torch.full_like(labels, -100))
        count = (labels != -100).sum().to(torch.float32)
        if not self.layers:
            return torch.zeros((), device=labels.device), count
        outs = self._collector.take(self.layers, batch, "ULA")
        logits = self.heads(self._pool(outs, last))
        total = sum(
            (
                F.cross_entropy(lg, labels.to(lg.device), ignore_index=-100, reduction="sum").to(labels.device)
                for lg in logits
            ),
            torch.zeros((), device=labels.device),
        )
        return total / len(logits), count

    def _pool(self, outs: Sequence[Tensor], last: Tensor) -> list[Tensor]:
        """Each layer's output at each row's last scored position, on the heads' device (under a
        device map each output lives on its own layer's device; the indices go there)."""
        to = next(self.heads.parameters()).device
        at = last.clamp(min=0)
        return [o[torch.arange(len(at), device=o.device), at.to(o.device)].float().to(to) for o in outs]

    def compute(self, batch: Batch) -> Tensor:
        total, count = self.partial(batch)
        return total / count.clamp(min=1)

    @torch.no_grad()
    def accuracy(self, batch: Batch) -> list[float]:
        """Per head, the share of labelled rows classified right (on the forward that just ran)."""
        labels = self._labels(batch).to(batch.inputs.device)
        last = last_positions(batch.mask)
        keep = (labels != -100) & (last >= 0)
        outs = self._collector.take(self.layers, batch, "ULA")
        logits = self.heads(self._pool(outs, last))
        n = max(int(keep.sum()), 1)
        return [float(((lg.argmax(-1).to(labels.device) == labels) & keep).sum()) / n for lg in logits]


# ---- labels for world sequences -----------------------------------------------------------------


@dataclass(frozen=True)
class LabelCoding:
    """Class names ↔ ids (``None`` labels map to -100, never trained on)."""

    classes: tuple[str, ...]

    @classmethod
    def fit(cls, labels: Sequence[Any]) -> "LabelCoding":
        seen = sorted({str(x) for x in labels if x is not None}, key=_natural)
        return cls(tuple(seen))

    def encode(self, labels: Sequence[Any]) -> Tensor:
        index = {c: i for i, c in enumerate(self.classes)}
        return torch.tensor([-100 if x is None else index.get(str(x), -100) for x in labels], dtype=torch.long)


def _natural(s: str) -> tuple[int, Any]:
    return (0, int(s)) if s.lstrip("-").isdigit() else (1, s)


def last_state_labels(world: Any, sequences: Sequence[Sequence[str]]) -> list[Any]:
    """The world's current-state label (``world.state_label``) at each sequence's pooled position:
    the state after all tokens but the last (token ids carry ``<bos>`` first, so input position
    ``len(seq) - 1`` has read ``len(seq) - 1`` tokens). ``None`` where the world has no label."""
    out: list[Any] = []
    for seq in sequences:
        if not seq:
            out.append(None)
            continue
        out.append(world.state_label(world.run(seq[:-1])))
    return out


def ula_labels(world: Any, sequences: Sequence[Sequence[str]]) -> tuple[list[Any], str]:
    """ULA's label per sequence for world data, and what it is.

    The dialogue world's sequences end in a probe's answer (``… ? yes``): the pooled position is the
    ``?``, where the model predicts the answer, so the label is the gold answer (``yes`` / ``no``;
    ``None`` for a sequence that does not end in one). Every other world: :func:`last_state_labels`.
    """
    from interp.worlds.dialogue import DialogueWorld

    if isinstance(world, DialogueWorld):
        from interp.worlds.dialogue.grammar import ANSWERS

        return (
            [s[-1] if len(s) >= 2 and s[-2] == "?" and s[-1] in ANSWERS else None for s in sequences],
            "yes/no gold answer",
        )
    return last_state_labels(world, sequences), "current-state label"


def describe_terms(terms: Sequence[Any], model: nn.Module) -> list[str]:
    """One line per term: which modules it hooks and its weight (for logs)."""
    lines = []
    for t in terms:
        names = mlp_module_names(model, t.layers) if t.layers else []
        w = "β" if t.name == "hls" else "α"
        lines.append(f"{t.name.upper()}: {w} = {t.weight:g} on layers {t.layers} ({', '.join(names) or 'none'})")
    return lines


__all__ = [
    "DEFAULT_WEIGHT",
    "HLS",
    "HLS_REDUCTIONS",
    "LabelCoding",
    "LabelledBatch",
    "LayerSpecError",
    "ULA",
    "ULAHeads",
    "check_layers",
    "describe_terms",
    "last_positions",
    "last_state_labels",
    "layers_from_verdicts",
    "mlp_module_names",
    "mlp_modules",
    "n_layers_of",
    "ula_labels",
]
