"""The loss math, checked against values worked out by hand (not against the code itself)."""

import math

import pytest
import torch

from gspo.core.objectives import DEFAULT_EPS, group_advantages, policy_loss, zero_variance_fraction
from gspo.model.logprobs import token_logprobs

GRPO = dict(objective="grpo", eps_low=0.2, eps_high=0.27)
GSPO = dict(objective="gspo", eps_low=3e-4, eps_high=4e-4)
GSPO_TOKEN = dict(objective="gspo_token", eps_low=3e-4, eps_high=4e-4)


def leaf(rows):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=True)


def test_group_advantages_are_centred_and_scaled_by_the_unbiased_group_std():
    # mean 0.25, unbiased std sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    adv = group_advantages(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), 4, eps=0.0)
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0])


def test_group_advantages_without_scaling_only_centre():
    adv = group_advantages(torch.tensor([1.0, 0, 0, 0]), 4, scale="none")
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_group_advantages_reject_a_batch_that_is_not_whole_groups():
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_advantages(torch.zeros(6), 4)


def test_zero_variance_fraction_counts_groups_with_all_equal_rewards():
    assert zero_variance_fraction(torch.tensor([1.0, 1, 0, 1, 0, 0]), 2) == pytest.approx(2 / 3)


def test_grpo_token_loss_matches_a_hand_computed_value_and_gradient():
    # ratios 1.5 and 0.5 with A = +1: token 1 is clipped to 1.27, token 2 keeps 0.5.
    logp = leaf([[math.log(1.5), math.log(0.5)]])
    old = torch.zeros(1, 2, dtype=torch.float64)
    loss, m = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), **GRPO)
    assert loss.item() == pytest.approx(-(1.27 + 0.5) / 2)
    loss.backward()
    # d(-0.5 * r2)/dlogp2 = -0.5 * r2 = -0.25; the clipped token gets no gradient.
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.25])
    assert m["clip_frac_tokens"] == pytest.approx(0.5)
    assert m["clip_frac_seqs"] == 1.0
    assert m["ratio_min"] == pytest.approx(0.5) and m["ratio_max"] == pytest.approx(1.5)


def test_gspo_sequence_loss_matches_a_hand_computed_value_and_gradient():
    # seq 1: mean log ratio 0.002 -> s = e^0.002 > 1.0004 with A = +1: clipped to 1.0004.
    # seq 2: mean log ratio 0 -> s = 1 with A = -1: unclipped, objective -1.
    logp = leaf([[0.001, 0.003, 0.0], [-0.0001, -0.0001, 0.0002]])
    old = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    loss, m = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask, **GSPO)
    assert loss.item() == pytest.approx(-(1.0004 - 1.0) / 2)
    loss.backward()
    # seq 2: d(-(1/2) * s * A)/dlogp_t = -(1/2) * (-1) * s / |y| = 1/6 per token.
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert logp.grad[1].tolist() == pytest.approx([1 / 6] * 3)
    assert m["clip_frac_seqs"] == pytest.approx(0.5)
    assert m["clip_frac_tokens"] == pytest.approx(2 / 5)  # the 2 real tokens of seq 1 of 5
    assert m["ratio_max"] == pytest.approx(math.exp(0.002))


def test_gspo_token_equals_gspo_in_loss_and_gradient_with_per_sequence_advantages():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 9, generator=g, dtype=torch.float64) * 1e-3
    old = torch.randn(6, 9, generator=g, dtype=torch.float64)
    mask = (torch.rand(6, 9, generator=g) > 0.3).float()
    mask[:, 0] = 1
    adv = torch.randn(6, generator=g, dtype=torch.float64)
    results = []
    for kw in (GSPO, GSPO_TOKEN):
        logp = (old + base).clone().requires_grad_(True)
        loss, m = policy_loss(logp, old, adv, mask, **kw)
        loss.backward()
        results.append((loss.item(), logp.grad.clone(), m))
    (l1, g1, m1), (l2, g2, m2) = results
    assert l1 == pytest.approx(l2, rel=1e-12)
    assert torch.allclose(g1, g2, atol=1e-12)
    assert m1["clip_frac_tokens"] == m2["clip_frac_tokens"] and 0 < m1["clip_frac_seqs"] < 1


