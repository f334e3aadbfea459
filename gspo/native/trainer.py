"""The RL loop shared by every objective (GRPO, GSPO, GSPO-token and their successors,
gspo.core.objectives.OBJECTIVES); `cfg.algorithm` is the only switch.

One step: prompts -> G rollouts each (engine) -> rewards (`reward_fn`, the caller's: the trainer
never knows the benchmarks) -> old log-probs (a no-grad pass; the first minibatch's come from its
own update forward) -> advantages, shaping and rollout correction (gspo.native.shaping) -> `epochs` x
`minibatches` updates (gspo.native.policy_update) -> engine sync -> log, checkpoint.

The first minibatch of each step is on-policy (ratio exactly 1); the later ones are not, which is
where the algorithms differ. Every random draw is a pure function of (seed, step), as is the LR,
so resuming from a checkpoint reproduces an uninterrupted run bit for bit on CPU.
"""

from __future__ import annotations

import pathlib
import time
from typing import Callable

import torch
from tqdm import tqdm

from gspo.config.fields import to_dict
from gspo.config.train import RLConfig
from gspo.core import objectives
from gspo.errors import TrainingError
from gspo.infra import checkpoint as ckpt
from gspo.infra import distributed as dist
from gspo.infra.checkpoint import STATE, latest_checkpoint, publish_model, run_info, write_run_info
from gspo.io import write_json
from gspo.model import moe, tokens
from gspo.model.flops import FlopCounter
from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import enable_activation_checkpointing
from gspo.native import policy_update, shaping, staleness, step_metrics
from gspo.native.data import Mix, micro_batched, micro_batches, pad_batch, prompt_seed
from gspo.rollout import make_engine
from gspo.tracking import samples
from gspo.tracking.runs import MetricsLog, Tracking, stage_run, supersede

# (records, completions) -> one reward per pair (pipeline.train wires evaluators.tasks.rewards in)
RewardFn = Callable[[list[dict], list[str]], list[float]]


