"""Small, dependency-free statistics for benchmark repeats.

For analyze/metrics.py, report and diff; what its tests assume of repeats: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from orchestrator.runner import compare_rule

# Both samples at least this large for a test; one value a side shows no noise ("single").
MIN_SAMPLES_FOR_TEST = 2
# No ties and one side this small: the exact Gaussian-binomial distribution of U (any other side).
_EXACT_MAX_SMALL_SIDE = 8
# With ties, the exact conditional distribution up to this many values in all (a few ms);
# beyond it the normal approximation with tie correction is within a few percent of it.
EXACT_MAX_VALUES = 40


def _require(values: Sequence[float], what: str) -> list[float]:
    data = [float(v) for v in values]
    if not data:
        raise ValueError(f"{what} of an empty sample")
    return data


def median(values: Sequence[float]) -> float:
    """The median; the mean of the two middle values for an even count."""
    data = sorted(_require(values, "median"))
    mid = len(data) // 2
    if len(data) % 2:
        return data[mid]
    middle = (data[mid - 1] + data[mid]) / 2.0
    # two values near the float range's end: their sum overflows, their halves do not
    return middle if math.isfinite(middle) else data[mid - 1] / 2.0 + data[mid] / 2.0


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean."""
    data = _require(values, "mean")
    try:
        return math.fsum(data) / len(data)
    except OverflowError:  # values near the float range's end: summed divided, not divided summed
        return math.fsum(x / len(data) for x in data)


def stdev(values: Sequence[float]) -> float:
    """The sample standard deviation (n - 1); 0.0 for a single value."""
    data = _require(values, "stdev")
    if len(data) < 2:
        return 0.0
    try:
        m = math.fsum(data) / len(data)
        return math.sqrt(math.fsum((x - m) ** 2 for x in data) / (len(data) - 1))
    except OverflowError:  # scaled down, then up again: the same figure where it fits a float
        scale = max(abs(x) for x in data)
        return scale * stdev([x / scale for x in data])


def mad(values: Sequence[float]) -> float:
    """The median absolute deviation from the median (unscaled)."""
    data = _require(values, "mad")
    m = median(data)
    return median([abs(x - m) for x in data])


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    data = sorted(_require(values, "quantile"))
    pos = q * (len(data) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def iqr(values: Sequence[float]) -> float:
    """The interquartile range, Q3 - Q1."""
    return quantile(values, 0.75) - quantile(values, 0.25)


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) of `values` and the sizes of the groups of tied values."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties: list[int] = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def u_distribution(n1: int, n2: int) -> list[int]:
    """Counts of the arrangements giving U = 0..n1*n2 (no ties): Gaussian binomial coefficients.

    The generating function of U is [n1 + n2 choose n1]_q = prod_{i=1..k} (1 - q^(m+i)) / (1 - q^i)
    with k = min(n1, n2), m = max(n1, n2); exact integers, O(k * n1 * n2) work.
    """
    k, m = min(n1, n2), max(n1, n2)
    size = n1 * n2 + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, k + 1):
        shift = m + i
        for d in range(size - 1, shift - 1, -1):  # multiply by (1 - q^shift)
            poly[d] -= poly[d - shift]
        for d in range(i, size):  # divide by (1 - q^i): a running sum
            poly[d] += poly[d - i]
    return poly


def u_cdf(n1: int, n2: int, u: int) -> float:
    """P(U <= u) under the null hypothesis, exact, for samples without ties."""
    counts = u_distribution(n1, n2)
    if u < 0:
        return 0.0
    return sum(counts[: u + 1]) / sum(counts)


@lru_cache(maxsize=256)
def _rank_sum_counts(doubled_ranks: tuple[int, ...], n1: int) -> tuple[tuple[int, int], ...]:
    """How many of the C(N, n1) ways to pick `n1` of the (doubled, so integer) ranks give each
    rank sum: the exact permutation distribution, ties included, by dynamic programming."""
    table: list[dict[int, int]] = [{} for _ in range(n1 + 1)]
    table[0][0] = 1
    for index, rank in enumerate(doubled_ranks):
        for k in range(min(index + 1, n1), 0, -1):  # downwards: each rank picked at most once
            row, below = table[k], table[k - 1]
            for total, count in below.items():
                row[total + rank] = row.get(total + rank, 0) + count
    return tuple(sorted(table[n1].items()))


