"""verl's own loss and rollout-correction code on the cases tests/test_conformance_verl.py sends,
in a process of its own.

verl 0.9.1 is installed without its dependencies beside the project (setup.sh puts it and the
few packages its import needs in .venv/verl-nodeps): its `transformers<5.11` pin cannot share the
project's environment, and its import pulls in ray, which the rest of a test session must not
see (vLLM and transformers change course when ray is importable). So the test runs this file
with that folder on PYTHONPATH and compares the numbers it writes back.

usage: python tests/verl_reference.py CASES.pt RESULTS.pt
CASES.pt: {name: case}; a case's "kind" names the function below that answers it (loss, weights,
dataset, reward, config, megatron, log), the rest are its arguments. RESULTS.pt: {name: what that function returns}
plus "version".
"""

from __future__ import annotations

import sys

import torch


def loss(case: dict) -> dict:
    """verl's registered policy loss `mode` (core_algos.get_policy_loss_fn), called as its actor
    calls it, and the gradient of the loss in the log-probs. case["policy_loss"]: the fields of
    its PolicyLossConfig (Clip-Cov's, KL-Cov's); case["seed"]: torch's global seed just before
    the call (Clip-Cov draws its tokens from torch's global generator)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    cfg = ActorConfig(
        strategy="fsdp",
        rollout_n=2,
        ppo_micro_batch_size_per_gpu=1,
        policy_loss=PolicyLossConfig(loss_mode=case["mode"], **case.get("policy_loss", {})),
        **case["config"],
    )
    logp = case["logp"].clone().requires_grad_()
    if "seed" in case:
        torch.manual_seed(case["seed"])
    value, metrics = get_policy_loss_fn(case["mode"])(
        old_log_prob=case["old"],
        log_prob=logp,
        advantages=case["adv"],
        response_mask=case["mask"],
        loss_agg_mode=case["agg"],
        config=cfg,
        rollout_is_weights=case.get("is_weights"),
    )
    value.backward()
    return {"loss": value.detach(), "grad": logp.grad, "metrics": metrics}


def weights(case: dict) -> dict:
    """verl's rollout-correction weights (rollout_corr_helper.compute_rollout_correction_weights)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    w, _ = compute_rollout_correction_weights(
        case["log_ratio"],
        case["mask"],
        rollout_is=case["level"],
        rollout_is_threshold=case["threshold"],
    )
    return {"weights": w}


