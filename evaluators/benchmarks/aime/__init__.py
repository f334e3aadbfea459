"""AIME-style math: a procedural problem generator, a loader for real AIME-style data, and the
answer scoring shared by RL rewards and evaluation (through evaluators.tasks).

Generated problems are multi-step integer arithmetic, `Compute (a*b+c-d+e) mod 1000.`, whose answer
is an integer 0..999 (AIME's answer range). The worked solution writes one line per operation and
ends in `\\boxed{N}`. Difficulty is the number of add/subtract steps and the operand size; named
tiers (`TIERS`: easy / medium / hard) fix both.

Splits are disjoint by construction: a problem's split is a hash of its canonical text, so no test
problem can ever be drawn for training, whatever the seeds and sizes.

Prompts: a generated record's prompt is its bare problem text (what the tiny model trains on);
a real record's is `format_prompt`: the problem, then the boxed-answer instruction.

Scoring (`score(record, completion)` -> {passed, answer}, the RL reward and the evaluation metric
alike) reads the final answer out of the completion and compares it with the record's, as
evaluators.benchmarks.aime.answers says.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import pathlib
import random
import re
import sys
from typing import Iterable, Sequence

from evaluators.benchmarks.aime import sources as math_sources
from evaluators.benchmarks.aime.answers import answers_match, extract_answer, last_boxed, plain_int
from evaluators.benchmarks.sources import looks_offline
from gspo.io import DataError

TASK = "aime"
MOD = 1000
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
RECORD_FIELDS = ("id", "task", "prompt", "answer")


@dataclasses.dataclass(frozen=True)
class Difficulty:
    steps: int = 3  # number of +/- operations after the product
    max_operand: int = 9  # operands are drawn from 1..max_operand

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError(f"difficulty.steps must be >= 0, got {self.steps}")
        if self.max_operand < 1:
            raise ValueError(f"difficulty.max_operand must be >= 1, got {self.max_operand}")


# Named difficulty tiers. `hard` products reach 9801, so its answers need the mod-1000 step.
TIERS: dict[str, Difficulty] = {
    "easy": Difficulty(steps=2, max_operand=9),
    "medium": Difficulty(steps=4, max_operand=30),
    "hard": Difficulty(steps=6, max_operand=99),
}


def as_difficulty(spec: Difficulty | str) -> Difficulty:
    """A Difficulty from itself or a tier name ('easy', 'medium', 'hard')."""
    if isinstance(spec, Difficulty):
        return spec
    if isinstance(spec, str) and spec in TIERS:
        return TIERS[spec]
    raise ValueError(f"unknown difficulty {spec!r}; expected a Difficulty or one of {list(TIERS)}")


def tier_of(d: Difficulty) -> str | None:
    """The tier name of `d`, or None when it is not one of TIERS."""
    return next((name for name, t in TIERS.items() if t == d), None)


def split_of(problem: str, test_fraction: float = 0.1) -> str:
    """'test' or 'train', decided by a hash of the problem text alone."""
    h = int.from_bytes(hashlib.sha256(problem.encode()).digest()[:8], "big")
    return "test" if (h % 10_000) < test_fraction * 10_000 else "train"


def make_problem(rng: random.Random, difficulty: Difficulty) -> dict:
    a = rng.randint(1, difficulty.max_operand)
    b = rng.randint(1, difficulty.max_operand)
    ops = [
        (rng.choice("+-"), rng.randint(1, difficulty.max_operand)) for _ in range(difficulty.steps)
    ]
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


def without_box(record: dict) -> dict:
    """`record` with its worked solution stopped before the final `\\boxed{...}` line: the
    arithmetic is all there, the answer is not marked. Imperfect cold-start data of this kind
    (pipeline.data's `sft_unboxed` share) leave RL a behaviour to learn that carries over to
    every problem: the scorer finds no answer in such a solution."""
    head, sep, _ = record["solution"].rpartition("\n\\boxed{")
    if not sep:
        raise ValueError(f"{record.get('id', '?')}: solution has no final \\boxed{{...}} line")
    return {**record, "solution": head}


def generate(
    n: int,
    *,
    split: str,
    seed: int,
    difficulty: Difficulty | str | Iterable[Difficulty | str],
    test_fraction: float = 0.1,
) -> list[dict]:
    """`n` distinct problems of `split` ('train' or 'test'), deterministic in `seed`.

    `difficulty` is a Difficulty, a tier name, or several of either, mixed round-robin. Records
    carry `difficulty` (its fields) and, when it is a named tier, `tier`. Raises if the space of
    problems is too small to give `n` distinct ones.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    specs = [difficulty] if isinstance(difficulty, (Difficulty, str)) else list(difficulty)
    if not specs:
        raise ValueError("difficulty must name at least one Difficulty or tier")
    diffs = [as_difficulty(d) for d in specs]
    rng = random.Random(f"{TASK}:{split}:{seed}")
    seen: set[str] = set()
    out: list[dict] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise ValueError(
                f"could only generate {len(out)} distinct {split} problems of {n} asked; "
                "raise max_operand or steps"
            )
        d = diffs[len(out) % len(diffs)]
        rec = make_problem(rng, d)
        if rec["problem"] in seen or split_of(rec["problem"], test_fraction) != split:
            continue
        seen.add(rec["problem"])
        rec = {
            "id": f"{TASK}-{split}-{seed}-{len(out):05d}",
            "task": TASK,
            "prompt": rec["problem"] + "\n",
            **rec,
            "difficulty": dataclasses.asdict(d),
        }
        tier = tier_of(d)
        if tier is not None:
            rec["tier"] = tier
        out.append(rec)
    return out


# -- scoring -----------------------------------------------------------------------------------


def score(record: dict, completion: str) -> dict:
    """{passed, answer}: whether the final boxed answer of `completion` equals the record's
    `answer`, and that extracted answer's text (None when there is none)."""
    got = extract_answer(completion)
    return {"passed": got is not None and answers_match(got, record["answer"]), "answer": got}


def score_many(
    records: Sequence[dict], completions: Sequence[str], workers: int = 1, **options
) -> list[dict]:
    """score() of each (record, completion) pair, in order, serially on the calling thread
    (math-verify's timeouts only work on the main thread). `workers` and the code benchmarks'
    `options` (stop_at_first_failure, ...) are accepted for the shared interface and change
    nothing here."""
    records, completions = list(records), list(completions)
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completions")
    return [score(r, c) for r, c in zip(records, completions)]


# -- real AIME-style data ----------------------------------------------------------------------

# Accepted field spellings, first match wins.
PROBLEM_FIELDS = ("problem", "Problem", "question", "Question")
ANSWER_FIELDS = ("answer", "Answer", "expected_answer")
ID_FIELDS = ("id", "ID", "Id", "problem_id")
YEAR_FIELDS = ("year", "Year")
SOLUTION_FIELDS = ("solution", "Solution")

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def make_prompt(problem: str) -> str:
    """The model input for a real AIME problem: the problem, then the boxed-answer instruction."""
    return f"{problem.strip()}\n{INSTRUCTION}\n"


def format_prompt(record: dict) -> str:
    """`make_prompt` of the record's problem text (the prompt `load` gives real records)."""
    return make_prompt(str(record["problem"]))


def _field(row: dict, names: tuple[str, ...]):
    for name in names:
        v = row.get(name)
        if v is not None and not (isinstance(v, str) and not v.strip()):
            return v
    return None


def _dataset(src: str, split: str, name: str | None, cache_dir):
    """The `datasets` dataset of a local file or hub name; any failure is one DataError line."""
    import datasets  # heavy; only when loading

    path = pathlib.Path(src)
    looks_local = path.is_absolute() or src.startswith(".") or path.suffix.lower() in _BUILDERS
    files = sorted(glob.glob(src)) if "*" in src else [src] if path.is_file() else []
    if "*" in src and not files:  # a pattern picks one split's shards: data/train-*.parquet
        raise DataError(f"{src}: no files match")
    if looks_local and not files and not path.exists():
        raise DataError(f"{src}: file not found")
    try:
        if files:
            builder = _BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise DataError(
                    f"{src}: unsupported file type {path.suffix!r}; "
                    f"expected one of {sorted(_BUILDERS)}"
                )
            return datasets.load_dataset(
                builder, data_files=files, split="train", cache_dir=cache_dir
            )
        if src in math_sources.HUB_CONFIGS and name is None:  # every config, concatenated
            return math_sources.hub_rows(
                lambda n, c, split: datasets.load_dataset(n, c, split=split, cache_dir=cache_dir),
                src,
            )
        return datasets.load_dataset(src, name, split=split, cache_dir=cache_dir)
    except DataError:
        raise
    except Exception as e:  # noqa: BLE001 - one line naming the source, whatever went wrong
        if not path.exists() and looks_offline(e):
            raise DataError(math_sources.offline_message(src)) from None
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"{src}: cannot load AIME data ({type(e).__name__}: {msg})") from None


