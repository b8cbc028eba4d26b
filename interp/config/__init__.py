"""Configs are frozen dataclasses loaded from TOML; an unknown key is an error that names it.

The config room: the loader (:func:`load_toml`, :func:`from_dict`) and the plain settings of
training (:class:`TrainConfig`), fine-tuning (:class:`FinetuneConfig` and its tables) and the main
job's later stages (:class:`AnalysisConfig`, :class:`PlantConfig`, :class:`FixConfig`). Pure
data, no torch: every room can import it, it imports none.

A config's fields that are command-line flags carry them (:mod:`interp.config.flags`): the
``interp finetune`` placement flags are :class:`FinetuneConfig`'s fields, the run-control flags of
``interp run`` / ``train`` / ``finetune`` the fields of :mod:`interp.config.runs`. A run folder
records its config in ``run.json`` under ``config`` (:func:`~interp.config.flags.recorded_config`;
``from_run`` of each config reads it back, the same config again).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import tomllib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from interp.config.flags import FlagFields, flag, recorded_config

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file is missing, malformed, or has unknown keys or wrong types."""


def refuse_unknown(
    given: Iterable[str], allowed: Iterable[str], what: str, where: str = "", error: type[Exception] = ConfigError
) -> None:
    """Refuse the names of ``given`` that are not ``allowed``: one sentence naming them and the
    allowed ones (``where: unknown key 'stepz'; allowed: steps, batch_size, …``), raised as
    ``error`` (a :class:`ConfigError` for a file's keys, a ``TypeError`` for keyword arguments).
    ``what``: what one name is (``key``, ``sweep setting`` …; an ``s`` is added for several)."""
    allowed = list(dict.fromkeys(allowed))
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        prefix = f"{where}: " if where else ""
        plural = "s" if len(unknown) > 1 else ""
        raise error(f"{prefix}unknown {what}{plural} {names}; allowed: {', '.join(allowed)}")


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if _is_dataclass_type(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{where}: {value!r} is not one of {typing.get_args(tp)}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and (not isinstance(value, tp) or (tp is int and isinstance(value, bool))):
        raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from a dict, recursively; unknown keys raise :class:`ConfigError`."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    refuse_unknown(data, fields, "key", where)
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def merge_options(cls: type[T], given: T | None, keywords: dict[str, Any], where: str) -> T:
    """The options a function runs with: ``given`` (None: ``cls()``) with ``keywords`` set by name.

    A function whose settings are a frozen dataclass still takes them as keyword arguments (the
    call ``f(x, depth=3)`` equals ``f(x, Options(depth=3))``); a name that is not a field of
    ``cls`` is a ``TypeError`` naming it and the fields, as for any unknown keyword. The result is
    made by ``cls(...)`` / :func:`dataclasses.replace`, so it is checked like any other."""
    known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    refuse_unknown(keywords, known, f"{cls.__name__} setting", f"{where}()", TypeError)
    base = given if given is not None else cls()
    if not isinstance(base, cls):
        raise TypeError(f"{where}(): options must be a {cls.__name__}, got {type(base).__name__}")
    return dataclasses.replace(base, **keywords) if keywords else base  # type: ignore[type-var]


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed TOML file at ``path``; a missing file or invalid TOML is a :class:`ConfigError`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from None


def load_toml(cls: type[T], path: str | Path) -> T:
    """Read a TOML file into dataclass ``cls``; errors name the file and the key."""
    return from_dict(cls, read_toml(path), where=str(path))


def path_field(default: str | None = None, *, kind: Literal["file", "dir"] = "file") -> Any:
    """A config field that names a file (or folder): :func:`check_files` checks it exists, and that a
    ``.json`` / ``.csv`` / ``.toml`` file parses, before any data or model is loaded."""
    return field(default=default, metadata={"path": kind})


def _parse_error(path: Path) -> str | None:
    """Why ``path`` does not parse as its suffix says (JSON, CSV, TOML), or None."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".toml":
            tomllib.loads(path.read_text(encoding="utf-8"))
        elif suffix == ".csv":
            with open(path, newline="", encoding="utf-8") as f:
                rows = csv.reader(f, strict=True)
                header = next(rows, None)
                if not header:
                    return "invalid CSV (no header row)"
                for row in rows:
                    if row and len(row) != len(header):
                        return f"invalid CSV (line {rows.line_num} has {len(row)} fields, the header {len(header)})"
    except json.JSONDecodeError as e:
        return f"invalid JSON ({e})"
    except tomllib.TOMLDecodeError as e:
        return f"invalid TOML ({e})"
    except csv.Error as e:
        return f"invalid CSV ({e})"
    except UnicodeDecodeError as e:
        return f"not UTF-8 text ({e})"
    return None


def config_paths(cfg: Any, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(key, path, kind)`` for every :func:`path_field` of dataclass ``cfg`` (nested tables too)
    that is set."""
    out: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if "path" in f.metadata and value is not None:
            out.append((key, str(value), f.metadata["path"]))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += config_paths(value, f"{key}.")
    return out


def check_files(cfg: Any, where: str | Path = "config", base: str | Path | None = None) -> None:
    """Every file or folder ``cfg`` names (its :func:`path_field` s) exists, and a JSON, CSV or TOML
    file parses; else a :class:`ConfigError` naming the config, the key and the file. Relative paths
    start from ``base`` (default: the current directory). Run it right after loading a config, so a
    bad file fails before any data or model is loaded."""
    root = Path(base) if base is not None else Path.cwd()
    for key, value, kind in config_paths(cfg):
        path = Path(value).expanduser()
        path = path if path.is_absolute() else root / path
        if kind == "dir":
            if not path.is_dir():
                raise ConfigError(f"{where}: {key} = {value!r}: no folder {path}")
            continue
        if not path.is_file():
            raise ConfigError(f"{where}: {key} = {value!r}: no file {path}" + (" (a folder)" if path.is_dir() else ""))
        why = _parse_error(path)
        if why:
            raise ConfigError(f"{where}: {key} = {value!r}: {path} is {why}")


def to_dict(obj: Any) -> dict[str, Any]:
    """A dataclass as plain JSON-friendly data (tuples become lists)."""
    return dataclasses.asdict(obj)


# ---- training and fine-tuning configs (plain data: the trainer and `interp finetune` read them) ----

#: normalisations of a step's next-token loss (:attr:`TrainConfig.loss_weighting`)
LOSS_WEIGHTINGS = ("token", "batch")


@dataclass(frozen=True)
class TrainConfig:
    """Settings of :func:`interp.train.train`, the one loop for pre-training and fine-tuning."""

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
    #: how a step's summed next-token loss is normalised. ``token``: by the batch's *expected*
    #: scored tokens (``batch_size`` × the mean scored tokens per training row), so every token of
    #: the data weighs the same however the rows are batched. ``batch``: by the batch's own count
    #: (the usual per-batch mean); with length bucketing it weighs a short row's tokens more (a
    #: batch of 3-turn routes counts as much as one of 99-turn routes), which biases what the model
    #: learns toward short sequences (measured on the demo: P(end | at the destination) 0.44 vs the
    #: data's 0.35)
    loss_weighting: str = "token"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("train.steps and train.batch_size must be ≥ 1")
        if self.lr <= 0 or self.min_lr < 0 or self.min_lr > self.lr:
            raise ValueError(f"need 0 ≤ train.min_lr ≤ train.lr and lr > 0 (lr={self.lr}, min_lr={self.min_lr})")
        if self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError("train.warmup_steps and train.grad_clip must be ≥ 0")
        if self.loss_weighting not in LOSS_WEIGHTINGS:
            raise ValueError(
                f"train.loss_weighting must be one of {', '.join(LOSS_WEIGHTINGS)}, got {self.loss_weighting!r}"
            )


#: fine-tuning objectives: next-token loss only, + HLS, + ULA (PragWorld §6.3)
OBJECTIVES = ("plain", "hls", "ula")


@dataclass(frozen=True)
class FinetuneData:
    """``[data]`` of a fine-tuning config: world sequences of the checkpoint's run, PragWorld
    yes/no rows, or contrast examples (e.g. IOI)."""

    #: ``world``: token sequences of the checkpoint's world; ``pragworld``: yes/no QA rows (CSV);
    #: ``contrast``: contrast examples (JSONL: prompt, correct, foil, group; trained toward the correct token)
    kind: Literal["world", "pragworld", "contrast"] = "world"
    #: world: a sequence file (default ``<checkpoint>/../data/train.txt``); pragworld: a CSV; contrast: a JSONL file
    train: str | None = path_field()
    #: world: held-out sequences (default ``<checkpoint>/../data/test.txt``); pragworld: a CSV of
    #: held-out alterations; contrast: a JSONL file of held-out examples
    test: str | None = path_field()
    #: at most this many training rows (0: all)
    n_train: int = 0
    #: at most this many held-out rows in every evaluation (0: all)
    n_eval: int = 200
    #: pragworld / contrast: the next-token loss on the gold (correct) ``answer`` token only (the default:
    #: supervised fine-tuning as the reference ran it, prompt masked) or on ``all`` tokens of prompt + answer;
    #: world data always trains on every token (unset or ``"all"``)
    loss_on: Literal["answer", "all"] | None = None
    #: pragworld / contrast: BOS as the model's tokenizer adds it (unset), always (true) or never (false);
    #: see :mod:`interp.tasks.tokens`
    prepend_bos: bool | None = None

    def __post_init__(self) -> None:
        if self.loss_on not in (None, "answer", "all"):
            raise ValueError(f"data.loss_on must be 'answer' or 'all', got {self.loss_on!r}")
        if self.kind == "world" and self.loss_on == "answer":
            raise ValueError(
                "data.loss_on = 'answer' needs pragworld or contrast data (world sequences have no answer "
                "token): use 'all' or leave it unset"
            )
        if self.kind == "world" and self.prepend_bos is not None:
            raise ValueError(
                "data.prepend_bos applies to pragworld or contrast data (world sequences always start with <bos>)"
            )


@dataclass(frozen=True)
class RegulariserConfig:
    """``[regulariser]`` of a fine-tuning config: the HLS / ULA layers (lists or a verdict file) and
    weights."""

    #: HLS layers (explicit); or take the verdict file's ``harmful`` list
    harmful: tuple[int, ...] | None = None
    #: ULA layers (explicit); or take the verdict file's ``useful`` list
    useful: tuple[int, ...] | None = None
    #: a verdict file of ``interp sweep`` (``verdicts.json``, or the sweep's folder), checked against the model
    verdicts: str | None = path_field()
    #: the removal whose verdicts HLS / ULA take (``zero``, the paper's; ``mean``, ``resample``,
    #: ``scale0.5`` …): the file must hold that removal's verdicts (a folder: its ``verdicts_<ablation>.json``)
    ablation: str = "zero"
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
    """``[eval]`` of a fine-tuning config: which measures the before/after table holds."""

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
    #: PragWorld data: the label-prompt accuracies on the held-out rows (off when a caller runs its
    #: own evaluation, e.g. :mod:`interp.jobs.pragworld`)
    pragworld: bool = True


#: ``--device``'s values (its help, before the default)
DEVICE_HELP = "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps"
#: ``--dtype``'s values (its help, before the default)
DTYPE_HELP = (
    "float32, bfloat16, float16, or auto (bfloat16 on a CUDA device that supports it, else "
    "float16; on a CPU bfloat16 with native AVX-512 BF16 / AMX, else float32)"
)
#: a flag's default that is the config file's setting
FILE_DEFAULT = "(default: the config's)"


@dataclass(frozen=True)
class FinetuneConfig(FlagFields):
    """Settings of ``interp finetune`` (one TOML file): the checkpoint, the objectives (plain, hls,
    ula), seeds, placement, and the data, regulariser, LoRA, training and evaluation sections.
    The placement fields are also flags (``--device``, ``--dtype``, ``--device-map``,
    ``--n-devices``: given, they replace the file's setting; :meth:`from_args`)."""

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
    device: str = field(default="auto", metadata=flag(f"{DEVICE_HELP} {FILE_DEFAULT}", default=None))
    #: parameter dtype of the model being trained: float32 | bfloat16 | float16 | auto (float32 on
    #: CPU, bfloat16 on CUDA when supported)
    dtype: str = field(default="float32", metadata=flag(f"{DTYPE_HELP} {FILE_DEFAULT}", default=None))
    #: a Hugging Face device map for a model larger than one GPU (auto, balanced, sequential, or a
    #: JSON {module: device}): accelerate keeps that placement (one process only); the evaluation
    #: before/after loads the model on the same placement
    device_map: str | None = field(
        default=None,
        metadata=flag(
            "split the model over several devices (Hugging Face / accelerate placement, one process): auto, "
            f"balanced, sequential, or a JSON object {{module name: device}} {FILE_DEFAULT}",
            metavar="MAP",
        ),
    )
    #: split the model evenly over this many CUDA GPUs (``balanced`` with a memory budget on each,
    #: as ``TransformerBridge.boot_transformers``); instead of, or beside, ``device_map``
    n_devices: int | None = field(
        default=None,
        metadata=flag(
            f"split the model evenly over this many CUDA GPUs, one process {FILE_DEFAULT}", type=int, metavar="N"
        ),
    )
    data: FinetuneData = field(default_factory=FinetuneData)
    regulariser: RegulariserConfig = field(default_factory=RegulariserConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            steps=200, batch_size=32, lr=3e-4, min_lr=3e-5, warmup_steps=20, eval_every=0, checkpoint_every=0
        )
    )
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
        """The output folder: ``out``, or ``runs/finetune/<name>``."""
        return Path(self.out) if self.out else Path("runs") / "finetune" / self.name

    @classmethod
    def from_args(cls, args: Any) -> FinetuneConfig:
        """The config file ``--config`` names (:func:`load_finetune_config`), with the placement
        flags given in place of its settings."""
        cfg = load_toml(cls, args.config)
        check_files(cfg, args.config)
        return dataclasses.replace(cfg, **cls.given_flags(args))

    @classmethod
    def from_run(cls, folder: str | Path) -> FinetuneConfig:
        """The config a fine-tuning folder recorded (``run.json``), its files checked as a config
        file's are: ``run_finetune(FinetuneConfig.from_run(folder))`` reruns it."""
        data, where = recorded_config(folder)
        cfg = cls.from_dict(data, where)
        check_files(cfg, where)
        return cfg


