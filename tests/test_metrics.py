import math
from fractions import Fraction

import pytest

from evaluators.metrics import (
    aggregate,
    avg_at_n,
    bootstrap_ci,
    default_ks,
    pass_at_k,
    problem_metrics,
)


def exact_pass_at_k(n, c, k):
    if n - c < k:
        return Fraction(1)
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_matches_hand_computed_values():
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # c / n
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6


def test_pass_at_k_agrees_with_exact_binomials_on_a_grid():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(
                    float(exact_pass_at_k(n, c, k)), abs=1e-12
                )


def test_pass_at_k_is_zero_without_a_correct_sample_and_one_when_fewer_than_k_are_wrong():
    assert pass_at_k(8, 0, 1) == 0.0
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 7, 2) == 1.0  # n - c = 1 < k: every pair holds a correct sample
    assert pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 6, 2) < 1.0  # n - c = 2 = k: one all-wrong pair exists


def test_pass_at_k_stays_accurate_for_thousands_of_samples():
    # C(2000, 1000) overflows floats; the product form must not.
    assert pass_at_k(2000, 3, 1000) == pytest.approx(
        float(exact_pass_at_k(2000, 3, 1000)), rel=1e-12
    )
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001, rel=1e-12)


@pytest.mark.parametrize("n,c,k", [(5, 2, 6), (5, 2, 0), (5, 6, 1), (0, 0, 1), (5, -1, 1)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_avg_at_n_is_the_fraction_of_correct_samples_and_equals_pass_at_1():
    assert avg_at_n(8, 3) == 3 / 8
    assert avg_at_n(8, 3) == pytest.approx(pass_at_k(8, 3, 1))


def test_default_ks_are_powers_of_two_up_to_n():
    assert default_ks(1) == [1]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(6) == [1, 2, 4, 6]


def test_bootstrap_ci_is_deterministic_for_a_seed_and_brackets_the_mean():
    vals = [0, 1, 1, 0, 0.5, 1, 0, 0, 1, 0.25]
    a = bootstrap_ci(vals, iters=500, seed=3)
    b = bootstrap_ci(vals, iters=500, seed=3)
    c = bootstrap_ci(vals, iters=500, seed=4)
    assert a == b
    assert a != c
    mean = sum(vals) / len(vals)
    assert a[0] < mean < a[1]
    assert 0 <= a[0] and a[1] <= 1


def test_bootstrap_ci_narrows_with_more_problems_and_collapses_for_one():
    small = bootstrap_ci([0, 1] * 5, seed=0)
    large = bootstrap_ci([0, 1] * 500, seed=0)
    assert (large[1] - large[0]) < (small[1] - small[0]) / 3
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    assert bootstrap_ci([1, 1, 1]) == (1.0, 1.0)


def test_bootstrap_ci_rejects_an_empty_benchmark():
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_problem_metrics_counts_samples_and_reports_every_k():
    m = problem_metrics([1, 0, 0, 1, 0])
    assert (m["n"], m["c"], m["k"]) == (5, 2, 5)
    assert m["avg@n"] == pytest.approx(0.4)
    assert m["pass@1"] == pytest.approx(0.4)
    assert m["pass@2"] == pytest.approx(0.7)
    assert m["pass@k"] == 1.0 and m["pass@5"] == 1.0


def test_aggregate_averages_problems_and_records_the_number_of_samples():
    s = aggregate([(5, 2), (5, 0), (5, 5)], iters=200, seed=0)
    assert s["n_problems"] == 3
    assert s["n_samples"] == 15
    assert s["samples_per_problem"] == 5 and s["k"] == 5
    assert s["avg@n"] == pytest.approx((0.4 + 0 + 1) / 3)
    assert s["pass@2"] == pytest.approx((0.7 + 0 + 1) / 3)
    assert s["pass@k"] == pytest.approx((1 + 0 + 1) / 3)
    lo, hi = s["pass@2_ci"]
    assert lo <= s["pass@2"] <= hi
    assert s["bootstrap"] == {"iters": 200, "confidence": 0.95, "seed": 0}
    assert aggregate([(5, 2), (5, 0), (5, 5)], iters=200, seed=0) == s


def test_aggregate_limits_k_to_the_fewest_samples_of_any_problem():
    s = aggregate([(4, 1), (2, 1)])
    assert s["k"] == 2 and "pass@4" not in s
    with pytest.raises(ValueError, match="fewest samples"):
        aggregate([(4, 1), (2, 1)], ks=[4])


def test_majority_vote_takes_the_most_common_answer_and_counts_no_answer_as_no_vote():
    from evaluators.metrics import majority_correct

    assert majority_correct(["7", "3", "7", None], [1, 0, 1, 0]) == 1.0
    assert majority_correct(["3", "7", "3", "7"], [0, 1, 0, 1]) == 0.0  # a tie: the first
    assert majority_correct([None, None, "7"], [0, 0, 1]) == 1.0  # one vote wins
    assert majority_correct([None, None], [0, 0]) == 0.0
    with pytest.raises(ValueError):
        majority_correct(["1"], [1, 0])
