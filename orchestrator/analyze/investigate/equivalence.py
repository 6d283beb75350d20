"""How far an experiment moved a metric, and whether that rules a factor in or out.

One scale and one centre: every figure is on the log scale (a ratio), centred on the difference
of mean logs, said back as a relative change. The interval is Welch's (unequal variances,
Welch-Satterthwaite degrees of freedom), not a pooled t. The unit of replication is the server
start: with several starts a side, each start's mean log is one observation; with one start a
side, a between-start standard deviation (`start_sd`, log scale) given by the caller is added to
each side's variance, since repeats inside one start cannot show it.

"No effect" needs evidence: two one-sided tests (Schuirmann 1987; Lakens, "Equivalence tests",
2017): a factor is ruled out only when the (1 - 2 alpha) interval lies inside +-tolerance.
Between "significant" and "ruled out" lies "inconclusive", with what it would take to decide.

Nothing is trimmed: the outlier screen's findings are said (one lone outlying repeat; two or
more are a second mode, and the sample is called bimodal), and the interval is the whole
sample's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.analyze.student import t_quantile, t_sf
from orchestrator.runner.compare_rule import outlier_indexes


@dataclass(frozen=True)
class Screened:
    """One side's log values as used: a lone outlier left out, a second mode kept and said."""

    logs: tuple[float, ...]
    starts: tuple[str, ...] | None  # the start of each kept value, when the caller knows them
    notes: tuple[str, ...]
    bimodal: bool


# Two groups apart by this many within-group sds (and GROUPS_APART_MIN on the log scale) are
# two modes: on normal samples of 5, 7 and 10 this calls 3 %, 1.2 % and 0.1 % bimodal.
GROUPS_APART_SDS, GROUPS_APART_MIN = 6.0, 0.02


def _two_groups(logs: Sequence[float]) -> tuple[int, float] | None:
    """Split at the widest gap between sorted logs (2 or more a group): (the smaller group's
    size, its mean's relative distance from the other's) when the gap is wide, else None."""
    xs = sorted(logs)
    n = len(xs)
    if n < 5:
        return None
    i = max(range(2, n - 1), key=lambda k: xs[k] - xs[k - 1])
    low, high = xs[:i], xs[i:]
    ss = math.fsum((x - _mean(low)) ** 2 for x in low) + math.fsum(
        (x - _mean(high)) ** 2 for x in high
    )
    gap = xs[i] - xs[i - 1]
    if gap < GROUPS_APART_MIN or gap <= GROUPS_APART_SDS * math.sqrt(ss / (n - 2)):
        return None
    small, big = (low, high) if len(low) < len(high) else (high, low)
    return len(small), math.expm1(_mean(small) - _mean(big))


