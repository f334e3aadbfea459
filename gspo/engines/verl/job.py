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
3. `gspo.engines.verl.collect.run_rl` (the project's environment, `pipeline.train` as for every
   engine): verl's checkpoints and metrics become the run's.

Nothing here imports verl: its config is checked by its own code in its own process
(tests/verl_reference.py's `config` case).
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil

from gspo.config.fields import ConfigError, Refusals, to_dict
from gspo.config.train import RLConfig
from gspo.core import offpolicy
from gspo.core.objectives import DEFAULT_LOG_RATIO_CLAMP, OBJECTIVES
from gspo.infra import checkpoint as ckpt
from gspo.io import write_json

ENGINE = "engine: verl"
DUAL_CLIP_OFF = 1e9  # verl's clip_ratio_c; this project's objectives have no dual clip
# objective -> verl's policy_loss.loss_mode, from the registry (gspo.core.objectives.Objective.verl)
LOSS_MODE = {name: o.verl for name, o in OBJECTIVES.items() if o.verl}
CORRECTION = {
    "token_truncate": "token",
    "token_mask": "token",
    "sequence_truncate": "sequence",
    "sequence_mask": "sequence",
    "icepop": "token",  # verl's token mask, "lower_upper": IcePop
}
BETAS = (0.9, 0.99)  # Adam's, as the native trainer's
JOB = "verl"  # out_dir/verl: the parquet, the overrides, verl's checkpoints and logs
DONE = "done.json"  # written by the launcher once verl's trainer has finished


# RLConfig field -> what it becomes in verl (docs/ENGINES.md's table)
FIELDS: dict[str, str] = {
    "algorithm": "`actor.policy_loss.loss_mode`: the objective's verl loss (LOSS_MODE, from "
    "gspo.core.objectives.Objective.verl: docs/OBJECTIVES.md's verl column); one "
    "without one refused; `algorithm.adv_estimator=grpo`",
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
    "activation_checkpointing": "fsdp: `model.enable_gradient_checkpointing`; megatron: "
    "`override_transformer_config.recompute_granularity=full`, "
    "`recompute_method=uniform`, `recompute_num_layers=1`",
    "precision": "bfloat16: verl's mixed precision; float32 refused",
    "prompt": "chat: verl renders the chat template (`system` as a system turn, "
    "`enable_thinking` in `data.apply_chat_template_kwargs`); raw refused",
    "lr": "`actor.optim.lr` (verl's schedule is constant after warm-up, as ours), Adam betas "
    "(0.9, 0.99): fsdp `optim.betas`, megatron `optim.override_optimizer_config."
    "adam_beta1`, `adam_beta2`",
    "warmup_steps": "`actor.optim.lr_warmup_steps` (verl steps its schedule once per rollout step)",
    "weight_decay": "`actor.optim.weight_decay`",
    "grad_clip": "`actor.optim.clip_grad`",
    "eps_low": "`actor.clip_ratio_low` (dppo_tv / dppo_kl: the divergence threshold); verl's "
    "dual clip off (`clip_ratio_c` 1e9) but for DPPO's cap (dppo_is_cap)",
    "eps_high": "`actor.clip_ratio_high`",
    "agg": "`actor.loss_agg_mode` (seq-mean-token-sum-norm: `loss_scale_factor` = max_new_tokens)",
    "adv_scale": "`algorithm.norm_adv_by_std_in_grpo`",
    "sapo_tau_pos": "`actor.tau_pos`",
    "sapo_tau_neg": "`actor.tau_neg`",
    "vespo_k_pos": "refused unless at its default (verl has no VESPO)",
    "vespo_lambda_pos": "refused unless at its default",
    "vespo_k_neg": "refused unless at its default",
    "vespo_lambda_neg": "refused unless at its default",
    "dppo_is_cap": "dppo_tv / dppo_kl: `actor.clip_ratio_c` (verl's cap of DPPO's truncated "
    "weight); the others keep the dual clip off",
    "clip_cov_ratio": "`actor.policy_loss.clip_cov_ratio`",
    "clip_cov_lb": "`actor.policy_loss.clip_cov_lb`",
    "clip_cov_ub": "`actor.policy_loss.clip_cov_ub`",
    "kl_cov_ratio": "`actor.policy_loss.kl_cov_ratio`",
    "kl_cov_coef": "`actor.policy_loss.ppo_kl_coef`",
    "opsm_threshold": "refused unless null (verl has no off-policy sequence masking)",
    "mask_truncated": "refused unless false",
    "overlong_buffer": "refused unless 0 (dapo: set 0)",
    "dynamic_sampling": "refused unless false (dapo: set false)",
    "dynamic_sampling_max_rounds": "refused unless at its default",
    "rollout_correction": "`algorithm.rollout_correction.rollout_is` token / sequence, "
    "`rollout_is_threshold` (truncate: max; mask: min_max; icepop: token, min_max)",
    "rollout_correction_min": "mask modes: the threshold's lower end; truncate: refused unless 0",
    "rollout_correction_max": "the threshold's upper end",
    "icepop_min": "icepop: the token threshold's lower end (`rollout_is=token`, min_max)",
    "icepop_max": "icepop: the token threshold's upper end",
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
    "staleness": "refused unless 0: verl 0.9.1's one-step-off and fully-async trainers "
    "(verl.experimental) and its v1 trainer's replay buffer (`max_off_policy_threshold`) bound "
    "the lag or set it by timing, and are other trainers than the one this job runs",
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
    "log_samples_every": "`trainer.rollout_data_dir` = out_dir/verl/rollouts when above 0: verl "
    "dumps every step's samples (input, output, score) there as "
    "<step>.jsonl, in its own layout (every step, not every N)",
    "device": "refused unless cuda (verl runs on CUDA, NPU or ROCm GPUs only)",
    "threads": "torch threads of the harness's collect step",
    "verl": "strategy fsdp | megatron; megatron `tensor_model_parallel_size`, "
    "`expert_model_parallel_size`, `pipeline_model_parallel_size`, "
    "`expert_tensor_parallel_size=1`, `context_parallel_size=1`, "
    "`CUDA_DEVICE_MAX_CONNECTIONS=1` for every Ray worker; overrides appended",
}


def refusals(cfg: RLConfig) -> list[tuple[str, str]]:
    """(field, why) for each value of `cfg` verl cannot honour as this project defines it."""
    d, base = to_dict(cfg), to_dict(RLConfig(train_data=cfg.train_data))
    out = Refusals()
    need = out.need

    need(
        cfg.algorithm in LOSS_MODE,
        "algorithm",
        f"{cfg.algorithm!r}: verl has no such policy loss; use one of {', '.join(LOSS_MODE)}",
    )
    for field in (
        "logprob_chunk",
        "overlong_buffer",
        "dynamic_sampling",
        "dynamic_sampling_max_rounds",
        "mask_truncated",
        "peak_flops",
        *(f for f in offpolicy.FIELDS if f.startswith("vespo")),
    ):
        need(
            d[field] in (base[field], 0, False),
            field,
            f"{d[field]!r}: verl has no such setting here; leave it at {base[field]!r} or 0",
        )
    need(
        cfg.log_ratio_clamp == DEFAULT_LOG_RATIO_CLAMP,
        "log_ratio_clamp",
        f"verl's clamps are fixed; leave it at {DEFAULT_LOG_RATIO_CLAMP}",
    )
    need(
        cfg.opsm_threshold is None,
        "opsm_threshold",
        "verl has no off-policy sequence masking: leave it unset",
    )
    need(
        cfg.staleness == 0,
        "staleness",
        "verl 0.9.1's asynchronous trainers bound the lag or set it by timing, and are not the "
        "trainer this job runs; run staleness with engine: native",
    )
    need(
        cfg.precision == "bfloat16",
        "precision",
        "verl trains in bf16 mixed precision: set bfloat16",
    )
    need(
        cfg.prompt.format == "chat",
        "prompt",
        "verl renders every prompt with the model's chat template: set prompt.format: chat",
    )
    need(
        cfg.device.startswith("cuda"), "device", f"{cfg.device!r}: verl runs on GPUs only: set cuda"
    )
    need(
        cfg.rollout.engine == "vllm",
        "rollout",
        "verl samples with its vLLM servers: set rollout.engine: vllm",
    )
    need(
        cfg.rollout_correction in ("none", "token_mask", "sequence_mask", "icepop")
        or cfg.rollout_correction_min == 0.0,
        "rollout_correction_min",
        "verl's truncation has no lower bound: set 0",
    )
    megatron = cfg.verl.strategy == "megatron"
    need(
        megatron or not cfg.routing_replay,
        "routing_replay",
        "verl replays routing in its Megatron engine only: set verl.strategy: megatron",
    )
    need(
        megatron or cfg.router_aux_loss_coef == 0,
        "router_aux_loss_coef",
        "verl's fsdp backend has no load-balancing loss setting: set 0",
    )
    need(
        not (cfg.moe_metrics and _is_moe(cfg.model)),
        "moe_metrics",
        "verl logs no routing drift: set false",
    )
    return out


def _is_moe(model: str) -> bool:
    """Whether the model directory's config.json describes an MoE model (experts)."""
    p = pathlib.Path(model) / "config.json"
    if not p.is_file():
        return False
    cfg = json.loads(p.read_text())  # transformers 5 writes num_local_experts, 4 num_experts
    return bool(cfg.get("num_local_experts") or cfg.get("num_experts"))


def check(cfg: RLConfig) -> None:
    """Raise a one-line ConfigError for the first field verl cannot honour."""
    if cfg.engine != "verl":
        raise ConfigError(f"engine: {cfg.engine!r}; gspo.engines.verl.job runs engine: verl only")
    for field, why in refusals(cfg):
        raise ConfigError(f"{field}: not supported with {ENGINE}: {why}")
    if cfg.prompts_per_step % cfg.minibatches:
        raise ConfigError(
            f"minibatches: {cfg.minibatches} does not divide prompts_per_step="
            f"{cfg.prompts_per_step}: verl's minibatches are whole prompt groups "
            f"({ENGINE})"
        )


def overrides(
    cfg: RLConfig, job_dir, *, max_prompt_length: int = 1024, reward_path: str | None = None
) -> list[str]:
    """verl's Hydra overrides for `cfg` (FIELDS), its parquet and checkpoints in `job_dir`,
    prompts of at most `max_prompt_length` tokens; cfg.verl.overrides last. `check` first. The
    cluster's size (trainer.nnodes, trainer.n_gpus_per_node) is the launcher's to add."""
    job = pathlib.Path(job_dir).resolve()
    a, r, m = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.model"
    reward_path = reward_path or str(
        pathlib.Path(__file__).resolve().parents[1] / "evaluators" / "for_verl.py"
    )
    o = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": cfg.adv_scale == "std",
        "data.train_files": str(job / "train.parquet"),
        "data.val_files": str(job / "train.parquet"),
        "data.train_batch_size": cfg.prompts_per_step,
        "data.max_prompt_length": max_prompt_length,
        "data.max_response_length": cfg.max_new_tokens,
        "data.shuffle": False,
        "data.seed": cfg.seed,
        "data.truncation": "error",
        "+data.apply_chat_template_kwargs.enable_thinking": cfg.prompt.enable_thinking,
        f"{m}.path": str(pathlib.Path(cfg.model).resolve()),
        f"{a}.policy_loss.loss_mode": LOSS_MODE[cfg.algorithm],
        f"{a}.clip_ratio_low": cfg.eps_low,
        f"{a}.clip_ratio_high": cfg.eps_high,
        # verl's DPPO truncates its weight at clip_ratio_c; the others' dual clip stays off
        f"{a}.clip_ratio_c": cfg.dppo_is_cap
        if LOSS_MODE[cfg.algorithm].startswith("dppo")
        else DUAL_CLIP_OFF,
        f"{a}.policy_loss.clip_cov_ratio": cfg.clip_cov_ratio,
        f"{a}.policy_loss.clip_cov_lb": cfg.clip_cov_lb,
        f"{a}.policy_loss.clip_cov_ub": cfg.clip_cov_ub,
        f"{a}.policy_loss.kl_cov_ratio": cfg.kl_cov_ratio,
        f"{a}.policy_loss.ppo_kl_coef": cfg.kl_cov_coef,
        f"{a}.tau_pos": cfg.sapo_tau_pos,
        f"{a}.tau_neg": cfg.sapo_tau_neg,
        f"{a}.loss_agg_mode": cfg.agg,
        f"{a}.ppo_mini_batch_size": cfg.prompts_per_step // cfg.minibatches,
        f"{a}.ppo_epochs": cfg.epochs,
        f"{a}.shuffle": False,
        f"{a}.data_loader_seed": cfg.seed,
        f"{a}.use_kl_loss": cfg.kl_coef > 0,
        f"{a}.kl_loss_coef": cfg.kl_coef,
        f"{a}.kl_loss_type": "low_var_kl",
        f"{a}.entropy_coeff": 0,
        f"{a}.optim.lr": cfg.lr,
        f"{a}.optim.lr_warmup_steps": cfg.warmup_steps or -1,
        f"{a}.optim.weight_decay": cfg.weight_decay,
        f"{a}.optim.betas": list(BETAS),
        f"{a}.optim.clip_grad": cfg.grad_clip,
        f"{a}.checkpoint.save_contents": ["model", "optimizer", "extra", "hf_model"],
        f"{r}.name": "vllm",
        f"{r}.n": cfg.group_size,
        f"{r}.temperature": cfg.temperature,
        f"{r}.top_p": cfg.top_p,
        f"{r}.top_k": -1,
        f"{r}.seed": cfg.seed,
        f"{r}.dtype": cfg.rollout.dtype,
        f"{r}.tensor_model_parallel_size": cfg.rollout.tensor_parallel_size,
        "trainer.total_training_steps": cfg.steps,
        "trainer.total_epochs": 1,
        "trainer.save_freq": cfg.ckpt_every,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.default_local_dir": str(job / "checkpoints"),
        # verl dumps every step's samples there (its layout), when samples are logged at all
        **({"trainer.rollout_data_dir": str(job / "rollouts")} if cfg.log_samples_every else {}),
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
    rollout correction, the backend's memory and layout settings (`_megatron`)."""
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    o: dict[str, object] = {}
    if cfg.agg == "seq-mean-token-sum-norm":
        o[f"{a}.loss_scale_factor"] = cfg.max_new_tokens
    micro = cfg.micro_batch_size or 1  # verl needs a size; 1 keeps any GPU count valid
    for key in (
        f"{a}.ppo_micro_batch_size_per_gpu",
        f"{r}.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    ):
        o[key] = micro
    if cfg.max_tokens_per_micro_batch:
        o[f"{a}.use_dynamic_bsz"] = True
        o[f"{a}.ppo_max_token_len_per_gpu"] = cfg.max_tokens_per_micro_batch
    if cfg.rollout.gpu_memory_utilization:
        o[f"{r}.gpu_memory_utilization"] = cfg.rollout.gpu_memory_utilization
    if cfg.rollout.max_model_len:
        o[f"{r}.max_model_len"] = cfg.rollout.max_model_len
    if cfg.rollout_correction != "none":
        lo, hi = cfg.correction_band()
        o["algorithm.rollout_correction.rollout_is"] = CORRECTION[cfg.rollout_correction]
        o["algorithm.rollout_correction.rollout_is_threshold"] = (
            hi if cfg.rollout_correction.endswith("truncate") else f"{lo}_{hi}"
        )
    if cfg.old_logprobs == "rollout":
        o["algorithm.rollout_correction.bypass_mode"] = True
    if cfg.verl.strategy != "megatron":
        o["actor_rollout_ref.model.enable_gradient_checkpointing"] = cfg.activation_checkpointing
    else:
        o.update(_megatron(cfg))
    return o


def _megatron(cfg: RLConfig) -> dict:
    """Megatron's layout, recomputation and optimizer, as its engine reads them: verl passes
    `expert_tensor_parallel_size` to Megatron's initialize_model_parallel, where None means the
    dense TP size (experts then need TP x EP x PP GPUs); only `override_transformer_config`'s
    recompute_* reach Megatron (`enable_gradient_checkpointing` is FSDP's); Megatron's
    optimizer takes Adam's betas from `override_optimizer_config` only. verl sets
    CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's overlap of TP communication needs it on
    Hopper/Ampere) only when its driver process sees such a GPU, which the launcher's does not."""
    a = "actor_rollout_ref.actor"
    mg, tc, oc = (
        f"{a}.megatron",
        f"+{a}.megatron.override_transformer_config",
        f"+{a}.optim.override_optimizer_config",
    )
    o = {
        f"{mg}.tensor_model_parallel_size": cfg.verl.tensor_parallel,
        f"{mg}.expert_model_parallel_size": cfg.verl.expert_parallel,
        f"{mg}.expert_tensor_parallel_size": 1,
        f"{mg}.pipeline_model_parallel_size": cfg.verl.pipeline_parallel,
        f"{mg}.context_parallel_size": 1,
        f"{tc}.moe_aux_loss_coeff": cfg.router_aux_loss_coef,
        f"{oc}.adam_beta1": BETAS[0],
        f"{oc}.adam_beta2": BETAS[1],
        "+ray_kwargs.ray_init.runtime_env.env_vars.CUDA_DEVICE_MAX_CONNECTIONS": "1",
    }
    if cfg.activation_checkpointing:
        o.update(
            {
                f"{tc}.recompute_granularity": "full",
                f"{tc}.recompute_method": "uniform",
                f"{tc}.recompute_num_layers": 1,
            }
        )
    if cfg.routing_replay:
        mode = "R2" if cfg.routing_replay_source == "trainer" else "R3"
        o[f"{mg}.router_replay.mode"] = mode
        o["actor_rollout_ref.rollout.enable_rollout_routing_replay"] = mode == "R3"
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
    if isinstance(v, str):  # quoted where Hydra would read a number, a bool or null
        plain = v and all(c.isalnum() or c in "/._-" for c in v) and not _scalar(v)
        return v if plain else json.dumps(v)
    return repr(v)


def _scalar(v: str) -> bool:
    """Whether Hydra reads the unquoted string `v` as something other than a string."""
    return v.lower() in ("true", "false", "null", "nan", "inf", "-inf") or bool(
        re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", v)
    )


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
    write_json(
        old,
        {
            "config_name": config_name(cfg),
            "overrides": overrides_,
            "config_hash": cfg_hash,
            "steps": cfg.steps,
        },
    )
    return old
