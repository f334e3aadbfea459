"""The Snakemake invocation the plan runs under, as opposed to the config it plans from: whether it
is a dry run, which interpreter the jobs' `python` is, and where and with which tags MLflow
records the runs (`tracking_flags`). What says where results are recorded, not what they are, is
`Unrecorded`, so that recording elsewhere re-runs nothing.
"""

from __future__ import annotations

import os
import pathlib
import shlex
import sys

DEFAULT_TRACKING_URI = "sqlite:///results/mlflow.db"


def is_dry_run(argv: list[str] | None = None) -> bool:
    """Whether this snakemake invocation is a dry run (-n / --dry-run / --dryrun, also inside a
    group of short flags such as -np). Snakemake decides its executor after parsing the
    Snakefile, so the command line is the only place to tell."""
    for a in (sys.argv if argv is None else argv)[1:]:
        if a in ("--dry-run", "--dryrun", "-n"):
            return True
        if a.startswith("-") and not a.startswith("--") and a[1:].isalpha() and "n" in a[1:]:
            return True
    return False


def _flag(argv: list[str], *names: str) -> str | None:
    """The value of the last of `names` (`--flag VALUE` or `--flag=VALUE`) in `argv`."""
    found = None
    for i, a in enumerate(argv):
        for n in names:
            if a == n and i + 1 < len(argv):
                found = argv[i + 1]
            elif a.startswith(n + "=") and n.startswith("--"):
                found = a[len(n) + 1 :]
    return found


def executor(basedir, argv: list[str] | None = None) -> str:
    """The executor this invocation's jobs run on: --executor / -e, else the `executor:` of its
    profile (--profile or $SNAKEMAKE_PROFILE, then --workflow-profile, else the workflow's
    profiles/default), else local. Snakemake settles it after reading the Snakefile, so the
    command line and the profiles are the only places to tell."""
    import yaml

    argv = (sys.argv if argv is None else argv)[1:]
    named = _flag(argv, "--executor", "-e")
    if named:
        return named
    for profile in (
        _flag(argv, "--profile") or os.environ.get("SNAKEMAKE_PROFILE"),
        _flag(argv, "--workflow-profile") or pathlib.Path(basedir) / "profiles" / "default",
    ):
        if not profile:
            continue
        # relative to where snakemake was started (-d has since changed the working directory),
        # the workflow, or the user's profiles
        folder = next(
            (
                f
                for f in (
                    pathlib.Path(os.environ.get("PWD", ".")) / profile,
                    pathlib.Path(profile),
                    pathlib.Path(basedir) / profile,
                )
                if f.is_dir()
            ),
            pathlib.Path.home() / ".config" / "snakemake" / str(profile),
        )
        for name in ("config.v9+.yaml", "config.v8+.yaml", "config.yaml"):
            if (folder / name).is_file():
                found = (yaml.safe_load((folder / name).read_text()) or {}).get("executor")
                if found:
                    return str(found)
                break
    return "local"


# snakemake flags under which no job runs (besides a dry run)
NO_JOBS = (
    "--lint",
    "--report",
    "--dag",
    "--d3dag",
    "--rulegraph",
    "--filegraph",
    "--list",
    "--list-rules",
    "--list-target-rules",
    "--lt",
    "--summary",
    "--detailed-summary",
    "--unlock",
    "--cleanup-metadata",
    "--containerize",
    "--archive",
    "--export-cwl",
    "--generate-unit-tests",
    "--print-compilation",
)


def runs_jobs(argv: list[str] | None = None) -> bool:
    """Whether this invocation may run jobs: not a dry run, a lint, a report or a listing."""
    argv = sys.argv if argv is None else argv
    return not is_dry_run(argv) and not any(a.split("=")[0] in NO_JOBS for a in argv[1:])


def put_interpreter_first() -> None:
    """Make `python` in the jobs' shell commands the interpreter running Snakemake (the project's
    environment), as it is for a user who activated it."""
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def tracking_uri(config: dict, root: pathlib.Path) -> str:
    """MLFLOW_TRACKING_URI, else the config's tracking.uri, else the sqlite store under results/;
    a relative sqlite path is made absolute against the working directory."""
    uri = (
        os.environ.get("MLFLOW_TRACKING_URI")
        or config.get("tracking", {}).get("uri")
        or DEFAULT_TRACKING_URI
    )
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str((root / uri[len("sqlite:///") :]).resolve())
    return uri


class Unrecorded:
    """A rule parameter Snakemake does not record, so that a change of it re-runs nothing:
    Snakemake's params trigger compares only values of builtin types, and this is none. For
    what says where results are recorded (the MLflow store, the invocation's tags), never for
    what they are. Formats into a shell command as its text."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text


def tracking_flags(uri: str, experiment: str, argv: list[str] | None = None) -> Unrecorded:
    """The MLflow flags of every stage command (shell-quoted): the store, the experiment and
    the tags that tie a run to this workflow invocation. Unrecorded: the command line of
    each invocation differs, and recording elsewhere must not re-run a stage."""
    argv = sys.argv if argv is None else argv
    tags = {"experiment": experiment, "workflow": "snakemake", "workflow_command": " ".join(argv)}
    flags = ["--tracking-uri", uri, "--experiment", experiment]
    for k, v in tags.items():
        flags += ["--tag", f"{k}={v}"]
    return Unrecorded(shlex.join(flags))
