"""Stage: RL (GRPO / GSPO / GSPO-token). `python -m pipeline.train --config FILE`."""

from gspo.config import RLConfig
from pipeline._cli import parse_config, run


def main(argv=None):
    from gspo.trainer import run_rl

    cfg = parse_config(RLConfig, "RL training with GRPO, GSPO or GSPO-token.", argv)
    print(f"rl model: {run_rl(cfg)}")


if __name__ == "__main__":
    run(main)
