"""CodeForces-style problems: rated stdin/stdout tasks, a generator, a loader, scoring and an
Elo-style rating estimate.

Records follow open-r1's Codeforces layout: id ("<contest_id>/<index>"), contest_id, index,
title, description, input_format, output_format, rating (800..3500), time_limit (seconds),
memory_limit (MB), tests (or official_tests) as a list of {input, output}, optional examples,
input_mode ('stdio' or 'file'), generated_checker (a Python checker or None), plus the project's
id / task ("cf") / prompt / solution. Real data (open-r1/codeforces with its generated_tests
folder for `load`, open-r1/codeforces-cots for `load_sft`) is read by evaluators.benchmarks.codeforces.sources,
whose docstring gives the published layouts and what is taken from each.

Scoring runs the extracted program through the shared code judge (evaluators.benchmarks.judge) on every
test in evaluators.execution.sandbox with the record's time and memory limits; with input_mode 'file' the
program reads input.txt and writes output.txt in its working directory (a missing output.txt is
a wrong answer). Output is compared the way Codeforces' default checker does (`tokens_match`,
the comparison this module gives the judge): as whitespace-separated tokens; tokens that differ
as text still match when the expected token is a real number (has '.' or an exponent) and the
two agree within an absolute or relative error of 1e-6. A record with a generated_checker is
judged by that program instead, in a sandbox run of its own (judge.run_checker: `python
checker.py input.txt correct_output.txt solution_output.txt`, last token 1 / 0, fixed limits of
10 s and 1024 MB; a failing checker gives "checker error", never a pass). Interactive problems
are not supported (the loader skips them; `score` refuses them).

Rating estimate (`estimate_rating`): the maximum-likelihood rating R from solved / unsolved
problems of known rating d under P(solve) = 1 / (1 + 10^((d - R)/400)), searched in a bounded
range [0, 4000] so that all-solved and none-solved give the range end (flagged `bounded`), with a
likelihood-ratio confidence interval (the R whose log-likelihood is within chi2_1(conf)/2 of the
maximum). `percentile` is against the project's reference distribution of human ratings,
REFERENCE_RATINGS: a normal distribution, mean 1400, standard deviation 350, truncated to
[0, 4000] -- a documented approximation of rated Codeforces users, not official data; pass
`population=` (a list of ratings) to compare against another one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from statistics import NormalDist
from typing import Iterable, Sequence

from evaluators.benchmarks import judge
from evaluators.benchmarks.codeforces import sources as code_sources
from evaluators.benchmarks.codeforces.sources import (  # noqa: F401 - part of this module's API
    REQUIRED_FIELDS,
    TASK,
    format_prompt,
    normalize,
    tests_of,
)

# The same split rule (a hash of the statement) and template rotation as LiveCodeBench-style
# problems; split_of is re-exported as this module's own.
from evaluators.benchmarks.splits import draw_round_robin, split_of  # noqa: F401
from gspo.io import DataError

MIN_RATING, MAX_RATING = 800, 3500
RATING_RANGE = (0.0, 4000.0)  # where estimate_rating searches
REFERENCE_MEAN, REFERENCE_SD = 1400.0, 350.0
REFERENCE_RATINGS = {
    "kind": "normal",
    "mean": REFERENCE_MEAN,
    "sd": REFERENCE_SD,
    "range": RATING_RANGE,
}
RECORD_FIELDS = ("id", "task", "prompt")
FLOAT_TOLERANCE = 1e-6


# ---------------------------------------------------------------------------------------------
# Generator: templates whose rating grows with how much the program has to do


@dataclasses.dataclass(frozen=True)
class Template:
    name: str
    rating: int
    statement: str
    code: str
    consts: tuple  # (name, lo, hi)
    inputs: str
    reference: object  # (consts, input value) -> expected value; harness side
    near: str = ""  # a threshold constant the tests must probe on both sides


def _fib(n, m):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, (a + b) % m
    return a


def _primes_upto(n):
    return sum(all(i % j for j in range(2, int(i**0.5) + 1)) for i in range(2, n + 1))


def _longest_run(a):
    best = cur = 1
    for x, y in zip(a, a[1:]):
        cur = cur + 1 if y > x else 1
        best = max(best, cur)
    return best


def _no_adjacent_ones(n, m):
    a, b = 1, 2  # strings of length 0 and 1
    for _ in range(n - 1):
        a, b = b, (a + b) % m
    return b % m if n >= 1 else 1


def _max_subarray(a):
    best = cur = a[0]
    for x in a[1:]:
        cur = max(x, cur + x)
        best = max(best, cur)
    return best


def _partitions(n, m):
    p = [1] + [0] * n
    for k in range(1, n + 1):
        for i in range(k, n + 1):
            p[i] = (p[i] + p[i - k]) % m
    return p[n]


TEMPLATES: tuple[Template, ...] = (
    Template(
        "linear",
        800,
        "Read n. Print n*{a}+{b}.",
        "n=int(input())\nprint(n*{a}+{b})",
        (("a", 2, 9), ("b", 1, 60)),
        "int",
        lambda c, x: x * c["a"] + c["b"],
    ),
    Template(
        "product",
        900,
        "Read a and b. Print a*b+{k}.",
        "a,b=map(int,input().split())\nprint(a*b+{k})",
        (("k", 1, 60),),
        "pair",
        lambda c, x: x[0] * x[1] + c["k"],
    ),
    Template(
        "listsum",
        1000,
        "Read a list of integers. Print its sum times {k}.",
        "print(sum(map(int,input().split()))*{k})",
        (("k", 2, 60),),
        "list",
        lambda c, x: sum(x) * c["k"],
    ),
    Template(
        "triangle",
        1200,
        "Read n. Print (1+2+...+n)*{k}.",
        "n=int(input())\nprint(n*(n+1)//2*{k})",
        (("k", 1, 60),),
        "int",
        lambda c, x: x * (x + 1) // 2 * c["k"],
    ),
    Template(
        "above",
        1400,
        "Read a list of integers. Print how many exceed {k}.",
        "print(sum(x>{k} for x in map(int,input().split())))",
        (("k", 0, 60),),
        "list",
        lambda c, x: sum(v > c["k"] for v in x),
        "k",
    ),
    Template(
        "factorial",
        1600,
        "Read n. Print n! mod {m}.",
        "import math\nprint(math.factorial(int(input()))%{m})",
        (("m", 7, 97),),
        "small",
        lambda c, x: math.factorial(x) % c["m"],
    ),
    Template(
        "divisors",
        1800,
        "Read n. Print the number of divisors of n, plus {k}.",
        "n=int(input())\nprint(sum(n%i<1 for i in range(1,n+1))+{k})",
        (("k", 0, 40),),
        "int",
        lambda c, x: sum(x % i == 0 for i in range(1, x + 1)) + c["k"],
    ),
    Template(
        "fibonacci",
        2000,
        "Read n. Print the n-th Fibonacci number (F0=0, F1=1) mod {m}.",
        "a,b=0,1\nfor _ in range(int(input())):a,b=b,(a+b)%{m}\nprint(a)",
        (("m", 7, 97),),
        "int",
        lambda c, x: _fib(x, c["m"]),
    ),
    Template(
        "primes",
        2200,
        "Read n. Print how many primes are at most n, plus {k}.",
        "n=int(input())\nprint(sum(all(i%j for j in range(2,i))for i in range(2,n+1))+{k})",
        (("k", 0, 40),),
        "int",
        lambda c, x: _primes_upto(x) + c["k"],
    ),
    Template(
        "digits",
        2400,
        "Read n. Print the digit sum of n**{k}.",
        "print(sum(map(int,str(int(input())**{k}))))",
        (("k", 2, 40),),
        "int",
        lambda c, x: sum(map(int, str(x ** c["k"]))),
    ),
    Template(
        "run",
        2600,
        "Read a list of integers. Print the longest strictly increasing run, times {k}.",
        "a=list(map(int,input().split()))\nb=c=1\nfor x,y in zip(a,a[1:]):\n c=c+1 if y>x else 1\n"
        " b=max(b,c)\nprint(b*{k})",
        (("k", 1, 40),),
        "list",
        lambda c, x: _longest_run(x) * c["k"],
    ),
    Template(
        "distinct",
        2800,
        "Read a word s. Print its number of distinct substrings plus {k}.",
        "s=input()\nprint(len({{s[i:j]for i in range(len(s))for j in range(i+1,len(s)+1)}})+{k})",
        (("k", 0, 40),),
        "word",
        lambda c, x: (
            len({x[i:j] for i in range(len(x)) for j in range(i + 1, len(x) + 1)}) + c["k"]
        ),
    ),
    Template(
        "binary",
        3000,
        "Read n. Count length-n binary strings with no two adjacent 1s, mod {m}.",
        "a,b=1,2\nfor _ in range(int(input())-1):a,b=b,(a+b)%{m}\nprint(b%{m})",
        (("m", 7, 97),),
        "pos",
        lambda c, x: _no_adjacent_ones(x, c["m"]),
    ),
    Template(
        "subarray",
        3200,
        "Read a list of integers. Print the maximum subarray sum, plus {k}.",
        "a=list(map(int,input().split()))\nb=c=a[0]\nfor x in a[1:]:\n c=max(x,c+x)\n b=max(b,c)\n"
        "print(b+{k})",
        (("k", 0, 40),),
        "signed",
        lambda c, x: _max_subarray(x) + c["k"],
    ),
    Template(
        "partitions",
        3500,
        "Read n. Print the number of partitions of n mod {m}.",
        "n=int(input())\np=[1]+[0]*n\nfor k in range(1,n+1):\n for i in range(k,n+1):p[i]+=p[i-k]\n"
        "print(p[n]%{m})",
        (("m", 7, 97),),
        "int",
        lambda c, x: _partitions(x, c["m"]),
    ),
)
TEMPLATE_NAMES = tuple(t.name for t in TEMPLATES)


def _draw(kind: str, rng: random.Random):
    if kind == "int":
        return rng.randint(1, 60)
    if kind == "pos":
        return rng.randint(1, 40)
    if kind == "small":
        return rng.randint(0, 12)
    if kind == "pair":
        return (rng.randint(0, 99), rng.randint(0, 99))
    if kind == "list":
        return [rng.randint(0, 99) for _ in range(rng.randint(1, 8))]
    if kind == "signed":
        return [rng.randint(-50, 50) for _ in range(rng.randint(1, 8))]
    if kind == "word":
        return "".join(rng.choice("ab") for _ in range(rng.randint(1, 8)))
    raise ValueError(f"unknown input kind {kind!r}")


def _text(x) -> str:
    return " ".join(map(str, x)) if isinstance(x, (list, tuple)) else str(x)


def make_problem(t: Template, consts: dict, index: int = 0) -> dict:
    statement = t.statement.format(**consts)
    code = t.code.format(**consts)
    rng = random.Random(hashlib.sha256(f"{TASK}:tests:{statement}".encode()).hexdigest())
    tests, seen = [], set()
    for _ in range(60):
        if len(tests) == 5:
            break
        x = _draw(t.inputs, rng)
        if t.near and len(tests) == 1:  # a test straddling the threshold
            k = consts[t.near]
            x = [k + 1, k, max(k - 1, 0)] + x[:2]
            rng.shuffle(x)
        if _text(x) in seen:
            continue
        seen.add(_text(x))
        tests.append({"input": _text(x) + "\n", "output": f"{t.reference(consts, x)}\n"})
    h = int(hashlib.sha256(statement.encode()).hexdigest()[:8], 16)
    contest_id = 9000 + h % 1000
    letter = "ABCDEFG"[min(6, (t.rating - MIN_RATING) // 400)]
    return {
        "id": f"{contest_id}/{letter}{h % 97}",
        "contest_id": contest_id,
        "index": f"{letter}{h % 97}",
        "title": f"{t.name} " + " ".join(f"{k}={v}" for k, v in consts.items()),
        "description": statement,
        "input_format": "",
        "output_format": "",
        "rating": t.rating,
        "tags": ["generated", t.name],
        "time_limit": 2.0,
        "memory_limit": 256,
        "examples": tests[:1],
        "tests": tests,
        "prompt": statement + "\n",
        "solution": f"```python\n{code}\n```",
        "template": t.name,
    }


def generate(
    n: int,
    *,
    split: str,
    seed: int,
    templates: Iterable[str] | None = None,
    min_rating: int = MIN_RATING,
    max_rating: int = MAX_RATING,
    test_fraction: float = 0.1,
) -> list[dict]:
    """`n` distinct generated problems of `split`, deterministic in `seed`, cycling through the
    templates rated in [min_rating, max_rating] (so every rating level is represented); each
    template draws its constants without replacement. Splits are disjoint by a hash of the text."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    by_name = {t.name: t for t in TEMPLATES}
    names = list(TEMPLATE_NAMES if templates is None else templates)
    unknown = [x for x in names if x not in by_name]
    if unknown:
        raise ValueError(f"unknown templates {unknown}; expected some of {list(TEMPLATE_NAMES)}")
    chosen = [
        by_name[x] for x in dict.fromkeys(names) if min_rating <= by_name[x].rating <= max_rating
    ]
    if not chosen:
        raise ValueError(f"no template rated in [{min_rating}, {max_rating}]")
    out: list[dict] = []
    for i, (t, consts) in enumerate(
        draw_round_robin(chosen, n, task=TASK, split=split, seed=seed, test_fraction=test_fraction)
    ):
        rec = make_problem(t, consts)
        rec["problem_id"] = rec["id"]
        rec["id"] = f"{TASK}-{split}-{seed}-{i:05d}"
        rec["task"] = TASK
        out.append(rec)
    return out


