"""The GPU machine this project can be lent, as benchmarks/device_check.sh meets it: what its
image holds, what it lacks, and the wheels the check carries there (in .whl/, ignored by git;
64 MiB of extra files at most travel with the working tree). tests/test_gpu_check.py simulates
the image on CPU with BLOCKED: the modules the image lacks and no carried wheel brings.

    python benchmarks/device_image.py --requirements     # NAME==VERSION of each carried wheel
    python benchmarks/device_image.py --sizes .whl       # the wheels there, with their sizes
    python benchmarks/device_image.py --partial FILE RC  # the JSON line of a killed check
"""

from __future__ import annotations

import json
import pathlib
import sys

# as the workplace's notes read the image (Python 3.12.3, /opt/torch/.venv/bin/python3)
IMAGE = {
    "python": "3.12.3",
    "torch": "2.11.0+cu130",
    "transformers": "5.17.0",
    "accelerate": "1.15.0",
    "tokenizers": "0.23.2",
    "safetensors": "0.8.0",
    "huggingface_hub": "1.33.0",
    "numpy": "2.5.2",
}
# carried: TRL (pure Python) and what it needs that the image lacks; transformers at the
# project's pin (5.19.0 over the image's 5.17.0: the code paths run under the tested version;
# it needs tokenizers >= 0.23.1, which the image has). torch cannot travel (GBs): the check
# runs on the image's 2.11 (docs/SCALE.md).
WHEELS = {
    "trl": "1.16.0",
    "datasets": "5.2.0",
    "dill": "0.4.1",
    "multiprocess": "0.70.19",
    "transformers": "5.19.0",
}
# top-level modules the project's environment has and the image does not (vLLM, MLflow,
# Snakemake, lm-eval, math-verify and what they pull in), less what the wheels bring
LACKS = (
    "vllm",
    "mlflow",
    "snakemake",
    "snakemake_interface_common",
    "lm_eval",
    "math_verify",
    "latex2sympy2_extended",
    "sqlalchemy",
    "alembic",
    "flask",
    "graphene",
    "gunicorn",
    "evaluate",
    "pytablewriter",
    "trl",
    "datasets",
    "dill",
    "multiprocess",
)
BLOCKED = tuple(m for m in LACKS if m not in WHEELS)
LIMIT_MIB = 64


def sizes(folder: pathlib.Path) -> int:
    files = sorted(folder.glob("*.whl"))
    total = sum(f.stat().st_size for f in files)
    for f in files:
        print(f"{f.stat().st_size / 2**20:8.2f} MiB  {f.name}")
    print(f"{total / 2**20:8.2f} MiB  in all ({len(files)} wheels; the limit: {LIMIT_MIB} MiB)")
    names = {f.name.split("-")[0].lower() for f in files}
    missing = [w for w in WHEELS if w not in names]
    if missing:
        print(f"device_image: missing wheels: {', '.join(missing)}", file=sys.stderr)
    return 0 if total < LIMIT_MIB * 2**20 and not missing else 1


def partial(path: pathlib.Path, rc: int) -> int:
    """The report of the phases a killed check finished, as its one JSON line."""
    report = (
        json.loads(path.read_text()) if path.is_file() else {"check": "gpu_check", "phases": {}}
    )
    done = ", ".join(report["phases"]) or "none"
    why = "timed out" if rc in (124, 137) else f"exit status {rc}"
    report.update(
        ok=False, timed_out=rc in (124, 137), failures=[f"check: {why} (phases finished: {done})"]
    )
    print(json.dumps(report), flush=True)
    return 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["--requirements"]:
        print(" ".join(f"{k}=={v}" for k, v in WHEELS.items()))
        return 0
    if argv[:1] == ["--sizes"] and len(argv) == 2:
        return sizes(pathlib.Path(argv[1]))
    if argv[:1] == ["--partial"] and len(argv) == 3:
        return partial(pathlib.Path(argv[1]), int(argv[2]))
    print(
        "usage: device_image.py --requirements | --sizes DIR | --partial FILE RC", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
