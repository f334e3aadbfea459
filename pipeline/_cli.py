"""One behaviour for every stage command (`python -m pipeline.<stage>`):

- `--help` names every flag and, for a stage configured by a dataclass, every field of it (name,
  default, help: gspo.config.fields.describe), nested fields dotted: the keys its `--config` YAML and
  `--set KEY=VALUE` take;
- `--version` prints the project's version (gspo.infra.provenance);
- an error is one line on stderr, `error: ...`, without a traceback: exit status 2 for a bad
  config, flag or input (ConfigError, DataError, a missing file), 1 for a run that failed (the
  trainer's stop conditions, TrainingError; no sandbox for the code benchmarks). Anything else
  is a bug and keeps its traceback.

Also the shared flags: `--config FILE [--set key=value ...]` and the MLflow flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import textwrap
import typing

from evaluators.execution.sandbox import SandboxUnavailable
from gspo.config.fields import ConfigError, describe, load
from gspo.errors import TrainingError
from gspo.infra.provenance import version
from gspo.io import DataError
from gspo.tracking.runs import Tracking
from gspo.tracking.store import DEFAULT_EXPERIMENT, DEFAULT_STORE

BAD_INPUT = (ConfigError, DataError, FileNotFoundError, NotADirectoryError, IsADirectoryError)
FAILED_RUN = (TrainingError, SandboxUnavailable)


class Parser(argparse.ArgumentParser):
    """A stage's argument parser: `--version`, the fields of its config class `fields` after the
    flags in `--help`, and a bad flag as one line (exit 2)."""

    def __init__(self, prog: str, description: str, fields=None):
        super().__init__(
            prog=prog,
            description=description,
            epilog=fields_help(fields) if fields else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_argument("--version", action="version", version=f"gspo-bench {version()}")

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _fields(cls, prefix: str = "") -> list[tuple[str, object, str]]:
    """(dotted name, default, help) of every leaf field of dataclass `cls`."""
    hints = typing.get_type_hints(cls)
    out = []
    for name, _, default, text in describe(cls):
        if dataclasses.is_dataclass(hints[name]):
            out += _fields(hints[name], f"{prefix}{name}.")
        else:
            out.append((prefix + name, default, text))
    return out


def fields_help(cls) -> str:
    """The `--help` section naming every field of config class `cls`."""
    lines = [
        f"fields of {cls.__name__} (the keys of the --config YAML; --set KEY=VALUE "
        "overrides one, dotted for nested fields):"
    ]
    for name, default, text in _fields(cls):
        lines.append(f"  {name} (default {default!r})")
        lines += textwrap.wrap(text, 92, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(lines)


def config_parser(description: str, prog: str, cls=None) -> Parser:
    ap = Parser(prog, description, cls)
    ap.add_argument("--config", required=True, help="YAML file of the stage's config")
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field (dotted keys, YAML values); repeatable",
    )
    return ap


def add_tracking_flags(ap: argparse.ArgumentParser, *, reads: bool = False) -> None:
    """MLflow flags, MLflow's own environment variables their defaults. A stage that records
    (sft, train, track) tracks nothing without a store; one that reads a store (aggregate,
    report) falls back to DEFAULT_STORE and names its own runs, so it takes no --run-name."""
    env = os.environ.get("MLFLOW_TRACKING_URI") or None
    unset = f"else {DEFAULT_STORE}" if reads else "unset: no tracking"
    ap.add_argument(
        "--tracking-uri",
        default=env or (DEFAULT_STORE if reads else None),
        help="MLflow store, e.g. sqlite:///results/mlflow.db or http://host:5000 "
        f"(default: MLFLOW_TRACKING_URI; {unset})",
    )
    ap.add_argument(
        "--experiment",
        default=os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT,
        help=f"MLflow experiment (default: MLFLOW_EXPERIMENT_NAME, else {DEFAULT_EXPERIMENT})",
    )
    if not reads:
        ap.add_argument(
            "--run-name",
            default="",
            help="MLflow run name (default: <stage>-<algorithm>-seed<seed>)",
        )
    ap.add_argument(
        "--tag",
        dest="tags",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra tag of the runs this command makes; repeatable",
    )


def tracking_of(args) -> Tracking:
    tags = {}
    for item in args.tags:
        if "=" not in item:
            raise ConfigError(f"--tag {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        tags[k] = v
    return Tracking(
        uri=args.tracking_uri,
        experiment=args.experiment,
        run_name=getattr(args, "run_name", ""),
        tags=tags,
    )


def load_config(cls, args):
    return load(cls, args.config, args.overrides)


def read_yaml(path, flag: str) -> dict:
    """A YAML mapping given by `flag` (a one-line ConfigError when absent or malformed)."""
    import pathlib

    import yaml

    p = pathlib.Path(path)
    if not p.is_file():
        raise ConfigError(f"{flag} {p}: file not found")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag} {p}: malformed YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{flag} {p}: expected a mapping at the top level")
    return data


def _fail(code: int, e: BaseException) -> typing.NoReturn:
    msg = " ".join(str(e).split()) or type(e).__name__
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def run(main, argv=None) -> None:
    """Run `main(argv)` and exit with its return value (None: 0); known errors as one line:
    exit 2 for bad input, 1 for a failed run (the module doc)."""
    try:
        code = main(argv)
    except BAD_INPUT as e:
        _fail(2, e)
    except FAILED_RUN as e:
        _fail(1, e)
    sys.exit(code or 0)