# ---------------------------------------------------------------------------------------------
# Loading open-r1's data (evaluators.benchmarks.codeforces.sources)


def load(
    source,
    *,
    split: str = "train",
    config: str | None = None,
    min_rating: int | None = None,
    max_rating: int | None = None,
    limit: int | None = None,
    skip_unusable: bool = True,
    generated_tests=None,
) -> list[dict]:
    """Problems for RL and test: records from a local .parquet/.jsonl/.json file (or a folder of
    them) in open-r1/codeforces' published layout or the project's, or a hub dataset name (via
    `datasets`, with `config` and `split`, e.g. open-r1/codeforces), checked (normalize) and
    filtered to a rating range. `generated_tests` names the dataset's generated_tests/ folder (or
    one of its parquet files): each problem's generated tests are added after its official ones.
    Unusable rows (interactive, no rating, no time or memory limit, no test at all) are skipped
    and counted on one stderr line (`skip_unusable=False`: they raise); any other bad row raises
    DataError naming file, row and field, and so does an SFT set (codeforces-cots). `limit`
    counts the rows kept before the generated tests are read (a problem whose tests are all
    missing from that folder is then skipped, so a few fewer may come back)."""
    return code_sources.load(
        source,
        split=split,
        config=config,
        min_rating=min_rating,
        max_rating=max_rating,
        limit=limit,
        skip_unusable=skip_unusable,
        generated_tests=generated_tests,
    )


