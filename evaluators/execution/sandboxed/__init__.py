"""Programs that run inside the sandbox, not in the harness: evaluators/execution/sandboxed/<name>.py is
read as text (`source`) and handed to the sandbox as its main script. Each is a real Python file
(linted and read like the rest) whose work happens only under `__main__`, so importing one by
mistake runs nothing.

- runner.py: the warm runner of evaluators.execution.batch / evaluators.execution.pool (one program's tests, a
  fresh forked child each); evaluators.execution.frames.RUNNER.
- functional.py: the driver of functional tests (calls the solution's function);
  evaluators.benchmarks.judge.DRIVER.
- file_mode.py: the driver of file tests (input.txt / output.txt); evaluators.benchmarks.judge.FILE_DRIVER.
"""

from __future__ import annotations

import pathlib


def source(name: str) -> str:
    """The text of evaluators/execution/sandboxed/<name>.py, as the sandbox runs it."""
    return (pathlib.Path(__file__).parent / f"{name}.py").read_text()
