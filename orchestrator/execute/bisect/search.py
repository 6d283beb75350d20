"""Noise-aware bisection over a first-parent commit range.

The good and bad ends are measured first, with repeats, which gives both the size of the change
and the noise. A commit between them is measured one repeat at a time, on the host, until Wald's
sequential probability ratio test of "its mean is good's" against "it is bad's" decides at the
policy's error (`Ends`, runner/repeat_rule.py): a commit that is plainly one side costs a repeat
or two, a close one more. A run that ends undecided is followed by another, up to a cap, and
only then is the commit called by the nearer side (and marked uncertain). A commit whose
measurement fails (build or setup) is skipped, as `git bisect skip` does, and the search goes
around it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from orchestrator.runner.compare_rule import noise_upper_bound
from orchestrator.runner.repeat_rule import between_verdict

Verdict = Literal["good", "bad", "skip"]


@dataclass(frozen=True)
class Ends:
    """What a run at an inner commit stops on: the ends' means, the noise of one repeat, and
    the error each call may have (`between_verdict`)."""

    good: float
    bad: float
    noise: float
    error: float


# measure(commit, repeats, ends) -> values, or None when the commit cannot be measured (skip).
# With `ends`, the run may stop before `repeats` once `between_verdict` decides.
Measure = Callable[[str, int, "Ends | None"], Sequence[float] | None]


def run_until_decided(draw: Callable[[], float], repeats: int, ends: Ends | None) -> list[float]:
    """What a run does on the host (runner/repeat_rule.py's `decide`): up to `repeats` draws,
    stopping after the first one at which the test against `ends` decides."""
    values: list[float] = []
    for _ in range(repeats):
        values.append(draw())
        if (
            ends is not None
            and between_verdict(values, ends.good, ends.bad, ends.noise, ends.error)[0]
        ):
            break
    return values


@dataclass
class Point:
    """Everything measured at one commit."""

    commit: str
    index: int
    values: list[float] = field(default_factory=list)
    verdict: Verdict | None = None
    z: float | None = None
    llr: float | None = None  # the sequential test's log likelihood ratio, > 0 leaning good
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
    repeats: int = 6  # the most repeats of one run at an inner commit (it stops when decided)
    z_threshold: float = 3.0  # the ends must be this many standard errors from their midpoint
    max_runs_per_point: int = 2  # runs at one inner commit before the nearer side is called
    max_end_runs: int = 4  # runs of each end before ends too close to tell apart are refused
    error: float = 0.001  # each inner commit's chance of a wrong call (Wald's bounds)
    # A decided commit's mean must be within this many standard errors of its side's (the
    # noise itself estimated from a few repeats): else it is neither end, and stays open.
    like: float = 5.0
    noise_z: float = 1.645  # the noise the test assumes: its 95% upper bound from the ends


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


def _like(values: Sequence[float], end: Sequence[float], noise: float, threshold: float) -> bool:
    """Whether the values' mean is within `threshold` standard errors of the difference from
    that end's mean (both means uncertain, the noise estimated from the ends)."""
    se = noise * math.sqrt(1 / len(values) + 1 / len(end))
    return abs(statistics.fmean(values) - statistics.fmean(end)) < threshold * se


def bisect(
    commits: Sequence[str], measure: Measure, policy: BisectPolicy | None = None
) -> BisectResult:
    """Find the first bad commit in `commits` (oldest first; [0] good, [-1] bad)."""
    policy = policy or BisectPolicy()
    if len(commits) < 2:
        raise BisectError("bisect needs at least a good and a bad commit")
    points: dict[int, Point] = {}
    order: list[Point] = []

    def run(index: int, repeats: int, ends: Ends | None = None) -> Point:
        point = points.get(index)
        if point is None:
            point = points[index] = Point(commits[index], index)
            order.append(point)
        got = measure(commits[index], repeats, ends)
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
    while not separated() and good.runs < policy.max_end_runs:
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

    def ends_now() -> tuple[Ends, float]:
        """What the test stops on, and the noise as estimated. The test takes the noise as
        known; it is estimated (pooled over every commit measured twice or more, each about its
        own mean, so it tightens as the search goes) and taken at its upper confidence bound. A
        floor keeps perfectly quiet ends from making every repeat decisive."""
        groups = [p.values for p in order if p.verdict != "skip" and len(p.values) >= 2]
        dof = sum(len(g) - 1 for g in groups)
        pooled = math.sqrt(
            sum((x - statistics.fmean(g)) ** 2 for g in groups for x in g) / max(dof, 1)
        )
        upper = noise_upper_bound(pooled, dof, policy.noise_z)
        floor = abs(g_mean - b_mean) * 1e-3
        return Ends(g_mean, b_mean, max(upper, floor), policy.error), max(pooled, floor)

    while True:
        candidates = [i for i in range(lo + 1, hi) if i not in skipped]
        if not candidates:
            break
        mid_target = (lo + hi) / 2
        index = min(candidates, key=lambda i: (abs(i - mid_target), i))
        ends, spread = ends_now()
        point = run(index, policy.repeats, ends)
        while point.verdict != "skip":
            verdict, point.llr = between_verdict(
                point.values, ends.good, ends.bad, ends.noise, ends.error
            )
            point.z = classify(point.values, g_mean, b_mean, noise, policy.z_threshold)[1]
            side = good.values if verdict == "good" else bad.values
            if verdict is not None and not _like(point.values, side, spread, policy.like):
                # The test only weighs good against bad; a mean far from both (a gradual or a
                # second change) is neither, and must not pass as a confident call.
                verdict = None
            if verdict is not None:
                point.verdict = "good" if verdict == "good" else "bad"
                break
            if point.runs >= policy.max_runs_per_point:
                point.verdict = "good" if point.llr > 0 else "bad"
                point.uncertain = True
                break
            ends, spread = ends_now()
            run(index, policy.repeats, ends)
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
