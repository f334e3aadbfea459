"""RL on TRL's GRPOTrainer (`engine: trl`): the same config, reward, prompts, checkpoints and
metrics as the native trainer (gspo.native.trainer), with TRL sampling and updating.

gspo.engines.trl.fields.FIELDS says what each RLConfig field becomes in TRL's GRPOConfig (docs/ENGINES.md shows it as
a table; tests/test_trl_engine.py holds the two to each other). A value TRL cannot honour as this
project defines it is a one-line ConfigError naming the field and the engine (`refusals`), never
a silent change.

- Prompts: each step's are the native trainer's (Mix.sample with the run's seed and the step),
  rendered by the Codec into the text TRL tokenizes back into the same ids, and handed to TRL in
  order (`shuffle_dataset=False`): TRL's step k trains on the native step k's prompts.
- Reward: the stage's reward_fn on the record and TRL's decoded completion. It also counts the
  step's tokens and forward FLOPs (gspo.model.flops), which TRL does not.
- Checkpoints: TRL saves its own (trl/checkpoint-N, N in optimizer steps) every ckpt_every
  rollout steps and at the end; after each, its model files go to checkpoints/step_S/ (the
  layout evaluation loads) beside a state file naming TRL's checkpoint, which a resumed run
  continues from. TRL checkpoints are removed only once a newer one is exported, so a kill -9 at
  any moment leaves a complete pair.
- Metrics: one record per rollout step (TRL logs every minibatches x epochs optimizer steps),
  under this project's names (METRICS), TRL's own kept under `trl/`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
import time
import typing
import warnings

import torch

from gspo.config.fields import ConfigError, Refusals, to_dict
from gspo.config.train import RLConfig, RolloutConfig
from gspo.core import offpolicy
from gspo.core.objectives import DEFAULT_LOG_RATIO_CLAMP, OBJECTIVES
from gspo.engines.trl import batch as trl_batch
from gspo.engines.trl import fsdp as trl_fsdp
from gspo.engines.trl.fields import FIELDS  # noqa: F401  (RLConfig field -> TRL; docs/ENGINES.md)
from gspo.errors import TrainingError
from gspo.infra import checkpoint as ckpt
from gspo.infra import distributed as dist
from gspo.io import write_json
from gspo.model.flops import FlopCounter
from gspo.native import step_metrics
from gspo.native.data import Mix
from gspo.tracking import samples
from gspo.tracking.runs import MetricsLog

if typing.TYPE_CHECKING:
    from gspo.engines.trl.rollout import Rollout

# TRL's logged name -> this project's (the report's curves, fit and claims read these)
METRICS = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "zero_variance_groups",
    "completions/mean_length": "response_length",
    "entropy": "entropy",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "loss": "loss",
    "learning_rate": "lr",
}
LOSS_TYPE = {
    "seq-mean-token-mean": "grpo",
    "token-mean": "bnpo",
    "seq-mean-token-sum-norm": "dr_grpo",
}
# the objectives TRL has (gspo.core.objectives.Objective.trl), and those at its sequence level, whose
# clip fraction TRL counts in sequences (clip_frac_seqs): luspo is a loss_type of that level
TRL_OBJECTIVES = tuple(name for name, o in OBJECTIVES.items() if o.trl)
SEQUENCE_LEVEL = tuple(name for name, o in OBJECTIVES.items() if o.trl in ("sequence", "luspo"))
# the aggregation TRL's own loss types have (any other refused)
OWN_AGG = {"cispo": "token-mean", "vespo": "token-mean", "luspo": "seq-mean-token-sum"}
ENGINE = "engine: trl"


def refusals(cfg: RLConfig) -> list[tuple[str, str]]:
    """(field, why) for each value of `cfg` TRL cannot honour as this project defines it."""
    d, base = to_dict(cfg), to_dict(RLConfig(train_data=cfg.train_data))
    assert cfg.eps_low is not None and cfg.agg is not None  # set by RLConfig.__post_init__
    out = Refusals()
    need = out.need

    need(
        cfg.algorithm in TRL_OBJECTIVES,
        "algorithm",
        f"{cfg.algorithm!r}: TRL has no such objective (gspo_token: no GSPO-token level; "
        f"gmpo: no geometric mean); use one of {', '.join(TRL_OBJECTIVES)}",
    )
    if cfg.algorithm in OWN_AGG:
        agg = OWN_AGG[cfg.algorithm]
        need(cfg.agg == agg, "agg", f"TRL's {cfg.algorithm} aggregates one way only: {agg}")
    if cfg.algorithm == "cispo":
        need(cfg.eps_low >= 1.0, "eps_low", "TRL's CISPO has no lower bound: set 1.0")
    elif cfg.algorithm in ("gspo", "sapo"):
        need(
            cfg.agg in ("seq-mean-token-mean", "token-mean")
            if cfg.algorithm == "gspo"
            else cfg.agg == "seq-mean-token-mean",
            "agg",
            f"{cfg.agg!r}: TRL has no such aggregation for {cfg.algorithm}",
        )
    for field in ("micro_batch_size", "max_tokens_per_micro_batch"):
        need(
            not (getattr(cfg, field) and cfg.agg == "token-mean"),
            field,
            "with agg token-mean TRL averages micro-batch token means, not the minibatch's: set 0",
        )
    for field in (
        "logprob_chunk",
        "overlong_buffer",
        "dynamic_sampling",
        "dynamic_sampling_max_rounds",
        "rollout_correction",
        "rollout_correction_min",
        "rollout_correction_max",
        "icepop_min",
        "icepop_max",
        "routing_replay",
        "routing_replay_source",
        "router_aux_loss_coef",
    ):
        need(
            d[field] in (base[field], 0, False, "none"),
            field,
            f"{d[field]!r}: TRL has no such setting; leave it at {base[field]!r}",
        )
    need(
        cfg.log_ratio_clamp == DEFAULT_LOG_RATIO_CLAMP,
        "log_ratio_clamp",
        "TRL does not clamp the log ratio; leave it at its default",
    )
    for field in offpolicy.FIELDS:  # the settings of objectives TRL lacks (refused with them)
        need(
            field.startswith("vespo") or d[field] == base[field],
            field,
            f"TRL has no {' / '.join(offpolicy.OWNERS[field])}; leave it at {base[field]}",
        )
    need(
        cfg.opsm_threshold is None or cfg.rollout.engine == "torch",
        "opsm_threshold",
        "TRL measures the drift against the engine's log-probs when rollout_func gives them, "
        "ours against the old ones: use rollout.engine torch or leave it unset",
    )
    need(
        cfg.old_logprobs == "recompute",
        "old_logprobs",
        "'rollout': TRL's generate returns no log-probs; use recompute",
    )
    need(
        cfg.staleness == 0,
        "staleness",
        "TRL 1.16's asynchronous trainer bounds the lag (max_staleness) instead of fixing it "
        "and needs a vLLM server with NCCL weight sync (CUDA); run staleness with engine: native",
    )
    r, r0 = dict(d["rollout"]), to_dict(RolloutConfig(device=cfg.device))
    need(
        r == r0 or cfg.rollout.engine == "vllm",
        "rollout",
        "with engine torch TRL samples with transformers' generate on the training model: "
        f"leave the rollout settings at {r0}, or set engine: vllm",
    )
    return out


def check(cfg: RLConfig, world: dist.World = dist.World()) -> None:
    """Raise a one-line ConfigError for the first field TRL cannot honour (on `world`'s
    ranks: FSDP2, each rank a share of every minibatch)."""
    share = cfg.prompts_per_step * cfg.group_size // cfg.minibatches
    if world.distributed:
        if share % world.size:
            raise ConfigError(
                f"minibatches: a minibatch of {share} sequences does not split "
                f"over {world.size} ranks ({ENGINE})"
            )
        if cfg.agg == "token-mean" and cfg.algorithm != "cispo":
            raise ConfigError(
                f"agg: token-mean on {world.size} ranks is not supported with "
                f"{ENGINE}: TRL's bnpo averages the ranks' token means"
            )
    for field, why in refusals(cfg):
        raise ConfigError(f"{field}: not supported with {ENGINE}: {why}")
    trl_batch.check_whole_share(cfg, share // world.size, "minibatch")


def grpo_args(cfg: RLConfig, world_size: int = 1, prompt_len: int = 0) -> dict:
    """GRPOConfig's keyword arguments for `cfg` on `world_size` ranks (FIELDS; `check`
    first): each rank takes 1/world_size of every minibatch, in micro-batches of sequences
    up to `prompt_len` + max_new_tokens long (gspo.engines.trl.batch)."""
    updates = cfg.minibatches * cfg.epochs  # optimizer steps per rollout step
    mb = cfg.prompts_per_step * cfg.group_size // cfg.minibatches // world_size
    micro = trl_batch.micro_batch(
        cfg.micro_batch_size, cfg.max_tokens_per_micro_batch, mb, prompt_len + cfg.max_new_tokens
    )
    if mb % micro:
        raise ConfigError(
            f"micro_batch_size: {micro} does not divide the minibatch of {mb} sequences ({ENGINE})"
        )
    accum = mb // micro
    assert cfg.agg is not None and cfg.eps_high is not None  # set by RLConfig.__post_init__
    form = OBJECTIVES[cfg.algorithm].trl  # token / sequence, or a loss_type of TRL's own
    loss_type = LOSS_TYPE[cfg.agg] if form in ("token", "sequence") else form
    eps_high = 1.0 + cfg.eps_high if cfg.algorithm == "cispo" else cfg.eps_high
    return dict(
        loss_type=loss_type,
        importance_sampling_level="sequence" if cfg.algorithm in SEQUENCE_LEVEL else "token",
        epsilon=cfg.eps_low,
        epsilon_high=eps_high,
        sapo_temperature_pos=cfg.sapo_tau_pos,
        sapo_temperature_neg=cfg.sapo_tau_neg,
        **{f: getattr(cfg, f) for f in offpolicy.FIELDS if f.startswith("vespo")},
        off_policy_mask_threshold=cfg.opsm_threshold,
        scale_rewards="group" if cfg.adv_scale == "std" else "none",
        mask_truncated_completions=bool(cfg.mask_truncated),
        beta=cfg.kl_coef,
        use_bias_correction_kl=False,
        num_generations=cfg.group_size,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        steps_per_generation=cfg.minibatches * accum,
        num_iterations=cfg.epochs,
        max_steps=cfg.steps * updates,
        save_steps=cfg.ckpt_every * updates,
        logging_steps=updates,
        save_strategy="steps",
        shuffle_dataset=False,
        learning_rate=cfg.lr,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=cfg.warmup_steps * updates,
        weight_decay=cfg.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.99,
        max_grad_norm=cfg.grad_clip,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=0,
        max_completion_length=cfg.max_new_tokens,
        gradient_checkpointing=cfg.activation_checkpointing,
        bf16=cfg.precision == "bfloat16",
        use_cpu=cfg.device == "cpu",
        seed=cfg.seed,
        report_to="none",
        save_only_model=False,
        disable_tqdm=False,
        remove_unused_columns=False,
        use_vllm=False,
        **trl_fsdp.fsdp_args(world_size),
    )


def prompt_rows(cfg: RLConfig, codec, mix: Mix) -> tuple[list[dict], dict[str, int]]:
    """The dataset TRL reads (one row per prompt, every step's in order) and each prompt text's
    token count."""
    rows, lengths = [], {}
    for step in range(cfg.steps):
        for rec in mix.sample(cfg.prompts_per_step, seed=cfg.seed, step=step):
            ids = codec.prompt(rec["prompt"])
            text = codec.tokenizer.decode(ids, skip_special_tokens=False)
            if codec.tokenizer(text, add_special_tokens=False).input_ids != ids:
                raise ConfigError(
                    f"prompt: record {rec.get('id')!r} does not survive a decode "
                    f"and re-encode by its tokenizer, which {ENGINE} needs"
                )
            rows.append({"prompt": text, "record": json.dumps(rec)})
            lengths[text] = len(ids)
    return rows, lengths


@dataclasses.dataclass
class _Run:
    """What the reward function and the callback share on one rank."""

    cfg: RLConfig
    world: dist.World
    log: MetricsLog | None  # rank 0 only
    counters: dict  # the run's, equal on every rank
    pending: list = dataclasses.field(default_factory=lambda: [0.0, 0, 0])  # this rank's, unsent
    clock: dict = dataclasses.field(default_factory=dict)
    old_pass: int = 0  # 1 when TRL makes an old-log-prob pass
    rollout: Rollout | None = None  # rollout.engine vllm
    sharding: str = "none"  # gspo.engines.trl.fsdp.sharding: fsdp2 on several ranks
    step: int = 0  # rollout steps whose samples the reward saw

    def add_pending(self) -> float:
        """The ranks' compute and tokens since the last record, summed into the counters;
        returns the step's compute."""
        t = dist.all_reduce(torch.tensor(self.pending, dtype=torch.float64), self.world)
        for k, v in zip(("compute_flops", "tokens_generated", "tokens_trained"), t.tolist()):
            self.counters[k] += v if k == "compute_flops" else int(v)
        self.pending = [0.0, 0, 0]
        return float(t[0])


def _reward(reward_fn, prompt_len: dict, flops: FlopCounter, run: _Run, old_pass: int):
    """TRL's reward function: the stage's reward_fn on this rank's records, and their compute
    counted as gspo.native.trainer counts it (generation + old-log-prob pass + 3 per epoch). TRL calls
    it once per rollout step, after generating and its old-log-prob pass: the clock gets the
    time the rollout ends."""
    epochs = run.cfg.epochs

    def reward(prompts, completions, completion_ids, record, **_):
        lengths = [prompt_len[p] + len(c) for p, c in zip(prompts, completion_ids)]
        resp = sum(len(c) for c in completion_ids)
        run.pending[0] += flops.forward(lengths) * (1 + old_pass + 3 * epochs)
        run.pending[1] += resp
        run.pending[2] += resp * epochs
        out = reward_fn([json.loads(r) for r in record], list(completions))
        run.clock["rollout_end"] = time.perf_counter()
        run.step += 1  # TRL scores each rollout step's samples in one call
        if run.world.main and samples.due(run.cfg.log_samples_every, run.step):
            samples.write(
                run.cfg.out_dir,
                run.step,
                samples.rows(
                    run.step,
                    list(prompts),
                    list(completions),
                    out,
                    lengths=[len(c) for c in completion_ids],
                ),
            )
        return out

    return reward


def _export(trl_dir: pathlib.Path, dest: pathlib.Path, state: dict) -> None:
    """TRL checkpoint -> checkpoints/step_S: its model and tokenizer files (not the trainer's
    state), the step and compute evaluation records, and the state naming TRL's checkpoint."""
    skip = (
        "optimizer.pt",
        "optimizer.bin",
        "pytorch_model_fsdp.bin",
        "scheduler.pt",
        "trainer_state.json",
        "training_args.bin",
    )
    ckpt.export_model_files(
        trl_dir,
        dest,
        {
            "step": state["step"],
            "stage": "rl",
            "engine": "trl",
            "compute_flops": state["counters"]["compute_flops"],
        },
        state,
        skip=lambda name: name in skip or name.startswith("rng_state"),
    )


def _record(logs: dict, run: _Run, now: float, step_flops: float) -> dict:
    """This project's record of a rollout step from TRL's log (METRICS; its own under trl/);
    `step_flops` the step's compute (every rank's) as _reward counted it."""
    cfg = run.cfg
    clip_key = "clip_frac_seqs" if cfg.algorithm in SEQUENCE_LEVEL else "clip_frac_tokens"
    t0, t1 = run.clock["start"], run.clock["rollout_end"]
    run.counters["wall_s"] += now - t0
    rec = {ours: logs[k] for k, ours in METRICS.items() if k in logs}
    rec.update(time_step_s=now - t0, time_rollout_s=t1 - t0, time_update_s=now - t1)
    if cfg.peak_flops:
        passes = {"rollout": (1 + run.old_pass, t1 - t0), "update": (3 * cfg.epochs, now - t1)}
        forward = step_flops / (1 + run.old_pass + 3 * cfg.epochs)  # F(L) of the step
        rec.update(step_metrics.mfu(forward, passes, cfg.peak_flops * run.world.size))
    if "clip_ratio/region_mean" in logs:
        rec[clip_key] = logs["clip_ratio/region_mean"]
    rec.update({f"trl/{k}": v for k, v in logs.items() if isinstance(v, (int, float))})
    return {**rec, **run.counters}


def _bridge(run: _Run, ckpt_root: pathlib.Path):
    """The TrainerCallback that turns TRL's logs into this project's records and its saves into
    checkpoints/step_S (rank 0 writes them). A step's time: from its first optimizer step's
    start to its log (rollout: until the reward returns, TRL's old-log-prob pass included;
    update: the rest)."""
    from transformers import TrainerCallback

    cfg = run.cfg
    updates = cfg.minibatches * cfg.epochs

    class Bridge(TrainerCallback):
        nonfinite = 0

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % updates == 0:
                run.clock["start"] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "reward" not in logs:
                return  # TRL's end-of-training summary
            step_flops = run.add_pending()  # every rank logs, so every rank takes part
            rec = _record(logs, run, time.perf_counter(), step_flops)
            if run.log is not None:
                run.log.log(state.global_step // updates, rec)
            bad = not all(math.isfinite(rec.get(k, 0.0)) for k in ("loss", "grad_norm"))
            Bridge.nonfinite = Bridge.nonfinite + 1 if bad else 0
            if Bridge.nonfinite >= cfg.max_consecutive_nonfinite:
                raise TrainingError(
                    f"{Bridge.nonfinite} steps in a row with a non-finite loss or gradient norm "
                    f"({ENGINE}); stopping. Lower lr or raise grad_clip"
                )

        def on_save(self, args, state, control, **kw):
            if not run.world.main:
                return
            step = state.global_step // updates
            trl_dir = pathlib.Path(args.output_dir) / f"checkpoint-{state.global_step}"
            _export(
                trl_dir,
                ckpt_root / f"step_{step:06d}",
                {"step": step, "counters": dict(run.counters), "trl_checkpoint": trl_dir.name},
            )
            for old in trl_dir.parent.glob("checkpoint-*"):
                if old != trl_dir:
                    shutil.rmtree(old, ignore_errors=True)
            ckpt.prune_checkpoints(ckpt_root, cfg.keep_last, cfg.keep_steps)

    return Bridge()


def _trl():
    """trl, imported without its warning that it supports vLLM up to 0.31 (0.32 is installed
    beside it, and its vLLM paths are not used here)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "TRL currently supports vLLM", UserWarning)
        import trl

        _ = trl.GRPOTrainer  # read for its lazy import, which warns here
    return trl


def _trainer(run: _Run, reward_fn, out: pathlib.Path):
    """GRPOTrainer over the run's prompts, with the bridge to this project's records."""
    from datasets import Dataset

    from gspo.model import tokens

    trl, cfg = _trl(), run.cfg
    model, tok = trl_fsdp.load(cfg.model, run.world)  # rank 0 alone reads the weights
    if cfg.moe_metrics and model.config.to_dict().get("num_experts"):
        raise ConfigError(
            f"moe_metrics: not supported with {ENGINE} (its pass is the native "
            "trainer's); set false"
        )
    codec = tokens.codec(tok, cfg.model, cfg.prompt)
    model.generation_config.eos_token_id = codec.stop_ids  # the native trainer's stop ids
    rows, prompt_len = prompt_rows(cfg, codec, Mix(cfg.train_data))
    args = trl.GRPOConfig(
        output_dir=str(out / "trl"), **grpo_args(cfg, run.world.size, max(prompt_len.values()))
    )
    # TRL recomputes old log-probs only when an update can be off-policy
    old_pass = int(args.gradient_accumulation_steps % (args.steps_per_generation * cfg.epochs) != 0)
    run.old_pass = old_pass
    reward = _reward(reward_fn, prompt_len, FlopCounter(model), run, old_pass)
    if cfg.rollout.engine == "vllm":
        from gspo.engines.trl.rollout import Rollout

        run.rollout = Rollout(cfg, tok, codec.stop_ids, run.world)
    with warnings.catch_warnings():  # rollout_func is marked experimental in TRL
        warnings.filterwarnings("ignore", "You are using 'rollout_func'", UserWarning)
        trainer, run.sharding = trl_fsdp.make_trainer(
            trl.GRPOTrainer,
            run.world,
            model=model,
            processing_class=tok,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(rows),
            callbacks=[_bridge(run, out / "checkpoints")],
            rollout_func=run.rollout,
        )
    return trainer


def train(cfg: RLConfig, reward_fn, world: dist.World = dist.World()) -> pathlib.Path:
    """Train (or resume) cfg's run with TRL inside the caller's stage run; returns out/model.
    On several ranks (torchrun) TRL shards the model with FSDP2 (gspo.engines.trl.fsdp) over the
    process group `world` set up."""
    check(cfg, world)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = pathlib.Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    resume_from = ckpt.latest_checkpoint(out / "checkpoints") if cfg.resume else None
    if resume_from is not None:
        ckpt.check_same_run(out / "run_info.json", to_dict(cfg))
    st: dict[str, typing.Any] = (
        torch.load(resume_from / ckpt.STATE, weights_only=False)
        if resume_from is not None
        else {
            "step": 0,
            "counters": {
                "compute_flops": 0.0,
                "tokens_generated": 0,
                "tokens_trained": 0,
                "wall_s": 0.0,
            },
        }
    )
    run = _Run(cfg, world, None, dict(st["counters"]), step=st["step"])
    if world.main:
        run.log = MetricsLog(
            out / "metrics.jsonl", resume_step=st["step"] if resume_from is not None else None
        )
        ckpt.write_run_info(
            out,
            ckpt.run_info(
                to_dict(cfg),
                Mix(cfg.train_data).hashes(),
                stage="rl",
                algorithm=cfg.algorithm,
                engine="trl",
                trl_version=_trl().__version__,
                world_size=world.size,
                resumed_from=str(resume_from),
            ),
        )
    try:
        trainer = _trainer(run, reward_fn, out)
        trainer.train(
            resume_from_checkpoint=str(out / "trl" / st["trl_checkpoint"])
            if resume_from is not None
            else None
        )
    finally:
        if run.rollout is not None:  # vLLM holds processes and memory
            run.rollout.close()
    if world.main:
        ckpt.publish_model(ckpt.latest_checkpoint(out / "checkpoints"), out / "model")
        write_json(
            out / "summary.json",
            {
                "steps": cfg.steps,
                "algorithm": cfg.algorithm,
                "engine": "trl",
                "world_size": world.size,
                "sharding": run.sharding,
                **run.counters,
            },
        )
    dist.barrier(world)
    return out / "model"


def run_rl(
    cfg: RLConfig,
    reward_fn,
    *,
    tracking=None,
    restart_if_changed: bool = False,
    world: dist.World = dist.World(),
):
    """gspo.native.trainer.run_rl's counterpart: the run in its MLflow stage run (rank 0's), resumed
    or started over as there; a field TRL cannot honour stops it before anything is written."""
    from gspo.native.trainer import prepare_out_dir
    from gspo.tracking.runs import stage_run

    check(cfg, world)
    tracking = prepare_out_dir(cfg, tracking, restart_if_changed, world)
    with stage_run("rl", cfg.out_dir, commit="checkpoint", tracking=tracking):
        return train(cfg, reward_fn, world)
