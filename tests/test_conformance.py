"""The objectives against TRL's own loss code, called as installed: `GRPOTrainer._compute_loss`
(trl 1.16) on identical float64 tensors, for every objective TRL ships. The loss, its gradient and
the clip fraction agree where the conventions do (1e-9, in practice to the last bit); each known
difference of convention is asserted as a difference (docs/OBJECTIVES.md lists them). A negative
control shows the comparison fails when a clip bound or the aggregation is changed.

The trainer object is made without its __init__ (no model, no datasets): `_compute_loss` reads
only the attributes set below, and the model's forward is the one thing given, as the log-probs
it would have returned (the tensor whose gradient is compared). GMPO is verl's only
(`loss_mode=geo_mean`): tests/test_conformance_verl.py holds it, and the others, to verl's code.
"""

from __future__ import annotations

import collections
import warnings

import pytest
import torch

from gspo.core.objectives import policy_loss
from gspo.core.offpolicy import FIELDS, Params

B, T = 4, 6
VESPO_PARAMS = Params(vespo_k_pos=1.5, vespo_lambda_pos=0.5, vespo_k_neg=4.0, vespo_lambda_neg=1.25)


def trl_loss(
    loss_type: str,
    logp,
    old,
    adv,
    mask,
    *,
    eps_low: float,
    eps_high: float,
    level: str = "token",
    max_len: int = T,
    tau=(1.0, 1.05),
    is_ratio=None,
    opsm=None,
    config=None,
    tmp_path=None,
):
    """TRL's GRPO loss of `logp` (a leaf) and its metrics: (loss, {metric: value}); `opsm`: its
    off_policy_mask_threshold, `config`: more of GRPOConfig's arguments (VESPO's)."""
    from accelerate import Accelerator
    from trl import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = GRPOConfig(
            output_dir=str(tmp_path),
            loss_type=loss_type,
            epsilon=eps_low,
            epsilon_high=eps_high,
            importance_sampling_level=level,
            sapo_temperature_pos=tau[0],
            sapo_temperature_neg=tau[1],
            beta=0.0,
            report_to=[],
            use_cpu=True,
            per_device_train_batch_size=B,
            num_generations=2,
            max_completion_length=max_len,
            off_policy_mask_threshold=opsm,
            **(config or {}),
        )
    t = object.__new__(GRPOTrainer)
    t.args, t.loss_type, t.importance_sampling_level = args, loss_type, level
    t.epsilon_low, t.epsilon_high, t.beta = eps_low, eps_high, 0.0
    t.max_completion_length = max_len
    t.top_entropy_quantile, t.off_policy_mask_threshold = 1.0, opsm
    t._entropy_bonus_enabled, t.aux_loss_enabled = False, False
    # the rollout correction: TRL multiplies each token's loss by the ratios it computed when it
    # sampled with vLLM; given here, as ours are given to policy_loss
    t.use_vllm = t.vllm_importance_sampling_correction = is_ratio is not None
    t.model = torch.nn.Identity()  # .training: True
    t.current_gradient_accumulation_steps = 1
    t.accelerator = Accelerator(cpu=True)
    t._metrics = {"train": collections.defaultdict(list), "eval": collections.defaultdict(list)}
    # the model's forward: the log-probs and entropies it would have computed
    t._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    loss = t._compute_loss(None, inputs)
    return loss, {k: v[-1] for k, v in t._metrics["train"].items()}


