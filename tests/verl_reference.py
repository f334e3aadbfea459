"""verl's own loss and rollout-correction code on the cases tests/test_conformance_verl.py sends,
in a process of its own.

verl 0.9.1 is installed without its dependencies beside the project (setup.sh puts it and the
few packages its import needs in .venv/verl-nodeps): its `transformers<5.11` pin cannot share the
project's environment, and its import pulls in ray, which the rest of a test session must not
see (vLLM and transformers change course when ray is importable). So the test runs this file
with that folder on PYTHONPATH and compares the numbers it writes back.

usage: python tests/verl_reference.py CASES.pt RESULTS.pt
CASES.pt: {name: case}; a case's "kind" names the function below that answers it (loss, weights,
dataset, reward, config, log), the rest are its arguments. RESULTS.pt: {name: what that function returns}
plus "version".
"""

from __future__ import annotations

import sys

import torch


def loss(case: dict) -> dict:
    """verl's registered policy loss `mode` (core_algos.get_policy_loss_fn), called as its actor
    calls it, and the gradient of the loss in the log-probs."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig

    cfg = ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1,
                      **case["config"])
    logp = case["logp"].clone().requires_grad_()
    value, metrics = get_policy_loss_fn(case["mode"])(
        old_log_prob=case["old"], log_prob=logp, advantages=case["adv"],
        response_mask=case["mask"], loss_agg_mode=case["agg"], config=cfg,
        rollout_is_weights=case.get("is_weights"))
    value.backward()
    return {"loss": value.detach(), "grad": logp.grad, "metrics": metrics}


def weights(case: dict) -> dict:
    """verl's rollout-correction weights (rollout_corr_helper.compute_rollout_correction_weights)."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights

    w, _ = compute_rollout_correction_weights(case["log_ratio"], case["mask"],
                                              rollout_is=case["level"],
                                              rollout_is_threshold=case["threshold"])
    return {"weights": w}


def dataset(case: dict) -> dict:
    """verl's RLHFDataset over the parquet at case["path"] with the model's tokenizer (its chat
    template renders each prompt; prompts over max_prompt_length filtered as verl filters)."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tok = AutoTokenizer.from_pretrained(case["tokenizer"])
    ds = RLHFDataset(data_files=[case["path"]], tokenizer=tok, config=OmegaConf.create(
        {"max_prompt_length": case["max_prompt_length"], "cache_dir": case["cache_dir"]}))
    return {"rows": [{k: ds[i][k] for k in ("data_source", "reward_model", "extra_info",
                                            "raw_prompt")} for i in range(len(ds))]}


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
        tensors={"prompts": case["prompts"], "responses": case["responses"],
                 "attention_mask": case["attention_mask"]},
        non_tensors={"data_source": np.array(case["data_source"], dtype=object),
                     "reward_model": np.array(case["reward_model"], dtype=object),
                     "extra_info": np.array([dict(x) for x in case["extra_info"]], dtype=object)})
    out = NaiveRewardManager(tok, num_examine=0, compute_score=module.compute_score)(batch)
    return {"rewards": out.sum(dim=1)}


def config(case: dict) -> dict:
    """verl's trainer config `case["name"]` composed with `case["overrides"]` as its command
    line would (Hydra's compose API over verl's own config folder), then checked by the
    validation its main_ppo runs first: {"error": message} when it refuses, else the values at
    `case["read"]` (dotted keys)."""
    import pathlib

    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    folder = str(pathlib.Path(verl.__file__).parent / "trainer" / "config")
    try:
        with initialize_config_dir(config_dir=folder, version_base=None):
            cfg = compose(config_name=case["name"], overrides=case["overrides"])
        auto_set_device(cfg)
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg),
                        use_critic=need_critic(cfg))
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        return {"error": f"{type(e).__name__}: {e}"}
    return {"values": {k: OmegaConf.select(cfg, k) for k in case.get("read", ())}}


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


KINDS = {"loss": loss, "weights": weights, "dataset": dataset, "reward": reward, "config": config,
         "log": log}


def main(cases_path: str, out_path: str) -> None:
    import verl

    cases = torch.load(cases_path)
    results = {name: KINDS[c["kind"]](c) for name, c in cases.items()}
    results["version"] = verl.__version__
    torch.save(results, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