@dataclass(frozen=True)
class RankTest:
    """A two-sided Mann-Whitney U test: U of the first sample, its p-value and the smallest
    p-value any arrangement of these values could give (`exact`: from the exact distribution,
    conditional on the ties, not the normal approximation)."""

    u: float
    p: float
    smallest_p: float
    exact: bool


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p an exact rank test of n1 against n2 untied values can reach:
    the two most extreme arrangements out of C(n1 + n2, n1) (ties only make it larger)."""
    if n1 < 1 or n2 < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n1 + n2, n1))


def rank_test(a: Sequence[float], b: Sequence[float]) -> RankTest:
    """Two-sided Mann-Whitney U test, exact for small samples with or without ties.

    No ties and one side of at most 8: the exact distribution of U. Ties and at most
    `EXACT_MAX_VALUES` values in all: the exact permutation distribution of the rank sum over the
    observed mid-ranks (as R's coin::wilcox_test(distribution = "exact")); p is the chance of a
    rank sum at least as far from its mean as the observed one. Otherwise the normal
    approximation with tie and continuity corrections (scipy.stats.mannwhitneyu's defaults),
    which with ties at n = 5 can be 2.4 times too small, hence the exact path.
    """
    xs = _require(a, "Mann-Whitney U")
    ys = _require(b, "Mann-Whitney U")
    n1, n2 = len(xs), len(ys)
    n = n1 + n2
    ranks, ties = _ranks(xs + ys)
    r1 = math.fsum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2.0
    u = max(u1, n1 * n2 - u1)
    has_ties = any(t > 1 for t in ties)
    if not has_ties and (n1 <= _EXACT_MAX_SMALL_SIDE or n2 <= _EXACT_MAX_SMALL_SIDE):
        counts = u_distribution(n1, n2)
        total = sum(counts)
        # P(U >= u) by symmetry with the lower tail; U = n1 n2 / 2 exactly: every arrangement
        p = 1.0 if 2 * round(u) == n1 * n2 else 2.0 * sum(counts[round(u) :]) / total
        return RankTest(u1, min(1.0, p), smallest_p(n1, n2), True)
    if n <= EXACT_MAX_VALUES:
        doubled = [round(2 * r) for r in ranks]
        grand = sum(doubled)
        observed = abs(n * sum(doubled[:n1]) - n1 * grand)  # n * |rank sum - its mean|, doubled
        counts_by_sum = _rank_sum_counts(tuple(sorted(doubled)), n1)
        total = math.comb(n, n1)
        far = sum(c for s, c in counts_by_sum if abs(n * s - n1 * grand) >= observed)
        widest = max(abs(n * s - n1 * grand) for s, _ in counts_by_sum)
        least = sum(c for s, c in counts_by_sum if abs(n * s - n1 * grand) >= widest)
        return RankTest(u1, min(1.0, far / total), min(1.0, least / total), True)
    return RankTest(u1, normal_rank_p(xs, ys), smallest_p(n1, n2), False)


def normal_rank_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Mann-Whitney's two-sided p by the normal approximation with tie and continuity
    corrections (scipy.stats.mannwhitneyu(method="asymptotic")): for large samples only."""
    xs = _require(a, "Mann-Whitney U")
    ys = _require(b, "Mann-Whitney U")
    n1, n2 = len(xs), len(ys)
    n = n1 + n2
    ranks, ties = _ranks(xs + ys)
    u1 = math.fsum(ranks[:n1]) - n1 * (n1 + 1) / 2.0
    u = max(u1, n1 * n2 - u1)
    tie_term = sum(t**3 - t for t in ties)
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0.0:  # every value tied: no evidence of any difference
        return 1.0
    z = (u - n1 * n2 / 2.0 - 0.5) / math.sqrt(var)
    return min(1.0, max(0.0, math.erfc(z / math.sqrt(2.0))))  # 2 * normal survival function


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: `(U of a, p)`, exact for small samples (`rank_test`)."""
    got = rank_test(a, b)
    return got.u, got.p


@dataclass(frozen=True)
class Comparison:
    """How sample b relates to sample a.

    `ratio` is median(b) / median(a) (None when median(a) is 0); `delta` is median(b) - median(a).
    `significant` is true only when |ratio - 1| reaches the threshold (`moved`) and the exact
    rank test (`method` "mann-whitney", `rank_test`) gives p < alpha; `smallest_p` is the least p
    these sample sizes could give (at 2 v 2: 0.33, so never significant at 5 %).
    """

    ratio: float | None
    delta: float
    significant: bool
    method: Literal["mann-whitney", "single"]
    p_value: float | None
    median_a: float
    median_b: float
    n_a: int
    n_b: int
    moved: bool = False  # |ratio - 1| reached the threshold (from 0: any change)
    smallest_p: float | None = None

    @property
    def delta_pct(self) -> float | None:
        """The relative change in percent, or None when median(a) is 0."""
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    ratio_threshold: float = 0.05,
    alpha: float = 0.05,
) -> Comparison:
    """Compare two samples as asv does: a ratio threshold AND a statistical check must agree.

    The check is the exact two-sided Mann-Whitney test (`rank_test`) at every size from 2 a
    side, so its p-values can join one Holm family whatever the repeats; small samples cannot
    reach every alpha (`smallest_p`) and then are never significant. A side with one value shows
    no noise at all: method "single", never significant (callers say they cannot tell).
    """
    xs = _require(a, "compare")
    ys = _require(b, "compare")
    ma, mb = median(xs), median(ys)
    if ma != 0.0:
        ratio: float | None = mb / ma
        big_enough = abs(mb / ma - 1.0) >= ratio_threshold
    else:
        ratio = None
        big_enough = mb != 0.0  # from zero, any change is an infinite ratio
    p: float | None = None
    least: float | None = None
    method: Literal["mann-whitney", "single"]
    if min(len(xs), len(ys)) < MIN_SAMPLES_FOR_TEST:
        method, test_agrees = "single", False
    else:
        method = "mann-whitney"
        got = rank_test(xs, ys)
        p, least = got.p, got.smallest_p
        test_agrees = p < alpha
    return Comparison(
        ratio=ratio,
        delta=mb - ma,
        significant=big_enough and test_agrees,
        method=method,
        p_value=p,
        median_a=ma,
        median_b=mb,
        n_a=len(xs),
        n_b=len(ys),
        moved=big_enough,
        smallest_p=least,
    )


def reach_text(n_a: int, n_b: int, least: float, alpha: float, family: int = 1) -> str | None:
    """'2 v 2: cannot reach 5 %; smallest p 0.33' when these sizes (in a Holm family of
    `family`) can never give an adjusted p below alpha; None when they can."""
    if min(1.0, least * family) < alpha:
        return None
    within = f" in a family of {family}" if family > 1 else ""
    return f"{n_a} v {n_b}: cannot reach {alpha:.0%}{within}; smallest p {least:.2g}"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given.

    The i-th smallest of m p-values is multiplied by (m - i + 1), made non-decreasing in that
    order and capped at 1 (as statsmodels' `multipletests(method="holm")`): rejecting where the
    adjusted p < alpha keeps the chance of any false alarm among the m tests below alpha.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[index])))
        adjusted[index] = running
    return adjusted


# The outlier rule and its constants live with the runner's comparison (stdlib, on the host).
MAD_SCALE = compare_rule.MAD_SCALE
OUTLIER_MADS = compare_rule.OUTLIER_MADS
OUTLIER_MIN_RELATIVE = compare_rule.OUTLIER_MIN_RELATIVE
# A robust relative spread (scaled MAD / |median|) of 10% or more: the repeats disagree by more
# than a change orch is asked to find, whatever the test says.
UNSTABLE_SPREAD = 0.10


def outliers(
    values: Sequence[float],
    *,
    mads: float = OUTLIER_MADS,
    min_relative: float = OUTLIER_MIN_RELATIVE,
) -> list[int]:
    """Indexes of the outlying values: more than `mads` scaled MADs from the median AND at least
    `min_relative` of |median| away from it. Fewer than 5 values (as `compare`'s test needs)
    have none: the MAD of 3 is the smaller of two deviations, so any lopsided trio would flag."""
    return compare_rule.outlier_indexes(
        _require(values, "outliers"), mads=mads, min_relative=min_relative
    )


def robust_spread(values: Sequence[float]) -> float | None:
    """Scaled MAD over |median|: a relative spread one wild value cannot inflate; None when the
    median is 0 or there are fewer than 3 values (the MAD of 2 is half their gap, no spread)."""
    data = _require(values, "robust_spread")
    center = median(data)
    if len(data) < 3 or center == 0.0:
        return None
    return MAD_SCALE * mad(data) / abs(center)


@dataclass(frozen=True)
class Stability:
    """Whether a sample of repeats is steady enough to read a change from.

    `outliers` are indexes into the sample (`outliers()`); `spread` is `robust_spread()`.
    """

    outliers: tuple[int, ...]
    spread: float | None

    @property
    def unstable(self) -> bool:
        """An outlying repeat, or a spread of `UNSTABLE_SPREAD` or more."""
        return bool(self.outliers) or (self.spread is not None and self.spread >= UNSTABLE_SPREAD)


def stability(values: Sequence[float]) -> Stability:
    """The outliers and robust spread of one sample of repeats."""
    return Stability(tuple(outliers(values)), robust_spread(values))