def screened(values: Sequence[float], starts: Sequence[str] | None = None) -> Screened:
    """`values` (positive) on the log scale, whole, with what the screen saw said: two groups
    far apart, or two or more outlying repeats, are a second mode ("bimodal"); one outlying
    repeat is a lone slow or fast one. Nothing is left out: trimming the farthest value of a
    small sample shrinks its spread and the interval with it (95 % intervals missed 7.9 % with
    the old screen, 5.5 % without)."""
    flagged = outlier_indexes(values)
    ordered = sorted(values)
    center = ordered[len(ordered) // 2]
    logs = tuple(math.log(x) for x in values)
    groups = _two_groups(logs)
    if groups is not None or len(flagged) >= 2:
        if groups is not None:
            size, shift = groups
        else:
            size, shift = len(flagged), sum(values[i] for i in flagged) / len(flagged) / center - 1
        note = f"bimodal: {size} of {len(values)} repeats at {shift:+.0%}, all kept"
        return Screened(logs, _opt(starts), (note,), True)
    notes = tuple(
        f"1 outlying repeat of {len(values)} ({values[i] / center - 1.0:+.0%}), kept"
        for i in flagged
    )
    return Screened(logs, _opt(starts), notes, False)


def _opt(starts: Sequence[str] | None) -> tuple[str, ...] | None:
    return tuple(starts) if starts is not None else None


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _var(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else math.nan


@dataclass(frozen=True)
class SideSpread:
    """One side's mean log, the variance of that mean, and the degrees of freedom behind it."""

    mean: float
    var_mean: float  # estimated part (from the sample)
    known: float  # the between-start part taken as known (start_sd^2 / starts)
    dof: float  # of the estimated part; 0 when it cannot be estimated
    unit: str  # "start" or "repeat"
    n: int  # units


def side_spread(side: Screened, start_sd: float = 0.0) -> SideSpread:
    """The side's mean log and its variance: per-start means as units where the side has two
    starts or more, repeats plus `start_sd`'s known part otherwise."""
    groups: dict[str, list[float]] = {}
    if side.starts is not None:
        for start, x in zip(side.starts, side.logs, strict=True):
            groups.setdefault(start, []).append(x)
    if len(groups) >= 2:
        means = [_mean(g) for g in groups.values()]
        v = _var(means)
        return SideSpread(_mean(means), v / len(means), 0.0, len(means) - 1.0, "start", len(means))
    n = len(side.logs)
    v = _var(side.logs) if n > 1 else math.nan
    return SideSpread(_mean(side.logs), v / n, start_sd**2, n - 1.0, "repeat", n)


@dataclass(frozen=True)
class LogEffect:
    """B against A on the log scale: the difference of means, its standard error and
    Welch-Satterthwaite degrees of freedom (inf when every part of the variance is known)."""

    diff: float
    se: float
    dof: float
    a: SideSpread
    b: SideSpread
    notes: tuple[str, ...]
    bimodal: bool

    def interval(self, level: float) -> tuple[float, float]:
        """The two-sided `level` interval of the relative change, B over A, minus 1."""
        if math.isnan(self.se) or self.dof <= 0:
            return -math.inf, math.inf
        half = self.se * (t_quantile(0.5 + level / 2.0, self.dof) if self.se > 0 else 0.0)
        return math.expm1(self.diff - half), math.expm1(self.diff + half)

    def p_value(self) -> float:
        """Welch's two-sided p of "no change"."""
        if math.isnan(self.se) or self.dof <= 0:
            return 1.0
        if self.se == 0.0:
            return 0.0 if self.diff != 0.0 else 1.0
        return min(1.0, 2.0 * t_sf(abs(self.diff) / self.se, self.dof))

    def equivalent(self, tolerance: float, alpha: float) -> bool:
        """Two one-sided tests at `alpha` each: the (1 - 2 alpha) interval inside +-tolerance
        (on the log scale, +-log(1 + tolerance))."""
        low, high = self.interval(1.0 - 2.0 * alpha)
        bound = math.log1p(tolerance)
        return math.log1p(low) > -bound and math.log1p(high) < bound if low > -1 else False


def log_effect(
    a: Sequence[float],
    b: Sequence[float],
    *,
    starts_a: Sequence[str] | None = None,
    starts_b: Sequence[str] | None = None,
    start_sd: float = 0.0,
    start_dof: float = math.inf,
) -> LogEffect:
    """How B moved from A (positive values): Welch on the screened logs, starts as units where
    a side has several, `start_sd` (log scale) added where a side has one; `start_dof`: the
    degrees of freedom behind `start_sd` where it is an estimate (a record's few starts), which
    enter Welch-Satterthwaite's (inf: taken as known)."""
    sa, sb = screened(a, starts_a), screened(b, starts_b)
    pa, pb = side_spread(sa, start_sd), side_spread(sb, start_sd)
    return _combined(pa, pb, sa.notes + sb.notes, sa.bimodal or sb.bimodal, start_dof)


def _combined(
    pa: SideSpread,
    pb: SideSpread,
    notes: tuple[str, ...],
    bimodal: bool,
    start_dof: float = math.inf,
) -> LogEffect:
    estimated = [(v, d) for v, d in ((pa.var_mean, pa.dof), (pb.var_mean, pb.dof))]
    if any(math.isnan(v) or d < 1 for v, d in estimated):
        return LogEffect(pb.mean - pa.mean, math.nan, 0.0, pa, pb, notes, bimodal)
    total = pa.var_mean + pb.var_mean + pa.known + pb.known
    # one estimate of the start variance serves both sides: its two parts move together
    known = pa.known + pb.known
    estimated += [(known, start_dof)] if known and math.isfinite(start_dof) else []
    denominator = math.fsum(v * v / d for v, d in estimated)
    dof = total * total / denominator if denominator > 0 else math.inf
    return LogEffect(pb.mean - pa.mean, math.sqrt(total), dof, pa, pb, notes, bimodal)


def repeats_to_decide(
    effect: LogEffect, n_b: int, *, tolerance: float, alpha_equivalence: float, alpha: float
) -> int | None:
    """About how many repeats of B in all (A fixed) would decide, were the spread and the
    change what this sample shows: the fewer of "enough to rule out" and "enough to be
    significant at `alpha` (two-sided)"; None when more repeats of B alone cannot."""
    if math.isnan(effect.se) or effect.b.unit != "repeat" or effect.b.n < 2:
        return None
    var_repeat = effect.b.var_mean * effect.b.n  # one repeat's variance
    fixed = effect.a.var_mean + effect.a.known + effect.b.known
    dof = max(effect.dof, 1.0)
    targets = []
    room = math.log1p(tolerance) - abs(effect.diff)
    if room > 0:
        targets.append(room / t_quantile(1.0 - alpha_equivalence, dof))
    if effect.diff != 0.0:
        targets.append(abs(effect.diff) / t_quantile(1.0 - alpha / 2.0, dof))
    needed = [math.ceil(var_repeat / (se * se - fixed)) for se in targets if se * se - fixed > 0]
    return max(min(needed), n_b + 1) if needed else None


def share_interval(
    experiment: LogEffect, gap: LogEffect, level: float
) -> tuple[float | None, float | None]:
    """Fieller's interval of the share experiment.diff / gap.diff, both measured from the same
    A (BAD now), so they covary by A's variance; None for an end the data leave unbounded."""
    if not (experiment.se == experiment.se and gap.se == gap.se):
        return None, None
    dof = max(min(experiment.dof, gap.dof), 1.0)
    q2 = t_quantile(0.5 + level / 2.0, dof) ** 2
    vd, vg = experiment.se**2, gap.se**2
    cov = experiment.a.var_mean + experiment.a.known  # A's mean appears in both
    d, g = experiment.diff, gap.diff
    # (d - theta g)^2 <= q2 (vd - 2 theta cov + theta^2 vg), a quadratic in theta
    qa = g * g - q2 * vg
    qb = -2.0 * (d * g - q2 * cov)
    qc = d * d - q2 * vd
    disc = qb * qb - 4.0 * qa * qc
    if qa <= 0 or disc < 0:  # the gap itself is not clear of zero at this level
        return None, None
    root = math.sqrt(disc)
    return (-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)
