"""Stage: RL (GRPO / GSPO / GSPO-token).

    python -m pipeline.train --config FILE [--set key=value ...] [--restart-if-changed]
                             [--tracking-uri URI --experiment NAME --run-name NAME --tag K=V]
    torchrun --nproc-per-node N -m pipeline.train --config FILE ...     # N ranks (FSDP2)

Under torchrun each rank samples its share of the step's prompt groups and the policy is sharded
(gspo.infra.distributed); the run's numbers equal a single process's up to float rounding, and only
rank 0 writes metrics, checkpoints and MLflow records.

The reward is the benchmarks' own scoring (evaluators.tasks.rewards, code in parallel sandboxes),
wired in here: the trainer never imports the benchmarks. A run resumes from the latest complete
checkpoint in its out_dir; with engine: verl this command collects the run verl's trainer
finished (pipeline.verl prepares it, workflow/scripts/verl_launch.py runs it); with --restart-if-changed a run whose config or starting model changed
starts over (its MLflow run superseded) instead of stopping with an error.
"""

import functools

from evaluators.tasks import rewards
from gspo.config.train import RLConfig
from pipeline._cli import add_tracking_flags, config_parser, load_config, run, tracking_of


def parser():
    ap = config_parser(
        "RL training with GRPO, GSPO, GSPO-token or another registered objective.",
        "python -m pipeline.train",
        RLConfig,
    )
    ap.add_argument(
        "--restart-if-changed",
        action="store_true",
        help="start over when out_dir holds a run of another config or starting "
        "model (default: resume, or stop with an error if the config differs)",
    )
    add_tracking_flags(ap)
    return ap


def main(argv=None):
    from gspo.infra import distributed as dist
    from gspo.native.trainer import run_rl

    args = parser().parse_args(argv)
    cfg = load_config(RLConfig, args)
    reward_fn = functools.partial(rewards, workers=cfg.reward_workers)
    world = dist.init(cfg.device)
    if cfg.engine == "trl":  # TRL's GRPOTrainer (gspo.engines.trl.rl), DDP on several ranks
        from gspo.engines.trl.rl import run_rl
    elif (
        cfg.engine == "verl"
    ):  # collect the run verl's trainer finished (gspo.engines.verl.collect)
        from gspo.engines.verl.collect import run_rl
    try:
        model = run_rl(
            cfg,
            reward_fn,
            tracking=tracking_of(args),
            restart_if_changed=args.restart_if_changed,
            world=world,
        )
    finally:
        dist.close(world)
    if world.main:
        print(f"rl model: {model}")


if __name__ == "__main__":
    run(main)
