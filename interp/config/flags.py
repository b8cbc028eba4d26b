"""Settings that are command-line flags. A config dataclass's field carries its flag (a
:class:`Flag` in the field's ``metadata``, made by :func:`flag`), so the ``interp`` parser is
generated from the dataclass (:func:`interp.cli.common.add_fields`) and the parsed flags are read
back into it (:meth:`FlagFields.from_args`): a flag and a field cannot drift apart, and their help
is one text. :class:`FlagFields` gives a config dataclass its flags, its JSON form and its record
in a run folder (``run.json``'s ``config``: :func:`run_record`, :meth:`FlagFields.from_run`).

Pure data: nothing heavy is imported, so ``interp --help`` builds every flag without torch."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

#: a config class with flags (the type its class methods give back)
C = TypeVar("C", bound="FlagFields")

#: :attr:`Flag.default` when the flag's default is the field's
FIELD_DEFAULT = "<field default>"


def flag_name(setting: str) -> str:
    """A setting's command-line flag: ``n_boot`` → ``--n-boot``."""
    return "--" + setting.replace("_", "-")


@dataclass(frozen=True)
class Flag:
    """How a setting appears on the command line (a dataclass field's ``metadata["flag"]``): the
    ``names`` (default the field's :func:`flag_name`), the ``help``, and what
    :meth:`argparse.ArgumentParser.add_argument` takes — ``type``, ``choices``, ``metavar``,
    ``action``; ``default``: the flag's own when it differs from the field's
    (:data:`FIELD_DEFAULT`: the same; None on a flag that overrides a config file's setting:
    unset, the file's); ``parse``: turns the flag's value into the field's (e.g. ``"on"`` → True)."""

    help: str
    names: tuple[str, ...] = ()
    type: Any = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    action: str | None = None
    default: Any = FIELD_DEFAULT
    parse: Any = None


def flag(help: str, **how: Any) -> dict[str, Flag]:
    """The ``metadata`` of a dataclass field that is a command-line flag (:class:`Flag`)."""
    return {"flag": Flag(help=help, **how)}


def dest(name: str, how: Flag) -> str:
    """The :mod:`argparse` destination of a field's flag (its first name, as argparse spells it)."""
    return (how.names[0] if how.names else flag_name(name)).lstrip("-").replace("-", "_")


def flag_default(how: Flag, field_default: Any) -> Any:
    """The default the flag shows: its own, or the field's."""
    return field_default if how.default == FIELD_DEFAULT else how.default


def field_flags(cls: Any) -> list[tuple[str, Flag, Any]]:
    """``(field name, Flag, field default)`` of each field of the dataclass ``cls`` that is a flag,
    in field order (what :func:`interp.cli.common.add_fields` takes)."""
    out = []
    for f in dataclasses.fields(cls):
        if "flag" in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append((f.name, f.metadata["flag"], default))
    return out


def flag_values(flags: list[tuple[str, Flag, Any]], args: Any) -> dict[str, Any]:
    """Each flag's value in the parsed ``args``, as its field's value (:attr:`Flag.parse` applied),
    by field name."""
    out = {}
    for name, how, _ in flags:
        value = getattr(args, dest(name, how))
        out[name] = how.parse(value) if how.parse is not None else value
    return out


class FlagFields:
    """What a frozen config dataclass gains from its fields' flags (a mixin: no fields of its own):
    :meth:`flags` (the parser is generated from them), :meth:`from_args` (the parsed flags back),
    :meth:`to_dict` / :meth:`from_dict` (JSON, every key checked as a TOML file's is) and
    :meth:`from_run` (the config a run folder recorded: rerun it to reproduce the run)."""

    @classmethod
    def flags(cls) -> list[tuple[str, Flag, Any]]:
        """Each field that is a flag: ``(field name, Flag, field default)``, in field order."""
        return field_flags(cls)

    @classmethod
    def given_flags(cls, args: Any) -> dict[str, Any]:
        """The flags given in the parsed ``args`` (those left at None are not), by field name."""
        return {k: v for k, v in flag_values(cls.flags(), args).items() if v is not None}

    @classmethod
    def from_args(cls: type[C], args: Any) -> C:
        """The config of the parsed flags (every field is a flag, or has its default)."""
        return cls(**flag_values(cls.flags(), args))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (tuples as lists): what ``run.json`` records under ``config``."""
        return json.loads(json.dumps(dataclasses.asdict(self)))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: Mapping[str, Any], where: str = "config") -> C:
        """The config :meth:`to_dict` wrote (or a TOML file's tables): an unknown key or a wrong
        type is a :class:`~interp.config.ConfigError` naming it, as in a config file."""
        from interp.config import from_dict

        return from_dict(cls, dict(data), where)

    @classmethod
    def from_run(cls: type[C], folder: str | Path) -> C:
        """The config recorded in the run folder ``folder`` (:func:`recorded_config`)."""
        data, where = recorded_config(folder)
        return cls.from_dict(data, where)


#: where a run folder records its config, in the order :func:`recorded_config` reads them:
#: ``run.json``'s ``config`` (:func:`run_record`), then the files of folders written before it
CONFIG_RECORDS = (("run.json", "config"), ("results.json", "config"), ("config.json", None))


def run_record(cfg: Any, **extra: Any) -> dict[str, Any]:
    """What a run folder's ``run.json`` holds (the jobs write it with
    :func:`interp.results.write_json`): the config dataclass ``cfg`` under ``config``, in JSON
    types, and the ``extra`` items beside it (what else a rerun needs)."""
    return {"config": json.loads(json.dumps(dataclasses.asdict(cfg))), **extra}


def recorded_config(folder: str | Path) -> tuple[dict[str, Any], str]:
    """The config a run folder recorded (:data:`CONFIG_RECORDS`: ``run.json``, or in a folder
    written before it ``results.json`` / ``config.json``) and the file it came from; a folder
    with none is a :class:`~interp.config.ConfigError` naming it."""
    from interp.config import ConfigError

    folder = Path(folder)
    for name, key in CONFIG_RECORDS:
        path = folder / name
        if path.is_file():
            data = json.loads(path.read_text())
            if key is None or key in data:
                return (data if key is None else data[key]), str(path)
    names = ", ".join(name for name, _ in CONFIG_RECORDS)
    raise ConfigError(f"{folder} records no config (none of {names}): not a run folder written by interp")


__all__ = [
    "CONFIG_RECORDS",
    "FIELD_DEFAULT",
    "Flag",
    "FlagFields",
    "dest",
    "field_flags",
    "flag",
    "flag_default",
    "flag_name",
    "flag_values",
    "run_record",
    "recorded_config",
]
