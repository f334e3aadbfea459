"""Typed, documented configs for each stage, loadable from YAML and validated on load.

Every field has a type, a default and a help text (`field(..., metadata={"help": ...})`). Loading
rejects unknown keys and wrong types with a message naming the file and the dotted field; the
dataclasses' `__post_init__` checks the invariants and says how to fix a violation.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from gspo.config.fields import ConfigError as ConfigError  # the configs' error, imported with them
from gspo.config.fields import check, option
from gspo.core import offpolicy
from gspo.core.objectives import (
    AGGS,
    CORRECTIONS,
    DEFAULT_LOG_RATIO_CLAMP,
    ICEPOP_BAND,
    OBJECTIVES,
)

OFF = offpolicy.DEFAULTS  # the off-policy objectives' parameters: their sources' defaults


@dataclass
class DataSource:
    path: str = option("", "JSONL file of task records (fields id, task, prompt, solution, ...)")
    weight: float = option(1.0, "relative sampling weight of this file in the training mix")

    def __post_init__(self):
        check(bool(self.path), "path", "is empty; give the JSONL file of task records")
        check(self.weight > 0, "weight", f"must be > 0, got {self.weight}")


@dataclass
class RolloutConfig:
    engine: str = option("torch", "rollout engine: 'torch' (batched KV-cached sampling) or 'vllm'")
    device: str = option("cpu", "device of the rollout engine ('cpu', 'cuda', 'cuda:1', ...)")
    dtype: str = option(
        "float32",
        "engine precision: float32, bfloat16 or float16 (the trainer's "
        "is its own `precision`; an engine below the trainer's precision is the "
        "precision-tolerance setting of config/precision.yaml)",
    )
    gpu_memory_utilization: float = option(
        0.0,
        "vllm only: share of accelerator memory vLLM may "
        "take (0 = the engine's default, 0.3: the trainer "
        "shares the device)",
    )
    max_model_len: int = option(
        0, "vllm only: longest prompt + response (0 = the model's max_position_embeddings)"
    )
    tensor_parallel_size: int = option(1, "vllm only: GPUs one engine spans")
    sleep: bool = option(
        False,
        "vllm on CUDA only: release the engine's GPU memory while the "
        "trainer runs (vLLM sleep mode level 2: weights and KV cache dropped, "
        "the weight sync after each step rewrites them), taken back for the "
        "sync and the next rollouts",
    )

    def __post_init__(self):
        check(
            self.engine in ("torch", "vllm"),
            "engine",
            f"must be 'torch' or 'vllm', got {self.engine!r}",
        )
        check(
            self.dtype in ("float32", "bfloat16", "float16"),
            "dtype",
            f"must be float32, bfloat16 or float16, got {self.dtype!r}",
        )
        check(
            0.0 <= self.gpu_memory_utilization < 1.0,
            "gpu_memory_utilization",
            f"must be in [0, 1) (0 = the engine default), got {self.gpu_memory_utilization}",
        )
        check(
            self.max_model_len >= 0,
            "max_model_len",
            f"must be >= 0 (0 = the model's), got {self.max_model_len}",
        )
        check(
            self.tensor_parallel_size >= 1,
            "tensor_parallel_size",
            f"must be >= 1, got {self.tensor_parallel_size}",
        )
        check(
            not self.sleep or (self.engine == "vllm" and self.device.startswith("cuda")),
            "sleep",
            "is vLLM's sleep mode: it needs engine: vllm and a cuda device",
        )

    def vllm_options(self) -> dict:
        """The vLLM knobs, with 0 meaning 'the engine's default'."""
        return {
            "gpu_memory_utilization": self.gpu_memory_utilization or None,
            "max_model_len": self.max_model_len or None,
            "tensor_parallel_size": self.tensor_parallel_size,
            "sleep": self.sleep,
        }


