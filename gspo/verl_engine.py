"""RL on verl (`engine: verl`): the same config, prompts, reward, checkpoints and metrics as the
native trainer, with verl sampling and updating at the scale the paper's MoE experiment needs
(Megatron tensor and expert parallelism, Routing Replay R2 / R3, vLLM rollouts, Ray over nodes).

verl runs in an environment of its own (its transformers pin cannot share the project's), so a
run is three steps, each a rule of the workflow (workflow/rules/verl.smk):

1. `prepare` (the project's environment): the run's prompts as verl's parquet, every step's in
   the order the native trainer draws them (verl reads them unshuffled), and `overrides(...)`:
   the run's config as verl's Hydra overrides (FIELDS; a value verl cannot honour as this
   project defines it is a one-line ConfigError naming the field, never a silent change).
2. verl's trainer (verl's environment; workflow/scripts/verl_launch.py starts the Ray cluster on
   the nodes SLURM gives): checkpoints with Hugging Face files in verl's layout, metrics through
   verl's file logger.
3. `run_rl` (the project's environment, `pipeline.train` as for every engine): verl's
   checkpoints at this run's checkpoint steps become checkpoints/step_S (the layout evaluation
   loads), verl's metrics become metrics.jsonl under this project's names (METRICS; verl's own
   kept under `verl/`), mirrored into the stage's MLflow run exactly once (gspo.tracking).

Nothing here imports verl: its config is checked by its own code in its own process
(tests/verl_reference.py's `config` case).
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil

from gspo import checkpoint as ckpt
from gspo.config import ConfigError, RLConfig
from gspo.fields import Refusals, to_dict
from gspo.data import Mix
from gspo.io import write_json
from gspo.objectives import DEFAULT_LOG_RATIO_CLAMP

ENGINE = "engine: verl"
DUAL_CLIP_OFF = 1e9     # verl's clip_ratio_c; this project's objectives have no dual clip
LOSS_MODE = {"grpo": "vanilla", "gspo": "gspo", "gspo_token": "gspo", "dapo": "vanilla",
             "dr_grpo": "vanilla", "cispo": "cispo", "gmpo": "geo_mean", "sapo": "sapo"}
CORRECTION = {"token_truncate": "token", "token_mask": "token",
              "sequence_truncate": "sequence", "sequence_mask": "sequence"}
JOB = "verl"            # out_dir/verl: the parquet, the overrides, verl's checkpoints and logs
DONE = "done.json"      # written by the launcher once verl's trainer has finished

# RLConfig field -> what it becomes in verl (docs/ENGINES.md's table)
FIELDS: dict[str, str] = {
    "algorithm": "`actor.policy_loss.loss_mode`: grpo, dapo, dr_grpo: vanilla; gspo, gspo_token: "
                 "gspo (verl's is the GSPO-token form, equal with one advantage per sequence); "
                 "cispo; gmpo: geo_mean; sapo; `algorithm.adv_estimator=grpo`",
    "engine": "this engine",
    "model": "`actor_rollout_ref.model.path`",
    "out_dir": "`trainer.default_local_dir` = out_dir/verl/checkpoints; checkpoints/, "
               "metrics.jsonl, model/ by the harness",
    "train_data": "out_dir/verl/train.parquet: each step's prompts as the native trainer draws "
                  "them, in order (`data.shuffle=False`)",
    "steps": "`trainer.total_training_steps`",
    "prompts_per_step": "`data.train_batch_size`",
    "group_size": "`rollout.n`",
    "minibatches": "`actor.ppo_mini_batch_size` = prompts_per_step / minibatches",
    "epochs": "`actor.ppo_epochs`",
    "micro_batch_size": "`actor.ppo_micro_batch_size_per_gpu` and the log-prob passes' (0: 1 "
                        "sequence, valid on any GPU count; the loss is the same)",
    "max_tokens_per_micro_batch": "`actor.use_dynamic_bsz`, `actor.ppo_max_token_len_per_gpu`",
    "logprob_chunk": "refused unless 0",
    "activation_checkpointing": "`model.enable_gradient_checkpointing`",
    "precision": "bfloat16: verl's mixed precision; float32 refused",
    "prompt": "chat: verl renders the chat template (`system` as a system turn, "
              "`enable_thinking` in `data.apply_chat_template_kwargs`); raw refused",
    "lr": "`actor.optim.lr` (verl's schedule is constant after warm-up, as ours), AdamW betas "
          "(0.9, 0.99)",
    "warmup_steps": "`actor.optim.lr_warmup_steps` (verl steps its schedule once per rollout step)",
    "weight_decay": "`actor.optim.weight_decay`",
    "grad_clip": "`actor.optim.clip_grad`",
    "eps_low": "`actor.clip_ratio_low`; verl's dual clip off (`clip_ratio_c` 1e9)",
    "eps_high": "`actor.clip_ratio_high`",
    "agg": "`actor.loss_agg_mode` (seq-mean-token-sum-norm: `loss_scale_factor` = "
           "max_new_tokens)",
    "adv_scale": "`algorithm.norm_adv_by_std_in_grpo`",
    "sapo_tau_pos": "`actor.tau_pos`",
    "sapo_tau_neg": "`actor.tau_neg`",
    "mask_truncated": "refused unless false",
    "overlong_buffer": "refused unless 0 (dapo: set 0)",
    "dynamic_sampling": "refused unless false (dapo: set false)",
    "dynamic_sampling_max_rounds": "refused unless at its default",
    "rollout_correction": "`algorithm.rollout_correction.rollout_is` token / sequence, "
                          "`rollout_is_threshold` (truncate: max; mask: min_max)",
    "rollout_correction_min": "mask modes: the threshold's lower end; truncate: refused unless 0",
    "rollout_correction_max": "the threshold's upper end",
    "log_ratio_clamp": "refused unless at its default (20: verl's vanilla clamp; its GSPO clamps "
                       "at 10, equal while every |log ratio| is below it)",
    "kl_coef": "`actor.use_kl_loss`, `kl_loss_coef`, `kl_loss_type=low_var_kl` (k3, which verl "
               "clamps to [-10, 10])",
    "temperature": "`rollout.temperature`",
    "top_p": "`rollout.top_p` (`top_k=-1`)",
    "max_new_tokens": "`data.max_response_length`",
    "rollout": "engine vllm (`rollout.name=vllm`), `dtype`, `gpu_memory_utilization`, "
               "`max_model_len`, `tensor_model_parallel_size`; sleep: verl always frees the "
               "cache between phases; torch refused",
    "old_logprobs": "recompute: verl's old-log-prob pass; rollout: "
                    "`algorithm.rollout_correction.bypass_mode=true`",
    "routing_replay": "`megatron.router_replay.mode` R2 (source trainer) or R3 (source engine, "
                      "`rollout.enable_rollout_routing_replay`); needs verl.strategy megatron",
    "routing_replay_source": "R2 (trainer) or R3 (engine)",
    "router_aux_loss_coef": "megatron: `override_transformer_config.moe_aux_loss_coeff`; fsdp: "
                            "refused unless 0",
    "moe_metrics": "refused on MoE models unless false; no effect on dense ones",
    "reward_workers": "`reward.num_workers`: verl's reward processes, one sandbox each",
    "peak_flops": "refused unless 0 (verl logs its own MFU, kept as verl/perf/mfu/*)",
    "ckpt_every": "`trainer.save_freq`; Hugging Face files saved (`checkpoint.save_contents`)",
    "keep_last": "checkpoints/ (verl keeps all of its own until the harness has exported them)",
    "keep_steps": "checkpoints/",
    "resume": "`trainer.resume_mode` auto or disable",
    "max_consecutive_nonfinite": "checked on verl's log when the run is collected: a run with "
                                 "this many non-finite losses or gradient norms in a row fails",
    "seed": "`data.seed`, `actor.data_loader_seed`, `rollout.seed`",
    "device": "refused unless cuda (verl runs on CUDA, NPU or ROCm GPUs only)",
    "threads": "torch threads of the harness's collect step",
    "verl": "strategy fsdp | megatron; megatron `tensor_model_parallel_size`, "
            "`expert_model_parallel_size`, `pipeline_model_parallel_size`; overrides appended",
}

# verl's logged name -> this project's (the report's curves, fit and claims read these)
METRICS = {"critic/score/mean": "reward_mean", "actor/pg_clipfrac": "clip_frac_tokens",
           "actor/entropy": "entropy", "actor/kl_loss": "kl", "actor/grad_norm": "grad_norm",
           "actor/pg_loss": "loss", "actor/lr": "lr", "response_length/mean": "response_length",
           "timing_s/step": "time_step_s", "timing_s/gen": "time_rollout_s",
           "timing_s/update_actor": "time_update_s"}


def refusals(cfg: RLConfig) -> list[tuple[str, str]]:
    """(field, why) for each value of `cfg` verl cannot honour as this project defines it."""
    d, base = to_dict(cfg), to_dict(RLConfig(train_data=cfg.train_data))
    out = Refusals()
    need = out.need

    for field in ("logprob_chunk", "overlong_buffer", "dynamic_sampling",
                  "dynamic_sampling_max_rounds", "mask_truncated", "peak_flops"):
        need(d[field] in (base[field], 0, False), field,
             f"{d[field]!r}: verl has no such setting here; leave it at {base[field]!r} or 0")
    need(cfg.log_ratio_clamp == DEFAULT_LOG_RATIO_CLAMP, "log_ratio_clamp",
         f"verl's clamps are fixed; leave it at {DEFAULT_LOG_RATIO_CLAMP}")
    need(cfg.precision == "bfloat16", "precision",
         "verl trains in bf16 mixed precision: set bfloat16")
    need(cfg.prompt.format == "chat", "prompt", "verl renders every prompt with the model's chat "
         "template: set prompt.format: chat")
    need(cfg.device.startswith("cuda"), "device", f"{cfg.device!r}: verl runs on GPUs only: "
         "set cuda")
    need(cfg.rollout.engine == "vllm", "rollout", "verl samples with its vLLM servers: set "
         "rollout.engine: vllm")
    need(cfg.rollout_correction in ("none", "token_mask", "sequence_mask")
         or cfg.rollout_correction_min == 0.0, "rollout_correction_min",
         "verl's truncation has no lower bound: set 0")
    megatron = cfg.verl.strategy == "megatron"
    need(megatron or not cfg.routing_replay, "routing_replay",
         "verl replays routing in its Megatron engine only: set verl.strategy: megatron")
    need(megatron or cfg.router_aux_loss_coef == 0, "router_aux_loss_coef",
         "verl's fsdp backend has no load-balancing loss setting: set 0")
    need(not (cfg.moe_metrics and _is_moe(cfg.model)), "moe_metrics",
         "verl logs no routing drift: set false")
    return out


def _is_moe(model: str) -> bool:
    """Whether the model directory's config.json describes an MoE model (experts)."""
    p = pathlib.Path(model) / "config.json"
    if not p.is_file():
        return False
    cfg = json.loads(p.read_text())      # transformers 5 writes num_local_experts, 4 num_experts
    return bool(cfg.get("num_local_experts") or cfg.get("num_experts"))