def load_sft(
    source, *, limit: int | None = None, config: str | None = None, split: str = "train"
) -> list[dict]:
    """SFT records {id, task "cf", prompt, solution} from worked solutions in
    open-r1/codeforces-cots' layout (a local file or folder, or the hub name, whose config
    defaults to solutions_py): prompt is `format_prompt` of the problem's fields (the prompt
    evaluation gives the same problem), solution the assistant message's content (else
    `generation`). Rows whose finish_reason is not 'stop' or whose answer has no ```python block
    are skipped and counted on stderr; a problem with several solutions gives ids 'ID', 'ID#2', ...
    A problem set without solutions (open-r1/codeforces) raises DataError."""
    return code_sources.load_sft(source, limit=limit, config=config, split=split)


# ---------------------------------------------------------------------------------------------
# Scoring


def _is_real(tok: str) -> bool:
    return any(ch in tok for ch in ".eE") and not tok.lower().lstrip("+-").startswith(
        ("inf", "nan")
    )


def tokens_match(got: str, want: str) -> bool:
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if not _is_real(y):
            return False
        try:
            fx, fy = float(x), float(y)
        except ValueError:
            return False
        if not (math.isfinite(fx) and abs(fx - fy) <= FLOAT_TOLERANCE * max(1.0, abs(fy))):
            return False
    return True


