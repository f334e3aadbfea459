"""Stage: cold-start SFT.

    python -m pipeline.sft --config FILE [--set key=value ...] [--tracking-uri URI ...]
    torchrun --nproc-per-node N -m pipeline.sft --config FILE ...     # N ranks (FSDP2)

Under torchrun the model is sharded and each rank trains on a slice of every step's batch (the
numbers equal a single process's up to float rounding); rank 0 alone writes and records.

The greedy held-out check scores answers with the benchmarks' own scoring
(evaluators.tasks.reward), wired in here: the training library never imports the benchmarks.
"""

from evaluators.tasks import reward
from gspo.config.train import SFTConfig
from pipeline._cli import add_tracking_flags, config_parser, load_config, run, tracking_of


def parser():
    ap = config_parser(
        "Cold-start supervised fine-tuning on worked solutions.",
        "python -m pipeline.sft",
        SFTConfig,
    )
    add_tracking_flags(ap)
    return ap


def main(argv=None):
    from gspo.engines.trl import sft as trl_sft
    from gspo.infra import distributed as dist
    from gspo.native import sft

    args = parser().parse_args(argv)
    cfg = load_config(SFTConfig, args)
    world = dist.init(cfg.device)
    try:
        run_sft = trl_sft.run_sft if cfg.engine == "trl" else sft.run_sft
        model = run_sft(cfg, reward, tracking=tracking_of(args), world=world)
    finally:
        dist.close(world)
    if world.main:
        print(f"sft model: {model}")


if __name__ == "__main__":
    run(main)
