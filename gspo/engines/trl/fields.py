"""What each RLConfig field becomes under `engine: trl` (gspo.engines.trl.rl): docs/ENGINES.md shows
FIELDS as a table and tests/test_trl_engine.py holds the two, and the code, to each other."""

from __future__ import annotations

# RLConfig field -> what it becomes in TRL (docs/ENGINES.md's table)
FIELDS: dict[str, str] = {
    "algorithm": "`loss_type`, `importance_sampling_level`: the objective's TRL form "
    "(gspo.core.objectives.Objective.trl, docs/OBJECTIVES.md's TRL column); one "
    "without one refused",
    "engine": "this engine",
    "model": "the model TRL trains",
    "out_dir": "`output_dir` = out_dir/trl; checkpoints/, metrics.jsonl, model/ by the harness",
    "train_data": "each step's prompts as the native trainer draws them, in order "
    "(`shuffle_dataset=False`)",
    "steps": "`max_steps` = steps x minibatches x epochs",
    "prompts_per_step": "the generation batch: prompts_per_step x group_size = "
    "`per_device_train_batch_size` x `steps_per_generation`",
    "group_size": "`num_generations`",
    "minibatches": "`steps_per_generation` (x gradient accumulation)",
    "epochs": "`num_iterations`",
    "micro_batch_size": "`per_device_train_batch_size`, `gradient_accumulation_steps`; refused "
    "with agg token-mean",
    "max_tokens_per_micro_batch": "`per_device_train_batch_size`: the most sequences of the "
    "longest prompt + max_new_tokens within it (gspo.engines.trl.batch); "
    "0 with micro_batch_size 0 refused on CUDA; refused with agg "
    "token-mean",
    "logprob_chunk": "refused unless 0",
    "activation_checkpointing": "`gradient_checkpointing`",
    "precision": "`bf16` for bfloat16 (TRL: autocast over fp32 weights)",
    "prompt": "the Codec renders the prompt text TRL receives",
    "lr": "`learning_rate`, `lr_scheduler_type=constant_with_warmup`, `adam_beta2=0.99`",
    "warmup_steps": "`warmup_steps` x minibatches x epochs",
    "weight_decay": "`weight_decay`",
    "grad_clip": "`max_grad_norm`",
    "eps_low": "`epsilon` (cispo: refused below 1, TRL's CISPO has no lower bound)",
    "eps_high": "`epsilon_high` (cispo: 1 + eps_high, TRL's bound is the weight's cap)",
    "agg": "`loss_type`: seq-mean-token-mean: grpo, token-mean: bnpo (cispo, vespo: their own, "
    "over the rollout batch's mean minibatch; luspo: its own seq-mean-token-sum; any other "
    "refused for these), seq-mean-token-sum-norm: dr_grpo (token level)",
    "adv_scale": "`scale_rewards`: std: group, none: none",
    "sapo_tau_pos": "`sapo_temperature_pos`",
    "sapo_tau_neg": "`sapo_temperature_neg`",
    "vespo_k_pos": "`vespo_k_pos`",
    "vespo_lambda_pos": "`vespo_lambda_pos`",
    "vespo_k_neg": "`vespo_k_neg`",
    "vespo_lambda_neg": "`vespo_lambda_neg`",
    "dppo_is_cap": "refused unless at its default (TRL has no DPPO)",
    "clip_cov_ratio": "refused unless at its default (TRL has no Clip-Cov)",
    "clip_cov_lb": "refused unless at its default",
    "clip_cov_ub": "refused unless at its default",
    "kl_cov_ratio": "refused unless at its default (TRL has no KL-Cov)",
    "kl_cov_coef": "refused unless at its default",
    "opsm_threshold": "`off_policy_mask_threshold`; refused with rollout engine vllm (TRL's drift "
    "is then against the engine's log-probs, ours against the old ones)",
    "mask_truncated": "`mask_truncated_completions`",
    "overlong_buffer": "refused unless 0 (dapo: set 0)",
    "dynamic_sampling": "refused unless false (dapo: set false)",
    "dynamic_sampling_max_rounds": "refused unless at its default",
    "rollout_correction": "refused unless none (TRL corrects vLLM rollouts only)",
    "rollout_correction_min": "refused unless at its default",
    "rollout_correction_max": "refused unless at its default",
    "icepop_min": "refused unless at its default",
    "icepop_max": "refused unless at its default",
    "log_ratio_clamp": "refused unless at its default; TRL does not clamp (equal while every "
    "|log ratio| is below it)",
    "kl_coef": "`beta` (k3 estimate, `use_bias_correction_kl=False`)",
    "temperature": "`temperature`",
    "top_p": "`top_p` (`top_k=0`)",
    "max_new_tokens": "`max_completion_length`",
    "rollout": "engine torch: transformers' generate on the training model, other settings "
    "refused unless at their defaults (device: the training device); engine vllm: "
    "this project's vLLM engine, colocated, through TRL's `rollout_func` "
    "(gspo.engines.trl.rollout), every setting as under the native trainer",
    "old_logprobs": "recompute (TRL recomputes whenever an update is off-policy); rollout refused",
    "staleness": "refused unless 0: TRL 1.16's asynchronous trainer (trl.experimental."
    "async_grpo) bounds the lag (`max_staleness`, staler samples dropped) rather than fixing it, "
    "samples from a `vllm serve` server over HTTP and syncs weights over NCCL (CUDA only)",
    "routing_replay": "refused unless false (TRL has no Routing Replay)",
    "routing_replay_source": "refused unless trainer",
    "router_aux_loss_coef": "refused unless 0",
    "moe_metrics": "refused on MoE models unless false; no effect on dense ones",
    "reward_workers": "the reward function's sandboxes",
    "peak_flops": "mfu_rollout (generation and TRL's old-log-prob pass) and mfu_update, from the "
    "harness's clock and compute count",
    "ckpt_every": "`save_steps` = ckpt_every x minibatches x epochs",
    "keep_last": "checkpoints/ (TRL keeps its newest exported checkpoint)",
    "keep_steps": "checkpoints/",
    "resume": "`resume_from_checkpoint`: the TRL checkpoint the latest checkpoints/step_S names",
    "max_consecutive_nonfinite": "stops after this many steps in a row with a non-finite loss or "
    "gradient norm (TRL applies such updates; it does not skip them)",
    "seed": "`seed`",
    "log_samples_every": "the harness: every this many rollout steps, the samples TRL's reward "
    "function gets (prompt, completion, reward; no advantage, ratio or clip) "
    "to samples/ and MLflow as gspo.tracking.samples writes them (TRL's own "
    "`log_completions` goes to wandb or trackio only)",
    "device": "`use_cpu` for cpu, else accelerate's device",
    "threads": "torch.set_num_threads",
    "verl": "engine: verl's settings (RLConfig refuses them with any other engine)",
}
