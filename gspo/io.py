"""Small file helpers: atomic writes, JSONL with line-numbered errors, content hashes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import tempfile


class DataError(ValueError):
    """Bad input data; the message names the file and line or field."""


def atomic_write_text(path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder and a rename."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(dest):
    """Yield a temp folder beside `dest`; on success it replaces `dest` in one rename.

    On any error the temp folder is removed, so `dest` is either the old complete folder, the new
    complete folder, or absent: never half-written. Temp names start with '.'.
    """
    dest = pathlib.Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        yield tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(records, path) -> None:
    """Write `records` to `path` atomically, one sorted-key JSON object a line."""
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def jsonl_rows(path):
    """Yield (line number, parsed value) of each non-blank line, in order, so that a caller's own
    checks of a line fail before a later line is read; malformed JSON raises DataError naming the
    file and line."""
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: malformed JSON ({e.msg})") from None
            yield lineno, value


def read_jsonl(path, required: tuple[str, ...] = ()) -> list[dict]:
    """Records of a JSONL file; a malformed line or missing field raises DataError naming it."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise DataError(f"{path}: file not found")
    out = []
    for lineno, rec in jsonl_rows(path):
        if not isinstance(rec, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
        missing = [k for k in required if k not in rec]
        if missing:
            raise DataError(f"{path}:{lineno}: record is missing field {missing[0]!r}")
        out.append(rec)
    return out


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