@pytest.fixture
def batch():
    """Old log-probs, a mask with two short sequences and advantages of both signs."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    return old, mask, torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64), g


def both(batch, tmp_path, ours: dict, trl: dict, noise: float = 0.3):
    """(our loss, TRL's loss, our gradient, TRL's gradient, our metrics, TRL's metrics) on log-probs
    `noise` off the old ones."""
    old, mask, adv, g = batch
    lp = old + noise * torch.randn(B, T, generator=g, dtype=torch.float64)
    a, b = lp.clone().requires_grad_(), lp.clone().requires_grad_()
    l_ours, m_ours = policy_loss(a, old, adv, mask, **ours)
    l_ours.backward()
    l_trl, m_trl = trl_loss(trl.pop("loss_type"), b, old, adv, mask, tmp_path=tmp_path, **trl)
    l_trl.backward()
    # padding's gradient is zero in ours and masked in TRL's
    return float(l_ours), float(l_trl), a.grad * mask, b.grad * mask, m_ours, m_trl


# objective: (our settings, TRL's settings, TRL's clip-fraction convention: which of ours it is)
SAME = {
    "grpo": (
        dict(objective="grpo", eps_low=0.2, eps_high=0.27),
        dict(loss_type="grpo", eps_low=0.2, eps_high=0.27),
        "clip_frac_tokens",
    ),
    # GSPO in TRL: sequence-level ratios with loss_type grpo; it counts clipped sequences
    "gspo": (
        dict(objective="gspo", eps_low=3e-4, eps_high=4e-4),
        dict(loss_type="grpo", level="sequence", eps_low=3e-4, eps_high=4e-4),
        "clip_frac_seqs",
    ),
    "dapo": (
        dict(objective="dapo", eps_low=0.2, eps_high=0.28, agg="token-mean"),
        dict(loss_type="dapo", eps_low=0.2, eps_high=0.28),
        "clip_frac_tokens",
    ),
    # token-mean as engine: trl maps it (gspo.engines.trl.rl.LOSS_TYPE): TRL's bnpo, a minibatch's
    # token mean, at token level and at GSPO's sequence level
    "dapo-bnpo": (
        dict(objective="dapo", eps_low=0.2, eps_high=0.28, agg="token-mean"),
        dict(loss_type="bnpo", eps_low=0.2, eps_high=0.28),
        "clip_frac_tokens",
    ),
    "gspo-bnpo": (
        dict(objective="gspo", eps_low=3e-4, eps_high=4e-4, agg="token-mean"),
        dict(loss_type="bnpo", level="sequence", eps_low=3e-4, eps_high=4e-4),
        "clip_frac_seqs",
    ),
    # Dr. GRPO's constant: TRL's max_completion_length, our norm_len
    "dr_grpo": (
        dict(
            objective="dr_grpo",
            eps_low=0.2,
            eps_high=0.2,
            agg="seq-mean-token-sum-norm",
            norm_len=T,
        ),
        dict(loss_type="dr_grpo", eps_low=0.2, eps_high=0.2, max_len=T),
        "clip_frac_tokens",
    ),
    # CISPO: TRL's epsilon_high is the weight's cap itself (ScaleRL's eps_max), ours the
    # distance above 1 (verl's); no lower bound in TRL, eps_low 1.0 here
    "cispo": (
        dict(objective="cispo", eps_low=1.0, eps_high=0.5, agg="token-mean"),
        dict(loss_type="cispo", eps_low=0.2, eps_high=1.5),
        None,
    ),
    # SAPO with temperatures a float32 holds exactly (see the difference below)
    "sapo": (
        dict(objective="sapo", tau_pos=1.0, tau_neg=1.25),
        dict(loss_type="sapo", eps_low=0.2, eps_high=0.2, tau=(1.0, 1.25)),
        None,
    ),
    # LUSPO: GSPO's sequence ratio, each sequence's token terms summed; TRL counts sequences
    "luspo": (
        dict(objective="luspo", eps_low=3e-4, eps_high=4e-4, agg="seq-mean-token-sum"),
        dict(loss_type="luspo", level="sequence", eps_low=3e-4, eps_high=4e-4),
        "clip_frac_seqs",
    ),
    # VESPO with its defaults (TRL's), and with other parameters (each exact in float32: TRL
    # makes k and lambda float32 tensors, as SAPO's temperatures)
    "vespo": (
        dict(objective="vespo", agg="token-mean"),
        dict(loss_type="vespo", eps_low=0.2, eps_high=0.2),
        None,
    ),
    "vespo-params": (
        dict(objective="vespo", agg="token-mean", params=VESPO_PARAMS),
        dict(
            loss_type="vespo",
            eps_low=0.2,
            eps_high=0.2,
            config={f: getattr(VESPO_PARAMS, f) for f in FIELDS if f.startswith("vespo_")},
        ),
        None,
    ),
    # OPSM over GRPO and over DAPO: sequences with A < 0 drifting past 0.0 drop out
    "grpo-opsm": (
        dict(objective="grpo", eps_low=0.2, eps_high=0.27, opsm_threshold=0.0),
        dict(loss_type="grpo", eps_low=0.2, eps_high=0.27, opsm=0.0),
        "clip_frac_tokens",
    ),
    "dapo-opsm": (
        dict(objective="dapo", eps_low=0.2, eps_high=0.28, agg="token-mean", opsm_threshold=0.0),
        dict(loss_type="dapo", eps_low=0.2, eps_high=0.28, opsm=0.0),
        "clip_frac_tokens",
    ),
}


@pytest.mark.parametrize("name", list(SAME))
def test_the_loss_gradient_and_clip_fraction_equal_trls(batch, tmp_path, name):
    ours, trl, clip_key = SAME[name]
    # GSPO's (and LUSPO's) band is 7e-4 wide: some in, some out
    noise = 1e-3 if name.startswith(("gspo", "luspo")) else 0.3
    l_ours, l_trl, g_ours, g_trl, m_ours, m_trl = both(batch, tmp_path, ours, dict(trl), noise)
    assert l_ours == pytest.approx(l_trl, abs=1e-9, rel=1e-9)
    assert torch.allclose(g_ours, g_trl, atol=1e-9, rtol=0)
    assert g_ours.abs().max() > 1e-3  # not vacuous: the loss moves the log-probs
    if clip_key is not None:
        # TRL logs its clip fraction in float32
        assert m_ours[clip_key] == pytest.approx(m_trl["clip_ratio/region_mean"], rel=1e-6)
        assert 0 < m_ours[clip_key] < 1  # some terms clipped, not all
    if "opsm_threshold" in ours:  # not vacuous: the mask drops some sequences, not all
        assert 0 < m_ours["opsm_masked_seqs"] < 1


def test_gspos_clip_fraction_is_sequences_in_trl_and_tokens_in_ours_too(batch, tmp_path):
    ours, trl, _ = SAME["gspo"]
    *_, m_ours, m_trl = both(batch, tmp_path, ours, dict(trl), noise=1e-3)
    # the two conventions, both logged here: the share of sequences (TRL's, verl's for GSPO)
    # and the share of tokens, which weights each clipped sequence by its length
    assert m_ours["clip_frac_seqs"] == pytest.approx(m_trl["clip_ratio/region_mean"], rel=1e-6)
    assert m_ours["clip_frac_tokens"] != pytest.approx(m_trl["clip_ratio/region_mean"], rel=1e-3)


def test_cispos_upper_bound_means_the_cap_in_trl_and_the_distance_above_1_in_ours(batch, tmp_path):
    ours, _, _ = SAME["cispo"]
    l_ours, l_trl, *_ = both(
        batch, tmp_path, ours, dict(loss_type="cispo", eps_low=0.2, eps_high=0.5)
    )
    assert abs(l_ours - l_trl) > 1e-3  # the same number, two different bounds


def test_sapos_temperatures_are_float32_in_trl(batch, tmp_path):
    # torch.where(advantages > 0, 1.0, 1.05) makes float32 temperatures: 1.05 is not one, so
    # TRL's SAPO differs from the float64 computation at the 1e-8 level
    l_ours, l_trl, *_ = both(
        batch,
        tmp_path,
        dict(objective="sapo", tau_pos=1.0, tau_neg=1.05),
        dict(loss_type="sapo", eps_low=0.2, eps_high=0.2, tau=(1.0, 1.05)),
    )
    assert 1e-12 < abs(l_ours - l_trl) < 1e-6


@pytest.mark.parametrize("change", ["clip bound", "aggregation"])
def test_the_comparison_fails_when_a_clip_bound_or_the_aggregation_changes(batch, tmp_path, change):
    # negative control: DAPO against TRL's dapo with our upper bound 0.27 instead of 0.28, or
    # our per-sequence mean instead of the token mean; the equality above would not hold
    ours, trl, _ = SAME["dapo"]
    ours = {
        **ours,
        **({"eps_high": 0.27} if change == "clip bound" else {"agg": "seq-mean-token-mean"}),
    }
    l_ours, l_trl, g_ours, g_trl, m_ours, _ = both(batch, tmp_path, ours, dict(trl))
    assert m_ours["clip_frac_tokens"] > 0  # some tokens sit past the upper bound
    assert abs(l_ours - l_trl) > 1e-6  # the first assertion above fails
    if change == "aggregation":  # and every token's weight changes
        assert not torch.allclose(g_ours, g_trl, atol=1e-9, rtol=0)


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_the_rollout_correction_weighs_the_loss_as_trls_vllm_importance_sampling(
    batch, tmp_path, mode
):
    # TRL computes its ratios while sampling (not callable alone); the same weights, ours,
    # enter both losses the same way. Sequence-level ratios are one per sequence in TRL, (B, 1).
    from gspo.core.objectives import rollout_correction

    old, mask, adv, g = batch
    engine = old + 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    w = rollout_correction(old, engine, mask, mode, c_min=0.0, c_max=1.5)
    assert 0 < float((w * mask).sum() / mask.sum()) and (w[mask > 0] != 1).any()
    trl_w = w[:, :1] if mode.startswith("sequence") else w
    ours, trl, _ = SAME["dapo"]
    l_ours, l_trl, g_ours, g_trl, *_ = both(
        batch, tmp_path, {**ours, "is_weights": w}, {**trl, "is_ratio": trl_w}
    )
    assert l_ours == pytest.approx(l_trl, abs=1e-9, rel=1e-9)
    assert torch.allclose(g_ours, g_trl, atol=1e-9, rtol=0)


# negative controls for the objectives built for off-policy training: each changed setting
# moves our loss off TRL's (the equality above would fail)
OFF_POLICY_CONTROLS = {
    "luspo's per-sequence token mean": ("luspo", {"agg": "seq-mean-token-mean"}),
    "vespo's k for A >= 0": ("vespo", {"params": Params(vespo_k_pos=2.5)}),
    "opsm's threshold": ("grpo-opsm", {"opsm_threshold": 0.1}),
    "opsm off": ("grpo-opsm", {"opsm_threshold": None}),
}


@pytest.mark.parametrize("control", list(OFF_POLICY_CONTROLS))
def test_the_off_policy_comparisons_fail_when_a_setting_changes(batch, tmp_path, control):
    name, change = OFF_POLICY_CONTROLS[control]
    ours, trl, _ = SAME[name]
    noise = 1e-3 if name == "luspo" else 0.3
    l_ours, l_trl, g_ours, g_trl, *_ = both(batch, tmp_path, {**ours, **change}, dict(trl), noise)
    assert abs(l_ours - l_trl) > 1e-9 or not torch.allclose(g_ours, g_trl, atol=1e-9, rtol=0)
    assert not torch.allclose(g_ours, g_trl, atol=1e-9, rtol=0)
