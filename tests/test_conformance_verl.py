"""The objectives against verl's own code, called as installed: verl 0.9.1's registered policy
losses (`core_algos.get_policy_loss_fn`: vanilla, gspo, cispo, geo_mean, sapo, and for the
objectives built for off-policy training dppo_tv, dppo_kl, clip_cov, kl_cov, gspo as LUSPO) and its
rollout-correction weights, on identical float64 tensors. The loss, its gradient and the clip
fraction agree where the conventions do; each known difference of convention is asserted as a
difference (docs/OBJECTIVES.md lists them); a negative control shows the comparison fails when a
clip bound or the aggregation is changed.

verl runs in a process of its own (tests/verl_reference.py, with setup.sh's .venv/verl-nodeps on
its path), once for every case of the module. verl's sequence means divide by `count + 1e-8`:
with the boolean mask its actor passes, the count is an integer tensor and the guard rounds away
in float32; each case is also sent with a float mask scaled by 2**40, which every use of the mask
in these functions (ratios of masked sums; `mask.bool()` where it selects) leaves unchanged but
for that guard, which then falls below float64's rounding. Both agree to 1e-12.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from gspo.core.objectives import policy_loss, rollout_correction
from gspo.core.offpolicy import Params

ROOT = pathlib.Path(__file__).resolve().parents[1]
VERL_PATH = pathlib.Path(sys.prefix) / "verl-nodeps"
B, T = 4, 6
SCALE = 2.0**40  # a power of two: scaling by it is exact in floating point
OFF = 1e9  # verl's dual clip bound clip_ratio_c, set where it can never act


def make_batch(noise: float = 0.3, seed: int = 0):
    """(old, logp, mask, adv): old log-probs, log-probs `noise` off them, a mask with two short
    sequences, and per-sequence advantages of both signs."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g, dtype=torch.float64)
    logp = old + noise * torch.randn(B, T, generator=g, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    return old, logp, mask, torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=torch.float64)


def clip(lo, hi, c=OFF, **more):
    return dict(clip_ratio=lo, clip_ratio_low=lo, clip_ratio_high=hi, clip_ratio_c=c, **more)


# name: (our policy_loss settings, verl's loss_mode, its ActorConfig fields, its loss_agg_mode)
SAME = {
    # GRPO: verl's vanilla PPO loss, its dual clip off
    "grpo": (
        dict(objective="grpo", eps_low=0.2, eps_high=0.27),
        "vanilla",
        clip(0.2, 0.27),
        "seq-mean-token-mean",
    ),
    "gspo": (
        dict(objective="gspo", eps_low=3e-4, eps_high=4e-4),
        "gspo",
        clip(3e-4, 4e-4),
        "seq-mean-token-mean",
    ),
    # verl's gspo is written as GSPO-token (sg[s_i] times the token's own ratio): with one
    # advantage per sequence both give GSPO's value and gradient
    "gspo_token": (
        dict(objective="gspo_token", eps_low=3e-4, eps_high=4e-4),
        "gspo",
        clip(3e-4, 4e-4),
        "seq-mean-token-mean",
    ),
    "dapo": (
        dict(objective="dapo", eps_low=0.2, eps_high=0.28, agg="token-mean"),
        "vanilla",
        clip(0.2, 0.28),
        "token-mean",
    ),
    # Dr. GRPO's constant: verl's loss_scale_factor, our norm_len
    "dr_grpo": (
        dict(
            objective="dr_grpo",
            eps_low=0.2,
            eps_high=0.2,
            agg="seq-mean-token-sum-norm",
            norm_len=T,
        ),
        "vanilla",
        clip(0.2, 0.2, global_batch_info={"loss_scale_factor": T}),
        "seq-mean-token-sum-norm",
    ),
    "grpo-token-sum": (
        dict(objective="grpo", eps_low=0.2, eps_high=0.27, agg="seq-mean-token-sum"),
        "vanilla",
        clip(0.2, 0.27),
        "seq-mean-token-sum",
    ),
    # CISPO: verl's clip_ratio_high is the distance above 1, as ours; the paper's defaults, and
    # a band narrow enough to act on these log-probs
    "cispo": (
        dict(objective="cispo", eps_low=1.0, eps_high=4.0, agg="token-mean"),
        "cispo",
        clip(1.0, 4.0),
        "token-mean",
    ),
    "cispo-narrow": (
        dict(objective="cispo", eps_low=0.2, eps_high=0.28, agg="token-mean"),
        "cispo",
        clip(0.2, 0.28),
        "token-mean",
    ),
    "gmpo": (
        dict(objective="gmpo", eps_low=0.4, eps_high=0.4),
        "geo_mean",
        clip(0.4, 0.4),
        "seq-mean-token-mean",
    ),
    # verl makes SAPO's temperatures tensors of the advantages' dtype: exact in float64
    "sapo": (
        dict(objective="sapo", tau_pos=1.0, tau_neg=1.05),
        "sapo",
        dict(tau_pos=1.0, tau_neg=1.05),
        "seq-mean-token-mean",
    ),
}
# verl's sequence sums carry no guard, and scaling the mask scales them
UNGUARDED = ("seq-mean-token-sum", "seq-mean-token-sum-norm")

