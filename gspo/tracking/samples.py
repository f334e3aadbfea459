"""Training samples to read: every `log_samples_every` steps, each of the step's samples (rank
0's share of them under torchrun) as one JSON line: the step, prompt, completion, reward,
advantage, its length and how it ended, and what the update made of it (`ratio`, its sequence
ratio s_i = exp(mean_t log(pi_theta / pi_old)) at its last update, and `clip_frac`, the share of
its tokens whose term the clip acted on; null under an engine that does not say). Written to
out_dir/samples/step_<S>.jsonl and logged to the stage's MLflow run as samples/step_<S>.jsonl
(a resumed run writes a step's file again, the same, and replaces it)."""

from __future__ import annotations

import json
import math
import pathlib

from gspo.io import atomic_write_text

FOLDER = "samples"


def due(every: int, step: int) -> bool:
    """Whether the samples of `step` (1-based) are logged."""
    return every > 0 and step % every == 0


def rows(
    step: int,
    prompts: list[str],
    completions: list[str],
    rewards: list[float],
    advantages: list[float] | None = None,
    stats: list[list[float]] | None = None,
    lengths: list[int] | None = None,
    finish: list[str] | None = None,
) -> list[dict]:
    """One dict per sample (module doc); `stats`: [ratio, clip_frac] per sample (NaN: none)."""
    n = len(prompts)

    def num(x):
        return None if x is None or not math.isfinite(x) else round(float(x), 6)

    return [
        {
            "step": step,
            "prompt": prompts[i],
            "completion": completions[i],
            "reward": float(rewards[i]),
            "advantage": num(advantages[i]) if advantages is not None else None,
            "ratio": num(stats[i][0]) if stats is not None else None,
            "clip_frac": num(stats[i][1]) if stats is not None else None,
            "length": lengths[i] if lengths is not None else None,
            "finish_reason": finish[i] if finish is not None else None,
        }
        for i in range(n)
    ]


def write(out_dir, step: int, samples: list[dict]) -> pathlib.Path:
    """out_dir/samples/step_<S>.jsonl, and the same file in the stage's MLflow run (if any)."""
    from gspo.tracking.runs import log_artifact

    path = pathlib.Path(out_dir) / FOLDER / f"step_{step:06d}.jsonl"
    atomic_write_text(path, "".join(json.dumps(s, sort_keys=True) + "\n" for s in samples))
    log_artifact(out_dir, path, FOLDER)
    return path
