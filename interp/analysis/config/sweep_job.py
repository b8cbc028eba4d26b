"""A sweep *job* as one frozen dataclass: every plain setting of ``interp sweep`` and of
:func:`interp.jobs.sweep.run_sweep` (the kind, the method, the layers, the removals, the verdict
rule, the PragWorld and activation-patching settings …), checked when it is made — before any model
loads — with the sentences the job has always said (``--kind must be one of …``). Importing it
loads nothing heavy (``interp --help`` builds the flags from it without torch).

Its fields carry their command-line flags (:class:`~interp.analysis.config.sweep_config.Flag` in each
field's ``metadata``): ``interp sweep``'s parser is generated from them
(:func:`interp.cli.common.add_fields`) and :meth:`SweepJob.from_args` reads them back, so a flag
and a field cannot drift apart. ``run.json`` records :meth:`SweepJob.to_dict` under ``job``;
:meth:`SweepJob.from_run` reads it back, the same job again.

What the job does not hold is where it runs and what it reads or writes — the model, the data
file, the output folder, the placement, the log, the long-run control — since those are not
settings of the sweep but of one run of it. :class:`~interp.analysis.config.sweep_config.SweepConfig`
(the Python API's settings) is the job's layer-sweep part: :meth:`SweepJob.config` and
:meth:`SweepJob.of_config` convert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interp.analysis.config.sweep_config import (
    ConfigError,
    SweepConfig,
    VerdictRule,
    known_keys,
    layer_tuple,
    recorded,
)
from interp.analysis.engines.sweep_options import KINDS, RUN_METHODS, parse_layers
from interp.config import refuse_unknown
from interp.config.flags import Flag, dest, flag, flag_default, flag_values

if TYPE_CHECKING:
    from interp.analysis.engines.removals import Removal

#: ``--prepend-bos`` / ``--chat-template``: the flag's word → the tokenization setting
SWITCH = {"auto": None, "on": True, "off": False}

#: ``--metric``: every task sweep's metrics (which one a file allows: its task)
METRICS = ("p-gold", "logit-diff", "accuracy")

#: the old keywords of the sweep jobs that name a field by another name
ALIASES = {"ablation": "removals"}


def check_folds(folds: int | None) -> None:
    """``--folds`` (``--confirm`` is 2): None, or an integer ≥ 2."""
    if folds is not None and (int(folds) != folds or folds < 2):
        raise ConfigError(f"--folds must be an integer ≥ 2 (2: a discovery and a confirmation half), got {folds}")


def _switch(word: str) -> bool | None:
    return SWITCH[word]


@dataclass(frozen=True, kw_only=True)
class SweepJob:
    """One ``interp sweep`` (:func:`interp.jobs.sweep.run_sweep`): the fields in the order of
    ``interp sweep --help``, each documented by its flag's help (:doc:`/cli`). ``removals`` is the
    flag ``--ablation``; ``rule`` (a :class:`~interp.analysis.config.sweep_config.VerdictRule`, or a
    mapping of its fields) the flags ``--min-effect``, ``--confidence``, ``--per-layer``,
    ``--resample``, ``--n-boot``. Make one from keywords by name (old ones too: ``ablation``,
    ``n_boot`` …) with :meth:`of`. Sequences given are kept as tuples (``removals`` a tuple of
    names, ``scales`` of floats, ``layers`` of ints), so a job equals its :meth:`from_dict`."""

    grouping: str = field(
        default="clean",
        metadata=flag(
            "PragWorld CSV: how rows form groups (see interp pragworld score)", choices=("clean", "reference")
        ),
    )
    n: int | None = field(
        default=200,
        metadata=flag(
            "at most this many sequences (default 200) or PragWorld rows (default all); --limit: "
            "the same, the name interp pragworld eval uses",
            names=("--n", "--limit"),
            type=int,
            metavar="N",
            default=None,  # resolved by from_args: 200 sequences, or every row of a task file
        ),
    )
    kind: str = field(
        default="mlp-zero",
        metadata=flag(
            "mlp-zero: zero each layer's MLP output, per-example next-token loss (default); "
            "direct-effect: patch resid_pre from a one-token state-changing edit into the "
            "original, loss on the original's tokens after the edit; activation-patching: "
            "layer × position and layer × head heatmaps (transformer_lens.patching) of how much "
            "of the clean state's legal-token mass one patched activation restores. On a PragWorld "
            "CSV all three score P(gold) of the label prompt; direct-effect and activation-patching "
            "patch the altered prompt into its original (activation-patching: pairs of equal token "
            "length, positions counted from the last token)",
            choices=KINDS,
        ),
    )
    prepend_bos: bool | None = field(
        default=None,
        metadata=flag(
            "PragWorld CSV: a BOS first as the model's own tokenizer adds it (auto, default), always "
            "(on) or never (off); see README 'Tokenizer settings'",
            choices=tuple(SWITCH),
            default="auto",
            parse=_switch,
        ),
    )
    chat_template: bool | None = field(
        default=False,
        metadata=flag(
            "PragWorld CSV: wrap the label prompt as a user message of the tokenizer's chat template: "
            "off (default: the reference layer analyses scored the bare prompt), auto (when it has "
            "one), on",
            choices=tuple(SWITCH),
            default="off",
            parse=_switch,
        ),
    )
    length: int = field(
        default=12, metadata=flag("activation-patching: prefix length in tokens (default 12)", type=int)
    )
    edit_at: int = field(
        default=4, metadata=flag("activation-patching: the edited token's index in the prefix (default 4)", type=int)
    )
    method: str = field(
        default="reuse",
        metadata=flag(
            "mlp-zero: reuse the clean run's early layers (reuse, default), one full forward "
            "per layer (loop), all layers stacked in one forward (batched), or reuse over rows "
            "read as token tries, each shared prefix once (prefix: metrics read at the last token, "
            "i.e. PragWorld and contrast data; zero/scale/mean; resample runs reuse); equal to 1e-5. "
            "attribution (every kind): first-order estimates of every site from one forward "
            "and backward (AtP), same outputs and verdicts",
            choices=RUN_METHODS,
        ),
    )
    verify_top: int | None = field(
        default=None,
        metadata=flag(
            "with --method attribution: also measure exactly the K sites of largest |attribution| "
            "(verify.csv; activation-patching: verify_<map>.csv)",
            type=int,
            metavar="K",
        ),
    )
    metric: str | None = field(
        default=None,
        metadata=flag(
            "PragWorld CSV: the per-row metric: p-gold (P(gold) in the yes/no softmax, default), "
            "logit-diff (logit gold − other, nats; adds the direct effect beside the total), accuracy; "
            "contrast file: logit-diff (correct − foil, default) or p-gold (P(correct) over the pair)",
            choices=METRICS,
        ),
    )
    removals: str | Sequence[str] = field(
        default=("zero",),
        metadata=flag(
            "--kind mlp-zero: how each MLP is removed, one or a comma-separated list of zero (default, "
            "the paper's), mean (its mean over the rows: first token / later positions), resample "
            "(another row's output, --draws averaged), scale (output × α for each of --scales); "
            "several write verdicts_<removal>.json and agreement.csv/.md",
            names=("--ablation",),
            metavar="KINDS",
            default="zero",
        ),
    )
    scales: str | Sequence[float] | None = field(
        default=None,
        metadata=flag(
            "--ablation scale: the factors α (default 1,0.75,0.5,0.25,0; α = 1, the model itself, is not run)",
            metavar="A,B,...",
        ),
    )
    draws: int = field(
        default=3,
        metadata=flag("--ablation resample: source rows per example, averaged (default 3; seeded by --seed)", type=int),
    )
    folds: int | None = field(
        default=None,
        metadata=flag(
            "confirmation with K folds of the groups: discovery on K − 1, confirmation on the held-out one",
            type=int,
            metavar="K",
        ),
    )
    layers: Sequence[int] | None = field(
        default=None,
        metadata=flag("comma-separated layers, e.g. 0,1,3 (default: all)", parse=parse_layers),
    )
    batch_size: int | None = field(
        default=None,
        metadata=flag(
            "examples per forward (default: the most whose memory estimate fits the budget, see --max-memory; "
            "printed and written to run.json)",
            type=int,
        ),
    )
    seed: int = field(default=0, metadata=flag("edit positions, fresh sequences, bootstrap (default 0)", type=int))
    #: a :class:`VerdictRule`, or a mapping of its fields (converted when the job is made)
    rule: Any = field(default_factory=VerdictRule)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # normalise to what to_dict / from_dict give back (a frozen dataclass)
        if not isinstance(self.rule, VerdictRule):
            set_(self, "rule", VerdictRule.flagged(**known_keys(VerdictRule, self.rule, "verdict-rule setting")))
        if self.kind not in KINDS:
            raise ConfigError(f"--kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.method not in RUN_METHODS:
            raise ConfigError(f"--method must be one of {', '.join(RUN_METHODS)}, got {self.method!r}")
        from interp.analysis.engines.removals import parse_ablations, parse_scales  # torch: only once a job is made

        set_(self, "removals", tuple(parse_ablations(self.removals)))
        if self.scales is not None:
            set_(self, "scales", tuple(parse_scales(self.scales)))
        if self.layers is not None:
            try:
                set_(self, "layers", layer_tuple(self.layers))
            except ConfigError as e:
                raise ConfigError(str(e).replace("layers", "--layers", 1)) from None
        self.removal_set()  # --ablation / --scales / --draws, and what does not apply to the kind
        check_folds(self.folds)
        self._check_kind_settings()

    def _check_kind_settings(self) -> None:
        if self.folds and self.kind == "activation-patching":
            raise ConfigError(
                "--confirm / --folds confirm layer verdicts (mlp-zero, direct-effect); activation-patching "
                "maps have cell verdicts"
            )
        if self.kind == "activation-patching" and self.layers is not None:
            raise ConfigError(
                "--layers does not apply to --kind activation-patching: transformer_lens.patching "
                "patches every layer (the maps have one row per layer)"
            )
        if self.verify_top is not None and (self.method != "attribution" or self.verify_top < 1):
            raise ConfigError(
                f"--verify-top needs --method attribution and K ≥ 1, got K={self.verify_top} with --method {self.method}"
            )
        if self.n is not None and self.n < 1:
            raise ConfigError(f"--n must be ≥ 1, got {self.n}")
        if self.grouping not in ("clean", "reference"):
            raise ConfigError(f"--grouping must be one of clean, reference, got {self.grouping!r}")
        if self.metric is not None and self.metric not in METRICS:
            raise ConfigError(f"--metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise ConfigError(
                f"--batch-size must be ≥ 1 (or None: sized from the memory budget), got {self.batch_size}"
            )

    def removal_set(self) -> list[Removal]:
        """The :class:`~interp.analysis.engines.removals.Removal` list the MLP sweep runs
        (:func:`~interp.analysis.engines.removals.check_removals`)."""
        from interp.analysis.engines.removals import check_removals

        return check_removals(self.kind, self.method, list(self.removals), self.scales, self.draws, self.seed)

    @property
    def rule_kwargs(self) -> dict[str, Any]:
        """The verdict rule as keyword arguments of :func:`~interp.analysis.verdicts.layers.layer_verdicts`."""
        return self.rule.kwargs()

    # -- made from keywords, a config, flags; written to and read from JSON -----------------------

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """Every keyword :meth:`of` takes: the fields, the verdict rule's fields, the aliases."""
        return (*(f.name for f in fields(cls)), *(f.name for f in fields(VerdictRule)), *ALIASES)

    @classmethod
    def of(cls, job: SweepJob | None = None, **settings: Any) -> SweepJob:
        """``job`` (default: every default) with the ``settings`` changed, by field name, by a
        verdict-rule field's name (``n_boot``, ``confidence`` …) or by an old keyword
        (``ablation`` = ``removals``); an unknown keyword is a TypeError listing the allowed ones."""
        job = job or cls()
        if not settings:
            return job
        refuse_unknown(settings, sorted(cls.settings()), "sweep setting", error=TypeError)
        for old, new in ALIASES.items():
            if old in settings:
                if new in settings:
                    raise TypeError(f"give {new} or its old name {old}, not both")
                settings[new] = settings.pop(old)
        rule_names = {f.name for f in fields(VerdictRule)}
        base = settings.pop("rule", job.rule)
        base = asdict(base) if isinstance(base, VerdictRule) else dict(base)
        rule = {**base, **{k: settings.pop(k) for k in list(settings) if k in rule_names}}
        current = {f.name: getattr(job, f.name) for f in fields(cls)}
        return cls(**{**current, **settings, "rule": rule})

    @classmethod
    def of_config(cls, config: SweepConfig, **settings: Any) -> SweepJob:
        """The job of the Python API's :class:`~interp.analysis.config.sweep_config.SweepConfig` (its
        ``method="auto"`` resolved), with further ``settings``."""
        return cls.of(
            removals=config.removals,
            scales=config.scales if "scale" in config.removals else None,
            draws=config.draws,
            layers=config.layers,
            kind=config.kind,
            metric=config.metric,
            method=config.resolved_method,
            batch_size=config.batch_size,
            folds=config.folds,
            seed=config.seed,
            rule=config.verdict_rule,
            **settings,
        )

    def config(self, attention: str = "auto") -> SweepConfig:
        """The layer-sweep part as a :class:`~interp.analysis.config.sweep_config.SweepConfig` (what
        ``run.json`` records under ``config``; not for ``activation-patching``: :func:`interp.patch`)."""
        return SweepConfig.of_job(
            self.removal_set(),
            self.rule_kwargs,
            self.layers,
            kind=self.kind,
            metric=self.metric,
            method=self.method,
            batch_size=self.batch_size,
            folds=self.folds,
            seed=self.seed,
            attention=attention,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (what ``run.json`` records under ``job``)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["rule"] = self.rule.kwargs()
        for key in ("removals", "scales", "layers"):
            d[key] = None if d[key] is None else list(d[key])
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepJob:
        """The job :meth:`to_dict` wrote; an unknown key is named, with the known ones."""
        return cls(**known_keys(cls, data, "sweep-job setting"))

    @classmethod
    def from_run(cls, folder: str | Path) -> SweepJob:
        """The job recorded in ``folder/run.json`` (written by ``interp sweep`` / :func:`run_sweep`)."""
        return cls.from_dict(recorded(folder, "job", "written by an earlier interp, or by interp.sweep / interp.patch"))

    @classmethod
    def flags(cls) -> list[tuple[str, Flag, Any]]:
        """Each flag's field name, :class:`~interp.analysis.config.sweep_config.Flag` and field default, in
        ``--help`` order (the verdict rule's flags last, in
        :attr:`~interp.analysis.config.sweep_config.VerdictRule.FLAG_ORDER`)."""
        own = [(f.name, f.metadata["flag"], f.default) for f in fields(cls) if "flag" in f.metadata]
        return own + VerdictRule.flags()

    @classmethod
    def from_args(cls, args: Any) -> SweepJob:
        """The job of ``interp sweep``'s parsed flags (``--confirm`` is ``--folds 2``; no ``--n``:
        200 sequences, or every row of a PragWorld / contrast file)."""
        given = flag_values(cls.flags(), args)
        if not given.get("folds") and getattr(args, "confirm", False):
            given["folds"] = 2
        if given["n"] is None and not _task_file(getattr(args, "data", None)):
            given["n"] = cls().n  # 200 world sequences
        return cls.of(**given)


def _task_file(data: str | None) -> bool:
    if not data:
        return False
    from interp.datasets.contrast import data_file_kind

    return data_file_kind(data) != "sequences"


__all__ = ["ALIASES", "METRICS", "SWITCH", "SweepJob", "check_folds", "dest", "flag_default"]
