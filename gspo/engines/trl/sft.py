"""Cold-start SFT on TRL's SFTTrainer (`engine: trl` in the sft section): the same config,
records, optimizer, schedule, model files and metrics as the native stage (gspo.native.sft), with TRL's
loop, collator, loss, gradient accumulation and FSDP2 (on several ranks) doing the training.

FIELDS says what each SFTConfig field becomes (docs/ENGINES.md shows it as a table; a test holds
the two to each other). A value TRL cannot honour as this project defines it is a one-line
ConfigError naming the field and the engine, never a silent change.

- Records: each step's are the native stage's (Mix.sample with the run's seed and the step),
  tokenized by the Codec (prompt + response + EOS, cut at max_len as pad_batch cuts them) and
  handed to TRL already tokenized, with the response as its completion mask, in order
  (`train_sampling_strategy=sequential`): TRL's step k trains on the native step k's records.
- Optimizer and schedule: the native stage's AdamW (betas 0.9 / 0.95) and its warm-up + cosine
  (gspo.native.sft.lr_at), made by the Trainer; TRL's own defaults differ (a warm-up that starts at 0,
  weight decay skipping biases and norms).
- Metrics under this project's names every log_every steps (TRL logs each step), TRL's own under
  `trl/`; the greedy check (gspo.native.sft.greedy_accuracy) runs from the same callback.
- The model goes to checkpoints/step_S and model/ as the native stage writes them. SFT always
  starts over, so no TRL checkpoint is kept.
"""

from __future__ import annotations

import pathlib
import time
import typing

import torch

from gspo.config.fields import ConfigError, to_dict
from gspo.config.train import SFTConfig
from gspo.engines.trl import batch as trl_batch
from gspo.engines.trl import fsdp as trl_fsdp
from gspo.infra import checkpoint as ckpt
from gspo.infra import distributed as dist
from gspo.io import read_jsonl, write_json
from gspo.model import tokens
from gspo.model.flops import FlopCounter
from gspo.model.models import PRESETS, enable_activation_checkpointing
from gspo.native.data import Mix
from gspo.tracking.runs import MetricsLog

ENGINE = "engine: trl"

# SFTConfig field -> what it becomes in TRL (docs/ENGINES.md's SFT table)
FIELDS: dict[str, str] = {
    "engine": "this engine",
    "model": "the model TRL trains (a preset is built first, as the native stage builds it)",
    "init_seed": "the preset's initialisation",
    "out_dir": "`output_dir` = out_dir/trl (nothing kept there); checkpoints/, metrics.jsonl, "
    "model/ by the harness",
    "train_data": "each step's records as the native stage draws them, tokenized, in order "
    "(`train_sampling_strategy=sequential`)",
    "eval_data": "the greedy check (gspo.native.sft.greedy_accuracy), from a callback",
    "eval_problems": "the greedy check's records",
    "steps": "`max_steps`",
    "batch_size": "`per_device_train_batch_size` x `gradient_accumulation_steps` x ranks",
    "lr": "the native AdamW (betas 0.9 / 0.95) and schedule (gspo.native.sft.lr_at), made by the "
    "Trainer (`create_optimizer`, after FSDP2 shards the model)",
    "warmup_steps": "the native schedule (gspo.native.sft.lr_at)",
    "min_lr_ratio": "the native schedule (gspo.native.sft.lr_at)",
    "weight_decay": "the native AdamW's, on every parameter",
    "grad_clip": "`max_grad_norm`",
    "max_len": "the records cut at max_len as the native stage cuts them (`max_length=None`)",
    "micro_batch_size": "`per_device_train_batch_size`, `gradient_accumulation_steps`",
    "max_tokens_per_micro_batch": "`per_device_train_batch_size`: the most of the longest "
    "records within it (gspo.engines.trl.batch); 0 with micro_batch_size "
    "0 refused on CUDA",
    "logprob_chunk": "refused unless 0",
    "activation_checkpointing": "`gradient_checkpointing`",
    "precision": "`bf16` for bfloat16 (autocast over fp32 weights); bf16 model files as the native stage",
    "prompt": "the Codec renders the prompt and response tokens TRL receives "
    "(`completion_only_loss`)",
    "eval_every": "the greedy check every eval_every steps, from a callback",
    "log_every": "a record every log_every steps (`logging_steps=1`, the others dropped)",
    "seed": "`seed` (the data order is the harness's)",
    "device": "`use_cpu` for cpu, else accelerate's device",
    "threads": "torch.set_num_threads",
}
# TRL's logged name -> this project's
METRICS = {"loss": "loss", "grad_norm": "grad_norm"}


