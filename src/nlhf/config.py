"""Dataclass configs: one per command, loadable from YAML, overridable from the command line.

Every command of the ``nlhf`` CLI is driven by a plain dataclass whose fields carry their
help text in ``metadata["help"]`` (write fields with :func:`option`).  From such a class this
module builds an ``argparse`` parser, so ``--help`` documents every field, and resolves a
config from three layers, later ones winning:

1. the dataclass defaults,
2. a YAML file given with ``--config file.yaml`` (unknown keys are an error naming the file),
3. ``--field value`` flags and ``field=value`` overrides after them.

    nlhf tabular --config configs/tabular.yaml tau=0.05 --steps 2000

Supported field types: ``bool``, ``int``, ``float``, ``str``, ``typing.Literal`` of strings,
``list[...]`` of those (comma-separated on the command line: ``--games cycle,condorcet``; a
list flag given twice keeps the items of both), and ``X | None``.  A value must fit its field:
a YAML list, mapping or null where one value belongs, a boolean where a number belongs and a
float that is not finite (nan, inf) are errors naming the file or flag and the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from nlhf.errors import UserError


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A dataclass field with help text; lists and other mutables may be given as defaults."""
    if isinstance(default, list | dict):
        value = default
        return dataclasses.field(
            default_factory=lambda: type(value)(value), metadata={"help": help}
        )
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


class ConfigError(UserError, ValueError):
    """A config value or file that cannot be used; the message says where and why."""


class Checked:
    """Base of every config and config mixin: validation is one rule.

    A class checks its own fields in ``check(self)`` and never calls another class's check;
    ``__post_init__`` runs every ``check`` defined along the MRO exactly once, bases first, so
    a config built from mixins runs all of their checks whether it is made in code or from
    the command line.  No config defines ``__post_init__`` itself.
    """

    def __post_init__(self) -> None:
        for cls in reversed(type(self).__mro__):
            check = cls.__dict__.get("check")
            if check is not None:
                check(self)

    def at_least(self, bound: float, *names: str) -> None:
        """For a ``check``: refuse any field of ``names`` below ``bound``, naming it."""
        for name in names:
            if (value := getattr(self, name)) < bound:
                raise ValueError(f"{name} must be ≥ {bound}, got {value}")


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _parse_scalar(tp: Any, raw: Any, name: str) -> Any:
    """Convert ``raw`` (a string from the command line or a YAML value) to ``tp``; a YAML
    list, mapping or null where one value belongs, a boolean where a number belongs and a
    float that is not finite are refused."""
    if not isinstance(raw, str | int | float) or (isinstance(raw, bool) and tp in (int, float)):
        got = "null" if raw is None else f"a {type(raw).__name__} {raw!r}"
        raise ConfigError(f"{name}: expected {_type_label(tp).lower()}, got {got}")
    if get_origin(tp) is Literal:
        choices = get_args(tp)
        if raw not in choices:
            raise ConfigError(f"{name}: {raw!r} is not one of {', '.join(map(str, choices))}")
        return raw
    if tp is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}: {raw!r} is not a boolean (true/false)")
    if tp in (int, float, str):
        if tp is int and isinstance(raw, float) and not raw.is_integer():
            raise ConfigError(f"{name}: {raw!r} is not an integer")
        try:
            value = tp(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}: {raw!r} is not a valid {tp.__name__}") from None
        if tp is float and not math.isfinite(value):
            raise ConfigError(f"{name}: {raw!r} is not a finite number")
        return value
    raise ConfigError(f"{name}: unsupported field type {tp!r}")


def convert(tp: Any, raw: Any, name: str) -> Any:
    """Convert a raw value to the field type ``tp``; lists accept comma-separated strings."""
    inner, optional = _strip_optional(tp)
    if optional and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null"))):
        return None
    if get_origin(inner) is list:
        (item_tp,) = get_args(inner)
        if isinstance(raw, str):
            raw = [part for part in raw.split(",") if part.strip()]
        if not isinstance(raw, list | tuple):
            raise ConfigError(f"{name}: expected a list, got {raw!r}")
        return [
            _parse_scalar(item_tp, item.strip() if isinstance(item, str) else item, name)
            for item in raw
        ]
    return _parse_scalar(inner, raw, name)