# the objectives built for off-policy training (gspo.core.offpolicy), with a boolean mask as
# verl's actor passes it (Clip-Cov counts its tokens on the mask itself, so a scaled one would
# change how many it takes): name -> (ours, loss_mode, ActorConfig fields, loss_agg_mode,
# PolicyLossConfig fields, torch's global seed before the call or None)
CLIP_COV_ALL = dict(clip_cov_ratio=1.0, clip_cov_lb=-0.5, clip_cov_ub=0.6)  # every candidate
CLIP_COV_SOME = dict(clip_cov_ratio=0.15, clip_cov_lb=-0.5, clip_cov_ub=0.6)  # 2 of them, at random
KL_COV = dict(kl_cov_ratio=0.2, ppo_kl_coef=1.0)
OFF_POLICY = {
    # LUSPO: verl's gspo with each sequence's token terms summed
    "luspo": (
        dict(objective="luspo", eps_low=3e-4, eps_high=4e-4, agg="seq-mean-token-sum"),
        "gspo",
        clip(3e-4, 4e-4),
        "seq-mean-token-sum",
        {},
        None,
    ),
    # DPPO: eps_* are the divergence thresholds, verl's clip_ratio_*; its weight's cap verl's
    # clip_ratio_c, ours dppo_is_cap (the default 20, and 1.2, which acts on these ratios)
    "dppo_tv": (
        dict(objective="dppo_tv", eps_low=0.15, eps_high=0.15),
        "dppo_tv",
        clip(0.15, 0.15, c=20.0),
        "seq-mean-token-mean",
        {},
        None,
    ),
    "dppo_tv-cap": (
        dict(
            objective="dppo_tv",
            eps_low=0.1,
            eps_high=0.2,
            agg="token-mean",
            params=Params(dppo_is_cap=1.2),
        ),
        "dppo_tv",
        clip(0.1, 0.2, c=1.2),
        "token-mean",
        {},
        None,
    ),
    "dppo_kl": (
        dict(objective="dppo_kl", eps_low=0.05, eps_high=0.05),
        "dppo_kl",
        clip(0.05, 0.05, c=20.0),
        "seq-mean-token-mean",
        {},
        None,
    ),
    "dppo_kl-cap": (
        dict(
            objective="dppo_kl",
            eps_low=0.02,
            eps_high=0.1,
            agg="token-mean",
            params=Params(dppo_is_cap=1.2),
        ),
        "dppo_kl",
        clip(0.02, 0.1, c=1.2),
        "token-mean",
        {},
        None,
    ),
    "clip_cov": (
        dict(objective="clip_cov", eps_low=0.2, eps_high=0.2, params=Params(**CLIP_COV_ALL)),
        "clip_cov",
        clip(0.2, 0.2),
        "seq-mean-token-mean",
        CLIP_COV_ALL,
        None,
    ),
    # a random 2 of the candidates: torch's global generator, seeded alike on both sides
    "clip_cov-random": (
        dict(
            objective="clip_cov",
            eps_low=0.2,
            eps_high=0.2,
            agg="token-mean",
            params=Params(**CLIP_COV_SOME),
        ),
        "clip_cov",
        clip(0.2, 0.2),
        "token-mean",
        CLIP_COV_SOME,
        7,
    ),
    "kl_cov": (
        dict(
            objective="kl_cov",
            params=Params(kl_cov_ratio=KL_COV["kl_cov_ratio"], kl_cov_coef=KL_COV["ppo_kl_coef"]),
        ),
        "kl_cov",
        {},
        "seq-mean-token-mean",
        KL_COV,
        None,
    ),
}


def loss_case(
    name, mode, config, agg, *, noise=0.3, scaled=False, is_weights=None, policy=None, seed=None
):
    old, logp, mask, adv = make_batch(noise)
    case = {
        "kind": "loss",
        "mode": mode,
        "config": config,
        "agg": agg,
        "old": old,
        "logp": logp,
        "adv": adv[:, None].expand(B, T).contiguous(),
        "mask": mask * SCALE if scaled else mask.bool(),
    }
    if is_weights is not None:
        case["is_weights"] = is_weights
    if policy:
        case["policy_loss"] = policy
    if seed is not None:
        case["seed"] = seed
    return name, case