def score(
    record: dict,
    completion: str,
    *,
    time_scale: float = 1.0,
    stop_at_first_failure: bool = False,
    workers: int = 1,
    unsafe: bool | None = None,
) -> dict:
    """Judge `completion` on every test of `record` under its time_limit (times `time_scale`)
    and memory_limit, reading input.txt / writing output.txt when its input_mode is 'file', and
    with its generated_checker instead of tokens_match when it has one: {passed, verdicts,
    n_tests, n_passed}."""
    where = f"record {record.get('id', '?')!r}"
    for k in ("time_limit", "memory_limit"):
        if k not in record:
            raise DataError(f"{where}: record is missing field {k!r}")
    if code_sources.interactive(record):
        raise DataError(f"{where}: interactive problems (interaction_format) are not supported")
    tests = tests_of(record, where)
    return judge.run_tests(
        judge.extract_code(completion),
        tests,
        compare=tokens_match,
        timeout_s=float(record["time_limit"]) * time_scale,
        memory_mb=int(record["memory_limit"]),
        stop_at_first_failure=stop_at_first_failure,
        workers=workers,
        unsafe=unsafe,
        checker=record.get("generated_checker") or None,
    )


def score_many(
    records: Sequence[dict], completions: Sequence[str], workers: int = 2, **kwargs
) -> list[dict]:
    """score() of each (record, completion) pair, `workers` sandboxes at a time, in order."""
    return judge.score_many(score, records, completions, workers, **kwargs)