def check(cfg: RLConfig) -> None:
    """Raise a one-line ConfigError for the first field verl cannot honour."""
    if cfg.engine != "verl":
        raise ConfigError(f"engine: {cfg.engine!r}; gspo.verl_engine runs engine: verl only")
    for field, why in refusals(cfg):
        raise ConfigError(f"{field}: not supported with {ENGINE}: {why}")
    if cfg.prompts_per_step % cfg.minibatches:
        raise ConfigError(f"minibatches: {cfg.minibatches} does not divide prompts_per_step="
                          f"{cfg.prompts_per_step}: verl's minibatches are whole prompt groups "
                          f"({ENGINE})")


def overrides(cfg: RLConfig, job_dir, *, max_prompt_length: int = 1024,
              reward_path: str | None = None) -> list[str]:
    """verl's Hydra overrides for `cfg` (FIELDS), its parquet and checkpoints in `job_dir`,
    prompts of at most `max_prompt_length` tokens; cfg.verl.overrides last. `check` first. The
    cluster's size (trainer.nnodes, trainer.n_gpus_per_node) is the launcher's to add."""
    job = pathlib.Path(job_dir).resolve()
    a, r, m = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.model"
    reward_path = reward_path or str(pathlib.Path(__file__).resolve().parents[1] / "evaluators"
                                     / "for_verl.py")
    o = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.adv_scale == "std",
        "data.train_files": str(job / "train.parquet"),
        "data.val_files": str(job / "train.parquet"),
        "data.train_batch_size": cfg.prompts_per_step,
        "data.max_prompt_length": max_prompt_length,
        "data.max_response_length": cfg.max_new_tokens,
        "data.shuffle": False, "data.seed": cfg.seed, "data.truncation": "error",
        "+data.apply_chat_template_kwargs.enable_thinking": cfg.prompt.enable_thinking,
        f"{m}.path": str(pathlib.Path(cfg.model).resolve()),
        f"{m}.enable_gradient_checkpointing": cfg.activation_checkpointing,
        f"{a}.policy_loss.loss_mode": LOSS_MODE[cfg.algorithm],
        f"{a}.clip_ratio_low": cfg.eps_low, f"{a}.clip_ratio_high": cfg.eps_high,
        f"{a}.clip_ratio_c": DUAL_CLIP_OFF,
        f"{a}.tau_pos": cfg.sapo_tau_pos, f"{a}.tau_neg": cfg.sapo_tau_neg,
        f"{a}.loss_agg_mode": cfg.agg,
        f"{a}.ppo_mini_batch_size": cfg.prompts_per_step // cfg.minibatches,
        f"{a}.ppo_epochs": cfg.epochs, f"{a}.shuffle": False, f"{a}.data_loader_seed": cfg.seed,
        f"{a}.use_kl_loss": cfg.kl_coef > 0, f"{a}.kl_loss_coef": cfg.kl_coef,
        f"{a}.kl_loss_type": "low_var_kl", f"{a}.entropy_coeff": 0,
        f"{a}.optim.lr": cfg.lr, f"{a}.optim.lr_warmup_steps": cfg.warmup_steps or -1,
        f"{a}.optim.weight_decay": cfg.weight_decay, f"{a}.optim.betas": [0.9, 0.99],
        f"{a}.optim.clip_grad": cfg.grad_clip,
        f"{a}.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        f"{r}.name": "vllm", f"{r}.n": cfg.group_size, f"{r}.temperature": cfg.temperature,
        f"{r}.top_p": cfg.top_p, f"{r}.top_k": -1, f"{r}.seed": cfg.seed,
        f"{r}.dtype": cfg.rollout.dtype,
        f"{r}.tensor_model_parallel_size": cfg.rollout.tensor_parallel_size,
        "trainer.total_training_steps": cfg.steps, "trainer.total_epochs": 1,
        "trainer.save_freq": cfg.ckpt_every, "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.default_local_dir": str(job / "checkpoints"),
        "trainer.resume_mode": "auto" if cfg.resume else "disable",
        "trainer.logger": ["console", "file"],
        "trainer.project_name": "gspo-bench",
        "trainer.experiment_name": f"{cfg.algorithm}-seed{cfg.seed}",
        "reward.custom_reward_function.path": reward_path,
        "reward.custom_reward_function.name": "compute_score",
        "reward.num_workers": cfg.reward_workers,
    }
    o.update(_conditional(cfg))
    return [f"{k}={_hydra(v)}" for k, v in o.items()] + list(cfg.verl.overrides)


