"""The RL loop shared by GRPO, GSPO and GSPO-token; `cfg.algorithm` is the only switch.

One step:  sample prompts -> G rollouts each (engine) -> rewards (the benchmark's own scoring)
-> group advantages -> old log-probs (one no-grad pass of the policy) -> `epochs` x `minibatches`
clipped updates -> sync the new weights into the engine -> log -> maybe checkpoint.

The first minibatch of each step is on-policy (ratio exactly 1); the later ones are not, which is
where the algorithms differ. Every random draw is a pure function of (seed, step), and the LR
schedule of the step, so resuming from a checkpoint reproduces an uninterrupted run bit for bit on
CPU.
"""

from __future__ import annotations

import copy
import math
import pathlib
import time

import torch
from tqdm import tqdm

from gspo import moe, objectives
from gspo.checkpoint import (latest_checkpoint, publish_model, run_info, save_checkpoint,
                             write_run_info, STATE)
from gspo.config import RLConfig, to_dict
from gspo.data import Mix, pad_batch, sequence_logprobs
from gspo.flops import FlopCounter
from gspo.io import write_json
from gspo.models import load_model
from gspo.rollout import make_engine
from gspo.sft import encoder
from gspo.tracking import MetricsLog, stage_run


class TrainingError(RuntimeError):
    pass


def _step_seed(seed: int, step: int, salt: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + salt) % (2**63 - 1)


def _finite(*xs) -> bool:
    return all(math.isfinite(float(x)) for x in xs)


