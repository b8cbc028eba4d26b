"""The sweep's settings as one frozen dataclass: what :func:`interp.sweep` takes, what ``run.json``
records under ``config`` (written by the API and by ``interp sweep`` alike) and what a rerun reads
back (:meth:`SweepConfig.from_run`).

Every field is checked when the config is made — before any model loads — with one sentence naming
the value and what is allowed. Importing it loads nothing heavy (the CLI's parser reads the
flags of :class:`VerdictRule`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from interp.analysis.engines.sweep_options import RESAMPLE, RUN_METHODS
from interp.config import refuse_unknown
from interp.config.flags import FIELD_DEFAULT, Flag, flag, flag_name

#: ``--kind`` of a sweep of PragWorld or contrast rows (``activation-patching``: :func:`interp.patch`)
PRAGWORLD_KINDS = ("mlp-zero", "direct-effect", "activation-patching")

#: what ``method="auto"`` stands for until a task's rows are known (:func:`interp.sweep` then picks
#: ``prefix`` where the rows share enough tokens: :func:`interp.analysis.engines.batching.choose_method`)
AUTO_METHOD = "reuse"


class ConfigError(ValueError):
    """A sweep setting that is not allowed (named, with what is). ``setting``: the field the
    sentence starts with, so a job can say it as its command-line flag (:meth:`as_flag`)."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting

    def as_flag(self) -> ConfigError:
        """The same sentence with its setting spelled as the flag (``n_boot`` → ``--n-boot``)."""
        text = str(self)
        if self.setting and text.startswith(self.setting):
            text = flag_name(self.setting) + text[len(self.setting) :]
        return ConfigError(text, self.setting)


