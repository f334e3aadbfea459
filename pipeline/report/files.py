"""The report's files: the CSV tables, summary.json (the headline numbers) and index.html, and
their copy in MLflow (a run tagged stage=report)."""

from __future__ import annotations

import csv
import io
import pathlib

from pipeline.report import html, offpolicy, tables
from pipeline.report.curves import CURVE_COLS
from pipeline.report.model import (
    FIT_COLS,
    MOE_COLS,
    STABILITY_COLS,
    TABLE_COLS,
    VARIANT_COLS,
    Report,
)
from pipeline.report.resample import MIN_RUNS
from pipeline.report.selection import SELECTION_COLS


def write_csv(path: pathlib.Path, rows: list[dict], cols: list[str]):
    """`rows` (dicts) as CSV with the columns `cols` (other keys left out)."""
    from gspo.io import atomic_write_text

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def headline(report: Report) -> dict:
    """summary.json: the paper's claims with their verdicts, how the intervals were made, the
    final scores (each with its runs' own numbers and run-to-run share), clip fractions and their
    ratios, collapsed runs, variant comparisons, the scaling-curve fits (asymptote, efficiency,
    c_mid), the MoE ablation and the provenance."""
    prov = report.provenance
    return {
        "experiment": report.experiment,
        "tracking_uri": report.data["tracking_uri"],
        "experiment_id": report.data["experiment_id"],
        "claims": report.claims,
        "intervals": {
            "over": "training runs (seeds) and problems",
            "method": "two-level bootstrap (pipeline.report.resample)",
            "confidence": report.settings["confidence"],
            "min_runs_for_a_verdict": MIN_RUNS,
        },
        "final_scores": [
            {k: v for k, v in r.items() if not k.startswith("_")} for r in report.table
        ],
        "clip_frac_tokens": report.clips,
        "clip_frac_tokens_offpolicy": report.clips_off,
        "clip_frac_seqs": report.clips_seq,
        "clip_ratio": report.ratios,
        "collapsed_runs": [
            f"{r['variant']}-seed{r['seed']}" for r in report.stability if r["collapsed"]
        ],
        "variants": report.comparisons,
        "curves": {
            "population": "per benchmark, the problems every evaluation scored and "
            "each problem's first k samples (pipeline.report.curves)",
            "draws": report.draws,
            "points": report.curve,
        },
        "scaling_fits": [{k: v for k, v in r.items() if k != "fitted"} for r in report.fits],
        "moe": dict(report.moe) if report.moe else None,
        "selection": (
            {
                "rule": report.selection["rule"],
                "benchmark": report.selection["benchmark"],
                "chosen_lr": {a: v["chosen_lr"] for a, v in report.selection["algorithms"].items()},
                "points": report.selection_rows,
            }
            if report.selection
            else None
        ),
        "provenance": {k: v for k, v in prov.items() if k != "workflow_config"},
        "rebuild_command": f"python -m pipeline.report --experiment {report.experiment}",
    }


def write_tables(report: Report, out: pathlib.Path) -> None:
    """final_scores.md / .tex and claims.md / .tex: the tables to paste into a paper
    (pipeline.report.tables)."""
    from gspo.io import atomic_write_text

    conf = f"{report.settings['confidence']:.0%}"
    for name, (header, cells), caption, align in (
        (
            "final_scores",
            tables.final_scores(report.table),
            f"{report.experiment}: final scores, mean [{conf} interval over training runs and "
            "problems]",
            "llrr" + "r" * 5,
        ),
        (
            "claims",
            tables.claims(report.claims),
            f"{report.experiment}: the paper's claims, measured ({conf} intervals)",
            "lll",
        ),
    ):
        atomic_write_text(out / f"{name}.md", tables.markdown(header, cells))
        atomic_write_text(out / f"{name}.tex", tables.latex(header, cells, caption, align))


def write(report: Report, out: pathlib.Path) -> dict:
    """final_scores.csv (and .md, .tex), claims.md / .tex, stability.csv, variants.csv, moe.csv,
    offpolicy.csv (pipeline.report.offpolicy),
    scaling_fits.csv, curve.csv, summary.json, side_by_side.json and index.html into `out`;
    returns the headline (summary.json's content)."""
    from gspo.io import atomic_write_text, write_json

    write_csv(out / "final_scores.csv", report.table, TABLE_COLS)
    write_tables(report, out)
    write_csv(out / "stability.csv", report.stability, STABILITY_COLS)
    write_csv(out / "variants.csv", report.comparisons, VARIANT_COLS)
    write_csv(out / "moe.csv", report.moe["rows"] if report.moe else [], MOE_COLS)
    write_csv(out / "offpolicy.csv", report.offpolicy, offpolicy.COLS)  # header only: none
    write_csv(out / "scaling_fits.csv", report.fits, FIT_COLS)
    write_csv(out / "curve.csv", report.curve, CURVE_COLS)
    if report.selection_rows:
        write_csv(out / "selection.csv", report.selection_rows, SELECTION_COLS)
    head = headline(report)
    write_json(out / "summary.json", head)
    write_json(out / "side_by_side.json", report.side_by_side)
    atomic_write_text(out / "index.html", html.render(report))
    return head


def log_to_mlflow(report: Report, out: pathlib.Path, tags: dict | None = None):
    """The folder `out` as the artifacts of a fresh run tagged stage=report plus `tags`
    (replacing the previous one)."""
    from gspo.tracking import runs as tracking

    cl = tracking.client(report.data["tracking_uri"])
    run_id = tracking.fresh_summary_run(cl, report.data["experiment_id"], "report", tags)
    tracking.retry(cl.log_artifacts, run_id, str(out), "report")
    tracking.retry(cl.set_terminated, run_id, "FINISHED")
