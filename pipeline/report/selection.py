"""The fair protocol's learning-rate choice (config `fair`, workflow/gspo_workflow/fair.py):
each algorithm's rate chosen on the validation split, and what the report makes of it.

`choose` reads each grid point's validation results (one results.jsonl per run) and picks, per
algorithm, the rate with the highest mean pass@1 over its runs and the validation problems
(ties: the first in grid order); each point carries its interval over training runs and problems
(pipeline.report.resample), so the report can show how clear the choice was. The choice reads
the validation split alone: the test problems never choose.

`apply` renames the chosen grid variant of each algorithm to the algorithm's name in the
report's data, so every comparison the report makes of `gspo` and `grpo` (the claims, the final
scores) is at the rates chosen for each; the other grid points keep their names
(`<algorithm>-lr<rate>`) and stay in the tables. `rows` joins each point's validation score with
its test score for the page, the CSV and the figure.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from pipeline.report import resample


def _per_problem(path: str) -> dict[str, float]:
    """{problem id: pass@1} of one run's results.jsonl."""
    from gspo.io import DataError

    p = pathlib.Path(path)
    if not p.is_file():
        raise DataError(f"{path}: no validation results (run the eval_val jobs first)")
    out = {}
    for i, line in enumerate(p.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
            out[rec["id"]] = float(rec["pass@1"])
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(
                f"{path}:{i}: expected a JSON record with id and pass@1 ({e})"
            ) from None
    return out


def point(results: list[str], *, iters: int, confidence: float) -> dict:
    """pass@1 of one grid point's runs on the validation problems they share, with its
    interval over runs and problems."""
    runs = [_per_problem(p) for p in results]
    ids = sorted(set.intersection(*(set(r) for r in runs)))
    m = np.array([[r[i] for i in ids] for r in runs])  # (seeds, problems)
    est = resample.interval(
        [resample.Arm(1.0, m)], iters=iters, confidence=confidence, bounds=(0.0, 1.0)
    )
    return {
        "seeds": len(runs),
        "n_problems": len(ids),
        "pass_at_1": est["estimate"],
        "ci_low": est["ci_low"],
        "ci_high": est["ci_high"],
        "seed_scores": [float(x) for x in m.mean(1)],
    }


def choose(cfg: dict, *, iters: int = 2000, confidence: float = 0.95) -> dict:
    """The choice of select.yaml's `cfg` (fair.select_config): per algorithm its points and the
    chosen rate and variant."""
    algs = {}
    for alg, pts in cfg["grid"].items():
        scored = [
            {
                "lr": p["lr"],
                "variant": p["variant"],
                **point(p["results"], iters=iters, confidence=confidence),
            }
            for p in pts
        ]
        best = max(scored, key=lambda r: r["pass_at_1"])  # max keeps the first of ties
        algs[alg] = {"chosen_lr": best["lr"], "chosen_variant": best["variant"], "points": scored}
    return {
        "benchmark": cfg["benchmark"],
        "split": "validation",
        "metric": "pass@1",
        "rule": "highest mean pass@1 over runs and validation problems (ties: first rate)",
        "confidence": confidence,
        "algorithms": algs,
    }


def apply(data: dict, sel: dict | None) -> dict:
    """`data` (pipeline.aggregate.collect's) with each chosen variant named after its
    algorithm (in runs, their baselines and evaluations)."""
    if not sel:
        return data
    names = {a["chosen_variant"]: alg for alg, a in sel["algorithms"].items()}

    def rename(rec: dict, *keys: str) -> dict:
        return {**rec, **{k: names.get(rec.get(k), rec.get(k)) for k in keys if k in rec}}

    return {
        **data,
        "rl": [rename(r, "variant", "baseline") for r in data["rl"]],
        "evals": [rename(e, "variant") for e in data["evals"]],
    }


SELECTION_COLS = [
    "algorithm",
    "lr",
    "variant",
    "chosen",
    "seeds",
    "val_pass_at_1",
    "val_ci_low",
    "val_ci_high",
    "test_benchmark",
    "test_pass_at_1",
    "test_ci_low",
    "test_ci_high",
]


def rows(sel: dict | None, table: list[dict]) -> list[dict]:
    """One row per (algorithm, rate): its validation score and its test score (the final
    scores' row of its variant, under the algorithm's name when chosen)."""
    if not sel:
        return []
    bench = sel["benchmark"]
    test = {r["variant"]: r for r in table if r["benchmark"] == bench}
    out = []
    for alg, a in sel["algorithms"].items():
        for p in a["points"]:
            chosen = p["variant"] == a["chosen_variant"]
            t = test.get(alg if chosen else p["variant"]) or {}
            out.append(
                {
                    "algorithm": alg,
                    "lr": p["lr"],
                    "variant": p["variant"],
                    "chosen": chosen,
                    "seeds": p["seeds"],
                    "val_pass_at_1": p["pass_at_1"],
                    "val_ci_low": p["ci_low"],
                    "val_ci_high": p["ci_high"],
                    "test_benchmark": bench,
                    "test_pass_at_1": t.get("pass_at_1"),
                    "test_ci_low": t.get("ci_low"),
                    "test_ci_high": t.get("ci_high"),
                }
            )
    return out


def figure(sel_rows: list[dict], path: pathlib.Path, plt) -> None:
    """Score against learning rate per algorithm: validation (which chose, filled markers) and
    test (hollow), each with its interval; the chosen rate ringed."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for k, alg in enumerate(dict.fromkeys(r["algorithm"] for r in sel_rows)):
        rs = sorted((r for r in sel_rows if r["algorithm"] == alg), key=lambda r: r["lr"])
        color = f"C{k}"
        for split, fill in (("val", color), ("test", "none")):
            pts = [r for r in rs if r[f"{split}_pass_at_1"] is not None]
            if not pts:
                continue
            x = [r["lr"] * (1.03 if split == "test" else 1.0) for r in pts]
            y = [r[f"{split}_pass_at_1"] for r in pts]
            err = [
                [v - r[f"{split}_ci_low"] for v, r in zip(y, pts)],
                [r[f"{split}_ci_high"] - v for v, r in zip(y, pts)],
            ]
            ax.errorbar(
                x,
                y,
                yerr=err,
                fmt="o-" if split == "val" else "s--",
                color=color,
                mfc=fill,
                capsize=3,
                label=f"{alg.upper()} {split}",
            )
        for r in rs:
            if r["chosen"]:
                ax.plot([r["lr"]], [r["val_pass_at_1"]], "o", ms=14, mfc="none", color=color)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel(f"pass@1 ({sel_rows[0]['test_benchmark']})")
    ax.set_title("Score against learning rate (validation chooses; ringed: the choice)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