def _record_id(row: dict, i: int, stem: str) -> str:
    pid, year = _field(row, ID_FIELDS), _field(row, YEAR_FIELDS)
    if pid is not None:
        pid = str(pid).strip()
        return (
            f"{TASK}-{year}-{pid}" if year is not None and str(year) not in pid else f"{TASK}-{pid}"
        )
    if year is not None:
        return f"{TASK}-{year}-{i:03d}"
    return f"{TASK}-{stem}-{i:05d}"


def _record(row: dict, i: int, src: str, stem: str) -> dict:
    """The project's record of row `i` (0-based) of `src`."""
    problem = _field(row, PROBLEM_FIELDS)
    if problem is None:
        raise DataError(
            f"{src}: row {i + 1}: record is missing field 'problem' "
            f"(accepted: {', '.join(PROBLEM_FIELDS)})"
        )
    answer = _field(row, ANSWER_FIELDS)
    if answer is None:
        raise DataError(
            f"{src}: row {i + 1}: record is missing field 'answer' "
            f"(accepted: {', '.join(ANSWER_FIELDS)})"
        )
    as_int = plain_int(answer)
    answer = as_int if as_int is not None else str(answer).strip()
    solution = _field(row, SOLUTION_FIELDS)
    solution = str(solution).rstrip() if solution is not None else ""
    if last_boxed(solution) is None:
        solution = (solution + "\n" if solution else "") + f"\\boxed{{{answer}}}"
    rec = {
        "id": _record_id(row, i, stem),
        "task": TASK,
        "prompt": make_prompt(str(problem)),
        "problem": str(problem).strip(),
        "answer": answer,
        "solution": solution,
        "source": src,
    }
    year = _field(row, YEAR_FIELDS)
    if year is not None:
        rec["year"] = year
    return rec


