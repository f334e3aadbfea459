"""AIME-style math: a procedural problem generator and the answer scoring shared by RL and eval.

Problems are multi-step integer arithmetic, `Compute (a*b+c-d+e) mod 1000.`, whose answer is an
integer 0..999 (AIME's answer range). The worked solution writes one line per operation and ends in
`\\boxed{N}`. Difficulty is the number of add/subtract steps and the operand size.

Splits are disjoint by construction: a problem's split is a hash of its canonical text, so no test
problem can ever be drawn for training, whatever the seeds and sizes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from typing import Iterable

TASK = "aime"
MOD = 1000


@dataclasses.dataclass(frozen=True)
class Difficulty:
    steps: int = 3         # number of +/- operations after the product
    max_operand: int = 9   # operands are drawn from 1..max_operand

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"difficulty.steps must be >= 0, got {self.steps}")
        if self.max_operand < 1:
            raise ValueError(f"difficulty.max_operand must be >= 1, got {self.max_operand}")


def split_of(problem: str, test_fraction: float = 0.1) -> str:
    """'test' or 'train', decided by a hash of the problem text alone."""
    h = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:8], "big")
    return "test" if (h % 10_000) < test_fraction * 10_000 else "train"


def make_problem(rng: random.Random, difficulty: Difficulty) -> dict:
    a = rng.randint(1, difficulty.max_operand)
    b = rng.randint(1, difficulty.max_operand)
    ops = [(rng.choice("+-"), rng.randint(1, difficulty.max_operand)) for _ in range(difficulty.steps)]
    expr = f"{a}*{b}" + "".join(f"{op}{x}" for op, x in ops)
    problem = f"Compute ({expr}) mod {MOD}."
    value = a * b
    lines = [f"{a}*{b}={value}"]
    for op, x in ops:
        new = value + x if op == "+" else value - x
        lines.append(f"{value}{op}{x}={new}")
        value = new
    answer = value % MOD
    if answer != value:
        lines.append(f"{value} mod {MOD}={answer}")
    solution = "\n".join(lines) + f"\n\\boxed{{{answer}}}"
    return {"problem": problem, "solution": solution, "answer": answer}


def generate(n: int, *, split: str, seed: int, difficulty: Difficulty | Iterable[Difficulty],
             test_fraction: float = 0.1) -> list[dict]:
    """`n` distinct problems of `split` ('train' or 'test'), deterministic in `seed`.

    Several difficulties are mixed round-robin. Raises if the space of problems is too small to
    give `n` distinct ones.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    diffs = [difficulty] if isinstance(difficulty, Difficulty) else list(difficulty)
    rng = random.Random(f"{TASK}:{split}:{seed}")
    seen: set[str] = set()
    out: list[dict] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise ValueError(f"could only generate {len(out)} distinct {split} problems of {n} asked; "
                             "raise max_operand or steps")
        d = diffs[len(out) % len(diffs)]
        rec = make_problem(rng, d)
        if rec["problem"] in seen or split_of(rec["problem"], test_fraction) != split:
            continue
        seen.add(rec["problem"])
        rec = {"id": f"{TASK}-{split}-{seed}-{len(out):05d}", "task": TASK, **rec,
               "difficulty": dataclasses.asdict(d)}
        out.append(rec)
    return out


def last_boxed(text: str) -> str | None:
    """Content of the last brace-matched `\\boxed{...}` in `text`, or None."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        j = i
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth == 0:
            return text[i:j - 1]
        start = text.rfind("\\boxed{", 0, start)  # unterminated: try an earlier one
    return None


def _as_int(s) -> int | None:
    try:
        s = str(s).strip().replace(",", "")
        v = float(s)
    except (TypeError, ValueError):
        return None
    return int(v) if v == int(v) else None


def score(completion: str, answer) -> float:
    """1.0 if the last `\\boxed{}` in `completion` equals the integer `answer`, else 0.0."""
    got = last_boxed(completion)
    if got is None:
        return 0.0
    want = _as_int(answer)
    g = _as_int(got)
    return float(g is not None and want is not None and g == want)


def write_jsonl(records: list[dict], path) -> None:
    from gspo.io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
