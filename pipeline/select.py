"""Stage: choose each algorithm's learning rate on the validation split (the fair protocol).

    python -m pipeline.select --config results/<experiment>/config/select.yaml \
        --out results/<experiment>/select/lr.json

The config (written by the workflow's plan, gspo_workflow.fair.select_config) lists per
algorithm each rate of the grid, its variant and the validation results.jsonl of its runs. The
choice (pipeline.report.selection.choose): the rate with the highest mean pass@1 over the runs
and the validation problems, each rate with its interval over training runs and problems.
Writes the choice as JSON (and a CSV beside it); `pipeline.report --selection FILE` then
compares the algorithms at the chosen rates.
"""

from __future__ import annotations

import pathlib

from pipeline._cli import Parser, run

CSV_COLS = [
    "algorithm",
    "lr",
    "variant",
    "chosen",
    "seeds",
    "n_problems",
    "pass_at_1",
    "ci_low",
    "ci_high",
]


def parser() -> Parser:
    ap = Parser("python -m pipeline.select", __doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="select.yaml (the workflow writes it)")
    ap.add_argument("--out", required=True, help="the choice, JSON (a .csv is written beside it)")
    ap.add_argument(
        "--bootstrap-iters", type=int, default=2000, help="bootstrap draws per interval"
    )
    ap.add_argument("--confidence", type=float, default=0.95, help="interval confidence")
    return ap


def main(argv=None):
    import yaml

    from gspo.io import DataError, write_json
    from pipeline.report.files import write_csv
    from pipeline.report.selection import choose

    args = parser().parse_args(argv)
    try:
        cfg = yaml.safe_load(pathlib.Path(args.config).read_text())
        if not isinstance(cfg, dict) or not isinstance(cfg.get("grid"), dict):
            raise KeyError("grid")
    except (OSError, yaml.YAMLError, KeyError) as e:
        raise DataError(
            f"{args.config}: expected a select config with a `grid` mapping ({e})"
        ) from None
    sel = choose(cfg, iters=args.bootstrap_iters, confidence=args.confidence)
    out = pathlib.Path(args.out)
    rows = [
        {"algorithm": alg, **p, "chosen": p["variant"] == a["chosen_variant"]}
        for alg, a in sel["algorithms"].items()
        for p in a["points"]
    ]
    for r in rows:
        print(
            f"{r['variant']:18s} validation pass@1 {r['pass_at_1']:.4f} "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]" + ("  (chosen)" if r["chosen"] else "")
        )
    write_csv(out.with_suffix(".csv"), rows, CSV_COLS)
    write_json(out, sel)


if __name__ == "__main__":
    run(main)
