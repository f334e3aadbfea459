"""The objectives and masks built for off-policy training (gspo.core.offpolicy, registered in
gspo.core.objectives.OBJECTIVES), against values worked out by hand; their settings' checks."""

import math

import pytest
import torch

from gspo.config.fields import ConfigError
from gspo.config.train import DataSource, RLConfig
from gspo.core.objectives import ICEPOP_BAND, policy_loss, rollout_correction
from gspo.core.offpolicy import Params

LUSPO = dict(objective="luspo", eps_low=3e-4, eps_high=4e-4, agg="seq-mean-token-sum")
GSPO = dict(objective="gspo", eps_low=3e-4, eps_high=4e-4)


def leaf(rows):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=True)


def flat(t):
    return [x for row in t.tolist() for x in row]


def test_luspo_gives_every_token_the_same_weight_whatever_its_sequences_length():
    # on-policy (every ratio 1), A = (1, -1), lengths 1 and 3: LUSPO sums each sequence's terms,
    # -(1 * 1 - 1 * 3) / 2 = 1; each token's gradient is -A_i / B. GSPO's mean gives 0 and
    # -A_i / (B len_i): the long sequence's tokens a third of the short one's.
    old = torch.tensor([[-1.0, 0.0, 0.0], [-0.5, -1.0, -2.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    a, b = old.clone().requires_grad_(), old.clone().requires_grad_()
    loss, m = policy_loss(a, old, adv, mask, **LUSPO)
    loss.backward()
    assert loss.item() == pytest.approx(1.0)
    assert flat(a.grad * mask) == pytest.approx([-0.5, 0, 0, 0.5, 0.5, 0.5])
    g_loss, _ = policy_loss(b, old, adv, mask, **GSPO)
    g_loss.backward()
    assert g_loss.item() == pytest.approx(0.0)
    assert flat(b.grad * mask) == pytest.approx([-0.5, 0, 0, 1 / 6, 1 / 6, 1 / 6])
    assert m["clip_frac_tokens"] == 0.0


def test_luspo_clips_the_sequence_ratio_as_gspo():
    # s = e^0.01 > 1 + 4e-4 with A > 0: clipped, no gradient, value (1 + 4e-4) A len
    logp = leaf([[0.01, 0.01]])
    loss, m = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), **LUSPO)
    loss.backward()
    assert loss.item() == pytest.approx(-2 * (1 + 4e-4))
    assert flat(logp.grad) == [0.0, 0.0] and m["clip_frac_seqs"] == 1.0


def test_vespo_weighs_by_the_gamma_shape_of_the_sequence_ratio():
    # sequence 0: log ratios 0.1, -0.1 sum to 0 (W = 1): phi = e^lam 1^k e^-lam = 1, A = 1.
    # sequence 1: log W = ln 2 (a sum over tokens, not a mean), A = -1: k 3, lambda 2:
    # phi = e^2 2^3 e^-4 = 8 e^-2. Token mean over 4 tokens of -phi A logp.
    logp = leaf([[-1.0, -2.0], [-0.5, -1.0]])
    old = torch.tensor([[-1.1, -1.9], [-0.5 - math.log(2), -1.0]], dtype=torch.float64)
    loss, m = policy_loss(
        logp, old, torch.tensor([1.0, -1.0]), torch.ones(2, 2), objective="vespo", agg="token-mean"
    )
    phi1 = 8 * math.exp(-2)
    assert loss.item() == pytest.approx(-(1 * 1 * (-3.0) + phi1 * -1 * (-1.5)) / 4)
    loss.backward()
    # phi carries no gradient: d/dlogp = -phi A / 4
    assert flat(logp.grad) == pytest.approx([-0.25, -0.25, phi1 / 4, phi1 / 4])
    assert m["ratio_max"] == pytest.approx(2.0) and m["clip_frac_tokens"] == 0.0


def test_vespos_parameters_shape_the_weight_by_the_advantages_sign():
    # W = 2, A = 1: phi = e^lam 2^k e^(-2 lam); with k 1, lambda 1: 2 e^-1
    logp = leaf([[math.log(2.0)]])
    params = Params(vespo_k_pos=1.0, vespo_lambda_pos=1.0)
    loss, _ = policy_loss(
        logp,
        torch.zeros(1, 1),
        torch.tensor([1.0]),
        torch.ones(1, 1),
        objective="vespo",
        params=params,
    )
    assert loss.item() == pytest.approx(-2 * math.exp(-1) * math.log(2.0))
    # a far-off ratio fades to 0 (its log clamped, never inf or nan)
    far = leaf([[30.0, 30.0]])
    loss, _ = policy_loss(
        far, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2), objective="vespo"
    )
    loss.backward()
    assert loss.item() == 0.0 and flat(far.grad) == [0.0, 0.0]


