"""docs/NEWCOMER.md's commands, run as written where they are cheap: every `--help` and
`--version`, the memory plan, and the scaled-up plan's dry run on the SLURM profile (its compute
estimate and the SQLite warning). Setting up, running a workflow and the UI are what
tests/test_environment.py, tests/test_workflow.py and tests/test_mlflow_ui.py run; the default's
dry run is test_workflow's too."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SNAKEMAKE_"))}


def commands() -> list[str]:
    text = (ROOT / "docs" / "NEWCOMER.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line.split("  #")[0].strip() for b in blocks for line in b.splitlines() if line.strip()]


def run(cmd: str, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    argv = cmd.split()
    if argv[0] == ".venv/bin/python":
        argv[0] = sys.executable
    elif argv[0] == ".venv/bin/snakemake":
        argv[:1] = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
    return subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def test_the_first_tasks_commands_that_are_cheap_run_as_written(tmp_path):
    from gspo.infra.provenance import version

    cmds = commands()
    cheap = [c for c in cmds if c.endswith(("--help", "--version")) or "memory_plan" in c]
    assert len(cheap) == 5, cmds
    for cmd in cheap:
        r = run(cmd)
        assert r.returncode == 0 and r.stdout, (cmd, r.stderr[-2000:])
        if cmd.endswith("--version"):
            assert r.stdout == f"gspo-bench {version()}\n"
        elif cmd.endswith("--help"):
            assert r.stdout.startswith("usage: python -m pipeline.")
        else:
            assert "fits: True" in r.stdout
    # the GPU plan, from another working directory (its profile named relative to the project)
    [dry] = [c for c in cmds if "snakemake -n --" in c]
    r = run(f"{dry} -d {tmp_path}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(
        r"^plan: compute, estimated: ~[\d,]+ H100 GPU-hours \(sft \d+, rl ", r.stderr, re.M
    ), r.stderr[-3000:]
    assert re.search(r"^warning: the MLflow store is SQLite .* slurm executor", r.stderr, re.M)
