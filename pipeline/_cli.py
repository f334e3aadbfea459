"""Shared command-line plumbing: `--config FILE [--set key=value ...]`, one-line errors."""

from __future__ import annotations

import argparse
import sys

from gspo.config import ConfigError, load


def parse_config(cls, description: str, argv=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--config", required=True, help="YAML file of the stage's config")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a field (dotted keys, YAML values); repeatable")
    args = ap.parse_args(argv)
    return load(cls, args.config, args.overrides)


def run(main, argv=None) -> None:
    """Run `main(argv)`; known errors print one line on stderr and exit 2."""
    from gspo.io import DataError

    try:
        main(argv)
    except (ConfigError, DataError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - the trainer's own stop conditions
        if type(e).__name__ == "TrainingError":
            print(f"error: {e}", file=sys.stderr)
            sys.exit(3)
        raise