@dataclass
class VerlConfig:
    """engine: verl only: how verl lays the run over the GPUs (gspo.engines.verl.job)."""

    strategy: str = option(
        "fsdp",
        "verl's training backend: fsdp, or megatron (tensor and expert "
        "parallelism; Routing Replay needs it)",
    )
    tensor_parallel: int = option(1, "megatron: tensor-parallel size of the trainer")
    expert_parallel: int = option(1, "megatron: expert-parallel size of the trainer (MoE)")
    pipeline_parallel: int = option(1, "megatron: pipeline-parallel size of the trainer")
    overrides: list[str] = option(
        [],
        "more of verl's own Hydra overrides (key=value), passed "
        "as they are after the mapped ones; verl's validation checks them",
    )

    def __post_init__(self):
        check(
            self.strategy in ("fsdp", "megatron"),
            "strategy",
            f"must be fsdp or megatron, got {self.strategy!r}",
        )
        for name in ("tensor_parallel", "expert_parallel", "pipeline_parallel"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(
            self.strategy == "megatron"
            or (self.tensor_parallel, self.expert_parallel, self.pipeline_parallel) == (1, 1, 1),
            "strategy",
            "tensor/expert/pipeline parallelism needs strategy: megatron",
        )
        check(
            all("=" in o for o in self.overrides),
            "overrides",
            "each is one of verl's Hydra overrides, key=value",
        )


@dataclass
class PromptConfig:
    """How a record's prompt text becomes the model's input."""

    format: str = option(
        "raw",
        "raw: the prompt text as it is; chat: the tokenizer's chat "
        "template around it (one user turn, generation prompt appended)",
    )
    system: str = option("", "chat only: a system prompt before the user turn ('' : none)")
    enable_thinking: bool = option(
        True,
        "chat only: passed to the chat template (Qwen3's "
        "thinking switch; other templates ignore it)",
    )

    def __post_init__(self):
        check(self.format in ("raw", "chat"), "format", f"must be raw or chat, got {self.format!r}")
        check(
            self.format == "chat" or not self.system,
            "system",
            "is a chat-template setting; set format: chat or leave system empty",
        )


LOGPROB_CHUNK_HELP = (
    "positions per chunk when computing log-probs and entropy from the final hidden states "
    "(gspo.model.logprobs.chunked_token_logprobs): only one chunk's full-vocabulary logits are alive "
    "at a time, forward and backward. 0: the whole (B, T, V) logits at once (fine for the tiny "
    "presets; at a 152K vocabulary use ~1024)"
)


ACTIVATION_CHECKPOINTING_HELP = (
    "recompute each decoder layer's activations in the backward pass instead of keeping them "
    "(about a third more compute, activations of one layer at a time); dense models only"
)
# The one precision vocabulary: torch's dtype names, for the trainer and the engines alike.
PRECISIONS = ("float32", "bfloat16")
PRECISION_HELP = (
    "training precision: float32, or bfloat16 (bf16 parameters and compute, fp32 gradient "
    "reduction, fp32 master weights and optimizer state; FSDP2's MixedPrecisionPolicy under "
    "torchrun, autocast in a world of one)"
)


@dataclass
class TrainConfig:
    """What both training stages share: the model and its data, the optimizer, the memory and
    precision settings, where it runs. SFTConfig and RLConfig extend it; a field they declare
    again keeps its place here and takes that stage's default and help."""

    engine: str = option(
        "native",
        "the trainer: 'native' (this project's, FSDP2 + torchrun) or "
        "another engine (docs/ENGINES.md maps each field onto it)",
    )
    model: str = option("tiny", "a model preset or the path of a local Hugging Face checkpoint")
    out_dir: str = option(
        "results/default/train", "where checkpoints, metrics and the final model go"
    )
    train_data: list[DataSource] = option([], "training files and their mixing weights")
    steps: int = option(1, "optimizer steps")
    lr: float = option(1e-3, "peak learning rate (AdamW)")
    warmup_steps: int = option(0, "linear warm-up steps")
    weight_decay: float = option(0.0, "AdamW weight decay")
    grad_clip: float = option(1.0, "max global gradient norm")
    micro_batch_size: int = option(0, "sequences per forward/backward (0: the whole batch)")
    max_tokens_per_micro_batch: int = option(0, "token budget of a forward/backward (0: off)")
    logprob_chunk: int = option(0, LOGPROB_CHUNK_HELP)
    activation_checkpointing: bool = option(False, ACTIVATION_CHECKPOINTING_HELP)
    precision: str = option("float32", PRECISION_HELP)
    prompt: PromptConfig = option(
        PromptConfig(),
        "how a record's prompt becomes the model's "
        "input (gspo.model.tokens): raw text or the chat template",
    )
    seed: int = option(0, "seed of data order")
    device: str = option("cpu", "training device")
    threads: int = option(0, "torch intra-op threads (0: leave torch's default)")

    def __post_init__(self):
        check(len(self.train_data) > 0, "train_data", "is empty; list at least one {path, weight}")
        check(self.steps > 0, "steps", f"must be > 0, got {self.steps}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(self.max_tokens_per_micro_batch >= 0, "max_tokens_per_micro_batch", "must be >= 0")
        check(self.logprob_chunk >= 0, "logprob_chunk", "must be >= 0 (0: no chunking)")
        check(
            self.precision in PRECISIONS,
            "precision",
            f"must be float32 or bfloat16 (the "
            f"engines' dtype names, as rollout.dtype), got {self.precision!r}",
        )


@dataclass
class SFTConfig(TrainConfig):
    """Cold-start supervised fine-tuning on worked solutions (loss on response tokens only)."""

    engine: str = option(
        "native",
        "the trainer: 'native' (this project's, FSDP2 + torchrun) or "
        "'trl' (TRL's SFTTrainer; docs/ENGINES.md maps each field onto it)",
    )
    model: str = option(
        "tiny",
        "a model preset (tiny, small, tiny-moe: random-initialised from "
        "init_seed) or the path of a local Hugging Face checkpoint directory",
    )
    init_seed: int = option(0, "seed of the random initialisation when `model` is a preset")
    out_dir: str = option(
        "results/default/sft", "where checkpoints, metrics and the final model go"
    )
    eval_data: str = option("", "optional JSONL of held-out records for a greedy accuracy check")
    eval_problems: int = option(64, "held-out records used for the periodic greedy check")
    steps: int = option(300, "optimizer steps")
    batch_size: int = option(32, "sequences per step")
    lr: float = option(5e-3, "peak learning rate (AdamW)")
    warmup_steps: int = option(20, "linear warm-up steps, then cosine decay")
    min_lr_ratio: float = option(0.1, "final learning rate as a fraction of the peak")
    max_len: int = option(256, "longest prompt + response kept, in tokens (longer ones are cut)")
    micro_batch_size: int = option(
        0,
        "sequences per forward/backward, gradients accumulated over "
        "the batch (0: the whole batch at once)",
    )
    max_tokens_per_micro_batch: int = option(
        0,
        "token budget of a forward/backward (sequences "
        "sorted by length and packed; replaces "
        "micro_batch_size; 0: off)",
    )
    eval_every: int = option(100, "steps between greedy held-out checks (0: only at the end)")
    log_every: int = option(10, "steps between metric records")

    def __post_init__(self):
        check(
            self.engine in ("native", "trl"),
            "engine",
            f"must be 'native' or 'trl', got {self.engine!r}",
        )
        super().__post_init__()
        for name in ("batch_size", "max_len"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")
        check(0 <= self.min_lr_ratio <= 1, "min_lr_ratio", "must lie in [0, 1]")


@dataclass
class RLConfig(TrainConfig):
    """RL training with one of the registered objectives (GRPO, GSPO, GSPO-token and their
    successors: gspo.core.objectives.OBJECTIVES). `algorithm` is the only field that differs between
    the compared methods; clip ranges, aggregation and advantage scaling default to each
    method's paper setting."""

    algorithm: str = option(
        "gspo",
        f"the objective, one of {', '.join(OBJECTIVES)} "
        "(gspo.core.objectives.OBJECTIVES registers them)",
    )
    engine: str = option(
        "native",
        "the trainer: 'native' (this project's, FSDP2 + torchrun), "
        "'trl' (TRL's GRPOTrainer) or 'verl' (verl's PPO trainer in its own "
        "environment, the workflow's verl rule); docs/ENGINES.md maps each field",
    )
    model: str = option("results/default/sft/model", "the starting checkpoint (usually SFT output)")
    out_dir: str = option("results/default/rl/gspo-0", "checkpoints, metrics and final model")
    train_data: list[DataSource] = option([], "prompt files and their mixing weights")
    steps: int = option(50, "rollout batches (one 'step' = sample, score, then all its updates)")
    prompts_per_step: int = option(16, "prompts per rollout batch")
    group_size: int = option(8, "responses sampled per prompt (G)")
    minibatches: int = option(
        4,
        "optimizer updates per rollout batch per epoch (paper: 4); with 1 "
        "the run is on-policy and every ratio is exactly 1",
    )
    epochs: int = option(1, "passes over each rollout batch")
    micro_batch_size: int = option(0, "sequences per forward/backward (0: the whole minibatch)")
    max_tokens_per_micro_batch: int = option(
        0,
        "token budget of a forward/backward: sequences "
        "sorted by length and packed so that sequences x "
        "longest length fits (replaces micro_batch_size; "
        "0: off); dense models only",
    )
    lr: float = option(5e-5, "learning rate (AdamW, constant after warm-up)")
    warmup_steps: int = option(0, "linear warm-up, in rollout steps")
    eps_low: typing.Optional[float] = option(
        None,
        "lower clip range (None: the objective's "
        "paper: 3e-4 gspo/gspo_token, 0.2 grpo/dapo/dr_grpo, "
        "1.0 cispo (no bound), 0.4 gmpo in log space)",
    )
    eps_high: typing.Optional[float] = option(
        None,
        "upper clip range (None: the objective's "
        "paper: 4e-4 gspo/gspo_token, 0.27 grpo, 0.28 dapo, "
        "0.2 dr_grpo, 4.0 cispo, 0.4 gmpo in log space)",
    )
    agg: typing.Optional[str] = option(
        None,
        f"loss aggregation, one of {list(AGGS)} (None: the "
        "objective's: token-mean for dapo and cispo, "
        "seq-mean-token-sum-norm over max_new_tokens for dr_grpo, "
        "seq-mean-token-mean otherwise)",
    )
    adv_scale: typing.Optional[str] = option(
        None,
        "advantage scaling: 'std' ((r-mean)/std) or "
        "'none' (r-mean) (None: the objective's: none for "
        "dr_grpo, std otherwise)",
    )
    sapo_tau_pos: float = option(1.0, "sapo only: the gate's temperature for positive advantages")
    sapo_tau_neg: float = option(1.05, "sapo only: the gate's temperature for negative advantages")
    vespo_k_pos: float = option(OFF.vespo_k_pos, "vespo only: phi's power k for A >= 0 (TRL's)")
    vespo_lambda_pos: float = option(
        OFF.vespo_lambda_pos, "vespo only: phi's decay lambda for A >= 0 (TRL's)"
    )
    vespo_k_neg: float = option(OFF.vespo_k_neg, "vespo only: phi's power k for A < 0 (TRL's)")
    vespo_lambda_neg: float = option(
        OFF.vespo_lambda_neg, "vespo only: phi's decay lambda for A < 0 (TRL's)"
    )
    dppo_is_cap: float = option(
        OFF.dppo_is_cap,
        "dppo_tv / dppo_kl only: the cap of DPPO's truncated importance "
        "weight (eps_low / eps_high are its divergence thresholds)",
    )
    clip_cov_ratio: float = option(
        OFF.clip_cov_ratio, "clip_cov only: the share of tokens dropped (verl's)"
    )
    clip_cov_lb: float = option(
        OFF.clip_cov_lb, "clip_cov only: lower end of the centred-product band (verl's)"
    )
    clip_cov_ub: float = option(
        OFF.clip_cov_ub, "clip_cov only: upper end of the centred-product band (verl's)"
    )
    kl_cov_ratio: float = option(
        OFF.kl_cov_ratio, "kl_cov only: the share of tokens penalised (verl's)"
    )
    kl_cov_coef: float = option(
        OFF.kl_cov_coef, "kl_cov only: the coefficient of |log w| on them (verl's)"
    )
    opsm_threshold: typing.Optional[float] = option(
        None,
        "off-policy sequence masking over any objective (DeepSeek-V3.2; TRL's "
        "off_policy_mask_threshold): a sequence with A < 0 whose mean log-prob drift "
        "log pi_old - log pi_theta exceeds this drops out of the update (None: off; "
        "DeepSeek-V3.2 and TRL suggest e.g. 0.5)",
    )
    mask_truncated: typing.Optional[bool] = option(
        None,
        "no loss on responses cut at "
        "max_new_tokens (DAPO's overlong filtering; "
        "None: true for dapo, false otherwise)",
    )
    overlong_buffer: typing.Optional[int] = option(
        None,
        "DAPO's soft overlong punishment: the "
        "reward falls linearly to -1 over the last "
        "this many tokens before max_new_tokens (0: "
        "off; None: max_new_tokens / 5 for dapo, as "
        "its paper's 4096 of 20480, 0 otherwise)",
    )
    dynamic_sampling: typing.Optional[bool] = option(
        None,
        "DAPO's dynamic sampling: keep only "
        "groups whose rewards differ, drawing more "
        "prompts until the batch is full (None: "
        "true for dapo, false otherwise; a world of "
        "one only)",
    )
    dynamic_sampling_max_rounds: int = option(
        3,
        "dynamic sampling's cap: at most this many "
        "draws of prompts_per_step prompts a step, then "
        "dropped groups fill the batch",
    )
    rollout_correction: str = option(
        "none",
        "importance weights pi_old / pi_engine on each "
        f"token's loss, for any objective: one of "
        f"{list(CORRECTIONS)} (truncate: TIS, mask: MIS; sequence: "
        "the product of its tokens' weights; icepop: MIS per token in "
        "[icepop_min, icepop_max])",
    )
    rollout_correction_min: float = option(0.0, "rollout_correction's lower bound")
    rollout_correction_max: float = option(3.0, "rollout_correction's upper bound (TRL's default)")
    icepop_min: float = option(
        ICEPOP_BAND[0],
        "rollout_correction: icepop only: tokens whose weight pi_old / pi_engine falls below "
        "this drop out (IcePop's a)",
    )
    icepop_max: float = option(
        ICEPOP_BAND[1], "rollout_correction: icepop only: ... or rises above this (IcePop's b)"
    )
    log_ratio_clamp: float = option(DEFAULT_LOG_RATIO_CLAMP, "clamp of the log ratio before exp()")
    kl_coef: float = option(0.0, "KL penalty to the starting model (paper: 0)")
    temperature: float = option(1.0, "sampling temperature (also applied to trainer log-probs)")
    top_p: float = option(1.0, "nucleus sampling mass")
    max_new_tokens: int = option(64, "longest response, in tokens")
    rollout: RolloutConfig = option(RolloutConfig(), "rollout engine settings")
    old_logprobs: str = option(
        "recompute",
        "old-policy log-probs: 'recompute' (the trainer's: "
        "a no-grad pass over the rollouts, but for the first minibatch's, "
        "which its forward gives before any update) or 'rollout' (the "
        "engine's own sampled log-probs; skips that pass)",
    )
    staleness: int = option(
        0,
        "off-policy lag (issue 45): step t's rollouts and old log-probs come from the policy "
        "before step max(0, t - staleness)'s update, as an asynchronous trainer's engine "
        "syncs its weights that many steps late, while the update moves the current policy "
        "(gspo.native.staleness). 0: on-policy rollouts, as before",
    )
    routing_replay: bool = option(
        False,
        "MoE only (Routing Replay): when computing the current "
        "policy's log-probs, route each token to the experts the old "
        "policy's routers picked (recorded in the old-log-prob pass); the "
        "router weights of those experts are still the current router's, "
        "so it keeps learning. true on a dense model is an error",
    )
    routing_replay_source: str = option(
        "trainer",
        "MoE, with routing_replay: whose expert choices "
        "are replayed. 'trainer': the old policy's, recorded in the "
        "old-log-prob pass (needs old_logprobs: recompute); 'engine': "
        "the rollout engine's, recorded while it sampled, replayed "
        "in the old-log-prob pass (if any) and in the update (needs "
        "rollout.engine: torch)",
    )
    router_aux_loss_coef: float = option(
        0.0,
        "MoE only: add this times the load-balancing loss "
        "(transformers' load_balancing_loss_func, padding masked) "
        "to each update's loss. 0: off, as in the paper's RL; the "
        "model config's own router_aux_loss_coef is not used in RL. "
        "> 0 on a dense model is an error",
    )
    moe_metrics: bool = option(
        True,
        "MoE only: after each step's updates, one extra no-grad pass "
        "over the rollout batch logs expert-activation volatility, load "
        "balance and the aux loss (moe/* metrics); ignored for dense models",
    )
    reward_workers: int = option(2, "parallel sandboxes scoring code-task rewards")
    peak_flops: float = option(
        0.0,
        "peak FLOP/s of one training device at `precision` (e.g. "
        "989e12 for an H100's dense bf16): logs mfu_rollout, "
        "mfu_old_logprob and mfu_update, each phase's model FLOPs over "
        "its time and the devices' peak (0: not logged)",
    )
    ckpt_every: int = option(10, "steps between checkpoints (the last step is always saved)")
    keep_last: int = option(
        0,
        "complete checkpoints kept for resuming, the newest ones (0: all); "
        "each holds the optimizer state, ~16 bytes per parameter",
    )
    keep_steps: list[int] = option(
        [],
        "steps whose checkpoints are kept whatever keep_last says "
        "(the workflow sets its evaluation budgets' steps)",
    )
    resume: bool = option(True, "continue from the latest complete checkpoint in out_dir if any")
    max_consecutive_nonfinite: int = option(3, "stop after this many non-finite updates in a row")
    seed: int = option(0, "seed of prompt sampling, rollouts and minibatch order")
    log_samples_every: int = option(
        8,
        "every this many steps, the step's samples (prompt, "
        "completion, reward, advantage, ratio, clipped share) to "
        "out_dir/samples/step_<S>.jsonl and the MLflow run "
        "(gspo.tracking.samples; 0: off)",
    )
    verl: VerlConfig = option(VerlConfig(), "engine: verl only: its backend and parallel layout")

    def __post_init__(self):
        check(
            self.algorithm in OBJECTIVES,
            "algorithm",
            f"must be one of {sorted(OBJECTIVES)}, got {self.algorithm!r}",
        )
        check(
            self.engine in ("native", "trl", "verl"),
            "engine",
            f"must be 'native', 'trl' or 'verl', got {self.engine!r}",
        )
        super().__post_init__()
        check(
            self.engine == "verl" or self.verl == VerlConfig(),
            "verl",
            "holds engine: verl's settings; set engine: verl or leave it out",
        )
        for name in (
            "prompts_per_step",
            "minibatches",
            "epochs",
            "max_new_tokens",
            "max_consecutive_nonfinite",
        ):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")
        self._objective_defaults()
        check(
            self.group_size >= 2,
            "group_size",
            f"must be >= 2 for group-relative advantages, got {self.group_size}",
        )
        n = self.prompts_per_step * self.group_size
        check(
            n % self.minibatches == 0,
            "minibatches",
            f"{self.minibatches} does not divide the rollout batch of {n} sequences "
            "(prompts_per_step * group_size); pick a divisor",
        )
        check(self.agg in AGGS, "agg", f"must be one of {list(AGGS)}, got {self.agg!r}")
        check(self.adv_scale in ("std", "none"), "adv_scale", "must be 'std' or 'none'")
        check(self.temperature > 0, "temperature", "must be > 0 for RL sampling")
        check(0 < self.top_p <= 1, "top_p", "must lie in (0, 1]")
        check(self.ckpt_every > 0, "ckpt_every", "must be > 0")
        check(
            self.peak_flops >= 0, "peak_flops", f"must be >= 0 (0: no MFU), got {self.peak_flops}"
        )
        check(self.keep_last >= 0, "keep_last", f"must be >= 0 (0: keep all), got {self.keep_last}")
        check(self.log_samples_every >= 0, "log_samples_every", "must be >= 0 (0: off)")
        check(
            self.old_logprobs in ("recompute", "rollout"),
            "old_logprobs",
            f"must be 'recompute' or 'rollout', got {self.old_logprobs!r}",
        )
        check(
            self.old_logprobs == "recompute" or self.top_p == 1.0,
            "old_logprobs",
            "'rollout' needs top_p: 1.0 (with a nucleus the engine's log-probs are of the "
            "truncated distribution, not the policy's)",
        )
        check(
            self.staleness >= 0,
            "staleness",
            f"must be >= 0 (0: on-policy rollouts), got {self.staleness}",
        )
        check(
            self.routing_replay_source in ("trainer", "engine"),
            "routing_replay_source",
            f"must be 'trainer' or 'engine', got {self.routing_replay_source!r}",
        )
        check(
            self.routing_replay or self.routing_replay_source == "trainer",
            "routing_replay_source",
            "'engine' says whose routing to replay; it needs routing_replay: true",
        )
        check(
            not self.routing_replay
            or self.routing_replay_source == "engine"
            or self.old_logprobs == "recompute",
            "routing_replay",
            "needs old_logprobs: recompute (the old policy's routing is recorded in that pass), "
            "or routing_replay_source: engine to replay the rollout engine's routing",
        )
        check(
            self.routing_replay_source == "trainer"
            or self.rollout.engine == "torch"
            or self.engine == "verl",
            "routing_replay_source",
            "'engine' needs rollout.engine: "
            "torch (the vLLM CPU build does not return routed experts; engine: verl's vLLM "
            f"servers do), got {self.rollout.engine!r}",
        )
        check(
            self.router_aux_loss_coef >= 0,
            "router_aux_loss_coef",
            f"must be >= 0, got {self.router_aux_loss_coef}",
        )

    def _objective_defaults(self) -> None:
        """The objective's own settings where a field is unset; a setting that does not apply
        to it is refused."""
        obj = OBJECTIVES[self.algorithm]
        if obj.clipped:
            self.eps_low = obj.eps[0] if self.eps_low is None else self.eps_low
            self.eps_high = obj.eps[1] if self.eps_high is None else self.eps_high
            check(
                0 < self.eps_low <= 1 and self.eps_high > 0,
                "eps_low/eps_high",
                "need 0 < eps_low <= 1 and eps_high > 0",
            )
        else:
            check(
                not self.eps_low and not self.eps_high,
                "eps_low/eps_high",
                f"{self.algorithm} has no clip (sapo's gate has sapo_tau_pos / sapo_tau_neg, "
                "vespo's weight vespo_k_* / vespo_lambda_*); leave them unset",
            )
            self.eps_low = self.eps_high = 0.0
        check(
            self.algorithm == "sapo" or (self.sapo_tau_pos, self.sapo_tau_neg) == (1.0, 1.05),
            "sapo_tau_pos/sapo_tau_neg",
            f"apply to algorithm: sapo only, not {self.algorithm}; leave them at their defaults",
        )
        check(
            self.sapo_tau_pos > 0 and self.sapo_tau_neg > 0,
            "sapo_tau_pos/sapo_tau_neg",
            "must be > 0",
        )
        self._offpolicy_checks()
        self.agg = obj.agg if self.agg is None else self.agg
        self.adv_scale = obj.adv_scale if self.adv_scale is None else self.adv_scale
        if self.mask_truncated is None:
            self.mask_truncated = obj.mask_truncated
        if self.dynamic_sampling is None:
            self.dynamic_sampling = obj.dynamic_sampling
        check(self.dynamic_sampling_max_rounds >= 1, "dynamic_sampling_max_rounds", "must be >= 1")
        if self.overlong_buffer is None:
            self.overlong_buffer = int(obj.overlong_fraction * self.max_new_tokens)
        check(
            0 <= self.overlong_buffer < self.max_new_tokens,
            "overlong_buffer",
            f"must be in [0, max_new_tokens={self.max_new_tokens}), got {self.overlong_buffer}",
        )
        check(
            self.rollout_correction in CORRECTIONS,
            "rollout_correction",
            f"must be one of {list(CORRECTIONS)}, got {self.rollout_correction!r}",
        )
        check(
            self.rollout_correction == "none" or self.old_logprobs == "recompute",
            "rollout_correction",
            "weighs the trainer's old log-probs against the engine's: "
            "it needs old_logprobs: recompute (with 'rollout' the two are the same)",
        )
        check(
            0 <= self.rollout_correction_min < self.rollout_correction_max,
            "rollout_correction_min/rollout_correction_max",
            "need 0 <= min < max",
        )
        icepop = self.rollout_correction == "icepop"
        check(
            icepop or (self.icepop_min, self.icepop_max) == ICEPOP_BAND,
            "icepop_min/icepop_max",
            f"apply to rollout_correction: icepop only; leave them at {ICEPOP_BAND}",
        )
        check(
            not icepop or (self.rollout_correction_min, self.rollout_correction_max) == (0.0, 3.0),
            "rollout_correction_min/rollout_correction_max",
            "icepop's band is icepop_min / icepop_max; leave these at 0.0 / 3.0",
        )
        check(0 <= self.icepop_min < self.icepop_max, "icepop_min/icepop_max", "need 0 <= a < b")

    def correction_band(self) -> tuple[float, float]:
        """rollout_correction's [c_min, c_max]: icepop's band, or the TIS / MIS bounds."""
        if self.rollout_correction == "icepop":
            return self.icepop_min, self.icepop_max
        return self.rollout_correction_min, self.rollout_correction_max

    def _offpolicy_checks(self) -> None:
        """The off-policy objectives' own settings (gspo.core.offpolicy) and OPSM."""
        for name in offpolicy.FIELDS:
            value, owners = getattr(self, name), offpolicy.OWNERS[name]
            check(
                self.algorithm in owners or value == getattr(OFF, name),
                name,
                f"applies to algorithm: {' / '.join(owners)} only, not {self.algorithm}; "
                f"leave it at {getattr(OFF, name)}",
            )
            if name in ("clip_cov_lb", "clip_cov_ub"):
                continue
            check(value >= 0, name, f"must be >= 0, got {value}")
            check(value > 0 or name.startswith("vespo_k"), name, f"must be > 0, got {value}")
            check(
                value <= 1 or not name.endswith("_ratio"),
                name,
                f"is a share of the tokens: must be <= 1, got {value}",
            )
        check(self.clip_cov_lb < self.clip_cov_ub, "clip_cov_lb/clip_cov_ub", "need lb < ub")
        check(
            self.opsm_threshold is None or self.opsm_threshold >= 0,
            "opsm_threshold",
            f"must be >= 0 (or null: off), got {self.opsm_threshold}",
        )
        check(
            self.algorithm != "vespo" or self.rollout_correction == "none",
            "rollout_correction",
            "vespo folds the engine's weights into its sequence weight (TRL) rather than "
            "multiplying the loss; not supported here: set none",
        )