def test_on_policy_all_three_levels_give_the_same_gradient_and_no_clipping():
    g = torch.Generator().manual_seed(1)
    old = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5])
    grads = []
    for kw in (GRPO, GSPO, GSPO_TOKEN):
        logp = old.clone().requires_grad_(True)
        loss, m = policy_loss(logp, old, adv, mask, **kw)
        loss.backward()
        grads.append(logp.grad)
        assert m["clip_frac_tokens"] == 0.0 and m["clip_frac_seqs"] == 0.0
        assert m["approx_kl"] == 0.0
    # -(1/B) * A_i / |y_i| on every real token
    expected = -(adv / mask.sum(1))[:, None] * mask / 4
    for grad in grads:
        assert torch.allclose(grad, expected.double(), atol=1e-12)


@pytest.mark.parametrize("adv_sign", [1.0, -1.0])
def test_sequence_clipping_engages_exactly_outside_the_band_in_the_advantages_direction(adv_sign):
    lo, hi = DEFAULT_EPS["gspo"]
    for s in [0.9990, 1 - lo - 1e-5, 1 - lo + 1e-5, 1.0, 1 + hi - 1e-5, 1 + hi + 1e-5, 1.0020]:
        logp = torch.full((1, 4), math.log(s), dtype=torch.float64)
        _, m = policy_loss(
            logp, torch.zeros_like(logp), torch.tensor([adv_sign]), torch.ones(1, 4), **GSPO
        )
        expect = (s > 1 + hi) if adv_sign > 0 else (s < 1 - lo)
        assert m["clip_frac_seqs"] == float(expect), s


@pytest.mark.parametrize("kw", [GRPO, GSPO, GSPO_TOKEN], ids=["grpo", "gspo", "gspo_token"])
def test_padding_tokens_never_change_the_loss_or_the_gradient(kw):
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    logp0 = old + 1e-3 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.0, -1.0, 0.5])
    a = logp0.clone().requires_grad_(True)
    loss_a, m_a = policy_loss(a, old, adv, torch.ones(3, 4), **kw)
    loss_a.backward()
    # Same rows plus 3 padding positions holding garbage, even inf and nan.
    junk = torch.tensor([[5.0, float("inf"), -7.0]] * 3, dtype=torch.float64)
    b = torch.cat([logp0, junk], 1).requires_grad_(True)
    old_b = torch.cat([old, torch.tensor([[float("nan"), 3.0, -2.0]] * 3, dtype=torch.float64)], 1)
    mask_b = torch.cat([torch.ones(3, 4), torch.zeros(3, 3)], 1)
    loss_b, m_b = policy_loss(b, old_b, adv, mask_b, **kw)
    loss_b.backward()
    assert loss_b.item() == pytest.approx(loss_a.item(), rel=1e-12)
    assert torch.allclose(b.grad[:, :4], a.grad, atol=1e-12)
    assert torch.all(b.grad[:, 4:] == 0)
    assert m_a == pytest.approx(m_b)


def test_per_sequence_aggregation_does_not_weight_sequences_by_length():
    # On-policy: each sequence's term is A_i. Lengths 1 and 3, A = +1 and -1.
    old = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    adv = torch.tensor([1.0, -1.0])
    loss, _ = policy_loss(old.clone().requires_grad_(True), old, adv, mask, **GSPO)
    assert loss.item() == pytest.approx(0.0)  # -(1 - 1) / 2
    loss_tok, _ = policy_loss(old.clone(), old, adv, mask, **GSPO, agg="token-mean")
    assert loss_tok.item() == pytest.approx(-(1 - 3) / 4)  # length-weighted: not zero
    loss_sum, _ = policy_loss(old.clone(), old, adv, mask, **GSPO, agg="seq-mean-token-sum")
    assert loss_sum.item() == pytest.approx(-(1 - 3) / 2)


