"""The house's lint, format and type checks, run as the suite runs everything (CI included): ruff's
linter and formatter over the whole tree and mypy over gspo/, each configured in pyproject.toml
(the pinned tools come with the test extra). A failure prints the tool's own report; `ruff check
--fix` and `ruff format` mend most of what the first two find.

Each check also meets a finding it must report, so a configuration that silently checks nothing
(an emptied rule selection, a mypy pointed at no files) fails here too."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUFF_CHECK = ["ruff", "check", "--no-cache", "--output-format", "concise"]
RUFF_FORMAT = ["ruff", "format", "--no-cache", "--check"]
MYPY = ["mypy"]  # its files and settings: pyproject.toml's [tool.mypy]


def _run(args: list[str], stdin: str | None = None, cwd: pathlib.Path = ROOT):
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _report(r) -> str:
    return f"exit status {r.returncode}\n{r.stdout[-20000:]}{r.stderr[-5000:]}"


def test_ruff_finds_nothing_in_the_tree():
    r = _run([*RUFF_CHECK, "."])
    assert r.returncode == 0, _report(r)


def test_the_tree_is_formatted_as_ruff_formats_it():
    r = _run([*RUFF_FORMAT, "."])
    assert r.returncode == 0, "run `ruff format`:\n" + _report(r)


def test_mypy_finds_no_type_error_in_gspo():
    r = _run(MYPY)
    assert r.returncode == 0, _report(r)
    assert "no issues found" in r.stdout and "source files" in r.stdout, _report(r)


def test_the_lint_reports_what_the_house_rules_select():
    """pyproject's rules are in force: bugbear's closure over a loop variable, an unused import,
    unsorted imports, and a line the formatter wraps at 100 columns, not 88."""
    bad = "import sys\nimport json\n\n\ndef f(xs):\n    return [lambda: x for x in xs]\n"
    r = _run([*RUFF_CHECK, "--stdin-filename", "gspo/example.py", "-"], stdin=bad)
    codes = {line.split()[1] for line in r.stdout.splitlines() if ": " in line}
    assert r.returncode == 1 and {"B023", "F401", "I001"} <= codes, _report(r)
    line_of_99 = "x = [" + ", ".join(["1000000"] * 10) + ", 100]\n"
    assert len(line_of_99) - 1 == 99
    r = _run(
        ["ruff", "format", "--no-cache", "--stdin-filename", "gspo/example.py", "-"],
        stdin=line_of_99 + "y = [" + ", ".join(["1000000"] * 12) + "]\n",
    )
    assert r.returncode == 0 and r.stdout.splitlines()[0] == line_of_99.strip(), _report(r)
    assert len(r.stdout.splitlines()) > 2, _report(r)  # the 101-column line is wrapped


def test_mypy_reports_a_type_error_under_the_house_settings(tmp_path):
    """mypy with pyproject's settings, on a module with a type error inside an unannotated
    function (reported only with check_untyped_defs, which the settings turn on)."""
    (tmp_path / "bad.py").write_text("def f():\n    x: int = 'one'\n    return x\n")
    r = _run(
        [
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-incremental",
            str(tmp_path / "bad.py"),
        ],
        cwd=tmp_path,
    )
    assert r.returncode == 1 and "bad.py:2: error: Incompatible types" in r.stdout, _report(r)


def test_the_pre_commit_hooks_run_the_checks_the_suite_runs():
    """.pre-commit-config.yaml, for contributors, runs these same tools from the project's
    environment (so a commit meets the versions and settings CI uses)."""
    hooks = {
        h["id"]: h
        for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
        for h in repo["hooks"]
    }
    assert hooks["ruff-check"]["entry"].split()[:3] == [".venv/bin/ruff", "check", "--fix"]
    assert hooks["ruff-format"]["entry"].split()[:2] == [".venv/bin/ruff", "format"]
    assert hooks["mypy"]["entry"] == ".venv/bin/mypy" and hooks["mypy"]["pass_filenames"] is False
    assert all(h["language"] == "system" for h in hooks.values())
