"""A math answer read out of a completion and compared with the gold answer: what AIME-style
scoring decides (evaluators.benchmarks.aime's `score`; `score_answer(completion, answer)` is the same decision
as 0.0 / 1.0).

1. The answer is the content of the last brace-matched `\\boxed{...}` (`last_boxed`). Documented
   fallbacks, tried only when there is no `\\boxed{...}` at all: the last `\\fbox{...}`, then TeX's
   brace-less `\\boxed N` (the token after the space), then the last line of the form `Answer: X`
   (DAPO-Math's convention, case-insensitive, at the start of a line, optionally `Final Answer:`
   and markdown bold; surrounding `$` and a trailing full stop are dropped). There is deliberately
   no "last number in the text" fallback: a reward must not pay for unguided guesses.
2. Cheap path first: if the content is a plain integer (optionally `$`-wrapped, with leading zeros,
   thousands commas or a `.0` tail: `012`, `1,000`, `12.0`) it is compared as an integer.
3. Otherwise math-verify decides (`parse` both sides, `verify(gold, prediction)`, gold first), e.g.
   `\\frac{6}{3}` equals 2. Its timeouts use SIGALRM, which only works on the main thread, so off the
   main thread it runs with its timeouts disabled (None). Contents longer than `MAX_ANSWER_CHARS`
   score 0 without parsing, which bounds the time sympy can take there. Results are memoised.
   evaluators.benchmarks.aime's `score_many` therefore scores serially on the calling thread.
"""

from __future__ import annotations

import functools
import re
import threading

MAX_ANSWER_CHARS = 200


def _braced_after(text: str, macro: str) -> str | None:
    """Content of the last brace-matched `<macro>{...}` in `text`, or None."""
    start = text.rfind(macro + "{")
    while start != -1:
        i = start + len(macro) + 1
        depth = 1
        j = i
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth == 0:
            return text[i : j - 1]
        start = text.rfind(macro + "{", 0, start)  # unterminated: try an earlier one
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last brace-matched `\\boxed{...}` in `text`, or None."""
    return _braced_after(text, "\\boxed")


_BOXED_SPACE = re.compile(r"\\boxed +([^\s$]+)")
_ANSWER_LINE = re.compile(
    r"^[ \t>*_#]*(?:final[ \t]+)?answer[ \t*_]*:[ \t*_]*(.*?)[ \t*_]*$",
    re.IGNORECASE | re.MULTILINE,
)


def answer_line(text: str) -> str | None:
    """The X of the last `Answer: X` line (DAPO-Math's convention; see module doc), or None."""
    m = list(_ANSWER_LINE.finditer(text))
    got = m[-1].group(1).strip() if m else ""
    got = got.rstrip(".").strip()
    if len(got) > 1 and got.startswith("$") and got.endswith("$"):
        got = got.strip("$").strip()
    return got or None


def extract_answer(text: str) -> str | None:
    """The final answer's text: last `\\boxed{...}`, else last `\\fbox{...}`, else `\\boxed N`,
    else the last `Answer: X` line."""
    got = last_boxed(text)
    if got is None:
        got = _braced_after(text, "\\fbox")
    if got is None:
        m = list(_BOXED_SPACE.finditer(text))
        got = m[-1].group(1) if m else None
    if got is None:
        got = answer_line(text)
    return got


_PLAIN_INT = re.compile(r"^\$?\s*([+-]?(?:\d{1,3}(?:,\d{3})+|\d+))(?:\.0*)?\s*\$?$")


def plain_int(s) -> int | None:
    """`s` as an integer when it is written as one (see module doc), else None."""
    if isinstance(s, bool):
        return None
    if isinstance(s, int):
        return s
    if isinstance(s, float):
        return int(s) if s.is_integer() else None
    m = _PLAIN_INT.match(str(s).strip())
    return int(m.group(1).replace(",", "")) if m else None


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@functools.lru_cache(maxsize=1 << 16)
def _math_verify(gold: str, pred: str, timeouts: bool) -> bool:
    try:
        from math_verify import parse, verify
    except ImportError:  # math-verify is a pinned dependency; without it only the integer path
        return False
    t = 5 if timeouts else None
    try:
        g = parse(f"${gold}$", parsing_timeout=t)
        p = parse(f"${pred}$", parsing_timeout=t)
        if not g or not p:
            return False
        return bool(verify(g, p, timeout_seconds=t))
    except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer
        return False


def answers_match(pred: str, answer) -> bool:
    """Whether the extracted answer text `pred` equals the gold `answer` (see module doc)."""
    pred = pred.strip()
    if not pred or len(pred) > MAX_ANSWER_CHARS:
        return False
    want = plain_int(answer)
    got = plain_int(pred)
    if got is not None and want is not None:
        return got == want
    gold = str(want) if want is not None else str(answer).strip()
    return _math_verify(gold, pred, _on_main_thread())


def score_answer(completion: str, answer) -> float:
    """1.0 if the final boxed answer of `completion` equals `answer` (normally an integer), else 0.0."""
    got = extract_answer(completion)
    if got is None:
        return 0.0
    return float(answers_match(got, answer))
