"""What a run records of the code it ran: the project's version and the git commit.

Both go beside the config, seed and data hashes in every training run's run_info.json (and so
its MLflow tags: `version.gspo-bench`, `git_commit`) and in every evaluation's summary.json
(and its MLflow eval run). Every stage command's `--version` prints `version()`. Nothing here
imports torch: the stages without tensors use it too.
"""

from __future__ import annotations

import functools
import pathlib
import subprocess

PACKAGE = "gspo-bench"
ROOT = pathlib.Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def version() -> str:
    """The project's version: pyproject.toml's in a source checkout (the truth there, whatever
    an older editable install's metadata says), else the installed package's, else 'unknown'."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == PACKAGE and project.get("version"):
            return str(project["version"])
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> str:
    """HEAD of the checkout the code runs from, with '-dirty' when tracked files changed;
    'unknown' outside a git checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha or "unknown") + ("-dirty" if sha and dirty else "")


def record() -> dict[str, str]:
    """{version, git_commit}: what an evaluation's summary.json records of the code."""
    return {"version": version(), "git_commit": git_commit()}