def test_opsm_drops_negative_advantage_sequences_that_drifted_past_the_threshold():
    # drift = mean(old - logp): 0.2 (A < 0: dropped), 0.05 (A < 0: kept), 0.3 (A > 0: kept)
    old = torch.zeros(3, 2, dtype=torch.float64)
    logp = leaf([[-0.1, -0.3], [-0.05, -0.05], [-0.3, -0.3]])
    adv = torch.tensor([-1.0, -1.0, 1.0])
    loss, m = policy_loss(
        logp,
        old,
        adv,
        torch.ones(3, 2),
        objective="grpo",
        eps_low=10.0,
        eps_high=10.0,
        opsm_threshold=0.1,
    )
    loss.backward()
    # grpo with the clip out of reach: -(A w) per token, mean per sequence, mean over 3; row 0 out
    w = torch.exp(logp.detach())
    assert loss.item() == pytest.approx(float(-(-w[1].mean() + w[2].mean()) / 3))
    assert flat(logp.grad[0:1]) == [0.0, 0.0] and (logp.grad[1:] != 0).all()
    assert m["opsm_masked_seqs"] == pytest.approx(1 / 3)


def test_opsm_measures_the_drift_against_the_sampling_policy_when_given():
    # against old log-probs equal to logp nothing drifts; against the sampler's (0.5 above) the
    # negative-advantage sequence has drifted 0.5 > 0.1 and drops out
    logp = leaf([[-1.0, -1.0]])
    common = dict(objective="grpo", eps_low=0.2, eps_high=0.2, opsm_threshold=0.1)
    args = (logp, logp.detach().clone(), torch.tensor([-1.0]), torch.ones(1, 2))
    loss, m = policy_loss(*args, **common)
    assert loss.item() == pytest.approx(1.0) and m["opsm_masked_seqs"] == 0.0
    loss, m = policy_loss(*args, **common, sampling_logp=logp.detach() + 0.5)
    assert loss.item() == 0.0 and m["opsm_masked_seqs"] == 1.0


def cfg(**kw):
    return RLConfig(train_data=[DataSource("x.jsonl")], **kw)