def ours(settings: dict, noise=0.3, is_weights=None, seed=None):
    """(loss, gradient on real tokens, metrics) of policy_loss (torch's global generator seeded
    with `seed` just before, if given)."""
    old, logp, mask, adv = make_batch(noise)
    lp = logp.clone().requires_grad_()
    if seed is not None:
        torch.manual_seed(seed)
    value, metrics = policy_loss(lp, old, adv, mask, is_weights=is_weights, **settings)
    value.backward()
    return float(value.detach()), lp.grad * mask, metrics


WEIGHT_MODES = {  # ours: (mode, c_min, c_max); verl: (rollout_is level, threshold)
    "token_truncate": (("token_truncate", 0.0, 1.5), ("token", 1.5)),
    "sequence_truncate": (("sequence_truncate", 0.0, 2.0), ("sequence", 2.0)),
    "token_mask": (("token_mask", 0.5, 1.5), ("token", "0.5_1.5")),
    "sequence_mask": (("sequence_mask", 0.5, 2.0), ("sequence", "0.5_2.0")),
    # IcePop: the token mask with its band (0.5, 5), and one narrow enough to act at both ends
    "icepop": (("icepop", 0.5, 5.0), ("token", "0.5_5.0")),
    "icepop-narrow": (("icepop", 0.8, 1.25), ("token", "0.8_1.25")),
}


def engine_logp():
    """The rollout engine's log-probs: the old ones, a little off."""
    old, _, mask, _ = make_batch()
    g = torch.Generator().manual_seed(1)
    return old + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)


def all_cases() -> dict:
    cases = {}
    for name, (_, mode, config, agg) in SAME.items():
        cases.update([loss_case(name, mode, config, agg)])
        if agg not in UNGUARDED:
            cases.update([loss_case(name + "@scaled", mode, config, agg, scaled=True)])
    for name, (_, mode, config, agg, policy, seed) in OFF_POLICY.items():
        cases.update([loss_case(name, mode, config, agg, policy=policy, seed=seed)])
    # differences of convention and the negative control
    cases.update(
        [
            loss_case(
                "grpo-dual-clip",
                "vanilla",
                clip(0.2, 0.27, c=3.0),
                "seq-mean-token-mean",
                noise=2.5,
            ),
            loss_case(
                "grpo-dual-clip-off",
                "vanilla",
                clip(0.2, 0.27),
                "seq-mean-token-mean",
                noise=2.5,
                scaled=True,
            ),
            loss_case(
                "sapo-token-mean",
                "sapo",
                dict(tau_pos=1.0, tau_neg=1.05),
                "token-mean",
                scaled=True,
            ),
            loss_case("dapo-0.27", "vanilla", clip(0.2, 0.27), "token-mean", scaled=True),
            # negative controls for the off-policy objectives: another threshold, seed, coef
            loss_case("dppo_tv-0.1", "dppo_tv", clip(0.15, 0.1, c=20.0), "seq-mean-token-mean"),
            loss_case(
                "clip_cov-seed-8",
                "clip_cov",
                clip(0.2, 0.2),
                "token-mean",
                policy=CLIP_COV_SOME,
                seed=8,
            ),
            loss_case(
                "kl_cov-coef-0.5",
                "kl_cov",
                {},
                "seq-mean-token-mean",
                policy={**KL_COV, "ppo_kl_coef": 0.5},
            ),
        ]
    )
    old, _, mask, _ = make_batch()
    w = rollout_correction(old, engine_logp(), mask, "token_truncate", 0.0, 1.5)
    cases.update(
        [
            loss_case(
                "grpo-corrected",
                "vanilla",
                clip(0.2, 0.27),
                "seq-mean-token-mean",
                scaled=True,
                is_weights=w,
            )
        ]
    )
    for name, (_, (level, threshold)) in WEIGHT_MODES.items():
        cases["weights-" + name] = {
            "kind": "weights",
            "log_ratio": old - engine_logp(),
            "mask": mask.bool(),
            "level": level,
            "threshold": threshold,
        }
    return cases