def _conditional(cfg: RLConfig) -> dict:
    """The overrides that depend on a setting: batch sizes, the rollout engine's limits, the
    rollout correction, Megatron's layout and Routing Replay."""
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    o = {}
    if cfg.agg == "seq-mean-token-sum-norm":
        o[f"{a}.loss_scale_factor"] = cfg.max_new_tokens
    micro = cfg.micro_batch_size or 1      # verl needs a size; 1 keeps any GPU count valid
    for key in (f"{a}.ppo_micro_batch_size_per_gpu", f"{r}.log_prob_micro_batch_size_per_gpu",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"):
        o[key] = micro
    if cfg.max_tokens_per_micro_batch:
        o[f"{a}.use_dynamic_bsz"] = True
        o[f"{a}.ppo_max_token_len_per_gpu"] = cfg.max_tokens_per_micro_batch
    if cfg.rollout.gpu_memory_utilization:
        o[f"{r}.gpu_memory_utilization"] = cfg.rollout.gpu_memory_utilization
    if cfg.rollout.max_model_len:
        o[f"{r}.max_model_len"] = cfg.rollout.max_model_len
    if cfg.rollout_correction != "none":
        lo, hi = cfg.rollout_correction_min, cfg.rollout_correction_max
        o["algorithm.rollout_correction.rollout_is"] = CORRECTION[cfg.rollout_correction]
        o["algorithm.rollout_correction.rollout_is_threshold"] = (
            f"{lo}_{hi}" if cfg.rollout_correction.endswith("mask") else hi)
    if cfg.old_logprobs == "rollout":
        o["algorithm.rollout_correction.bypass_mode"] = True
    if cfg.verl.strategy == "megatron":
        mg = f"{a}.megatron"
        o.update({f"{mg}.tensor_model_parallel_size": cfg.verl.tensor_parallel,
                  f"{mg}.expert_model_parallel_size": cfg.verl.expert_parallel,
                  f"{mg}.pipeline_model_parallel_size": cfg.verl.pipeline_parallel,
                  f"+{mg}.override_transformer_config.moe_aux_loss_coeff":
                      cfg.router_aux_loss_coef})
        if cfg.routing_replay:
            mode = "R2" if cfg.routing_replay_source == "trainer" else "R3"
            o[f"{mg}.router_replay.mode"] = mode
            o[f"{r}.enable_rollout_routing_replay"] = mode == "R3"
    return o


def config_name(cfg: RLConfig) -> str:
    """The trainer config of verl's that `overrides` apply to (its strategy's)."""
    return "ppo_megatron_trainer" if cfg.verl.strategy == "megatron" else "ppo_trainer"


def _hydra(v) -> str:
    """A value as Hydra's override grammar reads it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ",".join(_hydra(x) for x in v) + "]"
    if isinstance(v, str):
        return v if v and all(c.isalnum() or c in "/._-" for c in v) else json.dumps(v)
    return repr(v)


# -- the job verl runs (written by pipeline.verl prepare) ----------------------------------------

def write_job(cfg: RLConfig, overrides_: list[str], job_dir) -> pathlib.Path:
    """job.json, what the launcher runs: verl's config name and overrides, and the config they
    came from. A job dir holding another config's verl run loses that run's checkpoints and
    logs first: verl would otherwise resume them."""
    job = pathlib.Path(job_dir)
    cfg_hash = ckpt.config_hash(to_dict(cfg))
    old = job / "job.json"
    if old.is_file() and json.loads(old.read_text()).get("config_hash") != cfg_hash:
        for p in [job / "checkpoints", job / DONE, *job.glob("metrics.*.jsonl")]:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    write_json(old, {"config_name": config_name(cfg), "overrides": overrides_,
                     "config_hash": cfg_hash, "steps": cfg.steps})
    return old


# -- collecting a finished verl run (pipeline.train, engine: verl) ---------------------------------

def verl_metrics(job_dir) -> list[tuple[int, dict]]:
    """verl's per-step metrics from its file logger, one file per attempt (metrics.<k>.jsonl,
    the launcher numbers them: verl's logger truncates its file when a run resumes); a step an
    attempt logged again after a resume takes the later attempt's record."""
    by_step: dict[int, dict] = {}
    files = sorted(pathlib.Path(job_dir).glob("metrics.*.jsonl"),
                   key=lambda p: int(p.name.split(".")[1]))
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                by_step[int(rec["step"])] = rec["data"]
    return sorted(by_step.items())


def record(data: dict, cfg: RLConfig, forward_flops) -> tuple[dict, float]:
    """This project's record of one verl step (METRICS; verl's own under verl/) and the step's
    compute: prompts x group_size sequences of verl's mean prompt + response length, charged
    as gspo.flops charges the native trainer (generation, the old-log-prob pass, a reference
    pass with a KL term, 3 per update epoch)."""
    rec = {ours: data[k] for k, ours in METRICS.items() if k in data}
    if cfg.algorithm in ("gspo", "gspo_token") and "actor/pg_clipfrac" in data:
        rec["clip_frac_seqs"] = data["actor/pg_clipfrac"]     # whole sequences are clipped
    n = cfg.prompts_per_step * cfg.group_size
    length = round(data.get("prompt_length/mean", 0) + data.get("response_length/mean", 0))
    passes = 2 + (cfg.kl_coef > 0) + 3 * cfg.epochs
    flops = passes * forward_flops([length] * n)
    rec["tokens_generated"] = n * data.get("response_length/mean", 0)
    rec.update({f"verl/{k}": v for k, v in data.items() if isinstance(v, (int, float))})
    return rec, flops


def _hf_files(step_dir: pathlib.Path) -> pathlib.Path:
    """The Hugging Face folder of one of verl's checkpoints (fsdp: actor/huggingface; megatron
    layout v2: actor/model/huggingface)."""
    for sub in ("actor/huggingface", "actor/model/huggingface"):
        p = step_dir / sub
        if (p / "config.json").is_file() and any(p.glob("*.safetensors")):
            return p
    raise FileNotFoundError(f"{step_dir}: no Hugging Face model files (actor/huggingface or "
                            "actor/model/huggingface with config.json and *.safetensors); "
                            "verl saves them with checkpoint.save_contents: [..., hf_model]")


def export(job_dir, ckpt_root, step: int, counters: dict) -> pathlib.Path:
    """verl's global_step_<step> -> ckpt_root/step_<step>: its model files, the META record
    evaluation reads and the state file that marks it complete."""
    dest = pathlib.Path(ckpt_root) / f"step_{step:06d}"
    ckpt.export_model_files(
        _hf_files(pathlib.Path(job_dir) / "checkpoints" / f"global_step_{step}"), dest,
        {"step": step, "stage": "rl", "engine": "verl", "compute_flops": counters["compute_flops"]},
        {"step": step, "counters": dict(counters)})
    return dest


def saved_steps(job_dir) -> list[int]:
    """The steps of verl's complete checkpoints: those up to the one its tracker file names
    (written after each save)."""
    root = pathlib.Path(job_dir) / "checkpoints"
    tracker = root / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return []
    last = int(tracker.read_text().strip())
    return sorted(s for s in (int(p.name.rsplit("_", 1)[1]) for p in root.glob("global_step_*"))
                  if s <= last)


def collect(cfg: RLConfig) -> pathlib.Path:
    """Turn the finished verl run in out_dir/verl into this project's run (module doc, step 3),
    inside the caller's stage run; returns out_dir/model."""
    from gspo.errors import TrainingError
    from gspo.flops import FlopCounter
    from gspo.models import load_model
    from gspo.tracking import MetricsLog

    check(cfg)
    out = pathlib.Path(cfg.out_dir)
    job = out / JOB
    if not (job / DONE).is_file():
        raise TrainingError(f"{job}: no finished verl run (no {DONE}); verl's trainer runs "
                            "first, in its own environment (the workflow's verl_train rule)")
    done = json.loads((job / DONE).read_text())
    rows, saved = verl_metrics(job), set(saved_steps(job))
    if not rows or rows[-1][0] != cfg.steps or cfg.steps not in saved:
        raise TrainingError(f"{job}: verl's run logged steps up to {rows[-1][0] if rows else 0} "
                            f"and saved {sorted(saved)}; this config trains {cfg.steps} steps")
    ckpt.write_run_info(out, ckpt.run_info(
        to_dict(cfg), Mix(cfg.train_data).hashes(), stage="rl", algorithm=cfg.algorithm,
        engine="verl", verl_version=done.get("verl_version"), world_size=done.get("world_size")))
    forward = FlopCounter(load_model(cfg.model, weights=False)[0]).forward
    log = MetricsLog(out / "metrics.jsonl")
    counters = {"compute_flops": 0.0, "tokens_generated": 0.0, "tokens_trained": 0.0,
                "wall_s": 0.0}
    bad = 0
    for step, data in rows:
        rec, flops = record(data, cfg, forward)
        tokens = rec.pop("tokens_generated")
        counters["compute_flops"] += flops
        counters["tokens_generated"] += tokens
        counters["tokens_trained"] += tokens * cfg.epochs
        counters["wall_s"] += rec.get("time_step_s", 0.0)
        finite = all(math.isfinite(rec.get(k, 0.0)) for k in ("loss", "grad_norm"))
        bad = 0 if finite else bad + 1
        if bad >= cfg.max_consecutive_nonfinite:
            raise TrainingError(f"step {step}: {bad} non-finite losses or gradient norms in a "
                                f"row in verl's log (max_consecutive_nonfinite)")
        if step in saved:
            export(job, out / "checkpoints", step, counters)
        log.log(step, {**rec, **counters})
    ckpt.prune_checkpoints(out / "checkpoints", cfg.keep_last, cfg.keep_steps)
    ckpt.publish_model(ckpt.latest_checkpoint(out / "checkpoints"), out / "model")
    write_json(out / "summary.json", {"steps": cfg.steps, "algorithm": cfg.algorithm,
                                      "engine": "verl", "world_size": done.get("world_size"),
                                      **counters})
    return out / "model"


def run_rl(cfg: RLConfig, reward_fn=None, *, tracking=None, restart_if_changed: bool = False,
           world=None):
    """gspo.trainer.run_rl's counterpart for pipeline.train: the collected run in its MLflow
    stage run. verl scored the rewards itself (evaluators.for_verl), so `reward_fn` is unused."""
    from gspo.tracking import stage_run
    from gspo.trainer import prepare_out_dir

    check(cfg)
    tracking = prepare_out_dir(cfg, tracking, restart_if_changed)
    with stage_run("rl", cfg.out_dir, commit="checkpoint", tracking=tracking):
        return collect(cfg)
