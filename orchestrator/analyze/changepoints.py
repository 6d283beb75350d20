"""Change points in a performance series: E-Divisive means with a permutation test.

Matteson and James (2014), "A Nonparametric Approach for Multiple Change Point Analysis of
Multivariate Data" (JASA 109:505), the family Apache Otava (ex Hunter) and MongoDB's signal
processing use for nightly benchmark series. For a split of x[0..n) at t, the energy statistic

    Q(t) = t (n - t) / n * (2 E|X - Y| - E|X - X'| - E|Y - Y'|)

(X before t, Y from t on, alpha = 1) is largest where the distributions differ most. The
strongest split of a segment is kept when a permutation test says it is not chance: the same
statistic's maximum over `permutations` shuffles of the segment is at least as large in at most
`alpha` of them. Found splits cut the series and each part is searched again (binary
segmentation, as Otava does), each test at `alpha`. A split must also move the segment's median
by `min_change` (relative): a significant 0.5 % step is real but not a regression anyone
chases. Pure Python, O(n log n) per statistic (sums of distances through a Fenwick tree over
value ranks), so a series of a few hundred runs is judged in well under a second.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

ALPHA = 0.01  # per test: a pure-noise series of 30 runs raises nothing 99 % of the time
PERMUTATIONS = 199  # the smallest p a test can give is 1 / 200
MIN_CHANGE = 0.03  # relative change of the median across a split
MIN_SIZE = 2  # runs on each side of a split
WINDOW = 200  # runs a window holds on series longer than two of them


@dataclass(frozen=True)
class ChangePoint:
    """A step at `index` (the first run of the new level), with its size and p-value."""

    index: int
    before: float  # median of the segment before
    after: float  # median of the segment from `index` on
    p_value: float

    @property
    def change(self) -> float:
        """after / before - 1."""
        return self.after / self.before - 1.0 if self.before else float("inf")


def _prefix_within(values: Sequence[float]) -> list[float]:
    """W[t] = the sum of |x_i - x_j| over i < j < t, for t = 0..n, in O(n log n): each value
    joins a Fenwick tree over value ranks that knows how many values, and their sum, lie below."""
    order = sorted(set(values))
    rank = {v: k + 1 for k, v in enumerate(order)}
    size = len(order)
    counts, sums = [0] * (size + 1), [0.0] * (size + 1)
    out, total, running = [0.0], 0.0, 0.0
    for seen, x in enumerate(values):  # `seen` values joined before x
        k, below, below_sum = rank[x], 0, 0.0
        i = k
        while i > 0:  # values <= x
            below += counts[i]
            below_sum += sums[i]
            i -= i & -i
        running += x * below - below_sum + (total - below_sum) - x * (seen - below)
        out.append(running)
        i = k
        while i <= size:
            counts[i] += 1
            sums[i] += x
            i += i & -i
        total += x
    return out


def _best_split(values: Sequence[float], min_size: int) -> tuple[int, float]:
    """(t, Q(t)) of the split with the largest energy statistic; (-1, 0) when none fits."""
    n = len(values)
    if n < 2 * min_size:
        return -1, 0.0
    left = _prefix_within(values)  # left[t]: pairs within x[0..t)
    right = _prefix_within(values[::-1])[::-1]  # right[t]: pairs within x[t..n)
    everything = left[n]
    best_t, best_q = -1, 0.0
    for t in range(max(1, min_size), n - min_size + 1):
        m = n - t
        between = everything - left[t] - right[t]
        e_left = left[t] / (t * (t - 1) / 2) if t > 1 else 0.0
        e_right = right[t] / (m * (m - 1) / 2) if m > 1 else 0.0
        q = t * m / n * (2 * between / (t * m) - e_left - e_right)
        if q > best_q:
            best_t, best_q = t, q
    return best_t, best_q


def _p_value(values: Sequence[float], observed: float, min_size: int, rng: random.Random,
             permutations: int, alpha: float) -> float:  # fmt: skip
    """The permutation p-value, stopping as soon as it cannot be at most `alpha` (the decision
    is the full test's; the p then said is that of the shuffles done)."""
    shuffled = list(values)
    at_least, limit = 0, alpha * (permutations + 1) - 1
    for done in range(1, permutations + 1):
        rng.shuffle(shuffled)
        if _best_split(shuffled, min_size)[1] >= observed:
            at_least += 1
            if at_least > limit:
                return (at_least + 1) / (done + 1)
    return (at_least + 1) / (permutations + 1)


def _divisive(
    values: Sequence[float],
    *,
    alpha: float,
    permutations: int,
    min_change: float,
    min_size: int,
    rng: random.Random,
) -> dict[int, float]:
    """Binary segmentation of `values`: {index of a step: the p-value that kept it}."""
    found: dict[int, float] = {}
    pending = [(0, len(values))]
    while pending:
        start, end = pending.pop()
        segment = values[start:end]
        t, q = _best_split(segment, min_size)
        if t < 0 or q <= 0:
            continue
        before, after = statistics.median(segment[:t]), statistics.median(segment[t:])
        if before and abs(after / before - 1.0) < min_change:
            continue
        p = _p_value(segment, q, min_size, rng, permutations, alpha)
        if p > alpha:
            continue
        found[start + t] = p
        pending += [(start, start + t), (start + t, end)]
    return found


def change_points(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    min_change: float = MIN_CHANGE,
    min_size: int = MIN_SIZE,
    window: int = WINDOW,
    seed: int = 0,
) -> list[ChangePoint]:
    """The significant steps of `values` (in series order), first to last.

    A series longer than two windows is searched window by window (`window` runs, each
    overlapping the next by half, as Otava's split step does): a permutation test over
    thousands of runs costs seconds in pure Python, a window's costs milliseconds, and a step
    is a local thing. Steps found twice (or a run apart) by overlapping windows are one.
    """
    rng = random.Random(seed)  # the same series always gives the same answer
    search = partial(_divisive, alpha=alpha, permutations=permutations, min_change=min_change,
                     min_size=min_size, rng=rng)  # fmt: skip
    if len(values) <= 2 * window:
        found = search(values)
    else:
        found = {}
        half = window // 2
        for start in range(0, len(values) - half, half):
            local = search(values[start : start + window])
            for index, p in local.items():
                near = [k for k in found if abs(k - (start + index)) <= 1]
                if not near:
                    found[start + index] = p
                elif p < found[near[0]]:
                    del found[near[0]]
                    found[start + index] = p
    cuts = sorted(found)
    bounds = [0, *cuts, len(values)]
    return [
        ChangePoint(
            index,
            statistics.median(values[bounds[k] : index]),
            statistics.median(values[index : bounds[k + 2]]),
            found[index],
        )
        for k, index in enumerate(cuts)
    ]