# ---- the stages of the main job (interp.jobs.pipeline) after training ------------------------------


@dataclass(frozen=True)
class VerdictRule:
    """The layer-verdict settings (``docs/concepts/verdicts.md``) a config section carries."""

    #: the practical-effect margin in the metric's units (None: the metric's default — 0.01 nats
    #: per token for the losses, 0.01 for P(gold)), the confidence of intervals simultaneous over
    #: the layers (``per_layer``: one marginal interval each) and the bootstrap unit
    #: (``groups`` | ``rows``)
    min_effect: float | None = None
    confidence: float = 0.95
    per_layer: bool = False
    resample: Literal["groups", "rows"] = "groups"

    def verdict_rule(self) -> dict[str, Any]:
        """The verdict settings as keyword arguments of :func:`interp.jobs.sweep.run_sweep` and
        :func:`interp.analysis.verdicts.layers.layer_verdicts`."""
        return {
            "min_effect": self.min_effect,
            "confidence": self.confidence,
            "per_layer": self.per_layer,
            "resample": self.resample,
        }


@dataclass(frozen=True)
class AnalysisConfig(VerdictRule):
    """The world-model table and the layer analyses (stages 2–3)."""

    enabled: bool = True
    #: state pairs of the Myhill–Nerode metrics, suffix depth, estimator (exact | sampled)
    mn_pairs: int = 100
    mn_depth: int = 5
    estimator: str = "exact"
    #: exact estimator: skip (and count) a pair whose suffix tree exceeds this many nodes at a depth
    max_nodes: int = 1024
    #: current-state probe: training and test sequences (a probe fits one multinomial regression
    #: per layer by L-BFGS over every position: ~11k positions from 200 demo sequences)
    probe_train: int = 200
    probe_test: int = 100
    #: the removals of the MLP sweep (``zero``, the paper's; ``mean``, ``resample``, ``scale``;
    #: several: verdicts per removal and their agreement, docs/concepts/verdicts.md), the factors of
    #: ``scale`` and the draws of ``resample``
    ablation: tuple[str, ...] = ("zero",)
    scales: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0)
    draws: int = 3
    #: held-out sequences of the MLP zero-out sweep and of direct-effect patching
    sweep_n: int = 200
    patch_n: int = 200
    #: activation patching: prefix length and the edited token
    patching_length: int = 12
    patching_edit_at: int = 4
    #: streets: held-out (origin, destination) pairs for greedy routes and map reconstruction (0: skip)
    map_routes: int = 200
    seed: int = 0