def run_verl(cases: dict, tmp: pathlib.Path) -> dict:
    """verl's answers to `cases` (tests/verl_reference.py), from one verl process."""
    if not (VERL_PATH / "verl").is_dir():
        pytest.fail(f"{VERL_PATH}: verl is not installed beside the project; run bash setup.sh")
    torch.save(cases, tmp / "cases.pt")
    # this tree's project after verl's folder: the reward cases import its evaluators
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(VERL_PATH), str(ROOT)]),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "verl_reference.py"),
            str(tmp / "cases.pt"),
            str(tmp / "out.pt"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return torch.load(tmp / "out.pt")


@pytest.fixture(scope="module")
def verl(tmp_path_factory):
    """{case: verl's results} for every case of all_cases()."""
    return run_verl(all_cases(), tmp_path_factory.mktemp("verl"))


def test_it_is_verl_as_pinned_that_answers(verl):
    assert verl["version"] == "0.9.1"


@pytest.mark.parametrize("name", list(SAME))
def test_the_loss_gradient_and_clip_fraction_equal_verls(verl, name):
    settings, mode, _, agg = SAME[name]
    loss, grad, metrics = ours(settings)
    _, _, mask, _ = make_batch()
    exact = verl[name if agg in UNGUARDED else name + "@scaled"]
    assert abs(float(exact["loss"]) - loss) <= 1e-12
    torch.testing.assert_close(exact["grad"] * mask, grad, rtol=0, atol=1e-12)
    # as verl's actor calls it (a boolean mask)
    called = verl[name]
    assert abs(float(called["loss"]) - loss) <= 1e-12
    torch.testing.assert_close(called["grad"] * mask, grad, rtol=0, atol=1e-12)
    if mode in ("vanilla", "gspo", "cispo"):
        # verl's pg_clipfrac: the token-weighted share, clipped tokens counted in float32
        assert exact["metrics"]["actor/pg_clipfrac"] == pytest.approx(
            metrics["clip_frac_tokens"], abs=1e-7
        )
    # a comparison that can fail: each case moves the loss off its unclipped value
    assert abs(loss) > 1e-3


def test_a_clip_is_exercised_by_every_clipped_objective():
    """the comparisons above cover the clip's edges, not only its inside"""
    for name in ("grpo", "gspo", "dapo", "dr_grpo", "cispo-narrow", "gmpo"):
        assert ours(SAME[name][0])[2]["clip_frac_tokens"] > 0, name


def test_gmpos_clip_fraction_counts_every_bounded_token_in_verl_and_the_pessimistic_ones_in_ours(
    verl,
):
    old, logp, mask, adv = make_batch()
    log_ratio = logp - old
    bounded = ((log_ratio < -0.4) | (log_ratio > 0.4)) & (mask > 0)
    m = verl["gmpo@scaled"]["metrics"]
    theirs = m["actor/pg_clipfrac"] + m["actor/pg_clipfrac_lower"]
    assert theirs == pytest.approx(float(bounded.sum() / mask.sum()), abs=1e-12)
    mine = ours(SAME["gmpo"][0])[2]["clip_frac_tokens"]
    assert mine < theirs


def test_verls_dual_clip_bounds_a_negative_advantages_loss_where_ours_does_not(verl):
    """clip_ratio_c (3 by default) caps -A * ratio for A < 0; PPO's clip as the GSPO paper and
    ours write it has no such cap: equal with the cap off, different with verl's default, on
    log-probs far enough off the old ones for some ratio above 3."""
    settings = SAME["grpo"][0]
    loss = ours(settings, noise=2.5)[0]
    old, logp, mask, adv = make_batch(2.5)
    assert bool((((logp - old).exp() > 3.0) & (mask > 0))[adv < 0].any())
    assert abs(float(verl["grpo-dual-clip-off"]["loss"]) - loss) <= 1e-12
    assert abs(float(verl["grpo-dual-clip"]["loss"]) - loss) > 1e-3


def test_verls_sapo_aggregates_per_sequence_whatever_loss_agg_mode_says(verl):
    settings = SAME["sapo"][0]
    per_sequence = ours(settings)[0]
    token_mean = ours({**settings, "agg": "token-mean"})[0]
    theirs = float(verl["sapo-token-mean"]["loss"])
    assert abs(theirs - per_sequence) <= 1e-12
    assert abs(theirs - token_mean) > 1e-3


def test_the_comparison_fails_when_a_clip_bound_or_the_aggregation_changes(verl):
    """Negative control: DAPO against verl told 0.27 instead of 0.28, and against ours with the
    sequence mean instead of the token mean."""
    settings = SAME["dapo"][0]
    assert abs(float(verl["dapo-0.27"]["loss"]) - ours(settings)[0]) > 1e-6
    same = float(verl["dapo@scaled"]["loss"])
    assert abs(same - ours(settings)[0]) <= 1e-12
    assert abs(same - ours({**settings, "agg": "seq-mean-token-mean"})[0]) > 1e-6


def test_a_corrected_loss_equals_verls_given_the_same_weights(verl):
    old, _, mask, _ = make_batch()
    w = rollout_correction(old, engine_logp(), mask, "token_truncate", 0.0, 1.5)
    assert bool((w[mask > 0] == 1.5).any())  # the truncation acts on this batch
    loss = ours(SAME["grpo"][0], is_weights=w)[0]
    assert abs(float(verl["grpo-corrected"]["loss"]) - loss) <= 1e-12
    assert abs(loss - ours(SAME["grpo"][0])[0]) > 1e-3


@pytest.mark.parametrize("mode", list(WEIGHT_MODES))
def test_the_rollout_correction_weights_equal_verls(verl, mode):
    """TIS truncates to c_max (verl: a float threshold), MIS zeroes outside [c_min, c_max]
    (verl's IcePop, "lower_upper"); per sequence both take the product of the token weights."""
    (ours_mode, c_min, c_max), _ = WEIGHT_MODES[mode]
    old, _, mask, _ = make_batch()
    w = rollout_correction(old, engine_logp(), mask, ours_mode, c_min, c_max)
    theirs = verl["weights-" + mode]["weights"]
    torch.testing.assert_close(theirs, w, rtol=1e-15, atol=0)
    valid = w[mask > 0]
    # each mode acts on this batch: something is truncated or zeroed, something is kept
    assert bool(((valid == c_max) | (valid == 0)).any()) and bool(
        ((valid > 0) & (valid < c_max)).any()
    )


@pytest.mark.parametrize("name", list(OFF_POLICY))
def test_the_off_policy_objectives_equal_verls(verl, name):
    settings, mode, _, _, _, seed = OFF_POLICY[name]
    loss, grad, metrics = ours(settings, seed=seed)
    _, _, mask, _ = make_batch()
    theirs = verl[name]
    assert abs(float(theirs["loss"]) - loss) <= 1e-12
    torch.testing.assert_close(theirs["grad"] * mask, grad, rtol=0, atol=1e-12)
    assert abs(loss) > 1e-3 and grad.abs().max() > 1e-3
    m = theirs["metrics"]
    # what each acts on, counted alike (verl in float32), and acting on this batch: DPPO's
    # tokens outside its trust region, Clip-Cov's dropped tokens
    if mode.startswith("dppo") or mode == "gspo":
        assert m["actor/pg_clipfrac"] == pytest.approx(metrics["clip_frac_tokens"], abs=1e-7)
        assert 0 < metrics["clip_frac_tokens"] < 1
    if mode == "clip_cov":
        assert m["actor/pg_clipfrac"] == pytest.approx(metrics["clip_cov_selected"], abs=1e-7)
        assert 0 < metrics["clip_cov_selected"] < metrics["clip_frac_tokens"]
    if mode == "kl_cov":
        assert metrics["kl_cov_selected"] == pytest.approx(3 / 18)  # floor(0.2 x 18) tokens


def test_dppos_cap_and_clip_covs_random_choice_act_on_these_cases(verl):
    """Not vacuous: the cap truncates some weight, the random case leaves some candidates, and
    all of them taken is a different loss."""
    old, logp, mask, _ = make_batch()
    assert bool((((logp - old).exp() > 1.2) & (mask > 0)).any())
    some = ours(OFF_POLICY["clip_cov-random"][0], seed=7)[2]["clip_cov_selected"]
    every = ours({**OFF_POLICY["clip_cov-random"][0], "params": Params(**CLIP_COV_ALL)})[2]
    assert some == pytest.approx(2 / 18) and every["clip_cov_selected"] > some


@pytest.mark.parametrize(
    "name, control",
    [
        ("dppo_tv", "dppo_tv-0.1"),
        ("clip_cov-random", "clip_cov-seed-8"),
        ("kl_cov", "kl_cov-coef-0.5"),
    ],
)
def test_the_off_policy_comparisons_fail_when_a_threshold_the_seed_or_a_coefficient_changes(
    verl, name, control
):
    """Negative control: verl told another DPPO threshold, another seed for Clip-Cov's choice
    or another KL-Cov coefficient gives another loss than ours with the first."""
    settings, *_, seed = OFF_POLICY[name]
    assert abs(float(verl[name]["loss"]) - ours(settings, seed=seed)[0]) <= 1e-12
    assert abs(float(verl[control]["loss"]) - ours(settings, seed=seed)[0]) > 1e-6
