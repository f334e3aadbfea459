"""The default job until the Snakemake workflow lands: data -> SFT -> GSPO and GRPO -> evaluation.

    python -m pipeline.compare [--algorithms gspo,grpo] [--seed 0] [--samples 8]

Runs each stage with the shipped configs (config/data.yaml, config/sft.yaml, config/rl.yaml), then
evaluates the SFT checkpoint and every RL model on the held-out AIME-style set with the same
engine, seed and samples, and writes results/default/comparison.json plus a printed table: pass@1
(mean over samples) with a bootstrap interval, the paired difference to SFT on the same problems
(with its own interval), and each method's clip fraction. Stages whose output exists are skipped
(delete results/default to start over).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics

from gspo.config import DataGenConfig, RLConfig, SFTConfig, load
from pipeline._cli import run

ROOT = pathlib.Path(__file__).resolve().parents[1]


def up_to_date(cfg) -> bool:
    """A stage is skipped only when it finished with exactly this config and the same data."""
    import json

    from gspo.checkpoint import config_hash
    from gspo.config import to_dict
    from gspo.io import file_sha256

    out = pathlib.Path(cfg.out_dir)
    if not (out / "summary.json").exists() or not (out / "run_info.json").exists():
        return False
    info = json.loads((out / "run_info.json").read_text())
    data = {s.path: file_sha256(s.path) for s in cfg.train_data}
    return info.get("config_hash") == config_hash(to_dict(cfg)) and info.get("data_hashes") == data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", default="gspo,grpo")
    ap.add_argument("--seed", type=int, default=0, help="RL seed")
    ap.add_argument("--samples", type=int, default=8, help="samples per held-out problem")
    ap.add_argument("--config-dir", default=str(ROOT / "config"))
    args = ap.parse_args(argv)

    from evaluators.metrics import bootstrap_ci
    from gspo.io import write_json
    from gspo.models import load_model
    from gspo.rollout.torch_engine import TorchEngine
    from gspo.sft import run_sft
    from gspo.tracking import read_metrics
    from gspo.trainer import run_rl
    from pipeline.data import generate
    from pipeline.evaluate import evaluate_records, load_records

    cdir = pathlib.Path(args.config_dir)
    data_cfg = load(DataGenConfig, cdir / "data.yaml")
    data_dir = pathlib.Path(data_cfg.out_dir)
    generate(data_cfg)   # seconds, deterministic: always in step with the config
    sft_cfg = load(SFTConfig, cdir / "sft.yaml")
    sft_model = pathlib.Path(sft_cfg.out_dir) / "model"
    if not up_to_date(sft_cfg):
        run_sft(sft_cfg)
    models = {"sft": sft_model}
    rl_dirs = {}
    for alg in [a.strip() for a in args.algorithms.split(",") if a.strip()]:
        out = pathlib.Path(sft_cfg.out_dir).parent / "rl" / f"{alg}-{args.seed}"
        cfg = load(RLConfig, cdir / "rl.yaml",
                   [f"algorithm={alg}", f"seed={args.seed}", f"out_dir={out}", f"model={sft_model}"])
        if not up_to_date(cfg):
            run_rl(cfg)
        models[alg] = out / "model"
        rl_dirs[alg] = out

    records = load_records(data_dir, "aime")
    rl_cfg = load(RLConfig, cdir / "rl.yaml")
    per_problem = {}
    for name, path in models.items():
        model, tok = load_model(path)
        res = evaluate_records(TorchEngine(None, model=model), tok, records, samples=args.samples,
                               temperature=rl_cfg.temperature, top_p=1.0,
                               max_new_tokens=rl_cfg.max_new_tokens, seed=1234,
                               batch_prompts=len(records), keep_completions=False)
        per_problem[name] = [r["avg@n"] for r in res]

    report = {"samples": args.samples, "problems": len(records), "models": {}}
    print(f"\nheld-out AIME-style, {len(records)} problems x {args.samples} samples")
    print(f"{'model':10s} {'pass@1':>8s} {'95% CI':>17s} {'vs SFT':>8s} {'95% CI':>17s} "
          f"{'clip frac':>10s}")
    base = per_problem["sft"]
    for name, vals in per_problem.items():
        mean = statistics.mean(vals)
        lo, hi = bootstrap_ci(vals, seed=0)
        entry = {"pass@1": mean, "ci": [lo, hi]}
        line = f"{name:10s} {mean:8.4f} [{lo:7.4f}, {hi:7.4f}]"
        if name != "sft":
            diff = [a - b for a, b in zip(vals, base)]
            dlo, dhi = bootstrap_ci(diff, seed=0)
            rows = read_metrics(rl_dirs[name] / "metrics.jsonl")
            clip = statistics.mean(r["clip_frac_tokens"] for r in rows)
            entry.update({"diff_vs_sft": statistics.mean(diff), "diff_ci": [dlo, dhi],
                          "clip_frac_tokens": clip,
                          "final_train_reward": statistics.mean(r["reward_mean"] for r in rows[-10:])})
            line += f" {statistics.mean(diff):+8.4f} [{dlo:+7.4f}, {dhi:+7.4f}] {clip:10.5f}"
        report["models"][name] = entry
        print(line)
    clips = {k: v["clip_frac_tokens"] for k, v in report["models"].items() if "clip_frac_tokens" in v}
    if "gspo" in clips and "grpo" in clips and clips["grpo"] > 0:
        report["clip_ratio_gspo_over_grpo"] = clips["gspo"] / clips["grpo"]
        print(f"clip-fraction ratio GSPO/GRPO: {report['clip_ratio_gspo_over_grpo']:.1f}x")
    write_json(pathlib.Path(sft_cfg.out_dir).parent / "comparison.json", report)


if __name__ == "__main__":
    run(main)
