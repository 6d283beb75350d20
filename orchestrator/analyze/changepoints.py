"""Change points in performance series: E-Divisive means to locate a step, Student's t at the
split to judge it, and the false discovery rate held across every series of one query.

Location: Matteson and James (2014), "A Nonparametric Approach for Multiple Change Point
Analysis of Multivariate Data" (JASA 109:505). For a segment x[0..n), the energy statistic

    Q(t, k) = t m / (t + m) * (2 E|X - Y| - E|X - X'| - E|Y - Y'|),  X = x[0..t), Y = x[t..k)

(m = k - t, alpha = 1) is largest where the distributions differ most. Both t AND k are
searched, as the paper does: with k fixed at the segment end, a 10-run dip in the middle of
200 runs is diluted by the 190 normal runs after it and never found. Found splits cut the
series and each part is searched again (binary segmentation, as Otava does).

Significance: Student's t test on the logs of the two sides at the chosen (t, k), as Hunter /
Apache Otava replaced E-Divisive's permutation test (Fleming et al., "Hunter: Using Change
Point Detection to Hunt for Performance Regressions", ICPE 2023), times the number of (t, k)
pairs searched (Bonferroni: the split is the best of them, so its raw p is not a p). The p is
deterministic (the same series gives the same answer every night) and reaches far below the
1/200 floor of 199 permutations, which a correction across 1,000 series needs.

Across series: every test of every series of one query is one family, and Benjamini-Hochberg
at `fdr` decides (Benjamini and Hochberg 1995): of the R change points kept, at most fdr * R
are false on average; where nothing changed anywhere, any change point at all is raised with
probability at most fdr. A split must also move its segment's median by `min_change`
(relative): a significant 0.5 % step is real but not a regression anyone chases.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from itertools import accumulate

from orchestrator.analyze.student import t_two_sided

FDR = 0.05  # Benjamini-Hochberg level across the series of one query
MIN_CHANGE = 0.03  # relative change of the median across a split
MIN_SIZE = 2  # runs on each side of a split
WINDOW = 200  # runs a window holds on series longer than two of them
MERGE_GAP = 5  # steps found this close by overlapping windows are one step


@dataclass(frozen=True)
class ChangePoint:
    """A step at `index` (the first run of the new level), with its size and p-value."""

    index: int
    before: float  # median of the segment before
    after: float  # median of the segment from `index` on
    p_value: float  # Bonferroni over the splits searched; the family's correction is BH's

    @property
    def change(self) -> float:
        """after / before - 1."""
        return self.after / self.before - 1.0 if self.before else float("inf")


@dataclass(frozen=True)
class Family:
    """The change points of many series judged as one family: what the correction says."""

    found: list[list[ChangePoint]]  # per series, in the order given
    tests: int  # splits tested across all series (the family's size)
    fdr: float

    @property
    def kept(self) -> int:
        """Change points kept across all series."""
        return sum(len(f) for f in self.found)

    @property
    def expected_false(self) -> float:
        """At most this many of the kept change points are false, on average (BH: fdr * R)."""
        return self.fdr * self.kept


def split_p(left: Sequence[float], right: Sequence[float]) -> float:
    """Two-sample t test (pooled variance) of `left` against `right`; one value on the right is
    the prediction test of a new observation. 1 where there is nothing to test."""
    nl, nr = len(left), len(right)
    if nl < 1 or nr < 1 or nl + nr < 3:
        return 1.0
    ml, mr = math.fsum(left) / nl, math.fsum(right) / nr
    ss = math.fsum((v - ml) ** 2 for v in left) + math.fsum((v - mr) ** 2 for v in right)
    df = nl + nr - 2
    if ss <= 0.0:
        return 0.0 if ml != mr else 1.0
    return t_two_sided((mr - ml) / math.sqrt(ss / df * (1.0 / nl + 1.0 / nr)), df)


def logs_of(values: Sequence[float]) -> list[float]:
    """The t test's scale: logs (a step is relative), the values themselves if any is <= 0."""
    return [math.log(v) for v in values] if all(v > 0 for v in values) else list(values)