@dataclass(frozen=True)
class PlantConfig:
    """Harm planted in known layers before the layer analyses (issue 14): only the MLPs of
    ``layers`` are fine-tuned on corrupted training routes (:func:`interp.train.plant.plant_harm`),
    so the sweep has a known answer. The defaults are the issue's measured recipe."""

    enabled: bool = True
    #: layers whose MLPs learn the corruption (empty: the last layer)
    layers: tuple[int, ...] = ()
    #: ``auto`` (streets: ``random_turns``), ``random_turns``, ``mirror`` or ``shortcut`` (dialogue)
    corruption: str = "auto"
    share: float = 0.3
    #: ``shortcut``: the surface word that triggers "yes"
    word: str | None = None
    seed: int = 0
    steps: int = 150
    batch_size: int = 32
    lr: float = 3e-3


@dataclass(frozen=True)
class FixConfig:
    """HLS fine-tuning of the harmful layers against a plain fine-tuning control (stage 4)."""

    enabled: bool = True
    #: the layers HLS suppresses; empty: the sweep's harmful layers (none found: HLS is skipped)
    layers: tuple[int, ...] = ()
    #: whose harmful layers: the verdicts of this removal of the MLP sweep (one of ``analysis.ablation``;
    #: ``scale`` at a factor: ``scale0.5``)
    ablation: str = "zero"
    beta: float = 1e-3
    steps: int = 200
    lr: float = 3e-4
    batch_size: int = 32
    seeds: tuple[int, ...] = (0,)
    #: held-out sequences and state pairs in the before/after evaluation
    n_eval: int = 200
    mn_pairs: int = 100
    mn_depth: int = 3
    #: streets: greedy routes between this many held-out pairs, before / zeroed / unplanted (0: none)
    routes: int = 100


