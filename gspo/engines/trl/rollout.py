"""`engine: trl` with `rollout.engine: vllm`: TRL's GRPOTrainer samples through this project's own
vLLM engine (gspo.rollout.vllm_engine), colocated in each training process, by TRL's
`rollout_func`.

- Weights: before a rollout step's generation the engine gets the policy TRL trains (its full
  state dict in the rollout dtype, gathered tensor by tensor under FSDP2, as the native trainer
  syncs it), unless it has them already.
- Memory: the engine's `gpu_memory_utilization` share and sleep mode are RolloutConfig's, as
  under the native trainer (on CUDA the engine sleeps while TRL updates).
- Seeds: prompt i of rollout step s is sampled with the native trainer's seed
  (gspo.native.data.prompt_seed), rank r's prompts numbered after ranks 0..r-1's. On one rank TRL
  receives the native trainer's prompts in order, so the two engines' first step samples the
  same responses from the same model (a test compares them).
- The engine's log-probs go to TRL as its sampling log-probs; TRL still recomputes the old
  policy's where an update is off-policy (its own vLLM correction is not switched on).

Why not TRL's own `use_vllm`: its colocated weight sync writes through vLLM's per-parameter
loaders, which vLLM's CPU build replaces when it repacks the weights (an AttributeError at the
first sync); this engine reloads weights through its own worker extension, tested on CPU.
"""

from __future__ import annotations

import torch

from gspo.config.fields import ConfigError
from gspo.config.train import RLConfig
from gspo.infra import distributed as dist
from gspo.native.data import prompt_seed


class Rollout:
    """TRL's rollout_func over a VLLMEngine; `close()` stops the engine."""

    def __init__(self, cfg: RLConfig, tokenizer, stop_ids: list[int], world: dist.World):
        from gspo.rollout import make_engine

        r = cfg.rollout
        self.engine = make_engine(
            "vllm",
            cfg.model,
            device=dist.rank_device(r.device, world),
            dtype=r.dtype,
            seed=cfg.seed,
            **r.vllm_options(),
        )
        self.cfg, self.tok, self.stop_ids, self.world = cfg, tokenizer, stop_ids, world
        self.synced = 0  # TRL's optimizer step whose weights the engine holds

    def __call__(self, prompts: list[str], trainer) -> dict:
        cfg, G = self.cfg, self.cfg.group_size
        # TRL hands each prompt G times in a row (its sampler repeats it per generation)
        uniq = prompts[::G]
        if len(prompts) != G * len(uniq) or any(
            prompts[i] != uniq[i // G] for i in range(len(prompts))
        ):
            raise ConfigError(
                f"rollout: TRL passed {len(prompts)} prompts that are not groups "
                f"of {G} (group_size) repeats; engine: trl with rollout.engine: "
                "vllm needs TRL's default sampler"
            )
        now = trainer.state.global_step
        if now != self.synced:
            policy = trainer.accelerator.unwrap_model(trainer.model)
            writer = self.world.local_rank == 0  # one writer per node (vllm_engine)
            self.engine.update_weights(
                dist.full_state_dict(  # FSDP2: gathered one at a time
                    policy, self.world, dtype=getattr(torch, cfg.rollout.dtype), keep=writer
                ),
                world=self.world,
            )
            self.synced = now
        step = now // (cfg.minibatches * cfg.epochs)
        ids = [self.tok(p, add_special_tokens=False).input_ids for p in uniq]
        first = self.world.rank * len(uniq)
        groups = self.engine.generate(
            ids,
            n=G,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            stop_token_ids=self.stop_ids,
            seed=[prompt_seed(cfg.seed, step, first + i) * G for i in range(len(ids))],
        )
        return {
            "prompt_ids": [p for p in ids for _ in range(G)],
            "completion_ids": [c.token_ids for g in groups for c in g],
            "logprobs": [c.logprobs for g in groups for c in g],
        }

    def close(self) -> None:
        self.engine.close()
