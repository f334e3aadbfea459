"""Stage: record a run's evaluations in MLflow.

    python -m pipeline.track --run-dir results/EXP/rl/gspo/seed0 --variant gspo --seed 0 \\
        --eval 0=results/EXP/eval/sft --eval 50=results/EXP/eval/gspo/seed0/b50 ... \\
        --out results/EXP/eval/gspo/seed0/mlflow.json --tracking-uri URI --experiment EXP

Each `--eval BUDGET=DIR` names the folder `pipeline.evaluate` wrote for the run's model at that
budget (percent of its steps; 0 = the model it started from, at step 0 and no compute). Every
(budget, benchmark) becomes an eval run nested under the run's own MLflow run, replacing those
recorded before for (variant, seed); an RL run also gets the scores as its own metrics
(eval/<bench>/pass_at_1 at the checkpoint's step, eval_by_gflops/<bench>/pass_at_1 at its
cumulative GFLOPs), so MLflow charts score against step and against compute. For the SFT run,
use `--variant sft --seed 0`. `--out` records the MLflow run ids (see gspo.tracking.runs).
"""

from __future__ import annotations

from gspo.config.fields import ConfigError
from gspo.io import write_json
from gspo.tracking.evals import EvalPoint, record_evaluations
from pipeline._cli import Parser, add_tracking_flags, run, tracking_of


def _point(item: str) -> EvalPoint:
    budget, sep, folder = item.partition("=")
    if not sep or not budget.isdigit():
        raise ConfigError(f"--eval {item!r}: expected BUDGET=FOLDER, BUDGET a percent (0-100)")
    return EvalPoint.read(int(budget), folder)


def parser():
    ap = Parser("python -m pipeline.track", __doc__.splitlines()[0])
    ap.add_argument("--run-dir", required=True, help="the run's folder (SFT or RL out_dir)")
    ap.add_argument("--variant", required=True, help="the compared run's name ('sft' for SFT)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument(
        "--eval",
        dest="evals",
        action="append",
        default=[],
        metavar="BUDGET=DIR",
        help="an evaluated model of the run; repeatable",
    )
    ap.add_argument("--out", required=True, help="JSON record of the MLflow run ids")
    add_tracking_flags(ap)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    points = [_point(e) for e in args.evals]
    record = record_evaluations(
        args.run_dir, points, tracking=tracking_of(args), variant=args.variant, seed=args.seed
    )
    write_json(args.out, record)
    print(f"{len(record['eval_runs'])} evaluations recorded for {args.variant}-seed{args.seed}")


if __name__ == "__main__":
    run(main)
