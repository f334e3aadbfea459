"""Stage: cold-start SFT.

    python -m pipeline.sft --config FILE [--set key=value ...] [--tracking-uri URI ...]

The greedy held-out check scores answers with the benchmarks' own scoring
(evaluators.tasks.reward), wired in here: the training library never imports the benchmarks.
"""

from evaluators.tasks import reward
from gspo.config import SFTConfig
from pipeline._cli import add_tracking_flags, config_parser, load_config, run, tracking_of


def main(argv=None):
    from gspo.sft import run_sft

    ap = config_parser("Cold-start supervised fine-tuning on worked solutions.", "pipeline.sft")
    add_tracking_flags(ap)
    args = ap.parse_args(argv)
    cfg = load_config(SFTConfig, args)
    print(f"sft model: {run_sft(cfg, reward, tracking=tracking_of(args))}")


if __name__ == "__main__":
    run(main)