def _plain_rows(ds, src: str):
    """The layout of `ds` (math_sources.layout_of) and its (index, plain row or None, why skipped)
    triples, lazily."""
    cols = getattr(ds, "column_names", None)
    if cols is None:
        cols = list(ds[0]) if len(ds) else []
    layout = math_sources.layout_of(cols)

    def rows():
        for i, row in enumerate(ds):
            where = f"{src}: row {i + 1}"
            if layout == "dapo":
                yield i, math_sources.dapo_row(row, where), None
            elif layout == "openr1":
                got = math_sources.openr1_row(row, where)
                yield i, got, None if got else "with no generation that math-verify found correct"
            else:
                yield i, row, None

    return layout, rows()


def load(
    source,
    *,
    split: str = "train",
    name: str | None = None,
    limit: int | None = None,
    cache_dir=None,
    integer_only: bool = False,
) -> list[dict]:
    """Records of real AIME-style data, read through `datasets`.

    `source` is a local .json/.jsonl/.parquet/.csv file (or a folder `datasets` can read), or a
    hub dataset name (with config `name` and `split`; e.g. "HuggingFaceH4/aime_2024", split
    "train"; "opencompass/AIME2025" reads both its configs' test splits). Field spellings of public
    copies are accepted (`problem`/`Problem`/`question`, `answer`/`Answer`, `id`/`ID`, `year`,
    `solution`), and so are DAPO-Math-17k's and OpenR1-Math-220k's layouts (evaluators.benchmarks.aime.sources
    says what is taken from each). Each record gets the project's shape: id, task="aime", prompt
    (`format_prompt`), problem, answer (an int when it is written as one, else its text, which
    scoring hands to math-verify), solution (the source's worked solution, ending in
    `\\boxed{answer}`; just the box when the source has none) and, when present, year.
    A row missing a problem or answer raises gspo.io.DataError naming the source, the row and the
    field. Rows that give no record (OpenR1 without a verified generation, DAPO's repeats, and with
    `integer_only` answers that are not integers) are skipped, counted, and the counts written as
    one line on stderr. `limit` counts records kept.
    """
    src = str(source)
    ds = _dataset(src, split, name, cache_dir)
    path = pathlib.Path(src)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem if path.suffix else src)
    layout, rows = _plain_rows(ds, src)
    out: list[dict] = []
    seen: set[str] = set()
    skipped: dict[str, int] = {}
    for i, row, why in rows:
        if limit is not None and len(out) >= limit:
            break
        rec = _record(row, i, src, stem) if row is not None else None
        if rec is not None and integer_only and not isinstance(rec["answer"], int):
            why, rec = "without an integer answer", None
        if rec is not None and rec["id"] in seen:
            if layout != "dapo":
                raise DataError(f"{src}: row {i + 1}: duplicate problem id {rec['id']!r}")
            why, rec = "repeating an earlier problem (same extra_info.index)", None
        if rec is None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        seen.add(rec["id"])
        out.append(rec)
    if skipped:
        print(
            f"{src}: skipped " + "; ".join(f"{n} rows {why}" for why, n in skipped.items()),
            file=sys.stderr,
        )
    return out


def load_sft(source, *, limit: int | None = None, **kwargs) -> list[dict]:
    """SFT records: `load`'s, whose `solution` is the source's worked solution (OpenR1-Math: its
    first verified reasoning trace). A source whose rows carry no worked solution (only answers,
    like the AIME sets) would train on a bare `\\boxed{answer}`: that raises DataError."""
    recs = load(source, limit=limit, **kwargs)
    bare = [r["id"] for r in recs if r["solution"].strip() == f"\\boxed{{{r['answer']}}}"]
    if recs and len(bare) == len(recs):
        raise DataError(
            f"{source}: no worked solutions (every record's solution is just its "
            "boxed answer); SFT needs a set with solutions, e.g. OpenR1-Math"
        )
    return recs