def refusals(cfg: SFTConfig) -> list[tuple[str, str]]:
    """(field, why) for each value of `cfg` TRL cannot honour as this project defines it."""
    return [
        (f, f"{getattr(cfg, f)!r}: TRL has no such setting; set 0")
        for f in ("logprob_chunk",)
        if getattr(cfg, f)
    ]


def check(cfg: SFTConfig, world: dist.World = dist.World()) -> None:
    """A one-line ConfigError for the first field TRL cannot honour on `world`'s ranks."""
    for field, why in refusals(cfg):
        raise ConfigError(f"{field}: not supported with {ENGINE}: {why}")
    share = cfg.batch_size // world.size
    if cfg.batch_size % world.size:
        raise ConfigError(
            f"batch_size: {cfg.batch_size} does not divide by the {world.size} "
            "ranks (each trains on an equal slice); pick a multiple of them"
        )
    if cfg.micro_batch_size and share % cfg.micro_batch_size:
        raise ConfigError(
            f"micro_batch_size: {cfg.micro_batch_size} does not divide a rank's "
            f"{share} sequences a step ({ENGINE})"
        )
    trl_batch.check_whole_share(cfg, share, "step")


def sft_args(cfg: SFTConfig, world_size: int = 1, seq_len: int = 0) -> dict:
    """SFTConfig's (TRL's) keyword arguments for `cfg` on `world_size` ranks (FIELDS), the
    longest record `seq_len` tokens (default: max_len)."""
    share = cfg.batch_size // world_size
    micro = trl_batch.micro_batch(
        cfg.micro_batch_size, cfg.max_tokens_per_micro_batch, share, seq_len or cfg.max_len
    )
    return dict(
        max_steps=cfg.steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=share // micro,
        max_grad_norm=cfg.grad_clip,
        gradient_checkpointing=cfg.activation_checkpointing,
        bf16=cfg.precision == "bfloat16",
        use_cpu=cfg.device == "cpu",
        seed=cfg.seed,
        completion_only_loss=True,
        max_length=None,
        train_sampling_strategy="sequential",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=False,
        dataset_num_proc=None,
        **trl_fsdp.fsdp_args(world_size),
    )


def rows(cfg: SFTConfig, codec, mix: Mix) -> list[dict]:
    """TRL's dataset: every step's records in order, tokenized and cut at max_len (as
    gspo.native.data.pad_batch), the response marked as the completion."""
    out = []
    for step in range(cfg.steps):
        for r in mix.sample(cfg.batch_size, seed=cfg.seed, step=step):
            p, resp = codec.prompt(r["prompt"]), codec.response(r["solution"])
            out.append(
                {
                    "input_ids": (p + resp)[: cfg.max_len],
                    "completion_mask": ([0] * len(p) + [1] * len(resp))[: cfg.max_len],
                }
            )
    return out


def _callback(cfg: SFTConfig, data: list[dict], flops: FlopCounter, greedy, log: MetricsLog | None):
    """The TrainerCallback that writes this project's records (rank 0) and runs the greedy
    check (every rank: it is sharded over them) at the native stage's steps."""
    from transformers import TrainerCallback

    from gspo.native.sft import lr_at

    counters = {"tokens_trained": 0, "compute_flops": 0.0}
    last_loss = {}
    t0 = time.time()

    class Bridge(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            # the step's records: compute and tokens counted as gspo.native.sft counts them
            batch = data[
                (state.global_step - 1) * cfg.batch_size : state.global_step * cfg.batch_size
            ]
            counters["tokens_trained"] += sum(sum(r["completion_mask"]) for r in batch)
            counters["compute_flops"] += 3 * flops.forward([len(r["input_ids"]) for r in batch])

        def on_log(self, args, state, control, logs=None, model=None, **kw):
            step = state.global_step - 1  # the native stage's 0-based step
            last = state.global_step == cfg.steps
            if not logs or "loss" not in logs or not (step % cfg.log_every == 0 or last):
                return
            last_loss["final_loss"] = logs["loss"]
            rec = {ours: logs[k] for k, ours in METRICS.items() if k in logs}
            rec.update(lr=lr_at(step, cfg), **counters, wall_s=time.time() - t0)
            if greedy.records and (
                (cfg.eval_every and step and step % cfg.eval_every == 0) or last
            ):
                rec["greedy_accuracy"] = greedy(model)
            rec.update({f"trl/{k}": v for k, v in logs.items() if isinstance(v, (int, float))})
            if log is not None:
                log.log(state.global_step, rec)

    return Bridge(), counters, last_loss


class _Greedy:
    """The greedy held-out check on TRL's model (gspo.native.sft.greedy_accuracy)."""

    def __init__(self, cfg: SFTConfig, codec, scorer, world: dist.World, max_resp: int):
        self.records = read_jsonl(cfg.eval_data)[: cfg.eval_problems] if cfg.eval_data else []
        self.cfg, self.codec, self.scorer, self.world = cfg, codec, scorer, world
        self.max_resp = max_resp

    def __call__(self, model) -> float:
        from gspo.native.sft import greedy_accuracy

        return greedy_accuracy(
            model,
            self.codec,
            self.records,
            self.max_resp,
            self.scorer,
            self.world,
            self.cfg.precision,
        )


def _trainer_class(base, cfg: SFTConfig):
    """`base` (TRL's SFTTrainer) with the native stage's AdamW (betas 0.9 / 0.95, weight decay
    on every parameter) and schedule (gspo.native.sft.lr_at). Made by the Trainer rather than passed
    in, as FSDP needs: it shards the model first and the optimizer takes the shards."""
    from gspo.native.sft import lr_at

    class Trainer(base):
        optimizer: typing.Any  # the base class's, made here
        lr_scheduler: typing.Any

        def create_optimizer(self, model=None):
            if self.optimizer is None:
                params = (self.model if model is None else model).parameters()
                self.optimizer = torch.optim.AdamW(
                    params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
                )
            return self.optimizer

        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                    self.optimizer if optimizer is None else optimizer,
                    lambda s: lr_at(s, cfg) / cfg.lr,
                )
            return self.lr_scheduler

    return Trainer