@cache
def right_lengths(most: int, min_size: int) -> tuple[int, ...]:
    """The right segment's lengths searched: every one up to 8, then about a quarter apart, and the
    whole rest (a dip's end needs finding roughly; its start, the split, exactly): 25 lengths
    instead of 200 in a window, and fewer pairs for the Bonferroni factor to pay for."""
    lengths, m = set(range(min_size, min(most, 8) + 1)), 8.0
    while m * 1.25 < most:
        m *= 1.25
        lengths.add(round(m))
    return tuple(sorted(lengths | {most}))


def _best_split(values: Sequence[float], min_size: int) -> tuple[int, int, float, int]:
    """(t, k, Q(t, k), pairs searched) of the largest energy statistic over both the split t
    and the right segment's end k (its lengths from right_lengths); (-1, -1, 0, 0) when none
    fits. The 2-D prefix sums P[a][b] of |x_i - x_j| over i < a, j < b give each pair in O(1)."""
    n = len(values)
    if n < 2 * min_size:
        return -1, -1, 0.0, 0
    prefix = [[0.0] * (n + 1)]
    for x in values:
        sums = accumulate((abs(x - y) for y in values), initial=0.0)
        prefix.append([p + r for p, r in zip(prefix[-1], sums, strict=True)])
    diagonal = [prefix[k][k] for k in range(n + 1)]
    best_t, best_k, best_q, pairs = -1, -1, 0.0, 0
    for t in range(min_size, n - min_size + 1):
        row, ptt = prefix[t], diagonal[t]
        e_left = ptt / (t * (t - 1)) if t > 1 else 0.0  # P[t][t] / 2 over t (t - 1) / 2 pairs
        lengths = right_lengths(n - t, min_size)
        for m in lengths:
            k = t + m
            between = row[k] - ptt
            within = diagonal[k] - 2 * row[k] + ptt  # twice the right side's pair sum
            e_right = within / (m * (m - 1)) if m > 1 else 0.0
            q = t * m / (t + m) * (2 * between / (t * m) - e_left - e_right)
            if q > best_q:
                best_t, best_k, best_q = t, k, q
        pairs += len(lengths)
    return best_t, best_k, best_q, pairs


@dataclass(frozen=True)
class _Test:
    """One split tested: where (-1: none worth testing), its p, and the test that cut its
    segment out (a change point stands only when every test above it stands)."""

    index: int
    p_value: float
    parent: int | None


def _search(values: Sequence[float], logs: Sequence[float], *, min_change: float,
            min_size: int, level: float) -> list[_Test]:  # fmt: skip
    """Binary segmentation of one series (or window): every test made, in order; a segment is
    cut (and its parts searched) where its p is at most `level` (the family decides later)."""
    tests: list[_Test] = []
    pending: list[tuple[int, int, int | None]] = [(0, len(values), None)]
    while pending:
        start, end, parent = pending.pop()
        segment = values[start:end]
        t, k, q, pairs = _best_split(segment, min_size)
        if t < 0 or q <= 0:
            continue
        before, after = statistics.median(segment[:t]), statistics.median(segment[t:k])
        if before and abs(after / before - 1.0) < min_change:
            tests.append(_Test(-1, 1.0, parent))  # looked at, and too small to be one
            continue
        p = min(1.0, pairs * split_p(logs[start : start + t], logs[start + t : start + k]))
        tests.append(_Test(start + t, p, parent))
        if p <= level:
            me = len(tests) - 1
            pending += [(start, start + t, me), (start + t, end, me)]
    return tests


def benjamini_hochberg(p_values: Sequence[float], q: float) -> list[bool]:
    """Which hypotheses Benjamini-Hochberg rejects at false discovery rate `q`."""
    m = len(p_values)
    order = sorted(range(m), key=p_values.__getitem__)
    cut = 0
    for rank, i in enumerate(order, 1):
        if p_values[i] <= q * rank / m:
            cut = rank
    rejected = [False] * m
    for i in order[:cut]:
        rejected[i] = True
    return rejected


