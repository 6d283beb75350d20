"""Noise-aware bisection over a first-parent commit range.

The good and bad ends are measured first, with repeats, which gives both the size of the change
and the noise. A commit is then called good or bad only when its mean sits with one side by a
clear margin in units of the measured noise (a z-score against the midpoint); otherwise more
repeats are taken, up to a cap, and only then is it called by the nearer side (and marked
uncertain). A commit whose measurement fails (build or setup) is skipped, as `git bisect skip`
does, and the search goes around it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["good", "bad", "skip"]

# measure(commit, repeats) -> values, or None when the commit cannot be measured (skip).
Measure = Callable[[str, int], Sequence[float] | None]


@dataclass
class Point:
    """Everything measured at one commit."""

    commit: str
    index: int
    values: list[float] = field(default_factory=list)
    verdict: Verdict | None = None
    z: float | None = None
    uncertain: bool = False
    runs: int = 0  # cell runs spent here (each run gives several repeats)

    @property
    def mean(self) -> float | None:
        """Mean of the values, or None before any."""
        return statistics.fmean(self.values) if self.values else None


@dataclass
class BisectResult:
    """The outcome: the first bad commit (or None) and every tested point in test order."""

    first_bad: str | None
    last_good: str | None
    points: list[Point]
    good_mean: float
    bad_mean: float
    noise: float  # pooled standard deviation of one measurement
    cell_runs: int
    message: str
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form for bisect.json."""
        data = asdict(self)
        data["points"] = [asdict(p) for p in self.points]
        return data


@dataclass(frozen=True)
class BisectPolicy:
    """How hard to look: repeats per run, the certainty asked for, the cap on extra runs."""

    end_repeats: int = 5  # repeats for each end (good, bad): they define the noise
    repeats: int = 3  # repeats of the first run at an inner commit
    z_threshold: float = 3.0  # how many standard errors from the midpoint count as decided
    max_runs_per_point: int = 4  # first run + adaptive extra runs when ambiguous


class BisectError(ValueError):
    """The ends do not bracket a change (e.g. 'good' is not better than 'bad')."""


def pooled_stdev(a: Sequence[float], b: Sequence[float]) -> float:
    """Pooled sample standard deviation of two groups (0 when there is nothing to pool)."""
    dof = len(a) + len(b) - 2
    if dof <= 0:
        return 0.0
    ss = sum((x - statistics.fmean(a)) ** 2 for x in a) + sum(
        (x - statistics.fmean(b)) ** 2 for x in b
    )
    return math.sqrt(ss / dof)


def classify(
    values: Sequence[float], good_mean: float, bad_mean: float, noise: float, z_threshold: float
) -> tuple[Verdict | None, float]:
    """good/bad when the mean is clearly on one side of the midpoint, else None; and the z."""
    mid = (good_mean + bad_mean) / 2
    sign = 1.0 if good_mean > bad_mean else -1.0  # z > 0 leans good
    # A noise floor keeps a perfectly quiet pair of ends from making every point "certain".
    floor = abs(good_mean - bad_mean) * 1e-3
    se = max(noise, floor) / math.sqrt(len(values))
    z = sign * (statistics.fmean(values) - mid) / se
    if z >= z_threshold:
        return "good", z
    if z <= -z_threshold:
        return "bad", z
    return None, z


def bisect(
    commits: Sequence[str], measure: Measure, policy: BisectPolicy | None = None
) -> BisectResult:
    """Find the first bad commit in `commits` (oldest first; [0] good, [-1] bad)."""
    policy = policy or BisectPolicy()
    if len(commits) < 2:
        raise BisectError("bisect needs at least a good and a bad commit")
    points: dict[int, Point] = {}
    order: list[Point] = []

    def run(index: int, repeats: int) -> Point:
        point = points.get(index)
        if point is None:
            point = points[index] = Point(commits[index], index)
            order.append(point)
        got = measure(commits[index], repeats)
        point.runs += 1
        if got is None:
            point.verdict = "skip"
        else:
            point.values.extend(float(v) for v in got)
        return point

    good = run(0, policy.end_repeats)
    bad = run(len(commits) - 1, policy.end_repeats)
    if good.verdict == "skip" or bad.verdict == "skip":
        which = "good" if good.verdict == "skip" else "bad"
        raise BisectError(f"the {which} end could not be measured: nothing to compare against")

    def separated() -> bool:
        g_mean, b_mean = statistics.fmean(good.values), statistics.fmean(bad.values)
        noise = pooled_stdev(good.values, bad.values)
        return (
            classify(good.values, g_mean, b_mean, noise, policy.z_threshold)[0] == "good"
            and classify(bad.values, g_mean, b_mean, noise, policy.z_threshold)[0] == "bad"
        )

    # The ends must differ clearly, or any answer would be noise. A small change in a noisy
    # measurement may need more than one run of each end to show: take them, up to the cap,
    # before giving up (as for inner commits).
    while not separated() and good.runs < policy.max_runs_per_point:
        for end in (0, len(commits) - 1):
            if run(end, policy.end_repeats).verdict == "skip":
                which = "good" if end == 0 else "bad"
                raise BisectError(f"the {which} end could not be measured on a later run")
    g_mean, b_mean = statistics.fmean(good.values), statistics.fmean(bad.values)
    noise = pooled_stdev(good.values, bad.values)
    good.verdict, bad.verdict = "good", "bad"
    if not separated():
        raise BisectError(
            f"good ({g_mean:.4g}) and bad ({b_mean:.4g}) do not differ beyond the noise "
            f"({noise:.3g}); add repeats or check the range"
        )

    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    while True:
        candidates = [i for i in range(lo + 1, hi) if i not in skipped]
        if not candidates:
            break
        mid_target = (lo + hi) / 2
        index = min(candidates, key=lambda i: (abs(i - mid_target), i))
        point = run(index, policy.repeats)
        while point.verdict != "skip":
            verdict, z = classify(point.values, g_mean, b_mean, noise, policy.z_threshold)
            point.z = z
            if verdict is not None:
                point.verdict = verdict
                break
            if point.runs >= policy.max_runs_per_point:
                point.verdict = "good" if z > 0 else "bad"
                point.uncertain = True
                break
            run(index, policy.repeats)
        if point.verdict == "skip":
            skipped.add(index)
        elif point.verdict == "good":
            lo = index
        else:
            hi = index

    between = [commits[i] for i in sorted(skipped) if lo < i < hi]
    if between:
        message = (
            f"the first bad commit could be any of {len(between) + 1}: "
            f"{', '.join([*between, commits[hi]])} (skipped commits could not be measured)"
        )
    else:
        message = f"{commits[hi]} is the first bad commit"
    unsure = [p for p in order if p.uncertain]
    if unsure:
        # Called by the nearer side after the cap on runs: the answer may be wrong; say so.
        message += (
            f" (uncertain: {len(unsure)} tested commit(s) stayed ambiguous after "
            f"{policy.max_runs_per_point} runs and were called by the nearer side: "
            f"{', '.join(p.commit[:12] for p in unsure)}; add --repeats or --max-runs)"
        )
    return BisectResult(
        first_bad=commits[hi] if not between else None,
        last_good=commits[lo],
        points=order,
        good_mean=g_mean,
        bad_mean=b_mean,
        noise=noise,
        cell_runs=sum(p.runs for p in order),
        message=message,
        skipped=[commits[i] for i in sorted(skipped)],
    )
