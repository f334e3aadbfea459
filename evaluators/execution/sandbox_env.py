"""What the sandbox (evaluators.execution.sandbox) is built from on this machine, read from the environment:
the bwrap binary, the interpreter programs run under, the directories hidden from them, whether
the unsafe mode was asked for, and the user bwrap starts as when the harness is root.

Environment knobs: GSPO_SANDBOX_BWRAP (path of the bwrap binary), GSPO_SANDBOX_PYTHON (the
interpreter run inside; it must be readable by the sandbox user; by default the harness's own
interpreter when it is, else /usr/bin/python3), GSPO_SANDBOX_HIDE (extra directories, separated
by ':', to hide from programs), GSPO_UNSAFE_SANDBOX=1 (the unsafe mode: evaluators.execution.sandbox).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

UNSAFE_ENV = "GSPO_UNSAFE_SANDBOX"
SANDBOX_UID = 65534  # nobody; used only when the harness runs as root


def unsafe_requested(unsafe: bool | None = None) -> bool:
    """`unsafe` when given, else whether GSPO_UNSAFE_SANDBOX is set to 1/true/yes."""
    if unsafe is not None:
        return bool(unsafe)
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes")


def _world_accessible(path: str) -> bool:
    """Whether a user with no special rights can reach and execute `path` (mode bits only)."""
    p = pathlib.Path(path)
    try:
        if not (p.stat().st_mode & 0o001):
            return False
        for parent in p.parents:
            if not (parent.stat().st_mode & 0o001):
                return False
    except OSError:
        return False
    return True


def switch_user() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def sandbox_python() -> str | None:
    env = os.environ.get("GSPO_SANDBOX_PYTHON")
    if env:
        return env
    candidates = [os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"]
    for c in candidates:
        if c and os.path.isfile(c) and (not switch_user() or _world_accessible(c)):
            return c
    return None


def bwrap_path() -> str | None:
    """The bwrap binary that would be used (GSPO_SANDBOX_BWRAP or PATH), or None."""
    env = os.environ.get("GSPO_SANDBOX_BWRAP")
    if env is not None:
        return env if env and os.path.isfile(env) and os.access(env, os.X_OK) else None
    return shutil.which("bwrap")


def hidden_dirs(python: str) -> list[str]:
    """Directories to mask with an empty tmpfs: the harness's cwd (where data and results live)
    plus GSPO_SANDBOX_HIDE, never one that holds the interpreter or a system directory."""
    dirs = [os.getcwd()] + [d for d in os.environ.get("GSPO_SANDBOX_HIDE", "").split(":") if d]
    out = []
    py = os.path.realpath(python)
    for d in dirs:
        d = os.path.realpath(d)
        if d in ("/", "/usr", "/bin", "/lib", "/lib64", "/etc", "/tmp", "/proc", "/dev"):
            continue
        if py == d or py.startswith(d.rstrip("/") + "/"):
            continue
        if os.path.isdir(d) and (not switch_user() or _world_accessible(d)):
            out.append(d)
    return out
