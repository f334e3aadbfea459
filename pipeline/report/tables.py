"""The report's tables to paste into a paper: the final scores and the claims as Markdown and as
LaTeX (booktabs), beside the CSVs. A score reads `mean [low, high]`, its interval over training
runs and problems as everywhere in the report."""

from __future__ import annotations

import re

LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _ci(row: dict, col: str, low: str, high: str, digits: int = 3) -> str:
    if row.get(col) is None:
        return "-"
    if row.get(low) is None or row.get(high) is None:
        return f"{row[col]:.{digits}f}"
    return f"{row[col]:.{digits}f} [{row[low]:.{digits}f}, {row[high]:.{digits}f}]"


def final_scores(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """(header, cells) of the final scores: pass@1, pass@k, maj@k (answer-type benchmarks), the
    difference to the SFT model and CodeForces' Elo, each with its interval."""
    header = ["variant", "benchmark", "runs", "k", "pass@1", "pass@k", "maj@k", "vs SFT", "Elo"]
    return header, [
        [
            r["variant"],
            r["benchmark"],
            str(r.get("seeds", "-")),
            str(r.get("k", "-")),
            _ci(r, "pass_at_1", "ci_low", "ci_high"),
            _ci(r, "pass_at_k", "pass_at_k_ci_low", "pass_at_k_ci_high"),
            _ci(r, "maj_at_k", "maj_at_k_ci_low", "maj_at_k_ci_high"),
            _ci(r, "vs_sft", "vs_sft_ci_low", "vs_sft_ci_high"),
            _ci(r, "elo", "elo_low", "elo_high", digits=0),
        ]
        for r in rows
    ]


def claims(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    return ["claim", "measured", "verdict"], [
        [c["claim"], c["measured"], c["verdict"]] for c in rows
    ]


def markdown(header: list[str], cells: list[list[str]]) -> str:
    def line(values):
        return "| " + " | ".join(v.replace("|", "\\|") for v in values) + " |"

    return "\n".join([line(header), line(["---"] * len(header))] + [line(c) for c in cells]) + "\n"


def latex(header: list[str], cells: list[list[str]], caption: str, align: str) -> str:
    """A booktabs table; `align` its column spec (e.g. "llrr")."""

    def esc(v: str) -> str:
        return re.sub(r"[\\&%$#_{}~^]", lambda m: LATEX_SPECIAL[m.group()], v)

    def line(values):
        return " & ".join(esc(v) for v in values) + r" \\"

    return (
        "\n".join(
            [
                r"\begin{table}[t]",
                r"\centering",
                f"\\caption{{{esc(caption)}}}",
                f"\\begin{{tabular}}{{{align}}}",
                r"\toprule",
                line(header),
                r"\midrule",
                *map(line, cells),
                r"\bottomrule",
                r"\end{tabular}",
                r"\end{table}",
            ]
        )
        + "\n"
    )
