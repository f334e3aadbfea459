"""The report's command line: python -m pipeline.report --experiment NAME [--tracking-uri URI]
[--out DIR] [--report-config YAML] [--no-mlflow-log] [--tag KEY=VALUE ...] (see pipeline.report)."""

from __future__ import annotations

import pathlib

from gspo.tracking.store import ui_link
from pipeline._cli import Parser, add_tracking_flags, read_yaml, run, tracking_of


def parser() -> Parser:
    import pipeline.report

    ap = Parser("python -m pipeline.report", pipeline.report.__doc__.splitlines()[0])
    add_tracking_flags(ap, reads=True)
    ap.add_argument(
        "--out", default=None, help="output folder (default results/<experiment>/report)"
    )
    ap.add_argument(
        "--report-config",
        default=None,
        help="YAML of report settings: the workflow writes results/<experiment>/"
        "config/report.yaml (defaults: pipeline.report.model.DEFAULTS)",
    )
    ap.add_argument(
        "--selection",
        default=None,
        help="the fair protocol's learning-rate "
        "choice (pipeline.select's JSON): compare the algorithms at their chosen rates",
    )
    ap.add_argument(
        "--no-mlflow-log", action="store_true", help="do not log the report back to MLflow"
    )
    return ap


def _print_headline(head: dict, out: pathlib.Path):
    for r in head["final_scores"]:
        print(
            f"{r['variant']:18s} {r['benchmark']:5s} pass@1 {r['pass_at_1']:.4f} "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] seeds {r['seeds']}"
        )
    for k, v in head["clip_ratio"].items():
        print(f"clip-fraction ratio {k}: {v:.1f}x")
    for c in head["variants"]:
        if "diff" in c:
            sv = c["step_time_saving"]
            print(
                f"{c['variant']} vs {c['baseline']} {c['benchmark']}: {c['diff']:+.4f} "
                f"[{c['diff_ci_low']:+.4f}, {c['diff_ci_high']:+.4f}], step time saving "
                + (f"{sv:.0%}" if sv is not None else "-")
            )
    if head["moe"]:
        print(head["moe"]["verdict"])
    if head["collapsed_runs"]:
        print(f"collapsed: {', '.join(head['collapsed_runs'])}")
    print(f"report: {out / 'index.html'}")
    print(
        f"MLflow UI (mlflow ui --backend-store-uri {head['tracking_uri']}): "
        f"{ui_link(head['experiment_id'])}"
    )


def main(argv=None) -> int:
    from pipeline.report import build

    args = parser().parse_args(argv)
    settings = read_yaml(args.report_config, "--report-config") if args.report_config else {}
    out = pathlib.Path(args.out or f"results/{args.experiment}/report")
    selection = None
    if args.selection:
        import json

        selection = json.loads(pathlib.Path(args.selection).read_text())
    head = build(
        args.experiment,
        out,
        uri=args.tracking_uri,
        settings=settings,
        log_to_mlflow=not args.no_mlflow_log,
        tags=tracking_of(args).tags,
        selection=selection,
    )
    _print_headline(head, out)
    return 0


if __name__ == "__main__":
    run(main)
