"""Stage: evaluate a model on the benchmarks with the rollout engine.

    python -m pipeline.evaluate --model MODEL_DIR --out DIR --config AIME.yaml [LCB.yaml ...]
    python -m pipeline.evaluate --model MODEL_DIR --out DIR --benchmarks aime,lcb,cf \\
        --data-dir DATA [--samples 8 --temperature 1.0 --max-new-tokens 64 ...]

    torchrun --nproc-per-node N -m pipeline.evaluate ...     # N engines (one per GPU), same results

`--config` takes one evaluation config per benchmark (evaluators.evaluation.EvalConfig: the
workflow writes one per benchmark); without it, `--benchmarks` with `--data-dir` (reading
`<data-dir>/<bench>_test.jsonl`) and the flags below make them. `--set key=value` overrides a
field of every config. Writes `<out>/<bench>/{results.jsonl, summary.json}` (and checkpoint.json
when the model is a training checkpoint): see evaluators.evaluation. A killed run, re-run with
the same settings, resumes from the chunks it finished (`<out>/<bench>.partial/`).
"""

from __future__ import annotations

import dataclasses
import pathlib
import typing

from evaluators import tasks
from evaluators.evaluation import EvalConfig, evaluate, load_all
from gspo.config.fields import ConfigError, apply_overrides, from_dict, load
from pipeline._cli import Parser, run

DEFAULTS = EvalConfig()
# One flag per EvalConfig setting, with its type, default and help; the benchmark and its data
# come from --benchmarks / --data-dir, keep_completions from --no-completions, the prompt format
# from --set prompt.format=chat (a nested setting).
FLAGS = {
    f.name: f
    for f in dataclasses.fields(EvalConfig)
    if f.name not in ("benchmark", "data", "keep_completions", "prompt")
}
HINTS = typing.get_type_hints(EvalConfig)


def parser() -> Parser:
    p = Parser(
        "python -m pipeline.evaluate",
        "Evaluate a model on the benchmarks with the "
        "rollout engine. Without --config, the flags below make one config per benchmark "
        "of --benchmarks; their defaults are EvalConfig's (the torch engine on the CPU in "
        "float32: a real checkpoint on a GPU wants --engine vllm --device cuda --dtype "
        "bfloat16 and its own --max-new-tokens).",
        EvalConfig,
    )
    p.add_argument("--model", required=True, help="model directory (config.json + tokenizer)")
    p.add_argument("--out", required=True, help="output folder: <out>/<bench>/ per benchmark")
    p.add_argument(
        "--config",
        dest="configs",
        action="extend",
        nargs="+",
        default=[],
        help="benchmark EvalConfig YAML files, one per benchmark (replace "
        "--benchmarks and the settings flags)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field of every config; repeatable",
    )
    p.add_argument(
        "--benchmarks",
        default=",".join(tasks.BENCHMARKS),
        help=f"comma list of {', '.join(tasks.BENCHMARKS)} (default: all)",
    )
    p.add_argument("--data-dir", default="data", help="folder of <bench>_test.jsonl")
    for name, f in FLAGS.items():
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=HINTS[name],
            default=getattr(DEFAULTS, name),
            help=f"{f.metadata['help']} (default {getattr(DEFAULTS, name)!r})",
        )
    p.add_argument(
        "--no-completions", action="store_true", help="leave the completions out of results.jsonl"
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)"
    )
    return p


def configs_of(args) -> list[EvalConfig]:
    if args.configs:
        return [load(EvalConfig, c, args.overrides) for c in args.configs]
    out = []
    for bench in tasks.parse(args.benchmarks):
        d = {name: getattr(args, name) for name in FLAGS}
        d.update(
            benchmark=bench,
            data=str(pathlib.Path(args.data_dir) / f"{bench}_test.jsonl"),
            keep_completions=not args.no_completions,
        )
        out.append(from_dict(EvalConfig, apply_overrides(d, args.overrides)))
    return out


def main(argv=None) -> int:
    from gspo.infra import distributed as dist
    from gspo.infra.checkpoint import checkpoint_meta

    args = parser().parse_args(argv)
    try:
        configs = configs_of(args)
    except ValueError as e:  # an unknown benchmark in --benchmarks
        raise ConfigError(str(e)) from None
    records = load_all(configs)  # bad data fails before any model is loaded
    if not (pathlib.Path(args.model) / "config.json").is_file():
        raise ConfigError(f"{args.model}: not a model directory (no config.json)")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    meta = checkpoint_meta(args.model)
    # under torchrun the ranks share the sampling (one engine each); only objects cross ranks,
    # so gloo serves even on GPUs
    world = dist.init("cpu")
    try:
        summaries = evaluate(
            args.model,
            configs,
            args.out,
            records=records,
            world=world,
            checkpoint={**meta, "model": str(args.model)} if meta else None,
        )
    finally:
        dist.close(world)
    if not world.main:
        return 0
    for b, summary in summaries.items():
        s = summary["benchmarks"][b]
        maj = f" maj@{s['k']}={s['maj@k']:.4f}" if "maj@k" in s else ""
        print(
            f"{b}: avg@{s['samples_per_problem']}={s['avg@n']:.4f} pass@{s['k']}="
            f"{s['pass@k']:.4f}{maj} ({s['n_problems']} problems, {s['n_samples']} samples, "
            f"{summary['seconds']:.1f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    run(main)