class Trainer:
    def __init__(self, cfg: RLConfig, reward_fn: RewardFn, world: dist.World = dist.World()):
        self.cfg = cfg
        self.reward_fn = reward_fn
        self.world = world
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.out = pathlib.Path(cfg.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.ckpt_root = self.out / "checkpoints"
        self.mix = Mix(cfg.train_data)
        self.start_step = 0
        self.state = {
            "compute_flops": 0.0,
            "tokens_generated": 0,
            "tokens_trained": 0,
            "nonfinite_skips": 0,
            "old_logprob_passes": 0,
            "wall_s": 0.0,
        }
        resume_from = latest_checkpoint(self.ckpt_root) if cfg.resume else None
        if resume_from is not None:
            ckpt.check_same_run(self.out / "run_info.json", to_dict(cfg))
        src = resume_from if resume_from is not None else cfg.model
        self.policy, self.tok = dist.load_sharded(
            src, world, cfg.device, cfg.precision, prepare=self._prepare
        )
        self.old_routing: moe.Routing | None = None  # MoE: the replayed / old top-k experts
        # MoE: what the old policy's routers picked themselves, and the rollout engine's
        self.own_old_routing: moe.Routing | None = None
        self.engine_routing: moe.Routing | None = None
        # the step's rollout-correction weights (gspo.native.shaping)
        self.is_weights: torch.Tensor | None = None
        self.sampled: dict[
            str, float
        ] = {}  # the step's dynamic-sampling metrics (gspo.native.shaping)
        # a logged step's per-sample ratio and clip (gspo.tracking.samples)
        self.sample_stats: torch.Tensor | None = None
        # non-finite updates in a row, over steps (gspo.native.policy_update)
        self.nonfinite = policy_update.NonfiniteStreak(cfg.max_consecutive_nonfinite)
        # The torch engine reports its routing on MoE models: replayed with
        # routing_replay_source: engine, else compared with the trainer's (moe/engine_routing_mismatch).
        self.want_engine_routing = (
            self.is_moe
            and cfg.rollout.engine == "torch"
            and (self._replays_engine or cfg.moe_metrics)
        )
        self.opt = torch.optim.AdamW(
            self.policy.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=cfg.weight_decay
        )
        st = torch.load(resume_from / STATE, weights_only=False) if resume_from else {}
        if resume_from is not None:  # with the fp32 masters where the files hold bf16
            ckpt.load_training_state(self.policy, self.opt, resume_from, st)
            self.start_step = st["step"]
            self.state = st["counters"]
        # staleness k: the policy versions the next steps sample from (gspo.native.staleness)
        self.lag = staleness.Lag(cfg.staleness, self.policy)
        if resume_from is not None:
            self.lag.load(resume_from / ckpt.OPTIM, st.get("behaviour_versions"), self.start_step)
        self.engine = self._make_engine(src)  # it holds the live weights
        if self.lag.stale(self.start_step) or (
            st.get("masters") and cfg.rollout.engine != "torch"  # it read the bf16 files
        ):
            self._sync_late(self.start_step)
        self.ref = None  # sharded like the policy: its forwards pair up across ranks too
        if cfg.kl_coef:
            self.ref, _ = dist.load_sharded(cfg.model, world, cfg.device, cfg.precision)
            self.ref.eval().requires_grad_(False)
        self.codec = tokens.codec(self.tok, src, cfg.prompt)
        self.flops = FlopCounter(self.policy)
        self.log = None  # only rank 0 writes the run's records
        if world.main:
            self.log = MetricsLog(
                self.out / "metrics.jsonl",
                resume_step=self.start_step if resume_from is not None else None,
            )
            write_run_info(
                self.out,
                run_info(
                    to_dict(cfg),
                    self.mix.hashes(),
                    stage="rl",
                    algorithm=cfg.algorithm,
                    world_size=world.size,
                    resumed_from=str(resume_from),
                ),
            )

    def _prepare(self, model) -> None:
        """Checks and settings on the whole model, before it is sharded."""
        moe.validate(self.cfg, model)  # MoE-only options on a dense model: a ConfigError
        self.is_moe = moe.is_moe(model)
        self._refuse_unsupported()
        if self.cfg.activation_checkpointing:
            enable_activation_checkpointing(model)

    def _refuse_unsupported(self) -> None:
        cfg, world = self.cfg, self.world
        if cfg.prompts_per_step % world.size:
            raise TrainingError(
                f"prompts_per_step={cfg.prompts_per_step} does not divide by the "
                f"{world.size} ranks (each owns whole prompt groups); pick a "
                "multiple of the number of processes"
            )
        if self.is_moe and cfg.max_tokens_per_micro_batch:
            raise TrainingError(
                "max_tokens_per_micro_batch: MoE models replay routing over the "
                "whole padded batch; use micro_batch_size"
            )
        if world.distributed and self.is_moe:
            raise TrainingError(
                "MoE models train in a world of one for now (Routing Replay "
                "is not sharded); run without torchrun"
            )

    def _make_engine(self, src):
        r = self.cfg.rollout
        device = dist.rank_device(r.device, self.world)  # one engine per rank
        if r.engine == "torch":  # a whole copy of its own on every rank
            eng_model = dist.unsharded_copy(self.policy, self.world, getattr(torch, r.dtype))
            return make_engine("torch", src, device=device, dtype=r.dtype, model=eng_model)
        return make_engine(
            r.engine, src, device=device, dtype=r.dtype, seed=self.cfg.seed, **r.vllm_options()
        )

    def _sync_engine(self) -> None:
        dtype = getattr(torch, self.cfg.rollout.dtype)
        if self.cfg.rollout.engine == "vllm" and self.world.distributed:
            # one writer per node (gspo.rollout.vllm_engine): the others keep no host copy
            sd = dist.full_state_dict(
                self.policy, self.world, dtype=dtype, keep=self.world.local_rank == 0
            )
            self.engine.update_weights(sd, world=self.world)
        else:
            self.engine.update_weights(dist.full_state_dict(self.policy, self.world, dtype=dtype))

    def _sync_late(self, step: int) -> None:
        """The engine gets the weights step `step` samples from: the live ones, or with
        staleness k those of version step - k, kept since (gspo.native.staleness)."""
        with self.lag.weights(self.lag.version(step), live=step):
            self._sync_engine()

    def lr_at(self, step: int) -> float:
        w = self.cfg.warmup_steps
        return self.cfg.lr * min(1.0, (step + 1) / w) if w else self.cfg.lr

    # -- one rollout batch --------------------------------------------------------------------
    def rollout(self, step: int):
        """The step's prompts, completions and rewards (dynamic sampling: gspo.native.shaping; what it
        discards still counts as compute)."""
        cfg = self.cfg
        if not cfg.dynamic_sampling:
            return self._draw(step, 0)
        out, self.sampled, waste = shaping.dynamic_sampling(
            lambda k: self._draw(step, k),
            cfg.group_size,
            cfg.dynamic_sampling_max_rounds,
            self.world,
        )
        self.state["compute_flops"] += self.flops.forward(
            [len(p) + len(c.token_ids) for p, c in waste]
        )
        self.state["tokens_generated"] += sum(len(c.token_ids) for _, c in waste)
        return out

    def _draw(self, step: int, draw: int):
        cfg = self.cfg
        # the step's prompts are the same for any world size; each rank samples its share of
        # whole groups, every prompt with its own seed, so samples do not depend on the world
        share = cfg.prompts_per_step // self.world.size
        mine = range(self.world.rank * share, (self.world.rank + 1) * share)
        everyone = self.mix.sample(cfg.prompts_per_step, seed=cfg.seed, step=step, draw=draw)
        recs = [everyone[i] for i in mine]
        prompts = [self.codec.prompt(r["prompt"]) for r in recs]
        base = draw * cfg.prompts_per_step  # draw k's prompts get seeds of their own
        groups = self.engine.generate(
            prompts,
            n=cfg.group_size,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            seed=[prompt_seed(cfg.seed, step, base + i) * cfg.group_size for i in mine],
            stop_token_ids=self.codec.stop_ids,
            return_routing=self.want_engine_routing,
        )
        flat_r, flat_p, flat_c, texts = [], [], [], []
        for rec, p, group in zip(recs, prompts, groups):
            for c in group:
                flat_r.append(rec)
                flat_p.append(p)
                flat_c.append(c)
                texts.append(self.codec.decode(c.token_ids))
        return flat_p, flat_c, torch.tensor(self.reward_fn(flat_r, texts))

    def old_logprobs(
        self, batch, rows: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Old log-probs and entropy (B, T) of `batch`'s rows `rows` (None: all; the others 0:
        the update's on-policy forward gives them). Every rank takes part in a pass, with rows
        or without (FSDP's collectives); with one minibatch no rank makes one."""
        if rows is not None and self.cfg.minibatches == 1:
            zero = torch.zeros_like(batch["target_mask"])
            return zero, zero.clone()
        self.state["old_logprob_passes"] += 1
        self.policy.eval()
        # MoE: record every router's top-k experts, (B, T, k) per layer, for Routing Replay and
        # the volatility metric (gspo.model.moe); nothing is hooked on a dense model.
        # With routing_replay_source: engine this pass already routes like the engine did.
        record = self.is_moe and (self.cfg.routing_replay or self.cfg.moe_metrics)
        replay = self.engine_routing if self._replays_engine else None
        with torch.no_grad(), moe.routing_hooks(self.policy, record=record, replay=replay) as hooks:
            logp, ent = self._chunked(batch, with_entropy=True, rows=rows)
        self.own_old_routing = hooks.routing(own=True)
        self.old_routing = replay if replay is not None else hooks.routing()
        return logp, ent

    def _compute(self):
        """bf16 or fp32 compute for a training forward (gspo.infra.distributed.compute_precision)."""
        return dist.compute_precision(self.cfg.precision, self.cfg.device, self.world)

    @property
    def _replays_engine(self) -> bool:
        return self.cfg.routing_replay and self.cfg.routing_replay_source == "engine"

    def _chunked(self, batch, with_entropy=False, rows: torch.Tensor | None = None):
        """Log-probs (and entropy), each (B, T), of a no-grad pass over `batch` in micro-batches
        (gspo.native.data.micro_batched): without them the old-log-prob pass of a real-scale step is
        one forward over 256 sequences of ~8K tokens. A dense model's rows go longest first,
        each micro-batch cut to its longest row, as many rows as the update's (micro_batch_size,
        the token budget, else a minibatch's share of the rank's rows): no more memory than an
        update forward, and a fifth to a quarter less padding on the tiny default. MoE runs keep
        the rows in order, untrimmed (their routing records are laid by row, full width)."""
        cfg = self.cfg
        B = batch["input_ids"].shape[0]
        size = cfg.micro_batch_size or (0 if self.is_moe else -(-B // cfg.minibatches))
        rows = torch.arange(B) if rows is None else rows
        micros = micro_batches(
            rows,
            batch["attention_mask"].sum(1).cpu(),
            size,
            cfg.max_tokens_per_micro_batch,
            by_length=not self.is_moe,
        )
        n_micro = int(dist.all_reduce(torch.tensor(len(micros)), self.world, "max"))

        def forward(sub):
            with self._compute():
                out = sequence_logprobs(
                    self.policy,
                    sub,
                    cfg.temperature,
                    with_entropy=with_entropy,
                    chunk=cfg.logprob_chunk,
                )
            return out if with_entropy else (out,)

        outs = micro_batched(
            forward, batch, micros, n_micro, n_out=1 + with_entropy, trim=not self.is_moe
        )
        return tuple(outs) if with_entropy else outs[0]

    def update(self, batch, old_logp, adv, step: int, rows=None) -> tuple[dict, int, dict]:
        """epochs x minibatches optimizer steps on this rank's `batch` (its rows `rows` of the
        global batch; None: all of it) against old log-probs (B, T) and advantages (B,), with
        the step's old routing and correction weights (gspo.native.policy_update.update)."""
        lrn = policy_update.Learner(
            self.cfg, self.world, self.policy, self.opt, self.ref, self.is_moe
        )
        self.sample_stats = (
            torch.full((len(adv), 2), float("nan"))
            if samples.due(self.cfg.log_samples_every, step + 1)
            else None
        )
        old = policy_update.OldPolicy(
            old_logp,
            adv,
            self.old_routing,
            self.is_weights,
            self.sample_stats,
            fresh=not self.lag.stale(step),
        )
        upd, skipped, first = policy_update.update(lrn, batch, old, step, rows, self.nonfinite)
        self.state["nonfinite_skips"] += skipped
        return upd, skipped, first

    # -- the loop -----------------------------------------------------------------------------
    def train(self) -> pathlib.Path:
        cfg = self.cfg
        bar = tqdm(
            range(self.start_step, cfg.steps),
            desc=f"rl[{cfg.algorithm}]",
            total=cfg.steps,
            initial=self.start_step,
            dynamic_ncols=True,
            disable=not self.world.main,
        )
        for step in bar:
            rec = self.step(step)
            if self.log is not None:
                self.log.log(step + 1, rec)
            bar.set_postfix(
                reward=f"{rec['reward_mean']:.3f}", clip=f"{rec.get('clip_frac_tokens', 0):.3f}"
            )
            if (step + 1) % cfg.ckpt_every == 0 or step + 1 == cfg.steps:
                self.checkpoint(step + 1)
        self.engine.close()  # vLLM holds processes and memory
        if self.world.main:
            publish_model(latest_checkpoint(self.ckpt_root), self.out / "model")
            write_json(
                self.out / "summary.json",
                {
                    "steps": cfg.steps,
                    "algorithm": cfg.algorithm,
                    "world_size": self.world.size,
                    **self.state,
                },
            )
        dist.barrier(self.world)
        return self.out / "model"

    def step(self, step: int) -> dict:
        """One RL step (module doc); returns its metrics record."""
        cfg = self.cfg
        for g in self.opt.param_groups:
            g["lr"] = self.lr_at(step)
        t0 = time.perf_counter()
        prompts, comps, rewards = self.rollout(step)
        t1 = time.perf_counter()
        batch = pad_batch(prompts, [c.token_ids for c in comps], self.codec.pad_id)
        batch = {k: v.to(cfg.device) for k, v in batch.items()}
        mask = batch["target_mask"]
        if self.want_engine_routing:
            self.engine_routing = moe.engine_routing(
                prompts,
                comps,
                batch["input_ids"].shape[1],
                moe.routers(self.policy)[0][2].num_experts,
            )
        engine_logp = step_metrics.engine_logprobs(prompts, comps, mask)
        n_local = batch["input_ids"].shape[0]
        rows = torch.arange(self.world.rank * n_local, (self.world.rank + 1) * n_local)
        pass_rows = self._pass_rows(step, rows)
        self.lag.keep(step)
        if cfg.old_logprobs == "recompute":  # the behaviour policy's (staleness: an older one)
            with self.lag.weights(self.lag.version(step), live=step):
                old_logp, entropy = self.old_logprobs(batch, pass_rows)
        else:
            old_logp, entropy = engine_logp, None
            if self._replays_engine:
                self.old_routing = self.engine_routing
        sh = shaping.shape(
            batch,
            torch.tensor([c.finish_reason == "length" for c in comps]),
            rewards,
            old_logp,
            engine_logp,
            cfg,
            self.world,
        )
        self.is_weights = sh.is_weights
        self.lag.forget(self.lag.version(step + 1))  # this step's behaviour policy is read
        t2 = time.perf_counter()
        upd, skipped, first = self.update(sh.train, old_logp, sh.advantages, step, rows=rows)
        self._log_samples(step + 1, prompts, comps, rewards, sh.advantages)
        if pass_rows is not None and "idx" in first:  # the rows the pass left to the update
            entropy[first["idx"]] = first["entropy"]
        lag = step_metrics.behaviour_spread(old_logp, mask, first, rows, self.world)
        self._sync_late(step + 1)
        t3 = time.perf_counter()
        moe_rec = self._moe_record(batch, first)
        t4 = time.perf_counter()
        if self.is_moe:
            moe_rec["time_moe_s"] = t4 - t3
        f, f_pass = self._count(batch, t4 - t0, pass_rows)
        mfu = (
            step_metrics.mfu(
                f,
                {
                    "rollout": (1, t1 - t0),
                    "update": (3 * cfg.epochs, t3 - t2),
                    "old_logprob": (f_pass / f if f else 0, t2 - t1),
                },
                cfg.peak_flops * self.world.size,
            )
            if cfg.peak_flops
            else {}
        )
        # the whole step's rollouts, in global order (a world of one: these very tensors)
        rewards = dist.all_gather_cat(rewards, self.world)
        resp_len = dist.all_gather_cat(mask.sum(1), self.world)
        return {
            "reward_mean": rewards.mean().item(),
            "reward_std": rewards.std().item() if len(rewards) > 1 else 0.0,
            "zero_variance_groups": objectives.zero_variance_fraction(rewards, cfg.group_size),
            "response_length": resp_len.mean().item(),
            "lr": self.lr_at(step),
            "skipped_updates": skipped,
            "staleness": step - self.lag.version(step),
            **lag,
            **step_metrics.gap_metrics(engine_logp, old_logp, entropy, mask, first, self.world),
            "time_rollout_s": t1 - t0,
            "time_old_logprob_s": t2 - t1,
            "time_update_s": t3 - t2,
            **upd,
            **moe_rec,
            **mfu,
            **sh.metrics,
            **self.sampled,
            **self.state,
        }

    def _log_samples(self, step: int, prompts, comps, rewards, adv) -> None:
        """Rank 0's samples of a step whose samples are logged (gspo.tracking.samples)."""
        if self.sample_stats is None or not self.world.main:
            return
        dec = self.codec.decode
        samples.write(
            self.out,
            step,
            samples.rows(
                step,
                [dec(p) for p in prompts],
                [dec(c.token_ids) for c in comps],
                rewards.tolist(),
                adv.tolist(),
                self.sample_stats.tolist(),
                [len(c.token_ids) for c in comps],
                [c.finish_reason for c in comps],
            ),
        )

    def _moe_record(self, batch, first) -> dict:
        """The step's MoE metrics (none on a dense model); forgets the step's routings."""
        cfg = self.cfg
        moe_rec = (
            step_metrics.moe_pass(self.policy, self._chunked, self.old_routing, batch, first)
            if self.is_moe and cfg.moe_metrics
            else {}
        )
        if self.engine_routing is not None and cfg.moe_metrics:
            moe_rec.update(
                step_metrics.engine_routing_mismatch(
                    self.engine_routing, self.own_old_routing, batch, first
                )
            )
        if self.old_routing is not None:
            moe_rec["moe/routing_cache_bytes"] = self.old_routing.nbytes
        self.old_routing = self.own_old_routing = self.engine_routing = None
        return moe_rec

    def _pass_rows(self, step: int, rows: torch.Tensor) -> torch.Tensor | None:
        """This rank's rows the old-log-prob pass computes: all (None) but those of the step's
        on-policy first minibatch, whose update forward gives their old log-probs
        (gspo.native.policy_update.on_policy_rows); all where something needs every row's before the
        update: the rollout correction's weights, an MoE run's routing records."""
        cfg = self.cfg
        if (
            self.is_moe
            or cfg.rollout_correction != "none"
            or cfg.old_logprobs != "recompute"
            or self.lag.stale(step)  # no row's update forward is the behaviour policy's
        ):
            return None
        first = set(policy_update.on_policy_rows(cfg, step, len(rows) * self.world.size).tolist())
        return torch.tensor(
            [i for i, g in enumerate(rows.tolist()) if g not in first], dtype=torch.long
        )

    def _count(self, batch, seconds: float, pass_rows) -> tuple[float, float]:
        """Add the step's compute, tokens and time to the run's counters; returns the step's
        forward FLOPs over all its sequences (gspo.model.flops) and the old-log-prob pass's."""
        cfg = self.cfg
        lengths = dist.all_gather_cat(batch["attention_mask"].sum(1), self.world)
        f = self.flops.forward(lengths.tolist())  # the whole step's, summed over ranks
        extra = int(self.is_moe and cfg.moe_metrics)  # the MoE metrics' no-grad pass
        # the old-log-prob pass over the rows it ran (none when the engine's log-probs stand in)
        f_pass = 0.0
        if cfg.old_logprobs == "recompute" and pass_rows is None:
            f_pass = f
        elif cfg.old_logprobs == "recompute":
            ran = torch.zeros(len(batch["input_ids"]), dtype=torch.bool)
            ran[pass_rows] = True
            ran = dist.all_gather_cat(ran.to(lengths.device), self.world)
            f_pass = self.flops.forward(lengths[ran].tolist())
        # generation + the pass + forward and backward (3x) per epoch
        self.state["compute_flops"] += f * (1 + 3 * cfg.epochs + extra) + f_pass
        resp = int(dist.all_reduce(batch["target_mask"].sum(), self.world))
        self.state["tokens_generated"] += resp
        self.state["tokens_trained"] += resp * cfg.epochs
        self.state["wall_s"] += seconds
        return f, f_pass

    def checkpoint(self, step: int) -> pathlib.Path:
        path = ckpt.save_rl_checkpoint(
            self.ckpt_root,
            step,
            self.policy,
            self.tok,
            self.opt,
            self.world,
            {
                "step": step,
                "counters": dict(self.state),
                "world_size": self.world.size,
                "behaviour_versions": self.lag.versions(),
            },
            meta={"stage": "rl", "compute_flops": self.state["compute_flops"]},
            precision=self.cfg.precision,
            extra=self.lag.state(),
        )
        if self.world.main:
            ckpt.prune_checkpoints(self.ckpt_root, self.cfg.keep_last, self.cfg.keep_steps)
        return path


def run_rl(
    cfg: RLConfig,
    reward_fn: RewardFn,
    *,
    tracking: Tracking | None = None,
    restart_if_changed: bool = False,
    world: dist.World = dist.World(),
) -> pathlib.Path:
    """Train (or resume) the run of `cfg`, rewarding completions with `reward_fn`, inside its
    MLflow stage run (metrics sent as checkpoints cover them). restart_if_changed: see
    prepare_out_dir."""
    tracking = prepare_out_dir(cfg, tracking, restart_if_changed, world)
    with stage_run("rl", cfg.out_dir, commit="checkpoint", tracking=tracking):
        return Trainer(cfg, reward_fn, world).train()


def prepare_out_dir(
    cfg: RLConfig,
    tracking: Tracking | None,
    restart_if_changed: bool,
    world: dist.World = dist.World(),
) -> Tracking:
    """restart_if_changed: when cfg.out_dir holds a run of another lineage (config or starting
    model), supersede its MLflow run and start over instead of refusing to resume (what the
    workflow wants when a rule re-runs because its inputs changed). Returns the tracking this
    rank uses: only rank 0 talks to MLflow. Shared with gspo.engines.trl.rl."""
    tracking = (tracking or Tracking()) if world.main else Tracking()
    if restart_if_changed and world.main:
        lin = ckpt.lineage(to_dict(cfg))
        if ckpt.lineage_changed(cfg.out_dir, lin):
            print(
                f"rl: {cfg.out_dir} holds a run of another config or starting model: starting over"
            )
            supersede(cfg.out_dir, tracking)
            ckpt.reset_run(cfg.out_dir)
        elif latest_checkpoint(pathlib.Path(cfg.out_dir) / "checkpoints") is not None:
            print(f"rl: {cfg.out_dir}: same lineage, resuming from the latest checkpoint")
        ckpt.write_lineage(cfg.out_dir, lin)
    dist.barrier(world)
    return tracking