# ---------------------------------------------------------------------------------------------
# Rating


def solve_probability(rating: float, problem_rating: float) -> float:
    return 1.0 / (1.0 + 10.0 ** ((problem_rating - rating) / 400.0))


def _loglik(r: float, outcomes) -> float:
    total = 0.0
    for d, s in outcomes:
        z = (d - r) / 400.0 * math.log(10.0)
        # log p = -log(1 + e^z), log(1-p) = z - log(1 + e^z), computed stably
        log1pexp = z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))
        total += -log1pexp if s else z - log1pexp
    return total


def _chi2_1(conf: float) -> float:
    """The `conf` quantile of chi-square with 1 degree of freedom (= z^2)."""
    return NormalDist().inv_cdf(0.5 + conf / 2.0) ** 2


def percentile(rating: float, population: Sequence[float] | None = None) -> float:
    """Percent of the reference distribution (or of `population`) rated below `rating`."""
    if population is not None:
        pop = list(population)
        if not pop:
            raise ValueError("population is empty")
        return 100.0 * sum(p < rating for p in pop) / len(pop)
    nd = NormalDist(REFERENCE_MEAN, REFERENCE_SD)
    lo, hi = nd.cdf(RATING_RANGE[0]), nd.cdf(RATING_RANGE[1])
    r = min(max(rating, RATING_RANGE[0]), RATING_RANGE[1])
    return 100.0 * (nd.cdf(r) - lo) / (hi - lo)


def estimate_rating(
    outcomes: Iterable[tuple[float, bool]],
    *,
    confidence: float = 0.95,
    lo: float = RATING_RANGE[0],
    hi: float = RATING_RANGE[1],
    population: Sequence[float] | None = None,
) -> dict:
    """Maximum-likelihood rating from (problem_rating, solved) pairs, with a likelihood-ratio
    confidence interval, all within [lo, hi]: {rating, low, high, percentile, n, solved, bounded}.
    """
    pairs = [(float(d), bool(s)) for d, s in outcomes]
    if not pairs:
        raise ValueError("estimate_rating needs at least one (problem_rating, solved) outcome")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    solved = sum(s for _, s in pairs)

    def score_fn(r):  # d loglik / dR up to a positive factor; decreasing in r
        return solved - sum(solve_probability(r, d) for d, _ in pairs)

    if score_fn(hi) >= 0:
        mle = hi
    elif score_fn(lo) <= 0:
        mle = lo
    else:
        a, b = lo, hi
        for _ in range(100):
            m = (a + b) / 2
            if score_fn(m) > 0:
                a = m
            else:
                b = m
            if b - a < 1e-6:
                break
        mle = (a + b) / 2
    lmax = _loglik(mle, pairs)
    drop = _chi2_1(confidence) / 2.0

    def boundary(a, b):  # loglik(a) >= lmax - drop > loglik(b) (or b is the range end)
        target = lmax - drop
        if _loglik(b, pairs) >= target:
            return b
        for _ in range(100):
            m = (a + b) / 2
            if _loglik(m, pairs) >= target:
                a = m
            else:
                b = m
            if abs(b - a) < 1e-6:
                break
        return (a + b) / 2

    low, high = boundary(mle, lo), boundary(mle, hi)
    return {
        "rating": mle,
        "low": low,
        "high": high,
        "percentile": percentile(mle, population),
        "percentile_low": percentile(low, population),
        "percentile_high": percentile(high, population),
        "confidence": confidence,
        "n": len(pairs),
        "solved": solved,
        "bounded": mle in (lo, hi),
    }
