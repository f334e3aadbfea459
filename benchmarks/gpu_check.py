"""The GPU path end to end in one command: bf16 SFT with its greedy check, RL with the
colocated vLLM engine in sleep mode and its weight sync (the torch engine where vLLM is absent),
the checkpoint's bit-exact resume, then an evaluation; per phase the peak memory, MFU, tokens/s
and the sync time. Fails (exit 1) on any error, naming the phase in one line.

    python benchmarks/gpu_check.py [--json FILE] [--work DIR --keep]  # 1 GPU; <= 8 min on an H100
    python benchmarks/gpu_check.py --smoke [--engine vllm] [--trl]    # CPU, tiny preset, ~30 s
    bash benchmarks/device_check.sh [--smoke]   # the lent GPU machine: torchrun, --trl, limits

Nothing is downloaded: the model is random-initialised in Qwen3-1.7B's shapes
(gspo.infra.memory_plan.PRESETS: hidden 2048, 28 layers, 16 / 8 heads, head_dim 128, MLP 6144,
vocabulary 151,936, tied embeddings), written with save_pretrained in bf16 beside the project's
character tokenizer (the model's vocabulary exceeds the tokenizer's; ids past it decode to
nothing), and the data are generated AIME-style problems (evaluators.benchmarks.aime). Phases, each in its
own try/except (a failed phase is reported and the next one still runs, from the last good model):

- build: the random model and the generated data;
- sft: gspo.native.sft.run_sft, precision bfloat16, activation checkpointing, chunked log-probs,
  token-budget micro-batches, the greedy check on held-out problems at the last step;
- rl: gspo.native.trainer.Trainer (GSPO), rollouts by vLLM colocated on the same GPU (bfloat16, sleep
  mode: asleep while the trainer runs), the weight sync after every step; sync time measured
  around the engine's update_weights, tokens/s and mfu_* from the trainer's own metrics.jsonl;
- resume (benchmarks/gpu_check_phases.py, as are rl_trl and eval): the RL run's last
  checkpoint loaded by a fresh trainer (resume: true); its fp32 master weights and AdamW state
  must equal bit for bit what the trainer held, then one more step;
- eval: evaluators.evaluation.evaluate (what `python -m pipeline.evaluate` runs) of the RL
  model on the engine, one benchmark (aime), a few problems;
- rl_trl (`--trl`, before rl): the same RL on TRL's GRPOTrainer (engine: trl).

Per phase: wall seconds; torch.cuda.max_memory_allocated / max_memory_reserved of this process
(reset between phases); the peak device memory in use by all processes (vLLM's engine runs in
its own), sampled every 0.1 s; MFU (model FLOPs, gspo.model.flops, over the phase's time and
--peak-flops, 989e12 = an H100's dense bf16): SFT from its logged compute_flops, RL the
trainer's mfu_rollout / mfu_old_logprob / mfu_update, eval from the completions' lengths; tokens/s
(SFT: trained response tokens, RL: generated, eval: generated, engine start excluded). Steps
after the first are timed where there are several (the first holds warm-ups).

A world of one: run plainly, no process group (bf16 by autocast over fp32 masters); under
`torchrun --nproc-per-node 1` with GSPO_COLLECTIVES=1 (what device_check.sh runs) a process
group (nccl, gloo with --smoke), FSDP2 and every collective as on several GPUs (NCCL refuses two
ranks on one GPU). Either way the trainer's fp32 weights, gradients and AdamW moments (16 bytes
a parameter, ~26 GiB at 1.7B) sit whole on the one GPU. --budget-s: no phase starts past it.
`--smoke` runs the same phases on CPU (the `tiny` preset, fp32, the torch engine; `--engine
vllm`: the vLLM CPU build, a minute more) so the script's code runs without a GPU
(tests/test_gpu_check.py); memory there is this process's and its children's resident set, MFU
against a nominal 1e11 FLOP/s.

The generic parts (memory sampler, random Qwen3 writer, parameter and FLOP counts, table) are
in benchmarks/gpu_check_parts.py. The output: progress lines, a table, then one JSON line (also
in --json FILE) for docs/EXPERIMENTS.md; failures go to stderr as `gpu_check: FAILED <phase>:
<error>`.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import traceback

# a sibling module: running `python benchmarks/gpu_check.py` puts benchmarks/ first on sys.path
from gpu_check_parts import (
    GIB,
    MemoryMonitor,
    count_params_of,
    dir_bytes,
    one_line,
    print_table,
    timed,
    write_random_qwen3,
)
from gpu_check_phases import MorePhases, training_state, vllm_importable, write_partial

H100_BF16 = 989e12
NOMINAL_CPU = 1e11
PHASES = ("build", "sft", "rl_trl", "rl", "resume", "eval")  # rl_trl with --trl only

# per mode: what a check does unless a flag says otherwise
DEFAULTS = {
    "gpu": dict(
        shape="Qwen3-1.7B",
        engine="auto",
        precision="bfloat16",
        sft_steps=5,
        sft_batch=32,
        sft_max_len=1024,
        rl_steps=3,
        prompts=16,
        group=8,
        minibatches=2,
        max_new_tokens=512,
        micro_tokens=16384,
        logprob_chunk=1024,
        eval_problems=32,
        eval_samples=4,
        max_model_len=1024,
        gpu_memory_utilization=0.5,
        peak_flops=H100_BF16,
        difficulty=(40, 99),
        threads=0,
        greedy_problems=16,
        budget_s=0,
    ),
    "smoke": dict(
        shape="tiny",
        engine="torch",
        precision="float32",
        sft_steps=3,
        sft_batch=8,
        sft_max_len=128,
        rl_steps=2,
        prompts=4,
        group=4,
        minibatches=2,
        max_new_tokens=24,
        micro_tokens=256,
        logprob_chunk=16,
        eval_problems=8,
        eval_samples=2,
        max_model_len=256,
        gpu_memory_utilization=0.0,
        peak_flops=NOMINAL_CPU,
        difficulty=(3, 9),
        threads=2,
        greedy_problems=4,
        budget_s=0,
    ),
}


def backend(world) -> str | None:
    import torch.distributed as tdist

    return tdist.get_backend() if world.distributed and tdist.is_initialized() else None


def versions() -> dict:
    """The versions the check ran under (the lent image's differ from the project's pins)."""
    import importlib.metadata as md

    out = {}
    for name in ("torch", "transformers", "accelerate", "tokenizers", "trl", "datasets", "vllm"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


class Check(MorePhases):
    def __init__(self, args, world):
        import torch

        self.args = args
        self.world = world
        self.cuda = not args.smoke
        self.device = "cuda" if self.cuda else "cpu"
        self.saved_state = None  # the trainer's state at its last checkpoint (rl -> resume)
        self.t0 = time.perf_counter()
        self.work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="gspo-gpu-check-"))
        self.work.mkdir(parents=True, exist_ok=True)
        self.models: dict[str, pathlib.Path] = {}  # phase -> the model it produced
        self.report = {
            "check": "gpu_check",
            "mode": "smoke" if args.smoke else "gpu",
            "device": torch.cuda.get_device_name(0) if self.cuda else "cpu",
            "shape": args.shape,
            "precision": args.precision,
            "engine": args.engine,
            "peak_flops": args.peak_flops,
            "world_size": world.size,
            "collectives": world.distributed,
            "backend": backend(world),
            "versions": versions(),
            "phases": {},
        }
        self.monitor = MemoryMonitor(self.cuda)

    # -- the phase harness ------------------------------------------------------------------
    def run(self, name: str, fn) -> None:
        import torch

        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        self.monitor.reset()
        rec: dict = {"status": "ok"}
        t0 = time.perf_counter()
        left = self.args.budget_s - (t0 - self.t0) if self.args.budget_s else None
        try:
            if left is not None and left <= 0:
                raise TimeoutError(
                    f"not started: the check's {self.args.budget_s:.0f} s budget is spent"
                )
            rec.update(fn())
        except Exception as e:
            traceback.print_exc()
            rec = {"status": "failed", "error": one_line(e)}
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
        if rec["status"] == "ok" and name in self.models and not self.args.keep:
            self.prune(keep=name)
        if self.cuda:
            rec["torch_peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
            rec["torch_peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 2)
        rec["peak_used_gib"] = round(self.monitor.read() / GIB, 2)
        self.report["phases"][name] = rec
        write_partial(pathlib.Path(self.args.json) if self.args.json else None, self.report)
        print(
            f"gpu_check: {name} {rec['status']} in {rec['wall_s']:.1f} s"
            + (f" ({rec['error']})" if rec["status"] != "ok" else ""),
            flush=True,
        )

    def prune(self, keep: str) -> None:
        """Remove the models older than phase `keep`'s: at 1.7B the fp32 ones take 6.4 GiB each
        and the GPU machine's disk 64 GiB (an RL checkpoint alone, with AdamW's moments, 19)."""
        for phase in list(self.models):
            if phase != keep:
                shutil.rmtree(self.models.pop(phase), ignore_errors=True)

    def latest_model(self) -> pathlib.Path:
        for phase in ("rl", "sft", "build"):
            if phase in self.models:
                return self.models[phase]
        raise RuntimeError("no model to start from: the build phase failed")

    def data(self, part: str) -> pathlib.Path:
        p = self.work / "data" / f"aime_{part}.jsonl"
        if not p.is_file():
            raise RuntimeError(f"{p}: no data (the build phase failed)")
        return p

    # -- build -------------------------------------------------------------------------------
    def build(self) -> dict:
        from evaluators.benchmarks import aime
        from gspo.io import write_jsonl
        from gspo.model.models import build_tiny

        a = self.args
        steps, operand = DEFAULTS["smoke" if a.smoke else "gpu"]["difficulty"]
        d = aime.Difficulty(steps, operand)
        write_jsonl(
            aime.generate(max(4 * a.sft_batch, 64), split="train", seed=0, difficulty=d),
            self.work / "data" / "aime_sft.jsonl",
        )
        write_jsonl(
            aime.generate(max(4 * a.prompts, 64), split="train", seed=1, difficulty=d),
            self.work / "data" / "aime_rl.jsonl",
        )
        write_jsonl(
            aime.generate(a.eval_problems, split="test", seed=2, difficulty=d),
            self.work / "data" / "aime_test.jsonl",
        )
        out = self.work / "init"
        if a.shape == "tiny":
            build_tiny("tiny", out, seed=0)
        else:
            from gspo.infra.memory_plan import PRESETS

            write_random_qwen3(out, PRESETS[a.shape], device=self.device)
        cfg = json.loads((out / "config.json").read_text())
        self.models["build"] = out
        params = count_params_of(out)
        self.report["params"] = params
        return {
            "params": params,
            "vocab": cfg["vocab_size"],
            "layers": cfg["num_hidden_layers"],
            "model_gib_on_disk": round(dir_bytes(out) / GIB, 2),
        }

    # -- sft ---------------------------------------------------------------------------------
    def sft(self) -> dict:
        from evaluators.tasks import reward
        from gspo.config.train import DataSource, SFTConfig
        from gspo.native.sft import run_sft
        from gspo.tracking.runs import Tracking, read_metrics

        a = self.args
        out = self.work / "sft"
        cfg = SFTConfig(
            model=str(self.latest_model()),
            out_dir=str(out),
            train_data=[DataSource(str(self.data("sft")))],
            steps=a.sft_steps,
            batch_size=a.sft_batch,
            lr=1e-5,
            warmup_steps=1,
            max_len=a.sft_max_len,
            max_tokens_per_micro_batch=a.micro_tokens,
            logprob_chunk=a.logprob_chunk,
            activation_checkpointing=True,
            precision=a.precision,
            device=self.device,
            eval_data=str(self.data("test")),
            eval_problems=a.greedy_problems,
            eval_every=0,
            log_every=1,
            threads=a.threads,
        )
        model = run_sft(cfg, reward, tracking=Tracking(), world=self.world)  # greedy at the end
        rows = read_metrics(out / "metrics.jsonl")
        if len(rows) != a.sft_steps:
            raise RuntimeError(f"{len(rows)} metric records for {a.sft_steps} steps")
        if not all(math.isfinite(r["loss"]) for r in rows):
            raise RuntimeError(f"non-finite SFT loss: {[r['loss'] for r in rows]}")
        first, last = rows[0], rows[-1]
        if len(rows) > 1:  # steps after the first: the first holds the warm-ups
            dt = last["wall_s"] - first["wall_s"]
            flops = last["compute_flops"] - first["compute_flops"]
            toks = last["tokens_trained"] - first["tokens_trained"]
        else:
            dt, flops, toks = last["wall_s"], last["compute_flops"], last["tokens_trained"]
        if not self.args.keep:
            shutil.rmtree(out / "checkpoints", ignore_errors=True)  # the model is published
        self.models["sft"] = model
        return {
            "steps": len(rows),
            "timed_steps": max(len(rows) - 1, 1),
            "loss_first": round(first["loss"], 4),
            "loss_last": round(last["loss"], 4),
            "greedy_accuracy": last["greedy_accuracy"],
            "step_s": round(dt / max(len(rows) - 1, 1), 3),
            "tokens_per_s": round(toks / dt, 1) if dt > 0 else None,
            "mfu": round(flops / (dt * self.args.peak_flops), 4) if dt > 0 else None,
        }

    # -- rl ----------------------------------------------------------------------------------
    def rl(self) -> dict:
        from evaluators.tasks import rewards
        from gspo.native.trainer import Trainer
        from gspo.tracking.runs import read_metrics

        out = self.work / "rl"
        cfg = self.rl_config(out)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, functools.partial(rewards, workers=cfg.reward_workers), self.world)
        init_s = time.perf_counter() - t0
        engine = trainer.engine
        syncs, ckpts, asleep = self.instrument(trainer)
        try:
            model = trainer.train()
            # as it saved its last checkpoint, and the run's config (resume)
            self.saved_state, self.rl_cfg = training_state(trainer), cfg
        finally:
            engine.close()  # idempotent; train() closed it unless a step failed
            del trainer, engine
        rec = self.rl_record(read_metrics(out / "metrics.jsonl"), syncs, ckpts, asleep, init_s)
        self.models["rl"] = model  # its checkpoints stay for the resume phase
        return rec

    def rl_config(self, out: pathlib.Path):
        """GSPO from the latest model; on GPU vLLM colocated in sleep mode, in bf16."""
        from gspo.config.train import DataSource, RLConfig, RolloutConfig

        a = self.args
        vllm = a.engine == "vllm"
        rollout = RolloutConfig(
            engine=a.engine,
            device=self.device,
            dtype=a.precision,
            sleep=vllm and self.cuda,
            gpu_memory_utilization=a.gpu_memory_utilization if vllm else 0.0,
            max_model_len=a.max_model_len if vllm else 0,
        )
        return RLConfig(
            algorithm="gspo",
            model=str(self.latest_model()),
            out_dir=str(out),
            train_data=[DataSource(str(self.data("rl")))],
            steps=a.rl_steps,
            prompts_per_step=a.prompts,
            group_size=a.group,
            minibatches=a.minibatches,
            max_new_tokens=a.max_new_tokens,
            max_tokens_per_micro_batch=a.micro_tokens,
            logprob_chunk=a.logprob_chunk,
            activation_checkpointing=True,
            precision=a.precision,
            lr=1e-6,
            peak_flops=a.peak_flops,
            ckpt_every=10**6,
            keep_last=1,
            resume=False,
            device=self.device,
            threads=a.threads,
            rollout=rollout,
        )

    def instrument(self, trainer) -> tuple[list, list, list]:
        """Wrap the trainer in place for what its metrics lack: the seconds of every weight
        sync and checkpoint, and on CUDA the memory right after every sampling (the lists)."""
        import torch

        syncs, ckpts, asleep = [], [], []
        engine = trainer.engine

        def generate(*args, _gen=engine.generate, **kw):
            res = _gen(*args, **kw)
            if self.cuda and self.args.engine == "vllm":  # the engine asleep, the trainer's turn
                asleep.append(
                    {
                        "device_used_gib": self.monitor.used() / GIB,
                        "torch_reserved_gib": torch.cuda.memory_reserved() / GIB,
                        "engine_sleeping": bool(engine.sleeping),
                    }
                )
            return res

        engine.update_weights = timed(engine.update_weights, syncs)
        engine.generate = generate
        trainer.checkpoint = timed(trainer.checkpoint, ckpts)
        return syncs, ckpts, asleep

    def rl_record(
        self, rows: list[dict], syncs: list, ckpts: list, asleep: list, init_s: float
    ) -> dict:
        """The RL phase's record from the trainer's metrics.jsonl rows and instrument()'s lists;
        raises where a step or a sync is missing, or the engine was awake after sampling."""
        steps = self.args.rl_steps
        if len(syncs) != steps:
            raise RuntimeError(f"{len(syncs)} weight syncs for {steps} steps")
        rec, mean = self.step_means(rows)
        rec.update(
            init_s=round(init_s, 2),
            time_old_logprob_s=round(mean("time_old_logprob_s"), 3),
            sync_s=round(statistics.mean(syncs[1:] or syncs), 3),
            sync_first_s=round(syncs[0], 3),
            checkpoint_s=round(sum(ckpts), 2),
            logprob_gap_token_mean=float(f"{mean('logprob_gap_token_mean'):.3g}"),
        )
        if asleep:
            rec["engine_asleep"] = {
                k: (
                    round(statistics.mean(s[k] for s in asleep), 2)
                    if k != "engine_sleeping"
                    else all(s[k] for s in asleep)
                )
                for k in asleep[0]
            }
            if not rec["engine_asleep"]["engine_sleeping"]:
                raise RuntimeError("sleep mode on, yet the engine was awake after sampling")
        return rec

    def step_means(self, rows: list[dict]):
        """(an RL phase's record from its metrics.jsonl rows: times, tokens/s, MFU over the
        steps after the first; that mean of a metric); raises on a missing or empty step."""
        if len(rows) != self.args.rl_steps:
            raise RuntimeError(f"{len(rows)} metric records for {self.args.rl_steps} steps")
        gen = [
            r["tokens_generated"] - (rows[i - 1]["tokens_generated"] if i else 0)
            for i, r in enumerate(rows)
        ]
        if min(gen) <= 0:
            raise RuntimeError(f"a step generated no tokens: {gen}")
        timed_rows = range(1, len(rows)) if len(rows) > 1 else range(len(rows))
        mean = lambda k: statistics.mean(rows[i][k] for i in timed_rows)  # noqa: E731
        rec = {
            "steps": len(rows),
            "timed_steps": len(timed_rows),
            "reward_mean": round(statistics.mean(r["reward_mean"] for r in rows), 4),
            "time_rollout_s": round(mean("time_rollout_s"), 3),
            "time_update_s": round(mean("time_update_s"), 3),  # includes the sync
            "tokens_per_s": round(
                sum(gen[i] for i in timed_rows)
                / sum(rows[i]["time_rollout_s"] for i in timed_rows),
                1,
            ),
        }
        for k in ("mfu_rollout", "mfu_old_logprob", "mfu_update"):
            if all(k in rows[i] for i in timed_rows):
                rec[k] = round(mean(k), 4)
        return rec, mean

    # -- the whole check ---------------------------------------------------------------------
    def main(self) -> int:
        fns = {
            "build": self.build,
            "sft": self.sft,
            "rl_trl": self.rl_trl,
            "rl": self.rl,
            "eval": self.eval,
        }
        fns["resume"] = self.resume
        phases = [p for p in PHASES if p != "rl_trl" or self.args.trl]
        for name in phases:
            self.run(name, fns[name])
        self.monitor.close()
        failed = {k: v["error"] for k, v in self.report["phases"].items() if v["status"] != "ok"}
        self.report["ok"] = not failed
        self.report["failures"] = [f"{k}: {v}" for k, v in failed.items()]
        print_table(self.report, phases)
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            print(f"work folder kept: {self.work}")
        for k, v in failed.items():
            print(f"gpu_check: FAILED {k}: {v}", file=sys.stderr, flush=True)
        line = json.dumps(self.report)
        if self.args.json:
            pathlib.Path(self.args.json).write_text(line + "\n")
        print(line, flush=True)
        return 1 if failed else 0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="CPU, the tiny preset, fp32, torch engine: the script's code path",
    )
    ap.add_argument(
        "--engine",
        choices=("vllm", "torch", "auto"),
        help="rollout and evaluation engine (default auto: vllm where it imports, "
        "else torch; --smoke: torch)",
    )
    ap.add_argument(
        "--trl",
        action="store_true",
        help="also RL on TRL's GRPOTrainer (engine: trl), from the same SFT model",
    )
    ap.add_argument("--work", help="work folder (default: a fresh temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder and checkpoints")
    ap.add_argument("--json", help="also write the final JSON line to this file")
    ap.add_argument("--sft-steps", type=int)
    ap.add_argument("--rl-steps", type=int)
    ap.add_argument("--sft-max-len", type=int, help="SFT's max_len (prompt + response tokens)")
    ap.add_argument("--max-new-tokens", type=int, help="longest RL and evaluation completion")
    ap.add_argument("--max-model-len", type=int, help="vLLM's max_model_len")
    ap.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help="vLLM's share of the GPU (rollouts and evaluation)",
    )
    ap.add_argument("--peak-flops", type=float, help="the device's peak FLOP/s, for MFU")
    ap.add_argument("--eval-problems", type=int)
    ap.add_argument("--threads", type=int, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--greedy-problems", type=int, help="problems of SFT's greedy check")
    ap.add_argument("--prompts", type=int, help="RL prompts per step")
    ap.add_argument(
        "--budget-s", type=float, help="seconds after which no further phase starts (0: none)"
    )
    args = ap.parse_args(argv)
    mode = DEFAULTS["smoke" if args.smoke else "gpu"]
    for k, v in mode.items():
        if vars(args).get(k) is None:
            vars(args)[k] = v
    if args.engine == "auto":
        args.engine = "vllm" if vllm_importable() else "torch"
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.smoke and not torch.cuda.is_available():
        print(
            "gpu_check: FAILED setup: no CUDA device (run with --smoke for the CPU code path)",
            file=sys.stderr,
        )
        return 2
    from gspo.infra import distributed as dist

    world = dist.init("cpu" if args.smoke else "cuda")  # torchrun: GSPO_COLLECTIVES=1 too
    try:
        return Check(args, world).main()
    finally:
        dist.close(world)


if __name__ == "__main__":
    sys.exit(main())