def _type_label(tp: Any) -> str:
    inner, optional = _strip_optional(tp)
    if get_origin(inner) is list:
        label = f"{_type_label(get_args(inner)[0])},..."
    elif get_origin(inner) is Literal:
        label = "{" + ",".join(map(str, get_args(inner))) + "}"
    else:
        label = getattr(inner, "__name__", str(inner)).upper()
    return f"{label}|none" if optional else label


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


class _JoinRepeated(argparse.Action):
    """A list flag given more than once keeps every item: ``--a x --a y,z`` is ``--a x,y,z``."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        previous = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if previous is None else f"{previous},{values}")


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add ``--config``, one ``--flag`` per dataclass field, and ``key=value`` overrides."""
    hints = _field_types(cls)
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        default=None,
        help="YAML file with field values; flags and key=value override it",
    )
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        tp = hints[field.name]
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help")
        if not help_text:
            raise TypeError(f"{cls.__name__}.{field.name} has no help text")
        default = _default_of(field)
        if default is not dataclasses.MISSING:
            shown = ",".join(map(str, default)) if isinstance(default, list) else default
            help_text = f"{help_text} (default: {shown})"
        inner, _ = _strip_optional(tp)
        kwargs: dict[str, Any] = {
            "dest": field.name,
            "default": argparse.SUPPRESS,
            "help": help_text.replace("%", "%%"),
        }
        if inner is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **kwargs)
        elif get_origin(inner) is list:
            label = _type_label(get_args(inner)[0])
            parser.add_argument(flag, metavar=f"{label},...", action=_JoinRepeated, **kwargs)
        else:
            parser.add_argument(flag, metavar=_type_label(tp), **kwargs)
    example = next(
        (
            f"{f.name}={_default_of(f)}"
            for f in dataclasses.fields(cls)
            if f.init and type(_default_of(f)) in (int, float)
        ),
        "name=value",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help=f"field overrides, applied last (e.g. {example})".replace("%", "%%"),
    )


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file; a missing, unreadable or malformed one is a
    :class:`ConfigError` naming the file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    return data


def build_config(cls: type, values: dict[str, Any], sources: dict[str, str] | None = None) -> Any:
    """Instantiate ``cls`` from raw values, with errors that name the source, key and value.

    ``sources`` maps a key to where its value came from (a YAML file, ``--flag`` or
    ``key=value``); keys without one are reported as coming from the arguments.
    """
    sources = sources or {}
    hints = _field_types(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, raw in values.items():
        name = key.replace("-", "_")
        where = sources.get(key, "arguments")
        if name not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"{where}: unknown field {key!r} for {cls.__name__} (known: {known})")
        kwargs[name] = convert(hints[name], raw, f"{where}: {key}")
    try:
        return cls(**kwargs)
    except ValueError as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from None


RUN_RECORD_KEYS = ("algorithm", "processes", "judge_definition")
"""Entries a training run writes into its ``config.json`` beside the config's fields; a config
file skips them, so that a run's ``config.json`` serves as ``--config`` for another run."""


def config_from_args(cls: type, args: argparse.Namespace) -> Any:
    """Resolve defaults < YAML file < flags < key=value overrides into an instance of ``cls``."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if getattr(args, "config", None):
        for key, raw in load_yaml(args.config).items():
            if key not in RUN_RECORD_KEYS:
                values[key], sources[key] = raw, str(args.config)
    for field in dataclasses.fields(cls):
        if field.init and field.name in vars(args):
            values[field.name] = getattr(args, field.name)
            sources[field.name] = "--" + field.name.replace("_", "-")
    for item in getattr(args, "overrides", None) or []:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, _, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        values[key], sources[key] = raw, f"override {item!r}"
    return build_config(cls, values, sources)


SECRET_FIELDS = ("judge_token",)  # never written into the record of a run


def to_dict(config: Any) -> dict[str, Any]:
    """The config as a plain dict, ready for JSON or YAML (the record of a run); secrets
    (``SECRET_FIELDS``) that were set appear as ``(hidden)``."""
    record = dataclasses.asdict(config)
    for name in SECRET_FIELDS:
        if record.get(name):
            record[name] = "(hidden)"
    return record
