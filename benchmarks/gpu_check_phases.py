"""benchmarks/gpu_check.py's later phases, a mixin of its Check: the bit-exact resume of the RL
checkpoint, RL on TRL's GRPOTrainer and the evaluation. They use the Check's arguments, work
folder, world and models (gpu_check.py's module doc says what each phase measures)."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import shutil
import time

from gpu_check_parts import eval_flops, timed


def training_state(trainer) -> dict:
    """The trainer's fp32 master weights and AdamW state as host copies, for a bit-exact
    comparison (sharded parameters: this rank's shards; a world of one: all of it)."""
    import torch

    def host(t):
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.detach().to("cpu", copy=True).contiguous()

    out = {f"param/{n}": host(p) for n, p in trainer.policy.named_parameters()}
    names = {id(p): n for n, p in trainer.policy.named_parameters()}
    for p, st in trainer.opt.state.items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                out[f"adamw/{names[id(p)]}/{k}"] = host(v)
    return out


def differences(a: dict, b: dict) -> list[str]:
    """The names whose tensors differ in any bit (or exist on one side only)."""
    import torch

    out = sorted(set(a) ^ set(b))
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if (
            x.shape != y.shape
            or x.dtype != y.dtype
            or not torch.equal(
                x.view(torch.uint8) if x.dim() else x, y.view(torch.uint8) if y.dim() else y
            )
        ):
            out.append(k)
    return out


class MorePhases:
    """resume, rl_trl and eval (mixed into gpu_check.Check)."""

    # -- resume ------------------------------------------------------------------------------
    def resume(self) -> dict:
        """The RL phase's last checkpoint loaded into a fresh trainer (resume: true): its fp32
        master weights and AdamW moments must equal, bit for bit, what the trainer held when it
        saved (rl kept them); then one more step from there."""
        from evaluators.tasks import rewards
        from gspo.native.trainer import Trainer
        from gspo.tracking.runs import read_metrics

        if self.saved_state is None:
            raise RuntimeError("no RL checkpoint to resume (the rl phase failed)")
        out = self.work / "rl"
        cfg = dataclasses.replace(self.rl_cfg, resume=True, steps=self.args.rl_steps + 1)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, functools.partial(rewards, workers=cfg.reward_workers), self.world)
        load_s = time.perf_counter() - t0
        try:
            if trainer.start_step != self.args.rl_steps:
                raise RuntimeError(
                    f"resumed at step {trainer.start_step}, saved at {self.args.rl_steps}"
                )
            n = len(self.saved_state)
            diff = differences(self.saved_state, training_state(trainer))
            if diff:
                raise RuntimeError(
                    f"{len(diff)} of {len(self.saved_state)} tensors differ "
                    f"after the resume, first {diff[0]}"
                )
            # the loaded checkpoint is in memory now: its ~28 GB at 1.7B (AdamW's state) would
            # sit beside the next one on the GPU machine's 64 GiB disk
            shutil.rmtree(out / "checkpoints", ignore_errors=True)
            t1 = time.perf_counter()
            trainer.train()
            step_s = time.perf_counter() - t1
        finally:
            trainer.engine.close()
            del trainer
        self.saved_state = None
        rows = read_metrics(out / "metrics.jsonl")
        if [r["step"] for r in rows] != list(range(1, self.args.rl_steps + 2)):
            raise RuntimeError(f"steps logged after the resume: {[r['step'] for r in rows]}")
        if not self.args.keep:
            shutil.rmtree(out / "checkpoints", ignore_errors=True)
        return {
            "tensors_equal": n,
            "load_s": round(load_s, 2),
            "resumed_step_s": round(step_s, 2),
            "reward_mean": round(rows[-1]["reward_mean"], 4),
        }

    # -- rl on TRL -----------------------------------------------------------------------------
    def rl_trl(self) -> dict:
        """`--trl`: the same RL on TRL's GRPOTrainer from the same model, before the native run
        prunes it; vllm: on the project's engine (gspo.engines.trl.rollout). TRL micro-batches by the
        token budget (gspo.engines.trl.batch); no chunked log-probs in TRL."""
        from evaluators.tasks import rewards
        from gspo.engines.trl import rl as trl_engine
        from gspo.tracking.runs import read_metrics

        out = self.work / "rl_trl"
        cfg = dataclasses.replace(self.rl_config(out), engine="trl", logprob_chunk=0)
        try:
            trl_engine.train(
                cfg, functools.partial(rewards, workers=cfg.reward_workers), self.world
            )
            return self.step_means(read_metrics(out / "metrics.jsonl"))[0]
        finally:
            shutil.rmtree(out, ignore_errors=True)

    # -- eval --------------------------------------------------------------------------------
    def eval(self) -> dict:
        from evaluators import evaluation
        from evaluators.evaluation import EvalConfig
        from gspo.io import read_jsonl

        a = self.args
        vllm = a.engine == "vllm"
        model = self.latest_model()
        cfg = EvalConfig(
            benchmark="aime",
            data=str(self.data("test")),
            engine=a.engine,
            device=self.device,
            dtype=a.precision,
            gpu_memory_utilization=a.gpu_memory_utilization if vllm else 0.0,
            max_model_len=a.max_model_len if vllm else 0,
            samples=a.eval_samples,
            max_new_tokens=a.max_new_tokens,
            limit=a.eval_problems,
            bootstrap_iters=200,
            keep_completions=False,
        )
        starts = []
        make = evaluation.make_engine  # its start is left out of tokens/s and MFU
        evaluation.make_engine = timed(make, starts)
        try:
            summary = evaluation.evaluate(str(model), [cfg], self.work / "eval")["aime"]
        finally:
            evaluation.make_engine = make
        s = summary["benchmarks"]["aime"]
        want = min(a.eval_problems, len(read_jsonl(self.data("test")))) * a.eval_samples
        if s["n_samples"] != want:
            raise RuntimeError(f"{s['n_samples']} samples scored, expected {want}")
        results = read_jsonl(self.work / "eval" / "aime" / "results.jsonl")
        tokens = sum(n for r in results for n in r["n_tokens"])
        start_s = sum(starts)
        gen_s = summary["seconds"] - start_s
        rec = {
            "problems": s["n_problems"],
            "samples": s["n_samples"],
            "avg@n": round(s["avg@n"], 4),
            "engine_start_s": round(start_s, 2),
            "generate_score_s": round(gen_s, 2),
            "tokens": tokens,
            "tokens_per_s": round(tokens / gen_s, 1) if gen_s > 0 else None,
        }
        flops = eval_flops(model, self.data("test"), results)
        if gen_s > 0 and flops:
            rec["mfu"] = round(flops / (gen_s * self.args.peak_flops), 5)
        return rec


def vllm_importable() -> bool:
    """Whether vLLM can be imported here (the lent GPU image has none: the torch engine then)."""
    import importlib.util

    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def write_partial(path: pathlib.Path | None, report: dict) -> None:
    """The report so far, for device_check.sh to print should the check be killed."""
    import json

    if path is not None:
        tmp = path.with_suffix(".partial.tmp")
        tmp.write_text(json.dumps(report) + "\n")
        tmp.replace(path.with_suffix(".partial.json"))
