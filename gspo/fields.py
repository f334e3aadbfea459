"""The pieces every typed config is built from: a field with its help text, an invariant check
whose message names the field, and the error both raise. gspo.config's stage configs and the
engines' own settings use them; nothing here imports the rest of the project."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import field


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file and field."""


def option(default, text: str, **kw):
    if isinstance(default, (list, dict)) or dataclasses.is_dataclass(default):
        return field(default_factory=lambda d=default: _copy(d), metadata={"help": text}, **kw)
    return field(default=default, metadata={"help": text}, **kw)


def _copy(v):
    return json.loads(json.dumps(v)) if not dataclasses.is_dataclass(v) else dataclasses.replace(v)


def check(cond: bool, name: str, msg: str):
    if not cond:
        raise ConfigError(f"{name}: {msg}")


class Refusals(list):
    """(field, why) pairs: the values an engine cannot honour as this project defines them
    (gspo.trl_engine.refusals, gspo.verl_engine.refusals)."""

    def need(self, ok: bool, field: str, why: str) -> None:
        if not ok:
            self.append((field, why))
