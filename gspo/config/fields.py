"""The machinery of every typed config: a field with its help text, an invariant check whose
message names the field, the error both raise, and loading a config dataclass from YAML or a
plain dict (unknown keys and wrong types named by file and dotted field). gspo.config.train's stage
configs and the engines' own settings use them; nothing here imports the rest of the project."""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import types
import typing
from collections.abc import Sequence
from dataclasses import field

import yaml


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file and field."""


def option(default, text: str, **kw):
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(
            default_factory=functools.partial(_copy, default), metadata={"help": text}, **kw
        )
    return field(default=default, metadata={"help": text}, **kw)


def _copy(v):
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return dataclasses.replace(v)
    return json.loads(json.dumps(v))


def check(cond: bool, name: str, msg: str):
    if not cond:
        raise ConfigError(f"{name}: {msg}")


class Refusals(list):
    """(field, why) pairs: the values an engine cannot honour as this project defines them
    (gspo.engines.trl.rl.refusals, gspo.engines.verl.job.refusals)."""

    def need(self, ok: bool, field: str, why: str) -> None:
        if not ok:
            self.append((field, why))


# -- loading ------------------------------------------------------------------------------------


def _convert(tp, value, name: str):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, name)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected a mapping, got {type(value).__name__}")
        return from_dict(tp, value, prefix=name + ".")
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{name}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], v, f"{name}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 5e-5 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{name}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls, data: dict, prefix: str = ""):
    """Build dataclass `cls` from a plain dict, checking keys, types and invariants."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown field (known: {', '.join(sorted(known))})"
        )
    kwargs = {k: _convert(hints[k], v, prefix + k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{prefix}{e}") from None


def _set_dotted(d: dict, dotted: str, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d.setdefault(k, {})
    d[keys[-1]] = value


def apply_overrides(data: dict, overrides) -> dict:
    """Set each `dotted.key=value` of `overrides` (values are YAML) in `data`, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        _set_dotted(data, k, yaml.safe_load(v))
    return data


def load(cls, path, overrides: Sequence[str] = ()):
    """Load `cls` from YAML file `path`, then apply `key.sub=value` overrides (values are YAML)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: malformed YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields at the top level")
    apply_overrides(data, overrides)
    try:
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def describe(cls) -> list[tuple[str, str, object, str]]:
    """(name, type, default, help) of each field: the source of the docs' config reference."""
    out = []
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append((f.name, str(f.type), default, f.metadata.get("help", "")))
    return out