# ---- the PragWorld job on a pretrained model (interp.jobs.pragworld; `interp run` with job = "pragworld") ----


@dataclass(frozen=True)
class PragWorldEvalSettings:
    """(a) PragWorld Table 1 on the manual split, both prompts."""

    #: the first manual rows, whole groups (0: all 500); the fine-tuned models: ``after_rows``
    #: (the before model is scored on those too, for the before/after table)
    rows: int = 100
    after_rows: int = 40
    #: the published generation prompt through the chat template (as the paper ran open models);
    #: the label prompt scored bare (as the reference layer analyses, the sweeps' own metric)
    benchmark_chat_template: bool = True
    label_chat_template: bool = False
    max_new_tokens: int = 16
    batch_size: int = 8
    n_boot: int = 2000


@dataclass(frozen=True)
class PragWorldLayerSettings(VerdictRule):
    """(b) MLP zero-out over every layer and direct-effect patching on the manual split; the
    verdict rule's settings as in ``[analysis]`` of a world run."""

    #: rows of the MLP zero-out sweep (first whole groups); after fine-tuning ``after_rows``, on
    #: ``after_layers``: the layers (b) called harmful or useful (``found``) or ``all``
    rows: int = 25
    after_rows: int = 10
    #: the removal of the MLP sweep whose verdicts HLS / ULA take (``zero``, the paper's; ``mean``,
    #: ``resample``; docs/concepts/verdicts.md)
    ablation: Literal["zero", "mean", "resample"] = "zero"
    after_layers: Literal["found", "all"] = "found"
    #: direct-effect pairs, from the ``eval.rows`` label scores: ``reference`` (the paper's filter:
    #: the alteration answered correctly and the answer changed), with ``flip`` pairs (gold differs,
    #: any answers) added when the reference leaves fewer than ``min_pairs`` (beyond the paper; said)
    pairs: Literal["reference", "flip"] = "reference"
    min_pairs: int = 2
    max_pairs: int = 4
    batch_size: int = 8
    n_boot: int = 2000
    #: the layers HLS/ULA take when the verdicts call none harmful/useful: ``raw`` (the paper's
    #: rule A_ℓ vs A_0, no test; at most ``fallback_max`` layers, largest |effect| first) or ``none``
    fallback: Literal["raw", "none"] = "raw"
    fallback_max: int = 3