def test_the_off_policy_settings_default_to_their_sources_and_belong_to_their_objective():
    c = cfg(algorithm="vespo")
    assert (c.vespo_k_pos, c.vespo_lambda_pos, c.vespo_k_neg, c.vespo_lambda_neg) == (2, 3, 3, 2)
    assert (c.agg, c.eps_low, c.eps_high, c.opsm_threshold) == ("token-mean", 0.0, 0.0, None)
    assert cfg(algorithm="luspo").agg == "seq-mean-token-sum"
    cases = [
        (dict(vespo_k_pos=1.0), r"^vespo_k_pos: applies to algorithm: vespo only, not gspo"),
        (dict(algorithm="vespo", vespo_lambda_neg=0.0), r"^vespo_lambda_neg: must be > 0"),
        (dict(algorithm="vespo", vespo_k_neg=-1.0), r"^vespo_k_neg: must be >= 0"),
        (dict(algorithm="vespo", eps_high=0.2), r"^eps_low/eps_high: vespo has no clip"),
        (dict(opsm_threshold=-0.1), r"^opsm_threshold: must be >= 0"),
        (
            dict(algorithm="vespo", rollout_correction="token_mask"),
            r"^rollout_correction: vespo folds",
        ),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            cfg(**kw)
    assert cfg(algorithm="vespo", vespo_k_neg=0.0).vespo_k_neg == 0.0
    assert cfg(algorithm="grpo", opsm_threshold=0.0).opsm_threshold == 0.0


def one_token(p_old, p, adv, **kw):
    """policy_loss on sequences of one token each, probabilities p_old -> p; (loss, grad, m)."""
    logp = leaf([[math.log(x)] for x in p])
    old = torch.tensor([[math.log(x)] for x in p_old], dtype=torch.float64)
    loss, m = policy_loss(logp, old, torch.tensor(adv), torch.ones(len(p), 1), **kw)
    loss.backward()
    return loss.item(), flat(logp.grad), m


def test_dppo_tv_bounds_the_change_of_probability_not_the_ratio():
    # A > 0: 0.5 -> 0.8 moved 0.3 > 0.15: outside, no term; 0.5 -> 0.6 inside: w = 1.2.
    # A < 0: 0.5 -> 0.2 moved -0.3: outside; 0.01 -> 0.005 (ratio 0.5, far outside any ratio
    # clip) moved only -0.005: inside
    loss, grad, m = one_token(
        [0.5, 0.5, 0.5, 0.01],
        [0.8, 0.6, 0.2, 0.005],
        [1.0, 1.0, -1.0, -1.0],
        objective="dppo_tv",
        eps_low=0.15,
        eps_high=0.15,
    )
    assert loss == pytest.approx(-(1.2 * math.log(0.6) - 0.5 * math.log(0.005)) / 4)
    assert grad == pytest.approx([0.0, -1.2 / 4, 0.0, 0.5 / 4])  # the weight has no gradient
    assert m["clip_frac_tokens"] == 0.5
    # the weight is truncated at dppo_is_cap
    loss, grad, _ = one_token(
        [0.5],
        [0.6],
        [1.0],
        objective="dppo_tv",
        eps_low=0.15,
        eps_high=0.15,
        params=Params(dppo_is_cap=1.1),
    )
    assert loss == pytest.approx(-1.1 * math.log(0.6)) and grad == pytest.approx([-1.1])


def test_dppo_kl_bounds_the_binary_kl_in_the_advantages_direction():
    # 0.5 -> 0.8: KL((.5, .5) || (.8, .2)) = .5 ln(.5/.8) + .5 ln(.5/.2) = 0.223 > 0.05: outside
    # for A > 0; for A < 0 a rise is against the advantage: inside, whatever the KL
    kl = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)
    assert kl > 0.05
    loss, grad, m = one_token(
        [0.5, 0.5], [0.8, 0.8], [1.0, -1.0], objective="dppo_kl", eps_low=0.05, eps_high=0.05
    )
    assert loss == pytest.approx(-(-1.6 * math.log(0.8)) / 2)
    assert grad == pytest.approx([0.0, 1.6 / 2]) and m["clip_frac_tokens"] == 0.5


def test_clip_cov_drops_a_random_share_of_the_tokens_in_its_covariance_band():
    # on-policy, A = (1, -1), log p = (-1, -2): means 0 and -1.5, centred products 0.5 and 0.5,
    # both in (0.4, 0.6); a share 0.5 of 2 tokens is 1 of them, at random: the loss is the other
    # term's, -(A)/2 = -0.5 or 0.5; a share 1.0 drops both
    kw = dict(objective="clip_cov", eps_low=0.2, eps_high=0.2)
    band = dict(clip_cov_lb=0.4, clip_cov_ub=0.6)
    seen = set()
    for seed in range(8):
        gen = torch.Generator().manual_seed(seed)
        params = Params(clip_cov_ratio=0.5, generator=gen, **band)
        loss, grad, m = one_token(
            [math.exp(-1), math.exp(-2)],
            [math.exp(-1), math.exp(-2)],
            [1.0, -1.0],
            params=params,
            **kw,
        )
        assert m["clip_cov_selected"] == 0.5 and sorted(grad) in ([-0.5, 0.0], [0.0, 0.5])
        seen.add(round(loss, 9))
    assert seen == {-0.5, 0.5}  # either token, by the generator
    loss, grad, m = one_token(
        [math.exp(-1), math.exp(-2)],
        [math.exp(-1), math.exp(-2)],
        [1.0, -1.0],
        params=Params(clip_cov_ratio=1.0, **band),
        **kw,
    )
    assert (loss, grad, m["clip_cov_selected"]) == (0.0, [0.0, 0.0], 1.0)


