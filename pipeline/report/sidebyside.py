"""Two variants' completions side by side, on the problems where their final scores differ most:
what the methods write, not only how they score. Read from the final evaluations' results.jsonl
artifacts in MLflow (completions are kept unless eval.keep_completions is false); each side
shows its first seed's run, the scores are the means over seeds.

The pairs: GSPO against GRPO when both ran, then each configured variant against its baseline
(at most MAX_PAIRS); per pair and benchmark the PROBLEMS problems with the largest difference,
SAMPLES samples a side, each cut at CHARS characters."""

from __future__ import annotations

from html import escape as esc
from typing import Callable

MAX_PAIRS, PROBLEMS, SAMPLES, CHARS = 3, 3, 4, 1500


def pairs(report) -> list[tuple[str, str]]:
    """(variant, baseline) pairs to show (module doc)."""
    groups = report.by_variant
    out = [("gspo", "grpo")] if "gspo" in groups and "grpo" in groups else []
    for c in report.comparisons:
        if (c["variant"], c["baseline"]) not in out:
            out.append((c["variant"], c["baseline"]))
    if not out and len(groups) >= 2:
        out.append(tuple(sorted(groups)[:2]))
    return out[:MAX_PAIRS]


def _final(evals: list[dict], variant: str, bench: str, budget) -> list[dict]:
    return sorted(
        (
            e
            for e in evals
            if e["variant"] == variant and e["benchmark"] == bench and e["budget"] == budget
        ),
        key=lambda e: e["seed"],
    )


def _means(es: list[dict]) -> dict[str, float]:
    """Each problem's score, averaged over the runs that all scored it."""
    probs = [e.get("problems") or {} for e in es]
    common = set.intersection(*[set(p) for p in probs]) if probs and all(probs) else set()
    return {i: sum(p[i] for p in probs) / len(probs) for i in common}


def _samples(row: dict) -> list[dict]:
    answers = row.get("answers") or [None] * len(row["scores"])
    return [
        {
            "completion": c[:CHARS]
            + (f" [... {len(c) - CHARS} more characters]" if len(c) > CHARS else ""),
            "score": s,
            "answer": a,
        }
        for c, s, a in list(zip(row["completions"], row["scores"], answers))[:SAMPLES]
    ]


def side_by_side(report, fetch: Callable[[str], list[dict]]) -> list[dict]:
    """One entry per shown problem: benchmark, problem, variant, baseline, prompt, answer, each
    side's mean score, seed and samples ({completion, score, answer}). `fetch(run_id)`: an eval
    run's results.jsonl rows."""
    evals = report.data["evals"]
    budget = max((e["budget"] for e in evals if e["variant"] != "sft"), default=None)
    rows: dict[str, dict] = {}

    def results(e):
        if e["run_id"] not in rows:
            rows[e["run_id"]] = {r["id"]: r for r in fetch(e["run_id"])}
        return rows[e["run_id"]]

    out = []
    for a, b in pairs(report):
        for bench in sorted({e["benchmark"] for e in evals if e.get("benchmark")}):
            ea, eb = _final(evals, a, bench, budget), _final(evals, b, bench, budget)
            sa, sb = (_means(ea), _means(eb)) if ea and eb else ({}, {})
            for i in sorted(set(sa) & set(sb), key=lambda i: (-abs(sa[i] - sb[i]), i))[:PROBLEMS]:
                ra, rb = results(ea[0]).get(i, {}), results(eb[0]).get(i, {})
                if "completions" not in ra or "completions" not in rb:
                    continue
                out.append(
                    {
                        "benchmark": bench,
                        "problem": i,
                        "variant": a,
                        "baseline": b,
                        "prompt": ra.get("prompt", ""),
                        "answer": ra.get("answer"),
                        "score": sa[i],
                        "baseline_score": sb[i],
                        "seed": ea[0]["seed"],
                        "baseline_seed": eb[0]["seed"],
                        "samples": _samples(ra),
                        "baseline_samples": _samples(rb),
                    }
                )
    return out


def _cell(samples: list[dict]) -> str:
    return "".join(
        f"<p><b>{'pass' if s['score'] >= 0.5 else 'fail'}</b>"
        + (f" (answer {esc(str(s['answer']))})" if s["answer"] is not None else "")
        + f"</p><pre>{esc(s['completion'])}</pre>"
        for s in samples
    )


def section(entries: list[dict]) -> list[str]:
    """The page's section (nothing when no pair had kept completions)."""
    if not entries:
        return []
    out = [
        "<h2>Completions side by side</h2>",
        "<p>For each compared pair, the final-budget problems where the two differ most "
        "(score: the mean over seeds and samples); the first samples of each side's first "
        "seed, with each one's verdict and the answer its scoring extracted. All of them: "
        "<a href='side_by_side.json'>side_by_side.json</a>, and every eval run's "
        "results.jsonl in MLflow.</p>",
    ]
    for e in entries:
        out += [
            f"<h3>{esc(e['benchmark'])} {esc(e['problem'])}: {esc(e['variant'])} "
            f"{e['score']:.2f} vs {esc(e['baseline'])} {e['baseline_score']:.2f}</h3>",
            f"<pre>{esc(e['prompt'])}</pre>"
            + (f"<p>reference answer: {esc(e['answer'])}</p>" if e["answer"] else ""),
            "<div class='wide'><table class='sbs'><tr>"
            f"<th>{esc(e['variant'])} (seed {e['seed']})</th>"
            f"<th>{esc(e['baseline'])} (seed {e['baseline_seed']})</th></tr><tr>"
            f"<td>{_cell(e['samples'])}</td><td>{_cell(e['baseline_samples'])}</td>"
            "</tr></table></div>",
        ]
    return out