def dataset(case: dict) -> dict:
    """verl's RLHFDataset over the parquet at case["path"] with the model's tokenizer (its chat
    template renders each prompt; prompts over max_prompt_length filtered as verl filters)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = AutoTokenizer.from_pretrained(case["tokenizer"])
    ds = RLHFDataset(
        data_files=[case["path"]],
        tokenizer=tok,
        config=OmegaConf.create(
            {"max_prompt_length": case["max_prompt_length"], "cache_dir": case["cache_dir"]}
        ),
    )
    return {
        "rows": [
            {k: ds[i][k] for k in ("data_source", "reward_model", "extra_info", "raw_prompt")}
            for i in range(len(ds))
        ]
    }


def reward(case: dict) -> dict:
    """verl's NaiveRewardManager over a batch of tokenized prompts and responses, scoring with
    the function at case["score_path"] (as `custom_reward_function.path` loads it)."""
    import importlib.util

    import numpy as np
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    spec = importlib.util.spec_from_file_location("custom_reward", case["score_path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tok = AutoTokenizer.from_pretrained(case["tokenizer"])
    batch = DataProto.from_dict(
        tensors={
            "prompts": case["prompts"],
            "responses": case["responses"],
            "attention_mask": case["attention_mask"],
        },
        non_tensors={
            "data_source": np.array(case["data_source"], dtype=object),
            "reward_model": np.array(case["reward_model"], dtype=object),
            "extra_info": np.array([dict(x) for x in case["extra_info"]], dtype=object),
        },
    )
    out = NaiveRewardManager(tok, num_examine=0, compute_score=module.compute_score)(batch)
    return {"rewards": out.sum(dim=1)}


def _compose(case: dict):
    """verl's trainer config `case["name"]` composed with `case["overrides"]` as its command
    line would (Hydra's compose API over verl's own config folder), then checked by the
    validation its main_ppo runs first."""
    import pathlib

    import verl
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    folder = str(pathlib.Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=folder, version_base=None):
        cfg = compose(config_name=case["name"], overrides=case["overrides"])
    auto_set_device(cfg)
    validate_config(
        cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
    )
    return cfg


def config(case: dict) -> dict:
    """`_compose`: {"error": message} when verl refuses, else the values at `case["read"]`
    (dotted keys)."""
    from omegaconf import OmegaConf

    try:
        cfg = _compose(case)
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        return {"error": f"{type(e).__name__}: {e}"}
    return {"values": {k: OmegaConf.select(cfg, k) for k in case.get("read", ())}}


def megatron(case: dict) -> dict:
    """What verl's Megatron engine hands Megatron for the composed config (`_compose`), its
    actor turned into verl's own dataclasses as its engine worker turns it (McoreActorConfig:
    `.engine` and `.optim`), each answered by Megatron-Core's own code:

    - layout: initialize_model_parallel with the arguments verl's engine passes
      (MegatronEngine._init_device_mesh), on a world of nnodes x n_gpus_per_node ranks: torch's
      fake process group (one process; the groups are made, nothing is sent), Megatron's gloo
      groups off (the fake group cannot make them; they do not change the layout);
    - optimizer: Megatron's OptimizerConfig from verl's init_megatron_optim_config;
    - transformer: Megatron's TransformerConfig of case["shape"] with the engine's sizes and
      override_transformer_config (its own checks of the recompute settings run there);
    - ray_env: the env_vars of the runtime environment main_ppo starts Ray with (its
      get_ppo_ray_runtime_env merged with ray_kwargs.ray_init.runtime_env, as run_ppo merges)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu
    from megatron.core.transformer import TransformerConfig
    from omegaconf import OmegaConf
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.megatron.optimizer import init_megatron_optim_config

    cfg = _compose(case)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    e = actor.engine
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    if dist.is_initialized() and dist.get_world_size() != world:
        dist.destroy_process_group()
    if not dist.is_initialized():
        dist.init_process_group(backend="fake", store=FakeStore(), rank=0, world_size=world)
    out = {}
    try:
        mpu.initialize_model_parallel(
            tensor_model_parallel_size=e.tensor_model_parallel_size,
            pipeline_model_parallel_size=e.pipeline_model_parallel_size,
            virtual_pipeline_model_parallel_size=e.virtual_pipeline_model_parallel_size,
            use_sharp=False,
            context_parallel_size=e.context_parallel_size,
            expert_model_parallel_size=e.expert_model_parallel_size,
            expert_tensor_parallel_size=e.expert_tensor_parallel_size,
            nccl_communicator_config_path=None,
            create_gloo_process_groups=False,
        )
        out["layout"] = {
            "tp": mpu.get_tensor_model_parallel_world_size(),
            "ep": mpu.get_expert_model_parallel_world_size(),
            "etp": mpu.get_expert_tensor_parallel_world_size(),
            "edp": mpu.get_expert_data_parallel_world_size(),
            "dp": mpu.get_data_parallel_world_size(),
            "world": world,
        }
    except Exception as err:  # noqa: BLE001 - Megatron's refusal is the answer
        out["layout"] = {"error": f"{type(err).__name__}: {err}"}
    finally:
        mpu.destroy_model_parallel()
    opt = init_megatron_optim_config(actor.optim, use_distributed_optimizer=True, bf16=True)
    out["optimizer"] = {
        "adam_beta1": opt.adam_beta1,
        "adam_beta2": opt.adam_beta2,
        "lr": opt.lr,
        "weight_decay": opt.weight_decay,
    }
    overrides = dict(e.override_transformer_config)
    try:
        tf = TransformerConfig(
            **case["shape"],
            tensor_model_parallel_size=e.tensor_model_parallel_size,
            expert_model_parallel_size=e.expert_model_parallel_size,
            expert_tensor_parallel_size=e.expert_tensor_parallel_size,
            pipeline_model_parallel_size=e.pipeline_model_parallel_size,
            sequence_parallel=e.sequence_parallel,
            **overrides,
        )
        out["transformer"] = {
            k: getattr(tf, k)
            for k in (
                "recompute_granularity",
                "recompute_method",
                "recompute_num_layers",
                "moe_aux_loss_coeff",
            )
        }
    except Exception as err:  # noqa: BLE001
        out["transformer"] = {"error": f"{type(err).__name__}: {err}"}
    env = OmegaConf.merge(
        get_ppo_ray_runtime_env(cfg), cfg.ray_kwargs.get("ray_init", {}).get("runtime_env", {})
    )
    out["ray_env"] = OmegaConf.to_container(env).get("env_vars", {})
    return out


def log(case: dict) -> dict:
    """verl's own tracking with its file backend (what `trainer.logger: [console, file]` makes)
    writing case["rows"] ([(step, metrics)]) to case["path"], as the launcher points it there."""
    import os

    from verl.utils.tracking import Tracking

    os.environ["VERL_FILE_LOGGER_PATH"] = case["path"]
    tracker = Tracking(project_name="gspo-bench", experiment_name="run", default_backend=["file"])
    for step, data in case["rows"]:
        tracker.log(data=data, step=step)
    tracker.finish()
    return {}


KINDS = {
    "loss": loss,
    "weights": weights,
    "dataset": dataset,
    "reward": reward,
    "config": config,
    "megatron": megatron,
    "log": log,
}


def main(cases_path: str, out_path: str) -> None:
    import verl

    cases = torch.load(cases_path)
    results = {name: KINDS[c["kind"]](c) for name, c in cases.items()}
    results["version"] = verl.__version__
    torch.save(results, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