@pytest.mark.parametrize("kw", [GRPO, GSPO, GSPO_TOKEN], ids=["grpo", "gspo", "gspo_token"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extreme_log_ratios_keep_loss_and_gradients_finite(kw, dtype):
    logp = torch.tensor(
        [[100.0, -100.0, 50.0], [-100.0, -100.0, -100.0]], dtype=dtype, requires_grad=True
    )
    old = torch.zeros(2, 3, dtype=dtype)
    loss, m = policy_loss(logp, old, torch.tensor([-2.0, 3.0]), torch.ones(2, 3), **kw)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert all(math.isfinite(v) for v in m.values())


def test_kl_penalty_to_the_reference_adds_the_k3_estimate():
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    ref = torch.full((1, 2), math.log(2.0), dtype=torch.float64)
    loss, m = policy_loss(
        logp,
        logp.detach(),
        torch.tensor([0.0]),
        torch.ones(1, 2),
        **GRPO,
        ref_logp=ref,
        kl_coef=0.1,
    )
    # k3 = exp(ref - logp) - (ref - logp) - 1 = 2 - ln 2 - 1
    assert m["kl_ref"] == pytest.approx(1 - math.log(2))
    assert loss.item() == pytest.approx(0.1 * (1 - math.log(2)))


def test_approx_kl_is_the_k3_estimate_of_old_versus_new():
    logp = torch.tensor([[math.log(2.0), 0.0]])
    _, m = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), **GRPO)
    assert m["approx_kl"] == pytest.approx((2 - 1 - math.log(2)) / 2)


def test_token_logprobs_apply_the_temperature_before_the_softmax():
    logits = torch.tensor([[[2.0, 0.0]]])
    logp, ent = token_logprobs(logits, torch.tensor([[1]]), temperature=2.0)
    p1 = math.exp(0) / (math.exp(1) + math.exp(0))
    assert logp.item() == pytest.approx(math.log(p1))
    assert ent.item() == pytest.approx(-(p1 * math.log(p1) + (1 - p1) * math.log(1 - p1)))


def test_unknown_objective_or_aggregation_is_rejected_by_name():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="objective must be one of"):
        policy_loss(
            x, x, torch.zeros(1), torch.ones(1, 2), objective="ppo", eps_low=0.2, eps_high=0.2
        )
    with pytest.raises(ValueError, match="agg"):
        policy_loss(
            x,
            x,
            torch.zeros(1),
            torch.ones(1, 2),
            objective="grpo",
            eps_low=0.2,
            eps_high=0.2,
            agg="sum",
        )
    with pytest.raises(ValueError, match="norm_len"):
        policy_loss(
            x,
            x,
            torch.zeros(1),
            torch.ones(1, 2),
            objective="dr_grpo",
            eps_low=0.2,
            eps_high=0.2,
            agg="seq-mean-token-sum-norm",
        )