def _merge(values: Sequence[float], found: dict[int, float], *, min_change: float,
           min_size: int, window: int, gap: int) -> dict[int, float]:  # fmt: skip
    """Steps that overlapping windows found a few runs apart are one step (placed where a t
    test over the same span either side is strongest, with the smaller p); then, weakest
    first, a step whose segments either side (up to a window) no longer differ by `min_change`
    is merged into its neighbours: one -5 % step found at two runs of a seam is one -5 % step,
    not two sub-threshold ones."""
    logs, half = logs_of(values), window // 2

    def local_p(index: int) -> float:  # the same span either side: where the step is likeliest
        return split_p(logs[max(0, index - half) : index], logs[index : index + half])

    kept: dict[int, float] = {}
    for index in sorted(found):
        last = max(kept, default=None)
        if last is not None and index - last < gap:
            if local_p(index) < local_p(last):
                kept[index] = min(found[index], kept.pop(last))
            else:
                kept[last] = min(found[index], kept[last])
            continue
        kept[index] = found[index]
    while kept:
        cuts = sorted(kept)
        bounds = [0, *cuts, len(values)]
        weakest, smallest = -1, min_change
        for k, index in enumerate(cuts):
            lo, hi = max(bounds[k], index - window), min(bounds[k + 2], index + window)
            if index - lo < min_size or hi - index < min_size:
                change = 0.0
            else:
                before = statistics.median(values[lo:index])
                change = abs(statistics.median(values[index:hi]) / before - 1.0) if before else 1
            if change < smallest:
                weakest, smallest = index, change
        if weakest < 0:
            break
        del kept[weakest]
    return kept


def change_points_of_many(
    many: Sequence[Sequence[float]],
    *,
    fdr: float = FDR,
    min_change: float = MIN_CHANGE,
    min_size: int = MIN_SIZE,
    window: int = WINDOW,
) -> Family:
    """The change points of each series, the false discovery rate held at `fdr` across all of
    them (every split tested in every series is one hypothesis of one family).

    A series longer than two windows is searched window by window (`window` runs, each
    overlapping the next by half, as Otava's split step does): the search is O(n^2) in the
    runs, and a step is a local thing. Steps found by overlapping windows are merged.
    """
    tests: list[tuple[int, _Test]] = []  # (series, test), parents as indexes into `tests`
    for which, values in enumerate(many):
        logs = logs_of(values)
        spans = [(0, len(values))] if len(values) <= 2 * window else [
            (s, min(s + window, len(values))) for s in range(0, len(values) - window // 2,
                                                            window // 2)]  # fmt: skip
        for start, end in spans:
            base = len(tests)
            local = _search(values[start:end], logs[start:end], min_change=min_change,
                            min_size=min_size, level=fdr)  # fmt: skip
            for test in local:
                parent = None if test.parent is None else base + test.parent
                index = test.index + start if test.index >= 0 else -1
                tests.append((which, _Test(index, test.p_value, parent)))
    rejected = benjamini_hochberg([t.p_value for _, t in tests], fdr) if tests else []
    stands = [False] * len(tests)
    for i, (_, test) in enumerate(tests):  # parents come before their children
        stands[i] = rejected[i] and test.index >= 0 and (test.parent is None or stands[test.parent])
    found: list[dict[int, float]] = [{} for _ in many]
    for (which, test), kept in zip(tests, stands, strict=True):
        if kept:
            old = found[which].get(test.index, 1.0)
            found[which][test.index] = min(old, test.p_value)
    out = []
    for which, values in enumerate(many):
        gap = MERGE_GAP if len(values) > 2 * window else 1  # windows overlap only there
        cuts_p = _merge(values, found[which], min_change=min_change, min_size=min_size,
                        window=window, gap=gap)  # fmt: skip
        cuts = sorted(cuts_p)
        bounds = [0, *cuts, len(values)]
        out.append([
            ChangePoint(index, statistics.median(values[bounds[k] : index]),
                        statistics.median(values[index : bounds[k + 2]]), cuts_p[index])
            for k, index in enumerate(cuts)
        ])  # fmt: skip
    return Family(out, len(tests), fdr)


def change_points(
    values: Sequence[float],
    *,
    fdr: float = FDR,
    min_change: float = MIN_CHANGE,
    min_size: int = MIN_SIZE,
    window: int = WINDOW,
) -> list[ChangePoint]:
    """The significant steps of one series (in series order), first to last: the series is
    its own family."""
    return change_points_of_many([values], fdr=fdr, min_change=min_change, min_size=min_size,
                                 window=window).found[0]  # fmt: skip
