"""Cold-start SFT: next-token loss on response tokens only, over the tasks' worked solutions.

The periodic greedy check scores completions with a `scorer(record, completion) -> float` given
by the caller (pipeline.sft wires in evaluators.tasks.reward): the library never knows the
benchmarks.

Under torchrun the model is sharded (gspo.infra.distributed) and each rank trains on its slice of the
step's batch; every rank draws the same batch, so the loss normaliser (the batch's response
tokens) is known without a collective and an update equals the single-process one. Rank 0 alone
writes metrics, the checkpoint and the model, and runs the greedy check on a gathered copy."""

from __future__ import annotations

import math
import pathlib
import time
from typing import Callable

import torch
from tqdm import tqdm

from gspo.config.fields import ConfigError, to_dict
from gspo.config.train import SFTConfig
from gspo.infra import distributed as dist
from gspo.infra.checkpoint import publish_model, run_info, save_checkpoint, write_run_info
from gspo.io import read_jsonl, write_json
from gspo.model import tokens
from gspo.model.flops import FlopCounter
from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import PRESETS, build_tiny, enable_activation_checkpointing
from gspo.native.data import Mix, micro_batches, pad_batch, trim_padding
from gspo.tracking.runs import MetricsLog, Tracking, stage_run, supersede

Scorer = Callable[[dict, str], float]  # (record, completion) -> score in [0, 1]


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up then cosine decay to min_lr_ratio * lr; a pure function of the step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    frac = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr * (
        cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac))
    )


def initial_model(
    model: str,
    init_seed: int,
    work_dir: pathlib.Path,
    build: bool = True,
    corpus: list[str] | None = None,
) -> pathlib.Path:
    """The starting model's directory: a preset name builds a fresh random model under
    work_dir (build=False: the one built there; a BPE preset trains its tokenizer on
    `corpus`); anything else is a path."""
    if model not in PRESETS:
        return pathlib.Path(model)
    path = work_dir / "init"
    if build:
        build_tiny(model, path, seed=init_seed, corpus=corpus)
    return path


@torch.no_grad()
def greedy_decode(
    model,
    prompts: list[list[int]],
    max_new_tokens: int,
    stop_ids: list[int],
    world: dist.World = dist.World(),
    precision: str = "float32",
) -> list[list[int]]:
    """Greedy completions (stop token included) of `prompts` by the model's own forward with
    its KV cache. Sharded, every rank calls it with its own prompts (maybe none) and the
    ranks step together until all are done: each forward gathers the layers' shards from
    every rank. (Gathering a whole copy to decode on rank 0 left the other ranks waiting on a
    collective, into the watchdog's timeout at 8B: issue 23 #6.)"""
    rows = prompts or [[stop_ids[0]]]  # a rank without prompts steps along on a dummy row
    B, plen = len(rows), max(len(p) for p in rows)
    dev = next(model.parameters()).device
    ids = torch.zeros(B, plen, dtype=torch.long)
    mask = torch.zeros(B, plen, dtype=torch.long)
    for i, p in enumerate(rows):  # left-padded, so the last column is every row's
        ids[i, plen - len(p) :] = torch.tensor(p)
        mask[i, plen - len(p) :] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)  # (B, plen)
    out: list[list[int]] = [[] for _ in rows]
    done = torch.tensor([not prompts] * B)
    stop = torch.tensor(stop_ids)
    cache = None
    for _ in range(max_new_tokens):
        with dist.compute_precision(precision, dev.type, world):
            res = model(
                input_ids=ids.to(dev),
                attention_mask=mask.to(dev),
                position_ids=pos.to(dev),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        cache = res.past_key_values
        tok = res.logits[:, -1].float().argmax(-1).cpu()  # (B,)
        for i in (~done).nonzero().flatten().tolist():
            out[i].append(int(tok[i]))
        done |= torch.isin(tok, stop)
        if not dist.all_reduce(torch.tensor([int(not done.all())]), world, "max").item():
            break
        ids, pos = tok[:, None], pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], 1)
    return out if prompts else []