def known_keys(cls: Any, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``data`` as a dict, after refusing any key that is not a field of the dataclass ``cls``
    (:func:`interp.config.refuse_unknown`: named, with the allowed ones)."""
    refuse_unknown(data, (f.name for f in fields(cls)), what, error=ConfigError)
    return dict(data)


@dataclass(frozen=True)
class VerdictRule:
    """How effects become verdicts (:func:`interp.analysis.verdicts.layers.layer_verdicts`): a
    ``confidence`` interval simultaneous over all layers (or ``per_layer``) from ``n_boot``
    bootstrap resamples of ``resample`` units (``"groups"``: a PragWorld group or a contrast
    example's group; ``"rows"``), against the margin ``min_effect`` (None: the metric's default)."""

    n_boot: int = field(default=2000, metadata=flag("bootstrap replicates (default 2000)", type=int))
    confidence: float = field(
        default=0.95,
        metadata=flag(
            "confidence of the intervals, simultaneous over the layers unless --per-layer (default 0.95)", type=float
        ),
    )
    per_layer: bool = field(
        default=False,
        metadata=flag(
            "one marginal interval per layer instead of the simultaneous band (expect about "
            "(1 − confidence) × layers false verdicts on a model with no effects)",
            action="store_true",
        ),
    )
    min_effect: float | None = field(
        default=None,
        metadata=flag(
            "the practical-effect margin in the metric's units: a layer is harmful/useful only when "
            "its interval clears ±DELTA, negligible when it lies inside (default per metric: 0.01 nats "
            "for token/continuation loss, 0.01 for P(gold) and the legal-token mass)",
            type=float,
            metavar="DELTA",
        ),
    )
    resample: str = field(
        default="groups",
        metadata=flag(
            "bootstrap unit: groups (default: a PragWorld original with its alterations; a world "
            "sequence alone) or rows one by one (too narrow on grouped rows)",
            choices=RESAMPLE,
        ),
    )

    #: the order of the flags in ``--help`` (``interp sweep``, docs/concepts/verdicts.md)
    FLAG_ORDER: ClassVar[tuple[str, ...]] = ("min_effect", "confidence", "per_layer", "resample", "n_boot")

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ConfigError(f"confidence must be in (0, 1), got {self.confidence}", "confidence")
        if int(self.n_boot) < 1:
            raise ConfigError(f"n_boot must be ≥ 1, got {self.n_boot}", "n_boot")
        if self.min_effect is not None and not self.min_effect >= 0:
            raise ConfigError(
                f"min_effect must be ≥ 0 (in the metric's units) or None, got {self.min_effect}", "min_effect"
            )
        if self.resample not in RESAMPLE:
            raise ConfigError(f"resample must be one of {', '.join(RESAMPLE)}, got {self.resample!r}", "resample")

    @classmethod
    def flags(cls) -> list[tuple[str, Flag, Any]]:
        """Each field's name, :class:`Flag` and default, in :attr:`FLAG_ORDER`."""
        by_name = {f.name: f for f in fields(cls)}
        return [(name, by_name[name].metadata["flag"], by_name[name].default) for name in cls.FLAG_ORDER]

    @classmethod
    def flagged(cls, **settings: Any) -> VerdictRule:
        """The rule of a job's settings, a refusal naming the flag (``--n-boot must be ≥ 1``)."""
        try:
            return cls(**settings)
        except ConfigError as e:
            raise e.as_flag() from None

    def kwargs(self) -> dict[str, Any]:
        """The rule as keyword arguments of :func:`~interp.analysis.verdicts.layers.layer_verdicts`."""
        return asdict(self)


@dataclass(frozen=True)
class SweepConfig:
    """One layer sweep: the ``removals`` of each layer's MLP output (``zero``, ``mean``,
    ``resample``, ``scale`` with ``scales``; :doc:`/concepts/interventions`) or ``kind =
    "direct-effect"`` (each alteration patched into its original, PragWorld §6.1), on ``layers``
    (None: all), scored by ``metric`` (None: the task's default — P(gold) on yes/no, the logit
    difference on contrast tasks), by ``method`` (``auto``: ``prefix`` where the task's rows share enough tokens, else ``reuse``; ``loop``, ``batched``,
    ``prefix``, ``attribution``) in batches of ``batch_size`` rows; verdicts by ``rule``, confirmed
    on ``folds`` held-out group folds when set; ``seed`` seeds every draw; ``attention``: ``auto``
    (fused SDPA, since no sweep reads the attention pattern; eager where an architecture needs it),
    ``eager`` or ``fused`` (:doc:`/concepts/attention`)."""

    removals: Sequence[str] = ("zero",)
    scales: Sequence[float] = ()
    draws: int = 3
    layers: Sequence[int] | None = None
    kind: str = "mlp-zero"
    metric: str | None = None
    method: str = "auto"
    batch_size: int | None = 16
    folds: int | None = None
    seed: int = 0
    #: a :class:`VerdictRule`, or a mapping of its fields (converted when the config is made)
    rule: Any = field(default_factory=VerdictRule)
    attention: str = "auto"

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalise sequences to tuples (a frozen dataclass)
        set_(self, "removals", _names(self.removals, "removals"))
        set_(self, "scales", tuple(float(s) for s in self.scales))
        if self.layers is not None:
            set_(self, "layers", layer_tuple(self.layers))
        if isinstance(self.rule, Mapping):
            set_(self, "rule", VerdictRule(**self.rule))
        if self.kind not in PRAGWORLD_KINDS or self.kind == "activation-patching":
            allowed = [k for k in PRAGWORLD_KINDS if k != "activation-patching"]
            raise ConfigError(
                f"kind must be one of {', '.join(allowed)} (activation patching: interp.patch), got {self.kind!r}"
            )
        if self.method != "auto" and self.method not in RUN_METHODS:
            raise ConfigError(f"method must be one of auto, {', '.join(RUN_METHODS)}, got {self.method!r}")
        if self.attention not in ("auto", "eager", "fused"):
            raise ConfigError(f"attention must be one of auto, eager, fused, got {self.attention!r}")
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise ConfigError(f"batch_size must be ≥ 1 or None (all rows at once), got {self.batch_size}")
        if self.folds is not None and int(self.folds) < 2:
            raise ConfigError(f"folds must be ≥ 2 (or None: no confirmation), got {self.folds}")
        from interp.analysis.engines.removals import check_removals  # torch: only once a config is made

        try:
            check_removals(
                self.kind, self.resolved_method, list(self.removals), list(self.scales), self.draws, self.seed
            )
        except ValueError as e:
            raise ConfigError(str(e).replace("--ablation", "removals").replace("--method", "method")) from None

    @property
    def verdict_rule(self) -> VerdictRule:
        """``rule`` as a :class:`VerdictRule` (a mapping given is converted when the config is made)."""
        return self.rule if isinstance(self.rule, VerdictRule) else VerdictRule(**self.rule)

    @property
    def resolved_method(self) -> str:
        """The strategy ``method`` stands for (``auto`` → :data:`AUTO_METHOD`)."""
        return AUTO_METHOD if self.method == "auto" else self.method

    def with_(self, **changes: Any) -> SweepConfig:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (what ``run.json``'s ``config`` holds)."""
        d = asdict(self)
        d["removals"], d["scales"] = list(self.removals), list(self.scales)
        d["layers"] = None if self.layers is None else list(self.layers)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepConfig:
        """The config :meth:`to_dict` wrote; an unknown key is named, with the known ones."""
        d = known_keys(cls, data, "sweep setting")
        if "rule" in d and isinstance(d["rule"], Mapping):
            d["rule"] = VerdictRule(**known_keys(VerdictRule, d["rule"], "verdict-rule setting"))
        return cls(**d)

    @classmethod
    def of_job(
        cls, removals: Sequence[Any], rule: Mapping[str, Any], layers: Sequence[int] | None, **settings: Any
    ) -> SweepConfig:
        """The config of a sweep job's arguments: its :class:`~interp.analysis.engines.removals.Removal`
        list (kinds in order, the scale factors, the resample draws), its verdict-rule keywords,
        and the other fields by name (what ``interp sweep`` records in ``run.json``)."""
        kinds = list(dict.fromkeys(r.kind for r in removals)) or ["zero"]
        scales = [float(r.factor) for r in removals if r.kind == "scale"]
        draws = next((int(r.draws) for r in removals if r.kind == "resample"), 3)
        return cls(
            removals=kinds,
            scales=scales,
            draws=draws,
            layers=None if layers is None else list(layers),
            rule=VerdictRule(**rule),
            **settings,
        )

    @classmethod
    def from_run(cls, folder: str | Path) -> SweepConfig:
        """The config recorded in ``folder/run.json`` (a sweep written by :func:`interp.sweep`)."""
        return cls.from_dict(recorded(folder, "config", "written before interp 0.3, or by another job"))


def recorded(folder: str | Path, key: str, otherwise: str) -> Any:
    """The ``key`` section of ``folder/run.json``; a folder without one is named, with ``otherwise``
    (why such a run.json may lack it)."""
    path = Path(folder) / "run.json"
    if not path.is_file():
        raise ConfigError(f"{folder} has no run.json: not a sweep folder")
    info = json.loads(path.read_text())
    if key not in info:
        raise ConfigError(f"{path} records no {key} ({otherwise})")
    return info[key]


def _names(values: str | Sequence[str], what: str) -> tuple[str, ...]:
    out = tuple(v.strip() for v in (values.split(",") if isinstance(values, str) else values))
    if not out or any(not v for v in out):
        raise ConfigError(f"{what}: give at least one name, got {values!r}")
    return out


def layer_tuple(values: int | Sequence[int]) -> tuple[int, ...]:
    """Layer numbers as a tuple, each a non-negative integer (ConfigError otherwise)."""
    seq = [values] if isinstance(values, int) else list(values)
    if not seq:
        raise ConfigError("layers: give at least one layer, or None for all")
    bad = [v for v in seq if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad:
        raise ConfigError(f"layers must be non-negative integers, got {bad[0]!r}")
    return tuple(seq)


__all__ = [
    "AUTO_METHOD",
    "FIELD_DEFAULT",
    "PRAGWORLD_KINDS",
    "ConfigError",
    "Flag",
    "SweepConfig",
    "VerdictRule",
    "flag",
    "flag_name",
    "known_keys",
    "recorded",
    "layer_tuple",
]
