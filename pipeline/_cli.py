"""Shared command-line plumbing: `--config FILE [--set key=value ...]`, the MLflow flags, and
one-line errors."""

from __future__ import annotations

import argparse
import os
import sys

from gspo.fields import ConfigError, load
from gspo.io import DataError
from gspo.mlflow_store import DEFAULT_EXPERIMENT
from gspo.tracking import Tracking
from gspo.errors import TrainingError


def config_parser(description: str, prog: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help="YAML file of the stage's config")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a field (dotted keys, YAML values); repeatable")
    return ap


def add_tracking_flags(ap: argparse.ArgumentParser) -> None:
    """MLflow flags. The store defaults to MLflow's own MLFLOW_TRACKING_URI (unset: no
    tracking), the experiment to MLFLOW_EXPERIMENT_NAME, as with any MLflow program."""
    ap.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI") or None,
                    help="MLflow store, e.g. sqlite:///results/mlflow.db or http://host:5000 "
                    "(default: MLFLOW_TRACKING_URI; unset: no tracking)")
    ap.add_argument("--experiment", default=os.environ.get("MLFLOW_EXPERIMENT_NAME")
                    or DEFAULT_EXPERIMENT, help="MLflow experiment (default: "
                    f"MLFLOW_EXPERIMENT_NAME, else {DEFAULT_EXPERIMENT})")
    ap.add_argument("--run-name", default="",
                    help="MLflow run name (default: <stage>-<algorithm>-seed<seed>)")
    ap.add_argument("--tag", dest="tags", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra tag of the runs this command makes; repeatable")


def tracking_of(args) -> Tracking:
    tags = {}
    for item in args.tags:
        if "=" not in item:
            raise ConfigError(f"--tag {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        tags[k] = v
    return Tracking(uri=args.tracking_uri, experiment=args.experiment,
                    run_name=args.run_name, tags=tags)


def load_config(cls, args):
    return load(cls, args.config, args.overrides)


def run(main, argv=None) -> None:
    """Run `main(argv)`; known errors print one line on stderr and exit 2 (bad input) or 3
    (the trainer's own stop conditions)."""
    try:
        main(argv)
    except (ConfigError, DataError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except TrainingError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(3)


def parse_config(cls, description: str, argv=None, prog: str | None = None):
    """The config of a stage whose only flags are --config and --set."""
    return load_config(cls, config_parser(description, prog).parse_args(argv))
