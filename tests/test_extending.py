"""docs/EXTENDING.md performed: its edits applied to a copy of the repository (diff blocks with
`git apply`, `# new file:` blocks written, `# step` commands run), then tests/extending_check.py
there: the registry checks on the extension, a workflow plan of both, data, one RL step of the
new objective on the new benchmark and an evaluation of its checkpoint."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def copy_of_the_repository(dst: pathlib.Path) -> pathlib.Path:
    """The working tree's files git tracks or would (uncommitted edits included) under dst."""
    names = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in names:
        if (ROOT / name).is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst / name)
    return dst


def perform(page: str, repo: pathlib.Path, env: dict) -> dict[str, int]:
    """Apply the page's blocks in order; how many of each kind it performed."""
    done = {"diff": 0, "new file": 0, "step": 0}
    for lang, body in re.findall(r"^```(\w+)\n(.*?)^```$", page, re.M | re.S):
        if lang == "diff":
            subprocess.run(
                ["git", "apply", "--verbose", "-"],
                input=body,
                text=True,
                cwd=repo,
                check=True,
                capture_output=True,
            )
            done["diff"] += 1
        elif lang == "python" and body.startswith("# new file: "):
            first, code = body.split("\n", 1)
            path = repo / first[len("# new file: ") :]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code)
            done["new file"] += 1
        elif lang == "bash" and body.startswith("# step"):
            subprocess.run(["bash", "-euc", body], cwd=repo, env=env, check=True)
            done["step"] += 1
    return done


def test_the_extending_pages_objective_and_benchmark_work_end_to_end(tmp_path):
    repo = copy_of_the_repository(tmp_path / "repo")
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "OMP_NUM_THREADS": "1",
        "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = perform((ROOT / "docs" / "EXTENDING.md").read_text(), repo, env)
    # every block the page shows was performed (3 edits for the objective, 5 for the benchmark)
    assert done == {"diff": 8, "new file": 1, "step": 1}
    r = subprocess.run(
        [sys.executable, str(repo / "tests" / "extending_check.py"), str(tmp_path / "out")],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {
        "step": 1,
        "clip_frac_tokens": 0.0,
        "n_problems": 4,
        "samples": 2,
        "maj@k": True,
        "tasks": ["parity"] * 4,
    }
