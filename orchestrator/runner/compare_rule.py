"""Is B higher than A, lower, or the same within a tolerance? A sequential three-decision test.

Sobel and Wald's test on log values: two sequential probability ratio tests of "B's mean is A's"
(same) against "A's times 1 + tolerance" (higher) and against "A's divided by it" (lower), with
Wald's bounds log((1 - error) / error). A side is called when its test leaves "same" behind,
"same" when both tests accept it. The noise is not known: it is estimated from both samples
(outlying repeats left out) and taken at its upper confidence bound, so a lucky quiet start does
not end a comparison.

Stdlib only, Python 3.8: `orch audit --rerun`'s runner stops a cell's repeats with it on the
host (repeat_rule.py), and the controller's interleaved comparisons (analyze/sequential.py)
decide with the same function.
"""

from __future__ import annotations

import math
import statistics
from typing import List, NamedTuple, Optional, Sequence, Tuple

# 1.4826 * MAD estimates the standard deviation of normal data (1 / the normal's 0.75 quantile).
MAD_SCALE = 1.4826
# Leys et al. (2013): further than 3 scaled MADs from the median ("very conservative").
OUTLIER_MADS = 3.0
# ... and at least this far from the median, relatively: with identical repeats (MAD 0) a repeat
# 1% off would be infinitely many MADs away, yet it cannot move a verdict at a 5% threshold.
OUTLIER_MIN_RELATIVE = 0.05
# Fewer values have no outliers: the MAD of 3 is the smaller of two deviations, so any lopsided
# trio would flag.
OUTLIER_MIN_VALUES = 5
# A side whose screen drops more than this share of it is not read: with 3 slow repeats of 5 the
# "outliers" are the good ones, and which mode is the normal one is a coin toss.
SCREEN_MAX_SHARE = 0.2


def outlier_indexes(
    values: Sequence[float],
    mads: float = OUTLIER_MADS,
    min_relative: float = OUTLIER_MIN_RELATIVE,
) -> List[int]:
    """Indexes of the values more than `mads` scaled MADs from the median AND at least
    `min_relative` of |median| away from it; none below OUTLIER_MIN_VALUES values."""
    if len(values) < OUTLIER_MIN_VALUES:
        return []
    center = statistics.median(values)
    scale = MAD_SCALE * statistics.median([abs(x - center) for x in values])
    out = []
    for index, value in enumerate(values):
        distance = abs(value - center)
        far = distance > mads * scale if scale > 0.0 else distance > 0.0
        if far and distance >= min_relative * abs(center):
            out.append(index)
    return out


def noise_upper_bound(noise: float, dof: int, z: float) -> float:
    """A one-sided upper confidence bound of a standard deviation estimated with `dof` degrees
    of freedom, `z` standard normal units above (Wilson-Hilferty's chi-square quantile)."""
    if dof <= 0 or z <= 0:
        return noise
    k = float(dof)
    quantile = k * (1 - 2 / (9 * k) - z * math.sqrt(2 / (9 * k))) ** 3
    return noise * math.sqrt(k / quantile) if quantile > 0 else noise * 10


def kept_logs(values: Sequence[float]) -> List[float]:
    """The log values less the outliers of the raw values (slow or lost repeats)."""
    out = set(outlier_indexes(values))
    return [math.log(x) for i, x in enumerate(values) if i not in out]


class LogDifference(NamedTuple):
    """B against A on the log scale, outlying repeats left out (`kept_logs`)."""

    diff: float  # B's mean log minus A's
    sd: float  # the pooled standard deviation of the logs (0 without degrees of freedom)
    dof: int  # degrees of freedom of `sd`: the values kept, less 2
    n_a: int  # A's values kept
    n_b: int  # B's values kept

    @property
    def weight(self) -> float:
        """1 / (1/n_a + 1/n_b): the difference of means has variance sd^2 / weight."""
        return 1.0 / (1.0 / self.n_a + 1.0 / self.n_b)


def log_difference(a: Sequence[float], b: Sequence[float]) -> LogDifference:
    """B's mean log over A's with their pooled spread; `a` and `b` positive and not empty."""
    la, lb = kept_logs(a), kept_logs(b)
    ma, mb = math.fsum(la) / len(la), math.fsum(lb) / len(lb)
    dof = len(la) + len(lb) - 2
    ss = math.fsum((x - ma) ** 2 for x in la) + math.fsum((x - mb) ** 2 for x in lb)
    return LogDifference(mb - ma, math.sqrt(ss / dof) if dof >= 1 else 0.0, dof, len(la), len(lb))


def readable(values: Sequence[float]) -> bool:
    """Enough values for the outlier screen to work (OUTLIER_MIN_VALUES), and no more than
    SCREEN_MAX_SHARE of them screened out: a sample the test may read."""
    if len(values) < OUTLIER_MIN_VALUES:
        return False
    return len(outlier_indexes(values)) <= SCREEN_MAX_SHARE * len(values)


def three_decision(
    a: Sequence[float],
    b: Sequence[float],
    tolerance: float,
    error: float,
    noise_z: float,
    start_noise: float = 0.0,
) -> Tuple[Optional[str], float, float, float]:
    """B against A (positive values): ("higher" | "lower" | "same" | None, B's mean over A's
    minus 1 (geometric, outliers left out), the log likelihood ratios of higher and of lower
    over same). None: not yet; every value must be positive and each side `readable`: no look
    before the outlier screen can work (5 values), and none while a side is more than a fifth
    slow repeats (20 % slow repeats made 7-10 % wrong calls where 5 % was stated).
    `start_noise`: the sd (log scale) of a server start's own offset; A and B are two starts,
    so their difference carries twice its variance, which no number of repeats averages away."""
    if not a or not b or min(a) <= 0 or min(b) <= 0:
        return None, 0.0, 0.0, 0.0
    logs = log_difference(a, b)
    change = math.expm1(logs.diff)
    if logs.dof < 1 or not readable(a) or not readable(b):
        return None, change, 0.0, 0.0
    step = math.log1p(tolerance)
    noise = max(noise_upper_bound(logs.sd, logs.dof, noise_z), step * 1e-3)
    # the difference of means is one observation with variance noise^2 / weight (+ the starts')
    variance = noise * noise / logs.weight + 2.0 * start_noise * start_noise
    higher = (step * logs.diff - step * step / 2) / variance
    lower = (-step * logs.diff - step * step / 2) / variance
    bound = math.log((1 - error) / error)
    call: Optional[str] = None
    if higher >= bound:
        call = "higher"
    elif lower >= bound:
        call = "lower"
    elif higher <= -bound and lower <= -bound:
        call = "same"
    return call, change, higher, lower
