"""Per-step metrics: an append-only JSONL file per run (MLflow mirrors it when configured)."""

from __future__ import annotations

import json
import math
import pathlib


class MetricsLog:
    """`metrics.jsonl` of {"step": s, ...} records.

    On resume, records after the checkpoint's step are dropped so that the file matches an
    uninterrupted run exactly.
    """

    def __init__(self, path, *, resume_step: int | None = None):
        self.path = pathlib.Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_step is not None and self.path.exists():
            kept = [r for r in read_metrics(self.path) if r["step"] <= resume_step]
        with open(self.path, "w") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in kept)

    def log(self, step: int, metrics: dict) -> None:
        rec = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
            f.flush()


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no nan/inf; keep them visible rather than crash
    return v


def read_metrics(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