@pytest.mark.parametrize("chunk", [1, 5, 7, 64])
def test_chunked_logprobs_and_entropy_equal_the_plain_computation_and_so_do_their_gradients(chunk):
    from gspo.model.logprobs import chunked_token_logprobs

    g = torch.Generator().manual_seed(0)
    B, T, H, V = 3, 7, 8, 50
    hidden = torch.randn(B, T, H, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    up = torch.randn(B, T, generator=g, dtype=torch.float64)  # upstream gradients
    ue = torch.randn(B, T, generator=g, dtype=torch.float64)

    def grads(fn):
        lp, ent = fn()
        ((lp * up).sum() + (ent * ue).sum()).backward()
        out = (
            lp.detach(),
            ent.detach(),
            hidden.grad.clone(),
            weight.grad.clone(),
            bias.grad.clone(),
        )
        hidden.grad = weight.grad = bias.grad = None
        return out

    plain = grads(lambda: token_logprobs(hidden @ weight.T + bias, tokens, 0.7))
    chunked = grads(
        lambda: chunked_token_logprobs(hidden, weight, tokens, 0.7, chunk=chunk, bias=bias)
    )
    for a, b in zip(plain, chunked):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_sequence_logprobs_in_chunks_match_the_model_s_own_logits(tiny_model_dir):
    from gspo.model.logprobs import sequence_logprobs
    from gspo.model.models import load_model
    from gspo.native.data import pad_batch

    model, tok = load_model(tiny_model_dir)
    batch = pad_batch(
        [tok("12+3=").input_ids, tok("7*8=").input_ids],
        [tok("15").input_ids, tok("56 ok").input_ids],
        tok.pad_token_id,
    )
    outs = {}
    for chunk in (0, 3):
        model.zero_grad()
        lp, ent = sequence_logprobs(model, batch, 0.9, with_entropy=True, chunk=chunk)
        ((lp * batch["target_mask"]).sum() + ent.sum()).backward()
        outs[chunk] = (
            lp.detach(),
            ent.detach(),
            {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
        )
    torch.testing.assert_close(outs[0][0], outs[3][0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outs[0][1], outs[3][1], rtol=1e-5, atol=1e-6)
    assert outs[0][2].keys() == outs[3][2].keys() and outs[0][2]
    for name in outs[0][2]:
        torch.testing.assert_close(outs[0][2][name], outs[3][2][name], rtol=1e-4, atol=1e-6)


# -- GSPO's successors, each against values worked out by hand ------------------------------------


def flat(rows) -> list[float]:
    return torch.as_tensor(rows, dtype=torch.float64).flatten().tolist()


def test_dapo_clips_higher_and_averages_over_all_tokens():
    # ratios 1.3, 0.5 (sequence 1) and 1.1 (sequence 2), A = 1: 1.3 clips to 1.28, the others not
    logp = leaf([[math.log(1.3), math.log(0.5)], [math.log(1.1), 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    loss, m = policy_loss(
        logp,
        torch.zeros_like(logp),
        torch.tensor([1.0, 1.0]),
        mask,
        objective="dapo",
        eps_low=0.2,
        eps_high=0.28,
        agg="token-mean",
    )
    assert loss.item() == pytest.approx(-(1.28 + 0.5 + 1.1) / 3)
    loss.backward()
    # d(-r / 3)/dlogp = -r / 3; the clipped token none; padding none
    assert flat(logp.grad) == pytest.approx(flat([[0.0, -0.5 / 3], [-1.1 / 3, 0.0]]))
    assert m["clip_frac_tokens"] == pytest.approx(1 / 3) and m["clip_frac_seqs"] == 0.5


def test_dr_grpo_sums_tokens_and_divides_by_a_constant_length():
    logp = leaf([[math.log(1.3), math.log(0.5)], [math.log(1.1), 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    loss, _ = policy_loss(
        logp,
        torch.zeros_like(logp),
        torch.tensor([1.0, 1.0]),
        mask,
        objective="dr_grpo",
        eps_low=0.2,
        eps_high=0.2,
        agg="seq-mean-token-sum-norm",
        norm_len=4,
    )
    # sequence sums -(1.2 + 0.5) and -1.1, their mean -1.4, over the constant 4
    assert loss.item() == pytest.approx(-1.4 / 4)
    loss.backward()
    assert flat(logp.grad) == pytest.approx(flat([[0.0, -0.5 / 8], [-1.1 / 8, 0.0]]))


def test_cispo_clips_the_weight_but_keeps_every_tokens_gradient():
    logp = leaf([[math.log(2.0), math.log(7.0)]])
    loss, m = policy_loss(
        logp,
        torch.zeros_like(logp),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        objective="cispo",
        eps_low=1.0,
        eps_high=4.0,
        agg="token-mean",
    )
    # weights sg[clip(r, 0, 5)] = 2 and 5: loss -(2 logp_1 + 5 logp_2) / 2
    assert loss.item() == pytest.approx(-(2 * math.log(2) + 5 * math.log(7)) / 2)
    loss.backward()
    # the token past the bound still moves (PPO's clip would give it no gradient at all)
    assert flat(logp.grad) == pytest.approx(flat([[-1.0, -2.5]]))
    assert m["clip_frac_tokens"] == 0.5 and m["clip_frac_seqs"] == 1.0


def test_gmpo_takes_the_geometric_mean_of_token_ratios_clipped_in_log_space():
    # A > 0: log ratios 0.6 and -0.2; the first clips to 0.4 (pessimistic for A > 0), mean 0.1.
    # A < 0: log ratios 0.6 and -0.6; pessimistic is the larger, max(0.6, 0.4) and
    # max(-0.6, -0.4): 0.6 and -0.4 (the second clipped), mean 0.1.
    logp = leaf([[0.6, -0.2], [0.6, -0.6]])
    loss, m = policy_loss(
        logp,
        torch.zeros_like(logp),
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 2),
        objective="gmpo",
        eps_low=0.4,
        eps_high=0.4,
    )
    e = math.exp(0.1)
    assert loss.item() == pytest.approx((-e + e) / 2)
    loss.backward()
    # d(-A rho)/dlogp_t = -A rho / |y| / 2 sequences, where token t is not clipped
    assert flat(logp.grad) == pytest.approx(flat([[0.0, -e / 4], [e / 4, 0.0]]))
    assert m["clip_frac_tokens"] == 0.5 and m["clip_frac_seqs"] == 1.0
    assert m["ratio_mean"] == pytest.approx(e)


def test_sapo_gates_the_ratio_smoothly_with_a_temperature_per_advantage_sign():
    # r = 2, A = 1, tau 1: gate 4 sigmoid(1); its slope 4 sigmoid(1)(1 - sigmoid(1)) times r
    logp = leaf([[math.log(2.0)], [0.0]])
    loss, m = policy_loss(
        logp,
        torch.zeros_like(logp),
        torch.tensor([1.0, -1.0]),
        torch.ones(2, 1),
        objective="sapo",
        tau_pos=1.0,
        tau_neg=1.05,
    )
    sig = 1 / (1 + math.exp(-1))
    # r = 1, A = -1, tau 1.05: gate 4 / 1.05 * 1/2
    assert loss.item() == pytest.approx((-4 * sig + 2 / 1.05) / 2)
    loss.backward()
    assert flat(logp.grad) == pytest.approx(flat([[-4 * sig * (1 - sig) * 2 / 2], [1.0 / 2]]))
    assert m["clip_frac_tokens"] == 0.0  # nothing is clipped: the gate only fades


def test_every_registered_objective_is_a_loss_whose_gradient_ascends_the_advantage():
    # one step down the loss raises the log-prob of the positive-advantage sequence's tokens
    from gspo.core.objectives import OBJECTIVES

    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=g, dtype=torch.float64)
    for name, obj in OBJECTIVES.items():
        # within every clip band (GSPO's is 3e-4 wide): the step is on the gradient, not a clip edge
        logp = (old + 1e-6 * torch.randn(4, 5, generator=g, dtype=torch.float64)).requires_grad_()
        loss, m = policy_loss(
            logp,
            old,
            torch.tensor([1.0, -1.0, 0.5, -0.5]),
            torch.ones(4, 5),
            objective=name,
            eps_low=obj.eps[0] or 0.2,
            eps_high=obj.eps[1] or 0.2,
            agg=obj.agg,
            norm_len=5,
        )
        loss.backward()
        assert torch.isfinite(loss) and set(m) >= {"clip_frac_tokens", "clip_frac_seqs"}, name
        assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all(), name


# -- DAPO's shaping and the rollout correction -----------------------------------------------------


def test_rollout_correction_truncates_or_masks_per_token_or_per_sequence():
    from gspo.core.objectives import rollout_correction

    # old - engine log-probs: ln 2, ln 4 (sequence 1); ln 0.5 and padding (sequence 2)
    old = torch.tensor([[math.log(2), math.log(4)], [math.log(0.5), 9.0]], dtype=torch.float64)
    engine = torch.zeros(2, 2, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=torch.float64)

    def w(mode):
        return flat(rollout_correction(old, engine, mask, mode, c_min=0.6, c_max=3.0))

    assert w("token_truncate") == pytest.approx([2.0, 3.0, 0.6, 0.0])
    assert w("token_mask") == pytest.approx([2.0, 0.0, 0.0, 0.0])
    # the sequence's weight is the product of its tokens': 8 (capped to 3, or masked) and 0.5
    assert w("sequence_truncate") == pytest.approx([3.0, 3.0, 0.6, 0.0])
    assert w("sequence_mask") == pytest.approx([0.0, 0.0, 0.0, 0.0])


def test_rollout_correction_weights_each_tokens_loss_but_not_the_gradient_of_the_weight():
    logp = leaf([[0.1, -0.1]])
    weights = torch.tensor([[2.0, 0.5]], dtype=torch.float64)
    loss, _ = policy_loss(
        logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2), **GRPO, is_weights=weights
    )
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)  # ratio 1 on-policy
    loss.backward()
    assert flat(logp.grad) == pytest.approx([-1.0, -0.25])


def test_dapos_overlong_punishment_is_trls_reward_function():
    from trl.rewards import get_soft_overlong_punishment

    from gspo.core.objectives import overlong_penalty

    lengths = [10, 80, 81, 90, 99, 100, 120]
    ours = overlong_penalty(torch.tensor(lengths), max_len=100, buffer=20).tolist()
    assert ours == pytest.approx([0.0, 0.0, -0.05, -0.5, -0.95, -1.0, -1.0])
    theirs = get_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)(
        [[1] * n for n in lengths]
    )
    assert ours == pytest.approx(theirs, abs=1e-12)