def test_kl_cov_penalises_the_tokens_with_the_largest_covariance():
    # A = (1, -1, 0), log p = (-1, -2.2, -1.5): centred products 0.567, 0.633, 0: a share 0.4 of
    # 3 tokens is 1, the second; log w = (0.1, -0.2, 0): its term -w - 0.1 |log w|
    logp = leaf([[-1.0], [-2.2], [-1.5]])
    old = logp.detach() - torch.tensor([[0.1], [-0.2], [0.0]], dtype=torch.float64)
    loss, m = policy_loss(
        logp,
        old,
        torch.tensor([1.0, -1.0, 0.0]),
        torch.ones(3, 1),
        objective="kl_cov",
        params=Params(kl_cov_ratio=0.4, kl_cov_coef=0.1),
    )
    w0, w1 = math.exp(0.1), math.exp(-0.2)
    assert loss.item() == pytest.approx(-(w0 - w1 - 0.1 * 0.2) / 3)
    loss.backward()
    assert flat(logp.grad) == pytest.approx([-w0 / 3, (w1 - 0.1) / 3, 0.0])
    assert (
        m["kl_cov_selected"] == pytest.approx(1 / 3)
        and m["clip_frac_tokens"] == m["kl_cov_selected"]
    )


def test_the_verl_objectives_settings_default_to_verls_and_belong_to_their_objective():
    c = cfg(algorithm="dppo_tv")
    assert (c.eps_low, c.eps_high, c.dppo_is_cap) == (0.15, 0.15, 20.0)
    assert (cfg(algorithm="dppo_kl").eps_low, cfg(algorithm="clip_cov").eps_high) == (0.05, 0.2)
    c = cfg(algorithm="kl_cov")
    assert (c.kl_cov_ratio, c.kl_cov_coef, c.clip_cov_ratio, c.clip_cov_lb) == (2e-4, 0.1, 2e-4, 1)
    cases = [
        (dict(dppo_is_cap=5.0), r"^dppo_is_cap: applies to algorithm: dppo_tv / dppo_kl only"),
        (dict(algorithm="clip_cov", clip_cov_ratio=1.5), r"^clip_cov_ratio: is a share"),
        (dict(algorithm="clip_cov", clip_cov_lb=5.0), r"^clip_cov_lb/clip_cov_ub: need lb < ub"),
        (dict(algorithm="kl_cov", eps_low=0.2), r"^eps_low/eps_high: kl_cov has no clip"),
        (dict(algorithm="grpo", kl_cov_coef=1.0), r"^kl_cov_coef: applies to algorithm: kl_cov"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            cfg(**kw)
    assert cfg(algorithm="clip_cov", clip_cov_lb=-1.0).clip_cov_lb == -1.0


def test_icepop_drops_the_tokens_whose_weight_leaves_its_band_and_keeps_the_others_weights():
    # weights pi_old / pi_engine 0.4, 0.6, 4.0, 6.0 per token: [0.5, 5] keeps 0.6 and 4.0 as
    # they are, zeroes 0.4 and 6.0 (MIS per token; TIS would cap 6.0 at 5)
    w = torch.tensor([[0.4, 0.6, 4.0, 6.0]], dtype=torch.float64)
    old = torch.log(w)
    engine = torch.zeros_like(old)
    mask = torch.ones(1, 4)
    got = rollout_correction(old, engine, mask, "icepop", *ICEPOP_BAND)
    assert flat(got) == pytest.approx([0.0, 0.6, 4.0, 0.0])
    assert torch.equal(got, rollout_correction(old, engine, mask, "token_mask", 0.5, 5.0))
    assert flat(rollout_correction(old, engine, mask, "token_truncate", 0.5, 5.0)) == (
        pytest.approx([0.5, 0.6, 4.0, 5.0])
    )


def test_icepops_band_defaults_to_its_papers_and_belongs_to_it():
    c = cfg(rollout_correction="icepop")
    assert (c.icepop_min, c.icepop_max) == ICEPOP_BAND == (0.5, 5.0)
    assert c.correction_band() == (0.5, 5.0)
    assert cfg(rollout_correction="token_mask").correction_band() == (0.0, 3.0)
    cases = [
        (dict(icepop_min=0.8), r"^icepop_min/icepop_max: apply to rollout_correction: icepop"),
        (dict(rollout_correction="icepop", icepop_min=2.0, icepop_max=1.0), r"need 0 <= a < b"),
        (
            dict(rollout_correction="icepop", rollout_correction_max=2.0),
            r"^rollout_correction_min/rollout_correction_max: icepop's band is",
        ),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            cfg(**kw)