@dataclass(frozen=True)
class PragWorldFinetuneSettings:
    """(c) Fine-tuning on the synthetic split: plain, HLS on the harmful layers, ULA on the useful."""

    objectives: tuple[str, ...] = ("plain", "hls", "ula")
    seeds: tuple[int, ...] = (0, 1)
    steps: int = 24
    batch_size: int = 4
    lr: float = 2e-4
    warmup_steps: int = 2
    #: synthetic rows to draw batches from (0: all 2,158)
    n_train: int = 0
    beta: float = 1e-3
    alpha: float = 1e-3
    lora: LoraSettings = field(
        default_factory=lambda: LoraSettings(
            enabled=True,
            r=16,
            alpha=32,
            target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        )
    )


@dataclass(frozen=True)
class PragWorldJobConfig(FlagFields):
    """The PragWorld pipeline on a pretrained model (:mod:`interp.jobs.pragworld`)."""

    #: marks the config for ``interp run`` (a world config has no ``job`` key)
    job: Literal["pragworld"] = "pragworld"
    name: str = "smollm2_pragworld"
    #: a pinned model name (``interp models list``), a Hugging Face folder or a .gguf file
    model: str = "smollm2-135m-instruct"
    runs_dir: str = "runs"
    #: the PragWorld splits (relative paths: from the current directory, the repository root)
    manual: str = path_field("../shared/data/pragworld/Manual_Dataset_500_Final.csv")
    synthetic: str = path_field("../shared/data/pragworld/synthetic_final.csv")
    grouping: Literal["clean", "reference"] = "clean"
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    #: the bridge's attention (``--attention``): ``auto`` (fused unless a pattern is read: faster),
    #: ``eager`` (TransformerLens's own), ``fused``
    attention: Literal["auto", "eager", "fused"] = "eager"
    eval: PragWorldEvalSettings = field(default_factory=PragWorldEvalSettings)
    layers: PragWorldLayerSettings = field(default_factory=PragWorldLayerSettings)
    finetune: PragWorldFinetuneSettings = field(default_factory=PragWorldFinetuneSettings)


def config_job(path: str | Path) -> str:
    """``"pragworld"`` for a :class:`PragWorldJobConfig` file (its ``job`` key), else ``"world"``."""
    job = read_toml(path).get("job", "world")
    if job not in ("world", "pragworld"):
        raise ConfigError(f"{path}: job = {job!r} is not one of 'world' (the default) or 'pragworld'")
    return job


def load_finetune_config(path: str | Path) -> FinetuneConfig:
    """Read a fine-tuning TOML file into a :class:`FinetuneConfig` (an unknown key is an error
    naming it; so is a file it names that is missing or does not parse: :func:`check_files`)."""
    cfg = load_toml(FinetuneConfig, path)
    check_files(cfg, path)
    return cfg
