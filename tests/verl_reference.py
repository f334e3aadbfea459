"""verl's own loss and rollout-correction code on the cases tests/test_conformance_verl.py sends,
in a process of its own.

verl 0.9.1 is installed without its dependencies beside the project (setup.sh puts it and the
few packages its import needs in .venv/verl-nodeps): its `transformers<5.11` pin cannot share the
project's environment, and its import pulls in ray, which the rest of a test session must not
see (vLLM and transformers change course when ray is importable). So the test runs this file
with that folder on PYTHONPATH and compares the numbers it writes back.

usage: python tests/verl_reference.py CASES.pt RESULTS.pt
CASES.pt: {name: case}; a case is {"kind": "loss", "mode", "old", "logp", "adv", "mask", "agg",
"config": ActorConfig fields, "is_weights"?} or {"kind": "weights", "log_ratio", "mask", "level",
"threshold"}. RESULTS.pt: {name: {"loss", "grad", "metrics"} or {"weights"}} plus "version".
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


KINDS = {"loss": loss, "weights": weights}


def main(cases_path: str, out_path: str) -> None:
    import verl

    cases = torch.load(cases_path)
    results = {name: KINDS[c["kind"]](c) for name, c in cases.items()}
    results["version"] = verl.__version__
    torch.save(results, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
