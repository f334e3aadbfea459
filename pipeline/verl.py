"""Stage: the job verl's trainer runs for an `engine: verl` RL config (gspo.engines.verl.job).

    python -m pipeline.verl --config FILE [--set key=value ...]

Writes out_dir/verl/train.parquet (every step's prompts in the order the native trainer draws
them, as verl's RLHFDataset reads them: evaluators.for_verl) and out_dir/verl/job.json (verl's
config name and Hydra overrides). Then, in verl's environment,
`python workflow/scripts/verl_launch.py out_dir/verl --gpus-per-node G` runs verl's trainer on
the nodes it is given, and
`python -m pipeline.train --config FILE` collects its checkpoints and metrics.
"""

import pathlib

from evaluators import for_verl
from gspo.config.train import RLConfig
from gspo.engines.verl import job as verl_engine
from gspo.native.data import Mix
from pipeline._cli import config_parser, load_config, run

PROMPT_MARGIN = 32  # tokens over the longest rendered prompt: verl renders the template itself


def parser():
    return config_parser(
        "Write the job verl's trainer runs for an engine: verl RL config.",
        "python -m pipeline.verl",
        RLConfig,
    )


def main(argv=None):
    from transformers import AutoTokenizer

    from gspo.model.tokens import Codec

    args = parser().parse_args(argv)
    cfg = load_config(RLConfig, args)
    verl_engine.check(cfg)
    job = pathlib.Path(cfg.out_dir) / verl_engine.JOB
    mix = Mix(cfg.train_data)
    records = [
        r
        for step in range(cfg.steps)
        for r in mix.sample(cfg.prompts_per_step, seed=cfg.seed, step=step)
    ]
    codec = Codec(AutoTokenizer.from_pretrained(cfg.model), cfg.prompt, where=cfg.model)
    longest = max(len(codec.prompt(r["prompt"])) for r in records)
    for_verl.write_parquet(records, job / "train.parquet", system=cfg.prompt.system)
    overrides = verl_engine.overrides(cfg, job, max_prompt_length=longest + PROMPT_MARGIN)
    path = verl_engine.write_job(cfg, overrides, job)
    print(f"verl job: {path} ({len(records)} prompts, {cfg.steps} steps)")


if __name__ == "__main__":
    run(main)
