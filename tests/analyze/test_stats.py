"""Statistics against published reference values."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from orchestrator.analyze import stats


def test_central_values_and_spreads() -> None:
    data = [1.0, 2.0, 3.0, 4.0, 100.0]
    assert stats.median(data) == 3.0
    assert stats.median([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert stats.mean(data) == 22.0
    assert stats.mad(data) == 1.0
    # numpy.percentile's default (linear) gives Q1=2, Q3=4 for this sample.
    assert stats.iqr(data) == 2.0
    assert stats.stdev([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == pytest.approx(2.138089935)
    assert stats.stdev([5.0]) == 0.0
    with pytest.raises(ValueError):
        stats.median([])


def test_exact_distribution_matches_mann_whitney_1947_table() -> None:
    # Tabulated P(U <= u) for n = 3, m = 3 and n = 4, m = 4, from Mann & Whitney (1947), p. 52,
    # as quoted in scipy's tests (scipy/stats/tests/test_mannwhitneyu.py, `pn3`, `pn4`).
    pn3 = [0.05, 0.1, 0.2, 0.35, 0.5, 0.65]
    pn4 = [0.014, 0.029, 0.057, 0.1, 0.171, 0.243, 0.343, 0.443, 0.557]
    for u, expected in enumerate(pn3):
        assert stats.u_cdf(3, 3, u) == pytest.approx(expected, abs=5e-4)
    for u, expected in enumerate(pn4):
        assert stats.u_cdf(4, 4, u) == pytest.approx(expected, abs=5e-4)
    counts = stats.u_distribution(8, 1000)  # large one side: still exact and fast
    assert sum(counts) == math.comb(1008, 8)


def test_mann_whitney_exact_scipy_docs_example() -> None:
    # scipy.stats.mannwhitneyu docs (example from Shier 2004, "Statistics: 2.3 The Mann-Whitney
    # U Test"): U1 = 17, exact two-sided p = 0.1111111111111111.
    males = [19.0, 22.0, 16.0, 29.0, 24.0]
    females = [20.0, 11.0, 17.0, 12.0]
    u, p = stats.mann_whitney_u(males, females)
    assert u == 17.0
    assert p == pytest.approx(0.1111111111111111, rel=1e-12)
    u, p = stats.mann_whitney_u(females, males)
    assert u == 3.0
    assert p == pytest.approx(0.1111111111111111, rel=1e-12)


def test_mann_whitney_hand_case() -> None:
    # All of a below all of b: U = 0, p = 2 / C(6, 3) = 0.1.
    assert stats.mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]) == (0.0, pytest.approx(0.1))


def test_normal_approximation_with_tie_correction_matches_scipy() -> None:
    # scipy's test_tie_correct, checked there against R's wilcox.test(x, y, exact=FALSE):
    # x = 1..4, y = 1..5 -> U = 8, p = 0.7086240584439.
    assert stats.normal_rank_p([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(
        0.7086240584439, rel=1e-9
    )
    y = [1.0, 2.01, 3.0, 4.01, 5.0]
    assert stats.normal_rank_p([1.0, 2.0, 3.0, 4.0], y) == pytest.approx(0.5368784563079, rel=1e-9)
    assert stats.normal_rank_p([1.0] * 5, [1.0] * 6) == 1.0


def _brute_force_p(a: list[float], b: list[float]) -> float:
    """The permutation p of the rank sum over every split of the pooled mid-ranks."""
    ranks, _ = stats._ranks(a + b)
    n, n1 = len(ranks), len(a)
    mean = n1 * (n + 1) / 2.0
    observed = abs(sum(ranks[:n1]) - mean)
    splits = list(itertools.combinations(range(n), n1))
    far = sum(abs(sum(ranks[i] for i in pick) - mean) >= observed - 1e-9 for pick in splits)
    return far / len(splits)


def test_ties_use_the_exact_conditional_distribution() -> None:
    # The mid-rank permutation distribution, against enumerating every split.
    rng = random.Random(3)
    for _ in range(60):
        n1, n2 = rng.randint(2, 6), rng.randint(2, 6)
        a = [float(rng.randint(1, 4)) for _ in range(n1)]
        b = [float(rng.randint(1, 4)) for _ in range(n2)]
        got = stats.rank_test(a, b)
        assert got.exact and got.p == pytest.approx(_brute_force_p(a, b), rel=1e-12)
    assert stats.mann_whitney_u([1.0] * 5, [1.0] * 6)[1] == 1.0


def test_normal_approximation_with_ties_was_too_small_at_five_a_side() -> None:
    """Issue 36 item 11: the old path (normal approximation whenever ties exist) gave p up to
    2.4x too small at n = 5; the exact conditional p is never below the true tail."""
    worst = 0.0
    rng = random.Random(11)
    for _ in range(400):
        a = [float(rng.randint(1, 5)) for _ in range(5)]
        b = [float(rng.randint(2, 6)) for _ in range(5)]
        exact = stats.rank_test(a, b).p
        if exact < 0.2:
            worst = max(worst, exact / stats.normal_rank_p(a, b))
    assert worst > 2.0  # the approximation's error this replaces
    assert _brute_force_p([1.0, 2.0, 2.0, 3.0, 3.0], [3.0, 4.0, 4.0, 5.0, 5.0]) == pytest.approx(
        stats.rank_test([1.0, 2.0, 2.0, 3.0, 3.0], [3.0, 4.0, 4.0, 5.0, 5.0]).p
    )


def test_smallest_p_said_where_a_size_cannot_reach_alpha() -> None:
    assert stats.smallest_p(2, 2) == pytest.approx(1 / 3)
    assert stats.smallest_p(5, 5) == pytest.approx(2 / 252)
    assert stats.reach_text(2, 2, stats.smallest_p(2, 2), 0.05) == (
        "2 v 2: cannot reach 5%; smallest p 0.33"
    )
    # 5 v 5 alone can; in a Holm family of 18 it cannot (18 x 0.0079 = 0.14)
    assert stats.reach_text(5, 5, stats.smallest_p(5, 5), 0.05) is None
    assert "cannot reach 5% in a family of 18" in str(
        stats.reach_text(5, 5, stats.smallest_p(5, 5), 0.05, 18)
    )


def test_mann_whitney_large_samples_normal_approximation() -> None:
    # Both samples > 8 and no ties: asymptotic with continuity correction; all of a below b,
    # so U = 0 and p is tiny but positive.
    a = [float(i) for i in range(10)]
    b = [float(i) + 100.0 for i in range(10)]
    u, p = stats.mann_whitney_u(a, b)
    assert u == 0.0
    assert 0.0 < p < 0.001


def test_compare_mann_whitney_method() -> None:
    a = [94.0, 93.5, 94.2, 93.8, 94.1]
    b = [82.0, 81.5, 82.3, 81.9, 82.1]
    c = stats.compare(a, b)
    assert c.method == "mann-whitney"
    assert c.p_value is not None and c.p_value < 0.05
    assert c.significant
    assert c.ratio == pytest.approx(82.0 / 94.0)
    assert c.delta_pct == pytest.approx((82.0 / 94.0 - 1) * 100)
    # Same shift, below the 5% ratio threshold: not significant even though p is small.
    d = stats.compare(a, [x - 1.0 for x in a])
    assert d.p_value is not None and d.p_value < 0.05
    assert not d.significant
    # Large ratio but overlapping samples: not significant.
    e = stats.compare([1.0, 10.0, 1.0, 10.0, 1.0], [10.0, 1.0, 10.0, 1.0, 10.0])
    assert e.method == "mann-whitney" and not e.significant


def test_compare_small_samples_use_the_exact_test() -> None:
    # 3 v 3 disjoint: the exact p is 0.1 (the old "ranges" rule called it, at a 10% level)
    c = stats.compare([94.0, 93.0, 95.0], [82.0, 83.0, 81.0])
    assert c.method == "mann-whitney" and c.p_value == pytest.approx(0.1) and not c.significant
    assert c.smallest_p == pytest.approx(0.1)
    assert stats.compare([94.0, 93.0, 95.0, 96.0], [82.0, 83.0, 81.0, 80.0]).significant
    overlap = stats.compare([94.0, 80.0, 95.0], [82.0, 83.0, 81.0])
    assert overlap.method == "mann-whitney" and not overlap.significant
    small = stats.compare([100.0, 101.0], [102.0, 103.0])  # disjoint but +2%: below threshold
    assert not small.significant
    zero = stats.compare([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], alpha=0.2)
    assert zero.ratio is None and zero.delta_pct is None and zero.significant


def test_compare_with_one_value_on_a_side_is_never_significant() -> None:
    """One run shows no noise: 94 vs 61 might be a regression or a bad minute."""
    c = stats.compare([94.0], [61.0])
    assert c.method == "single" and c.significant is False
    assert c.ratio == pytest.approx(61 / 94)
    assert stats.compare([94.0, 94.2, 93.9], [61.0]).method == "single"


# Issue 11, item 15: a busy host's repeats against a steady 55-59.
BUSY = [54.9, 55.5, 11.2, 49.5, 39.9, 46.1]
STEADY = [55.0, 55.8, 56.6, 57.4, 58.2, 59.0]


def test_the_busy_hosts_repeats_are_a_significant_drop_with_an_outlier() -> None:
    c = stats.compare(STEADY, BUSY)
    assert c.significant and c.method == "mann-whitney"
    assert c.p_value == pytest.approx(4 / 924)  # U = 1 of 36: 2 * 2 arrangements of C(12, 6)
    assert c.delta_pct == pytest.approx(-16.14, abs=0.01)
    # median 47.8, MAD 7.4: 11.2 is 36.6 / (1.4826 * 7.4) = 3.34 scaled MADs away (> 3)
    assert stats.outliers(BUSY) == [2]
    assert stats.robust_spread(BUSY) == pytest.approx(1.4826 * 7.4 / 47.8)
    busy, steady = stats.stability(BUSY), stats.stability(STEADY)
    assert busy.unstable and busy.outliers == (2,)
    assert not steady.unstable and steady.spread == pytest.approx(1.4826 * 1.2 / 57.0)


def test_outliers_need_five_values_and_a_material_distance() -> None:
    assert stats.outliers([65.15, 77.82, 77.52]) == []  # the MAD of 3 is one deviation
    assert stats.outliers([10.0, 10.0, 10.0, 10.0, 10.2]) == []  # MAD 0, but only 2% off
    assert stats.outliers([10.0, 10.0, 10.0, 10.0, 11.0]) == [4]  # MAD 0 and 10% off
    assert stats.outliers([100.0, 101.0, 99.0, 100.5, 99.5, 100.2]) == []
    assert stats.robust_spread([73.2, 83.9]) is None  # two values show no spread
    assert stats.robust_spread([0.0, 0.0, 1.0]) is None  # median 0: no relative spread


def test_holm_matches_statsmodels() -> None:
    # statsmodels.stats.multitest.multipletests([0.01, 0.04, 0.03, 0.005], method="holm")[1]
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert stats.holm([]) == []
    # Issue 11, item 16: p = 0.041 is no change among 18 metrics tested at once
    assert stats.holm([0.041] + [0.6] * 17)[0] == pytest.approx(0.041 * 18)