def greedy_accuracy(
    model,
    codec: tokens.Codec,
    records: list[dict],
    max_new_tokens: int,
    scorer: Scorer,
    world: dist.World = dist.World(),
    precision: str = "float32",
) -> float:
    """Share of records solved by greedy decoding (a quick progress signal, not the
    evaluation), on every rank; sharded, each rank decodes and scores its slice of them."""
    share = -(-len(records) // world.size)
    mine = records[world.rank * share : (world.rank + 1) * share]
    was_training = model.training
    model.eval()
    outs = greedy_decode(
        model,
        [codec.prompt(r["prompt"]) for r in mine],
        max_new_tokens,
        codec.stop_ids,
        world,
        precision,
    )
    model.train(was_training)
    scores = [scorer(r, codec.decode(t)) for r, t in zip(mine, outs)]
    return sum(dist.gather_objects(scores, world)) / max(len(records), 1)


def start(
    cfg: SFTConfig, scorer: Scorer | None, tracking: Tracking | None, world: dist.World
) -> Tracking:
    """What an SFT stage checks and clears before it trains, on either engine: the config's
    fit to the ranks and the scorer, and the MLflow run a previous attempt left (SFT always
    starts over); returns the tracking this rank records with (rank 0 alone talks to MLflow)."""
    if cfg.eval_data and scorer is None:
        raise ValueError(
            "run_sft: eval_data is set, so a scorer(record, completion) is needed "
            "for the greedy check (e.g. evaluators.tasks.reward)"
        )
    if cfg.batch_size % world.size:
        raise ConfigError(
            f"batch_size: {cfg.batch_size} does not divide by the {world.size} "
            "ranks (each trains on an equal slice); pick a multiple of them"
        )
    tracking = (tracking or Tracking()) if world.main else Tracking()
    if world.main:
        supersede(cfg.out_dir, tracking)
    dist.barrier(world)
    return tracking


def run_sft(
    cfg: SFTConfig,
    scorer: Scorer | None = None,
    *,
    tracking: Tracking | None = None,
    world: dist.World = dist.World(),
) -> pathlib.Path:
    """Train on the native engine; `scorer` (needed when cfg.eval_data is set) judges the
    greedy check's answers. `engine: trl` runs through gspo.engines.trl.sft.run_sft instead."""
    if cfg.engine != "native":
        raise ConfigError(
            f"engine: {cfg.engine!r} runs through gspo.engines.trl.sft.run_sft "
            "(pipeline.sft picks the engine's)"
        )
    tracking = start(cfg, scorer, tracking, world)
    # MLflow run (when tracking has a URI), status FINISHED / FAILED / KILLED.
    with stage_run("sft", cfg.out_dir, commit="immediate", tracking=tracking):
        return _run_sft(cfg, scorer, world)


def _setup(cfg: SFTConfig, out: pathlib.Path, world: dist.World, mix: Mix):
    """Threads, the output folder and the initial model, in training mode on its device and
    sharded over the ranks (a preset is built by rank 0 first: the others load its files)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    path = initial_model(
        cfg.model,
        cfg.init_seed,
        out,
        build=world.main,
        corpus=[r["prompt"] + r["solution"] for _, _, recs in mix.files for r in recs],
    )
    dist.barrier(world)
    model, tok = dist.load_sharded(
        path,
        world,
        cfg.device,
        cfg.precision,
        prepare=(enable_activation_checkpointing if cfg.activation_checkpointing else None),
    )
    return model.train(), tok


def _update(model, opt, batch, cfg: SFTConfig, world: dist.World) -> tuple[float, float]:
    """One optimizer step on the whole step's `batch` (the same on every rank; each trains on
    its slice of rows): the mean response-token loss, accumulated over micro-batches
    (micro_batch_size, or max_tokens_per_micro_batch sorted and trimmed); returns (loss, grad
    norm), both of the whole batch."""
    mask = batch["target_mask"]
    share = mask.shape[0] // world.size
    rows = torch.arange(world.rank * share, (world.rank + 1) * share)
    micros = micro_batches(
        rows, batch["attention_mask"].sum(1), cfg.micro_batch_size, cfg.max_tokens_per_micro_batch
    )
    # FSDP's collectives need as many forward/backward passes on every rank (token budgets
    # pack slices differently): a rank short of micro-batches runs one at weight 0
    n_micro = int(dist.all_reduce(torch.tensor(len(micros)), world, "max"))
    opt.zero_grad(set_to_none=True)
    loss = 0.0
    for j in range(n_micro):
        idx = micros[j] if j < len(micros) else rows[:1]
        sub = (
            batch if world.size == 1 and len(micros) == 1 else {k: v[idx] for k, v in batch.items()}
        )
        if cfg.max_tokens_per_micro_batch:
            sub = trim_padding(sub)
        with dist.compute_precision(cfg.precision, cfg.device, world):
            logp = sequence_logprobs(model, sub, chunk=cfg.logprob_chunk)
        part = -(logp * sub["target_mask"]).sum() / mask.sum() * float(j < len(micros))
        (part * dist.grad_scale(world)).backward()  # FSDP averages over ranks: sum them
        loss += part.item()
    params = [p for g in opt.param_groups for p in g["params"]]
    gnorm = dist.clip_grad_norm(params, cfg.grad_clip, world)
    opt.step()
    return float(dist.all_reduce(torch.tensor(loss, dtype=torch.float64), world)), gnorm


def check_lengths(mix: Mix, codec: tokens.Codec, max_len: int) -> int:
    """The longest response in tokens (EOS included); a ConfigError when a prompt leaves no room
    for a response within max_len."""
    for path, _, recs in mix.files:
        for r in recs:
            n = len(codec.prompt(r["prompt"]))
            if n >= max_len:
                raise ConfigError(
                    f"max_len: {max_len} leaves no room for a response after the "
                    f"prompt of record {r['id']!r} in {path} ({n} tokens); raise "
                    "max_len or drop such records"
                )
    return max(len(codec.response(r["solution"])) for _, _, recs in mix.files for r in recs)


def _run_sft(cfg: SFTConfig, scorer: Scorer | None, world: dist.World) -> pathlib.Path:
    out = pathlib.Path(cfg.out_dir)
    mix = Mix(cfg.train_data, need_solution=True)
    eval_recs = read_jsonl(cfg.eval_data)[: cfg.eval_problems] if cfg.eval_data else []
    model, tok = _setup(cfg, out, world, mix)
    codec = tokens.codec(tok, out / "init" if cfg.model in PRESETS else cfg.model, cfg.prompt)
    flops = FlopCounter(model)
    max_resp = check_lengths(mix, codec, cfg.max_len)
    if world.main:
        write_run_info(
            out, run_info(to_dict(cfg), mix.hashes(), stage="sft", world_size=world.size)
        )
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
    )
    log = MetricsLog(out / "metrics.jsonl") if world.main else None
    total_flops = 0.0  # of the whole batch: the sum over the ranks
    trained = 0
    t0 = time.time()
    bar = tqdm(range(cfg.steps), desc="sft", dynamic_ncols=True, disable=not world.main)
    for step in bar:
        lr = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        recs = mix.sample(cfg.batch_size, seed=cfg.seed, step=step)
        batch = pad_batch(
            [codec.prompt(r["prompt"]) for r in recs],
            [codec.response(r["solution"]) for r in recs],
            codec.pad_id,
            cfg.max_len,
        )
        batch = {k: v.to(cfg.device) for k, v in batch.items()}
        loss, gnorm = _update(model, opt, batch, cfg, world)
        total_flops += 3 * flops.forward(batch["attention_mask"].sum(1).tolist())
        trained += int(batch["target_mask"].sum())
        last = step == cfg.steps - 1
        if step % cfg.log_every == 0 or last:
            rec = {
                "loss": loss,
                "lr": lr,
                "grad_norm": gnorm,
                "tokens_trained": trained,
                "compute_flops": total_flops,
                "wall_s": time.time() - t0,
            }
            if (
                eval_recs
                and scorer is not None
                and (  # start() asks for a scorer with eval_data
                    (cfg.eval_every and step and step % cfg.eval_every == 0) or last
                )
            ):
                rec["greedy_accuracy"] = greedy_accuracy(
                    model, codec, eval_recs, max_resp, scorer, world, cfg.precision
                )
            if log is not None:
                log.log(step + 1, rec)
            bar.set_postfix(
                loss=f"{rec['loss']:.3f}",
                **({"acc": f"{rec['greedy_accuracy']:.2f}"} if "greedy_accuracy" in rec else {}),
            )
    weights = dist.full_state_dict(model, world, rank0_only=True) if world.distributed else None
    if world.main:
        ckpt = save_checkpoint(
            out / "checkpoints",
            cfg.steps,
            model,
            tok,
            {"step": cfg.steps, "compute_flops": total_flops},
            meta={"stage": "sft", "compute_flops": total_flops},
            weights=weights,
            precision=cfg.precision,
        )
        publish_model(ckpt, out / "model")
        write_json(
            out / "summary.json",
            {
                "steps": cfg.steps,
                "compute_flops": total_flops,
                "tokens_trained": trained,
                "wall_s": time.time() - t0,
                "final_loss": loss,
                "world_size": world.size,
            },
        )
    dist.barrier(world)
    return out / "model"
