"""Cold-start SFT: next-token loss on response tokens only, over the tasks' worked solutions.

The periodic greedy check scores completions with a `scorer(record, completion) -> float` given
by the caller (pipeline.sft wires in evaluators.tasks.reward): the library never knows the
benchmarks."""

from __future__ import annotations

import copy
import math
import pathlib
import time

import torch
from tqdm import tqdm

from typing import Callable

from gspo.checkpoint import publish_model, run_info, save_checkpoint, write_run_info
from gspo.config import SFTConfig, to_dict
from gspo.data import Mix, encoder, micro_batches, pad_batch, sequence_logprobs, trim_padding
from gspo.flops import FlopCounter
from gspo.io import read_jsonl, write_json
from gspo.models import PRESETS, build_tiny, enable_activation_checkpointing, load_model
from gspo.tracking import MetricsLog, Tracking, stage_run, supersede

Scorer = Callable[[dict, str], float]     # (record, completion) -> score in [0, 1]


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up then cosine decay to min_lr_ratio * lr; a pure function of the step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    frac = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def initial_model(model: str, init_seed: int, work_dir: pathlib.Path):
    """A preset name builds a fresh random model under work_dir; anything else is a path."""
    if model in PRESETS:
        path = build_tiny(model, work_dir / "init", seed=init_seed)
    else:
        path = pathlib.Path(model)
    return load_model(path)


@torch.no_grad()
def greedy_accuracy(model, tokenizer, records: list[dict], max_new_tokens: int,
                    scorer: Scorer) -> float:
    """Share of records solved by greedy decoding (a quick progress signal, not the evaluation)."""
    from gspo.rollout.torch_engine import TorchEngine

    engine = TorchEngine(None, model=copy.deepcopy(model))
    enc = encoder(tokenizer)
    outs = engine.generate([enc(r["prompt"]) for r in records], n=1, temperature=0.0,
                           max_new_tokens=max_new_tokens, seed=0,
                           stop_token_ids=[tokenizer.eos_token_id])
    texts = [tokenizer.decode(g[0].token_ids, skip_special_tokens=True) for g in outs]
    return sum(scorer(r, t) for r, t in zip(records, texts)) / max(len(records), 1)


def run_sft(cfg: SFTConfig, scorer: Scorer | None = None, *,
            tracking: Tracking | None = None) -> pathlib.Path:
    """Train; `scorer` (needed when cfg.eval_data is set) judges the greedy check's answers.
    SFT always starts over, so the MLflow run a previous attempt left is superseded first."""
    if cfg.eval_data and scorer is None:
        raise ValueError("run_sft: eval_data is set, so a scorer(record, completion) is needed "
                         "for the greedy check (e.g. evaluators.tasks.reward)")
    tracking = tracking or Tracking()
    supersede(cfg.out_dir, tracking)
    # MLflow run (when tracking has a URI), status FINISHED / FAILED / KILLED.
    with stage_run("sft", cfg.out_dir, commit="immediate", tracking=tracking):
        return _run_sft(cfg, scorer)


def _setup(cfg: SFTConfig, out: pathlib.Path):
    """Threads, the output folder and the initial model, in training mode on its device."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    model, tok = initial_model(cfg.model, cfg.init_seed, out)
    model.to(cfg.device).train()
    if cfg.activation_checkpointing:
        enable_activation_checkpointing(model)
    return model, tok


def _update(model, opt, batch, cfg: SFTConfig) -> tuple[float, float]:
    """One optimizer step on `batch`: the mean response-token loss, accumulated over
    micro-batches (micro_batch_size, or max_tokens_per_micro_batch sorted and trimmed); returns
    (loss, grad norm)."""
    mask = batch["target_mask"]
    rows = torch.arange(mask.shape[0])
    micros = micro_batches(rows, batch["attention_mask"].sum(1), cfg.micro_batch_size,
                           cfg.max_tokens_per_micro_batch)
    opt.zero_grad(set_to_none=True)
    loss = 0.0
    for idx in micros:
        sub = batch if len(micros) == 1 else {k: v[idx] for k, v in batch.items()}
        if cfg.max_tokens_per_micro_batch:
            sub = trim_padding(sub)
        logp = sequence_logprobs(model, sub, chunk=cfg.logprob_chunk)
        part = -(logp * sub["target_mask"]).sum() / mask.sum()
        part.backward()
        loss += part.item()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return loss, gnorm.item()


def _run_sft(cfg: SFTConfig, scorer: Scorer | None) -> pathlib.Path:
    out = pathlib.Path(cfg.out_dir)
    mix = Mix(cfg.train_data, need_solution=True)
    eval_recs = read_jsonl(cfg.eval_data)[:cfg.eval_problems] if cfg.eval_data else []
    model, tok = _setup(cfg, out)
    enc = encoder(tok)
    eos = tok.eos_token_id
    flops = FlopCounter(model)
    max_resp = max(len(enc(r["solution"])) for _, _, recs in mix.files for r in recs) + 1
    hashes = mix.hashes()
    write_run_info(out, run_info(to_dict(cfg), hashes, stage="sft"))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=cfg.weight_decay)
    log = MetricsLog(out / "metrics.jsonl")
    total_flops = 0.0
    tokens = 0
    t0 = time.time()
    bar = tqdm(range(cfg.steps), desc="sft", dynamic_ncols=True)
    for step in bar:
        lr = lr_at(step, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        recs = mix.sample(cfg.batch_size, seed=cfg.seed, step=step)
        batch = pad_batch([enc(r["prompt"]) for r in recs],
                          [enc(r["solution"]) + [eos] for r in recs], tok.pad_token_id, cfg.max_len)
        batch = {k: v.to(cfg.device) for k, v in batch.items()}
        mask = batch["target_mask"]
        loss, gnorm = _update(model, opt, batch, cfg)
        lengths = batch["attention_mask"].sum(1).tolist()
        total_flops += 3 * flops.forward(lengths)
        tokens += int(mask.sum())
        last = step == cfg.steps - 1
        if step % cfg.log_every == 0 or last:
            rec = {"loss": loss, "lr": lr, "grad_norm": gnorm,
                   "tokens_trained": tokens, "compute_flops": total_flops,
                   "wall_s": time.time() - t0}
            if eval_recs and ((cfg.eval_every and step and step % cfg.eval_every == 0) or last):
                rec["greedy_accuracy"] = greedy_accuracy(model, tok, eval_recs, max_resp, scorer)
                model.train()
            log.log(step + 1, rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}",
                            **({"acc": f"{rec['greedy_accuracy']:.2f}"} if "greedy_accuracy" in rec else {}))
    ckpt = save_checkpoint(out / "checkpoints", cfg.steps, model, tok,
                           {"step": cfg.steps, "compute_flops": total_flops},
                           meta={"stage": "sft", "compute_flops": total_flops})
    publish_model(ckpt, out / "model")
    write_json(out / "summary.json", {"steps": cfg.steps, "compute_flops": total_flops,
                                      "tokens_trained": tokens, "wall_s": time.time() - t0,
                                      "final_loss": loss})
    return out / "model"