def train(cfg: SFTConfig, scorer, world: dist.World = dist.World()) -> pathlib.Path:
    """Train cfg's SFT run with TRL inside the caller's stage run; returns out/model. On
    several ranks (torchrun) TRL shards the model with FSDP2 (gspo.engines.trl.fsdp) over the process
    group `world` set up."""
    from datasets import Dataset

    from gspo.engines.trl.rl import _trl
    from gspo.native.sft import check_lengths, initial_model

    check(cfg, world)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = pathlib.Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mix = Mix(cfg.train_data, need_solution=True)
    path = initial_model(
        cfg.model,
        cfg.init_seed,
        out,
        build=world.main,
        corpus=[r["prompt"] + r["solution"] for _, _, recs in mix.files for r in recs],
    )
    dist.barrier(world)
    model, tok = trl_fsdp.load(path, world)  # rank 0 alone reads the weights
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    codec = tokens.codec(tok, out / "init" if cfg.model in PRESETS else cfg.model, cfg.prompt)
    greedy = _Greedy(cfg, codec, scorer, world, check_lengths(mix, codec, cfg.max_len))
    trl = _trl()
    if world.main:
        ckpt.write_run_info(
            out,
            ckpt.run_info(
                to_dict(cfg),
                mix.hashes(),
                stage="sft",
                engine="trl",
                trl_version=trl.__version__,
                world_size=world.size,
            ),
        )
    data = rows(cfg, codec, mix)
    log = MetricsLog(out / "metrics.jsonl") if world.main else None
    bridge, counters, last = _callback(cfg, data, FlopCounter(model), greedy, log)
    t0 = time.time()
    longest = max(len(r["input_ids"]) for r in data)
    trainer, sharding = trl_fsdp.make_trainer(
        _trainer_class(trl.SFTTrainer, cfg),
        world,
        model=model,
        processing_class=tok,
        train_dataset=Dataset.from_list(data),
        callbacks=[bridge],
        args=trl.SFTConfig(output_dir=str(out / "trl"), **sft_args(cfg, world.size, longest)),
    )
    trainer.train()
    weights = dist.full_state_dict(model, world, rank0_only=True) if world.distributed else None
    if world.main:
        state = {"step": cfg.steps, "compute_flops": counters["compute_flops"]}
        final = ckpt.save_checkpoint(
            out / "checkpoints",
            cfg.steps,
            model,
            tok,
            state,
            meta={"stage": "sft", "engine": "trl", **state},
            weights=weights,
            precision=cfg.precision,
        )
        ckpt.publish_model(final, out / "model")
        write_json(
            out / "summary.json",
            {
                "steps": cfg.steps,
                **counters,
                "wall_s": time.time() - t0,
                **last,
                "engine": "trl",
                "world_size": world.size,
                "sharding": sharding,
            },
        )
    dist.barrier(world)
    return out / "model"


def run_sft(
    cfg: SFTConfig, scorer=None, *, tracking=None, world: dist.World = dist.World()
) -> pathlib.Path:
    """gspo.native.sft.run_sft's counterpart: the same checks and MLflow stage run; a field TRL cannot
    honour stops it before anything is written."""
    from gspo.native.sft import start
    from gspo.tracking.runs import stage_run

    check(cfg, world)
    tracking = start(cfg, scorer, tracking, world)
    with stage_run("sft", cfg.out_dir, commit="immediate", tracking=tracking):
        return train(cfg, scorer, world)
