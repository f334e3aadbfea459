"""Stage: cold-start SFT. `python -m pipeline.sft --config FILE [--set key=value]`."""

from gspo.config import SFTConfig
from pipeline._cli import parse_config, run


def main(argv=None):
    from gspo.sft import run_sft

    cfg = parse_config(SFTConfig, "Cold-start supervised fine-tuning on worked solutions.", argv)
    print(f"sft model: {run_sft(cfg)}")


if __name__ == "__main__":
    run(main)