class Trainer:
    def __init__(self, cfg: RLConfig):
        self.cfg = cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.out = pathlib.Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt_root = self.out / "checkpoints"
        self.mix = Mix(cfg.train_data)
        self.start_step = 0
        self.state = {"compute_flops": 0.0, "tokens_generated": 0, "tokens_trained": 0,
                      "nonfinite_skips": 0, "old_logprob_passes": 0, "wall_s": 0.0}
        resume_from = latest_checkpoint(self.ckpt_root) if cfg.resume else None
        if resume_from is not None:
            _check_same_run(self.out / "run_info.json", to_dict(cfg))
        src = resume_from if resume_from is not None else cfg.model
        self.policy, self.tok = load_model(src)
        self.policy.to(cfg.device)
        moe.validate(cfg, self.policy)   # MoE-only options on a dense model: a ConfigError
        self.is_moe = moe.is_moe(self.policy)
        self.old_routing = None          # MoE: the replayed / old top-k experts (moe.Routing)
        self.own_old_routing = None      # MoE: what the old policy's routers picked themselves
        self.engine_routing = None       # MoE: what the rollout engine's routers picked
        # The torch engine reports its routing on MoE models: replayed with
        # routing_replay_source: engine, else compared with the trainer's (engine_routing_mismatch).
        self.want_engine_routing = self.is_moe and cfg.rollout.engine == "torch" and (
            self._replays_engine or cfg.moe_metrics)
        self.opt = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, betas=(0.9, 0.99),
                                     weight_decay=cfg.weight_decay)
        if resume_from is not None:
            st = torch.load(resume_from / STATE, weights_only=False)
            self.opt.load_state_dict(st["optimizer"])
            self.start_step = st["step"]
            self.state = st["counters"]
        self.ref = None
        if cfg.kl_coef:
            self.ref, _ = load_model(cfg.model)
            self.ref.to(cfg.device).eval().requires_grad_(False)
        self.engine = self._make_engine(src)
        self.enc = encoder(self.tok)
        self.flops = FlopCounter(self.policy)
        self.log = MetricsLog(self.out / "metrics.jsonl",
                              resume_step=self.start_step if resume_from is not None else None)
        write_run_info(self.out, run_info(to_dict(cfg), self.mix.hashes(), stage="rl",
                                          algorithm=cfg.algorithm, resumed_from=str(resume_from)))

    def _make_engine(self, src):
        r = self.cfg.rollout
        if r.engine == "torch":
            eng_model = copy.deepcopy(self.policy).to(dtype=getattr(torch, r.dtype))
            return make_engine("torch", src, device=r.device, dtype=r.dtype, model=eng_model)
        return make_engine(r.engine, src, device=r.device, dtype=r.dtype, seed=self.cfg.seed,
                           **r.vllm_options())

    def lr_at(self, step: int) -> float:
        w = self.cfg.warmup_steps
        return self.cfg.lr * min(1.0, (step + 1) / w) if w else self.cfg.lr

    # -- one rollout batch --------------------------------------------------------------------
    def rollout(self, step: int):
        from evaluators.tasks import rewards

        cfg = self.cfg
        recs = self.mix.sample(cfg.prompts_per_step, seed=cfg.seed, step=step)
        prompts = [self.enc(r["prompt"]) for r in recs]
        groups = self.engine.generate(prompts, n=cfg.group_size, temperature=cfg.temperature,
                                      top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                                      seed=_step_seed(cfg.seed, step, 1),
                                      stop_token_ids=[self.tok.eos_token_id],
                                      return_routing=self.want_engine_routing)
        flat_r, flat_p, flat_c, texts = [], [], [], []
        for rec, p, group in zip(recs, prompts, groups):
            for c in group:
                flat_r.append(rec)
                flat_p.append(p)
                flat_c.append(c)
                texts.append(self.tok.decode(c.token_ids, skip_special_tokens=True))
        r = rewards(flat_r, texts, workers=cfg.reward_workers)
        return flat_p, flat_c, torch.tensor(r)

    def old_logprobs(self, batch) -> tuple[torch.Tensor, torch.Tensor]:
        self.state["old_logprob_passes"] += 1
        self.policy.eval()
        # MoE: record every router's top-k experts, (B, T, k) per layer, for Routing Replay and
        # the volatility metric (gspo.moe); nothing is hooked on a dense model.
        # With routing_replay_source: engine this pass already routes like the engine did.
        record = self.is_moe and (self.cfg.routing_replay or self.cfg.moe_metrics)
        replay = self.engine_routing if self._replays_engine else None
        with torch.no_grad(), moe.routing_hooks(self.policy, record=record, replay=replay) as hooks:
            logp, ent = self._chunked(batch, with_entropy=True)
        self.own_old_routing = hooks.routing(own=True)
        self.old_routing = replay if replay is not None else hooks.routing()
        return logp, ent

    @property
    def _replays_engine(self) -> bool:
        return self.cfg.routing_replay and self.cfg.routing_replay_source == "engine"

    def _chunked(self, batch, with_entropy=False):
        mbs = self.cfg.micro_batch_size or batch["input_ids"].shape[0]
        outs = []
        for i in range(0, batch["input_ids"].shape[0], mbs):
            sub = {k: v[i:i + mbs] for k, v in batch.items()}
            outs.append(sequence_logprobs(self.policy, sub, self.cfg.temperature,
                                          with_entropy=with_entropy))
        if with_entropy:
            return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])
        return torch.cat(outs)

    def update(self, batch, old_logp, adv, step: int) -> tuple[dict, int, dict]:
        """epochs x minibatches optimizer steps.

        Returns averaged metrics, the number of skipped updates, and what the first (on-policy)
        minibatch saw: its indices, the trainer's log-probs and entropy, so the engine/trainer
        log-prob gap is measurable even when old log-probs are not recomputed.
        """
        cfg = self.cfg
        N = batch["input_ids"].shape[0]
        first: dict = {}
        gen = torch.Generator().manual_seed(_step_seed(cfg.seed, step, 2))
        per_mb: list[dict] = []
        skipped = 0
        self.policy.train()
        params = [p for p in self.policy.parameters() if p.requires_grad]
        for _ in range(cfg.epochs):
            perm = torch.randperm(N, generator=gen)
            for mb in perm.chunk(cfg.minibatches):
                self.opt.zero_grad(set_to_none=True)
                mbs = cfg.micro_batch_size or len(mb)
                mask_all = batch["target_mask"][mb]
                tot_tokens = mask_all.sum().clamp(min=1)
                loss_sum = 0.0
                metrics_acc: dict[str, list] = {}
                for j in range(0, len(mb), mbs):
                    idx = mb[j:j + mbs]
                    sub = {k: v[idx] for k, v in batch.items()}
                    on_policy = not per_mb and not skipped   # still on-policy: the first minibatch
                    # MoE: replay the old routing of these rows; in 'rollout' mode record the
                    # on-policy minibatch's routing as the old one (for the volatility metric).
                    with moe.routing_hooks(
                            self.policy,
                            replay=self.old_routing.rows(idx) if cfg.routing_replay else None,
                            record=(self.is_moe and on_policy and cfg.moe_metrics
                                    and cfg.old_logprobs == "rollout"),
                            keep_logits=self.is_moe and cfg.router_aux_loss_coef > 0) as hooks:
                        logp, ent = sequence_logprobs(self.policy, sub, cfg.temperature,
                                                      with_entropy=True)
                    if on_policy:
                        first.setdefault("idx", []).append(idx)
                        first.setdefault("logp", []).append(logp.detach())
                        first.setdefault("entropy", []).append(ent.detach())
                        if hooks.record:
                            first.setdefault("routing", []).append(hooks.routing(own=True))
                    ref_logp = None
                    if self.ref is not None:
                        with torch.no_grad():
                            ref_logp = sequence_logprobs(self.ref, sub, cfg.temperature)
                    loss, m = objectives.policy_loss(
                        logp, old_logp[idx], adv[idx], sub["target_mask"], level=cfg.level,
                        eps_low=cfg.eps_low, eps_high=cfg.eps_high, agg=cfg.agg,
                        log_ratio_clamp=cfg.log_ratio_clamp, ref_logp=ref_logp,
                        kl_coef=cfg.kl_coef)
                    if self.is_moe and cfg.router_aux_loss_coef > 0:   # load-balancing loss
                        aux = hooks.aux_loss(sub["attention_mask"])
                        loss = loss + cfg.router_aux_loss_coef * aux
                        m["moe/aux_loss_train"] = aux.item()
                    # Weight micro-batches so their sum equals the minibatch's own aggregate.
                    w = (sub["target_mask"].sum() / tot_tokens if cfg.agg == "token-mean"
                         else torch.tensor(len(idx) / len(mb)))
                    (loss * w).backward()
                    loss_sum += loss.item() * float(w)
                    for k, v in m.items():
                        metrics_acc.setdefault(k, []).append((v, float(w)))
                gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                if not _finite(loss_sum, gnorm):
                    self.opt.zero_grad(set_to_none=True)
                    skipped += 1
                    self.state["nonfinite_skips"] += 1
                    self._consecutive_nonfinite += 1
                    if self._consecutive_nonfinite >= cfg.max_consecutive_nonfinite:
                        raise TrainingError(
                            f"step {step + 1}: {self._consecutive_nonfinite} non-finite updates in "
                            f"a row (loss={loss_sum}, grad_norm={float(gnorm)}); stopping. Lower "
                            "lr, check the rewards and data, or raise max_consecutive_nonfinite")
                    continue
                self._consecutive_nonfinite = 0
                self.opt.step()
                rec = {k: (min(x for x, _ in v) if k == "ratio_min" else
                           max(x for x, _ in v) if k == "ratio_max" else
                           sum(x * w for x, w in v)) for k, v in metrics_acc.items()}
                rec["loss"] = loss_sum
                rec["grad_norm"] = float(gnorm)
                if not per_mb and not skipped:
                    # On-policy: with recomputed old log-probs every ratio is exactly 1 here, so
                    # whatever this minibatch clips comes from the engine/trainer mismatch alone.
                    first["clip_frac_onpolicy"] = rec.get("clip_frac_tokens", 0.0)
                per_mb.append(rec)
        routing = first.pop("routing", None)
        clip_on = first.pop("clip_frac_onpolicy", None)
        first = {k: torch.cat(v) for k, v in first.items()}
        if routing:
            first["routing"] = moe.Routing.cat(routing)
        if not per_mb:
            return {}, skipped, first
        out = {}
        for k in per_mb[0]:
            vals = [r[k] for r in per_mb]
            out[k] = min(vals) if k == "ratio_min" else max(vals) if k == "ratio_max" else \
                sum(vals) / len(vals)
        if clip_on is not None:
            out["clip_frac_tokens_onpolicy"] = clip_on
        if len(per_mb) > 1:  # the off-policy updates alone: where clipping can engage
            out["clip_frac_tokens_offpolicy"] = sum(r["clip_frac_tokens"] for r in per_mb[1:]) / (len(per_mb) - 1)
        return out, skipped, first

    # -- the loop -----------------------------------------------------------------------------
    def train(self) -> pathlib.Path:
        cfg = self.cfg
        self._consecutive_nonfinite = 0
        bar = tqdm(range(self.start_step, cfg.steps), desc=f"rl[{cfg.algorithm}]",
                   initial=self.start_step, total=cfg.steps, dynamic_ncols=True)
        for step in bar:
            for g in self.opt.param_groups:
                g["lr"] = self.lr_at(step)
            t0 = time.perf_counter()
            prompts, comps, rewards = self.rollout(step)
            t1 = time.perf_counter()
            batch = pad_batch(prompts, [c.token_ids for c in comps], self.tok.pad_token_id)
            batch = {k: v.to(cfg.device) for k, v in batch.items()}
            mask = batch["target_mask"]
            adv = objectives.group_advantages(rewards, cfg.group_size, scale=cfg.adv_scale)
            if self.want_engine_routing:
                self.engine_routing = moe.engine_routing(
                    prompts, comps, batch["input_ids"].shape[1],
                    moe.routers(self.policy)[0][2].num_experts)
            engine_logp = torch.zeros_like(mask)
            for i, (p, c) in enumerate(zip(prompts, comps)):
                engine_logp[i, len(p) - 1:len(p) - 1 + len(c.logprobs)] = torch.tensor(c.logprobs)
            if cfg.old_logprobs == "recompute":
                old_logp, entropy = self.old_logprobs(batch)
            else:
                old_logp, entropy = engine_logp, None
                if self._replays_engine:
                    self.old_routing = self.engine_routing
            t2 = time.perf_counter()
            upd, skipped, first = self.update(batch, old_logp, adv.to(cfg.device), step)
            self.engine.update_weights(self.policy.state_dict())
            t3 = time.perf_counter()
            moe_rec = self.moe_step_metrics(batch, first) if self.is_moe and cfg.moe_metrics else {}
            if self.engine_routing is not None and cfg.moe_metrics:
                moe_rec.update(self.engine_routing_mismatch(batch, first))
            if self.old_routing is not None:
                moe_rec["moe/routing_cache_bytes"] = self.old_routing.nbytes
            self.old_routing = self.own_old_routing = self.engine_routing = None
            t4 = time.perf_counter()
            if self.is_moe:
                moe_rec["time_moe_s"] = t4 - t3
            if entropy is None:   # rollout mode: the on-policy minibatch's forward pass
                idx, trainer_logp, m_gap = first["idx"], first["logp"], mask[first["idx"]]
                ent_val = ((first["entropy"] * m_gap).sum() / m_gap.sum()).item()
            else:
                idx, trainer_logp, m_gap = slice(None), old_logp, mask
                ent_val = ((entropy * mask).sum() / mask.sum()).item()
            gap = (engine_logp[idx] - trainer_logp) * m_gap                      # (b, T)
            seq_gap = gap.sum(1).abs() / m_gap.sum(1).clamp(min=1)              # (b,)

            lengths = batch["attention_mask"].sum(1).tolist()
            f = self.flops.forward(lengths)
            extra = int(self.is_moe and cfg.moe_metrics)    # the MoE metrics' no-grad pass
            # generation + (the old-log-prob pass, unless the engine's log-probs stand in) +
            # forward and backward (3x) per epoch
            old_pass = int(cfg.old_logprobs == "recompute")
            self.state["compute_flops"] += f * (1 + old_pass + 3 * cfg.epochs + extra)
            resp_len = mask.sum(1)
            self.state["tokens_generated"] += int(resp_len.sum())
            self.state["tokens_trained"] += int(resp_len.sum()) * cfg.epochs
            self.state["wall_s"] += t4 - t0
            rec = {
                "reward_mean": rewards.mean().item(),
                "reward_std": rewards.std().item() if len(rewards) > 1 else 0.0,
                "zero_variance_groups": objectives.zero_variance_fraction(rewards, cfg.group_size),
                "entropy": ent_val,
                "response_length": resp_len.mean().item(),
                "lr": self.lr_at(step),
                "skipped_updates": skipped,
                "logprob_gap_token_mean": (gap.abs().sum() / m_gap.sum()).item(),
                "logprob_gap_token_max": gap.abs().max().item(),
                "logprob_gap_seq_mean": seq_gap.mean().item(),
                "logprob_gap_seq_max": seq_gap.max().item(),
                "time_rollout_s": t1 - t0, "time_old_logprob_s": t2 - t1, "time_update_s": t3 - t2,
                **{k: v for k, v in upd.items()},
                **moe_rec,
                **{k: v for k, v in self.state.items()},
            }
            self.log.log(step + 1, rec)
            bar.set_postfix(reward=f"{rec['reward_mean']:.3f}",
                            clip=f"{rec.get('clip_frac_tokens', 0):.3f}")
            if (step + 1) % cfg.ckpt_every == 0 or step + 1 == cfg.steps:
                self.checkpoint(step + 1)
        getattr(self.engine, "close", lambda: None)()   # vLLM holds processes and memory
        final = latest_checkpoint(self.ckpt_root)
        publish_model(final, self.out / "model")
        write_json(self.out / "summary.json", {"steps": cfg.steps, "algorithm": cfg.algorithm,
                                               **self.state})
        return self.out / "model"

    def moe_step_metrics(self, batch, first) -> dict:
        """MoE, after the step's updates: one no-grad pass of the updated policy over the rollout
        batch with recording on. Its routing against the old policy's (the old-log-prob pass, or
        in 'rollout' mode the on-policy first minibatch's rows) gives moe/volatility; plus load
        balance over the real tokens and the aux (load-balancing) loss value."""
        self.policy.eval()
        with torch.no_grad(), moe.routing_hooks(self.policy, record=True, keep_logits=True) as h:
            self._chunked(batch)
        new = h.routing()
        rec = moe.load_balance(new, batch["attention_mask"])
        rec["moe/aux_loss"] = float(h.aux_loss(batch["attention_mask"]))
        old, rows = self._old_or_first(self.old_routing, first)
        if old is not None:
            rec.update(moe.volatility(old, new.rows(rows), moe.response_positions(batch)[rows]))
        return rec

    @staticmethod
    def _old_or_first(routing, first):
        """(routing, its batch rows): the old-log-prob pass's over all rows, or in 'rollout' mode
        (no such pass) the on-policy first minibatch's own routing over its rows."""
        if routing is None and "routing" in first:
            return first["routing"], first["idx"]
        return routing, slice(None)

    def engine_routing_mismatch(self, batch, first) -> dict:
        """Share of (response token, MoE layer) top-k expert sets on which the rollout engine's
        routers and the old policy's own routers (the old-log-prob pass, or in 'rollout' mode the
        on-policy first minibatch) disagree on the same samples: the train-inference routing
        mismatch, e.g. from a bf16 engine beside an fp32 trainer."""
        own, rows = self._old_or_first(self.own_old_routing, first)
        if own is None:
            return {}
        v = moe.volatility(self.engine_routing.rows(rows), own, moe.response_positions(batch)[rows])
        return {"moe/engine_routing_mismatch": v["moe/volatility"]} if v else {}

    def checkpoint(self, step: int) -> pathlib.Path:
        return save_checkpoint(self.ckpt_root, step, self.policy, self.tok,
                               {"step": step, "optimizer": self.opt.state_dict(),
                                "counters": dict(self.state)})


def _check_same_run(info_path: pathlib.Path, cfg_dict: dict) -> None:
    """Refuse to resume checkpoints that another config produced (only `steps` may grow)."""
    import json

    if not info_path.exists():
        return
    old = json.loads(info_path.read_text()).get("config", {})
    free = {"steps", "resume", "threads", "out_dir"}
    # A field the older run did not have yet counts as unchanged (it ran with the default).
    diff = sorted(k for k in set(old) & set(cfg_dict) if k not in free and old[k] != cfg_dict[k])
    if diff:
        raise TrainingError(
            f"{info_path.parent}: its checkpoints come from a different config (field "
            f"{diff[0]!r} differs); use another out_dir, delete the folder, or set resume: false")


def run_rl(cfg: RLConfig) -> pathlib.Path:
    # MLflow run (when MLFLOW_TRACKING_URI is set): metrics sent as checkpoints cover them,
    # status FINISHED / FAILED / KILLED (gspo.tracking).
    with stage_run("rl", cfg.out_dir, commit="checkpoint"):
        return Trainer(cfg).train()
