"""Noise-aware bisection over a first-parent commit range.

The good and bad ends are measured first, with repeats, which gives both the size of the change
and the noise. A commit between them is measured one repeat at a time, on the host, until Wald's
sequential probability ratio test of "its mean is good's" against "it is bad's" decides at the
policy's error (`Ends`, runner/repeat_rule.py): a commit that is plainly one side costs a repeat
or two, a close one more. A run that ends undecided is followed by another, up to a cap, and
only then is the commit called by the nearer side (and marked uncertain). A commit whose
measurement fails (build or setup) is skipped, as `git bisect skip` does, and the search goes
around it.

One wrong call moves the answer, and a search cannot see its own mistakes; so the answer is
tested again (confirm.py): the ends are measured again (a drift is said, and the later calls
use the ends as they are now), and the first bad commit and its parent are measured anew,
interleaved, one server start per replicate. A step shown between them is the answer with a
stated confidence; none shown sends the search back to the side the new runs put them on, up to
`max_rounds`; a commit judged bad below one judged good is said (a change reverted and landed
again).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from orchestrator.execute.bisect.confirm import confirm_answer, drift_sentence, first_inversion
from orchestrator.runner.compare_rule import noise_upper_bound
from orchestrator.runner.repeat_rule import between_verdict

Verdict = Literal["good", "bad", "skip"]
# A confirmed step is said to be only part of the change when a one-sided t test puts the rest
# of the gap this far from zero.
PARTIAL_P = 0.01


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
    run_values: list[list[float]] = field(default_factory=list)  # the values, run by run
    rejudged: bool = False  # measured again beside its neighbour, it changed sides
    probe: bool = False  # measured after the answer, only to look for a revert

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
    # The answer tested again: True when a step was shown between first_bad and its parent,
    # False when it was not, None when there was no single commit to test.
    confirmed: bool | None = None
    confidence: float | None = None  # the chance the named commit is right (1 - stated error)
    confirmations: list[dict[str, Any]] = field(default_factory=list)  # each round's test
    warnings: list[str] = field(default_factory=list)  # drift, a non-monotone history, ...

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form for bisect.json."""
        data = asdict(self)
        data["points"] = [asdict(p) for p in self.points]
        return data


@dataclass(frozen=True)
class BisectPolicy:
    """How hard to look: repeats per run, the certainty asked for, the cap on extra runs."""

    end_repeats: int = 5  # repeats of each run of an end (and of a confirmation run)
    repeats: int = 6  # the most repeats of one run at an inner commit (it stops when decided)
    z_threshold: float = 3.0  # the ends must be this many standard errors from their midpoint
    max_runs_per_point: int = 2  # runs at one inner commit before the nearer side is called
    max_end_runs: int = 4  # runs of each end before ends too close to tell apart are refused
    # Each inner commit's chance of a wrong call (Wald's bounds) against the noise within a
    # start: a start-to-start spread, a slow start or a drift make it larger (measured in
    # bench/verdicts/bisection.py); the answer's confirmation is what bounds the answer's error.
    error: float = 0.001
    # A decided commit's mean must be within this many standard errors of its side's (the
    # noise itself estimated from a few repeats): else it is neither end, and stays open.
    like: float = 5.0
    noise_z: float = 1.645  # the noise the test assumes: its 95% upper bound from the ends
    end_runs: int = 2  # server starts of each end before the search: their spread is a start's
    # The answer's test: blocks of P F F P runs of the parent and the first bad commit (each
    # `end_repeats` repeats, one server start each), the ends measured again around them.
    confirm_blocks: int = 2
    confirm_error: float = 0.01  # a named commit with no step before it passes at most this often
    max_rounds: int = 3  # searches (the first, and re-searches after a failed confirmation)
    probe: bool = True  # one run each side of a confirmed answer, looking for a revert


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
    """Find the first bad commit in `commits` (oldest first; [0] good, [-1] bad), then test the
    answer again beside its parent (confirm.py) and say how sure it is."""
    policy = policy or BisectPolicy()
    if len(commits) < 2:
        raise BisectError("bisect needs at least a good and a bad commit")
    points: dict[int, Point] = {}
    order: list[Point] = []
    last = len(commits) - 1

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
            point.run_values.append([float(v) for v in got])
            point.values.extend(point.run_values[-1])
        return point

    def run_end(index: int, later: bool = False) -> Point:
        point = run(index, policy.end_repeats)
        if point.verdict == "skip" or not point.run_values[-1]:
            which = "good" if index == 0 else "bad"
            when = " on a later run" if later else ""
            raise BisectError(f"the {which} end could not be measured{when}: nothing to compare")
        return point

    # Each end in `end_runs` server starts, interleaved: their spread is a start's, not a
    # repeat's, and what the answer's test pools.
    good = run_end(0)
    bad = run_end(last)
    for _ in range(policy.end_runs - 1):
        run_end(0, later=True)
        run_end(last, later=True)

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
        run_end(0, later=True)
        run_end(last, later=True)
    g_mean, b_mean = statistics.fmean(good.values), statistics.fmean(bad.values)
    noise = pooled_stdev(good.values, bad.values)
    good.verdict, bad.verdict = "good", "bad"
    if not separated():
        raise BisectError(
            f"good ({g_mean:.4g}) and bad ({b_mean:.4g}) do not differ beyond the noise "
            f"({noise:.3g}); add repeats or check the range"
        )
    sign = 1.0 if g_mean > b_mean else -1.0  # +1: higher is better
    first_ends = (list(good.run_values), list(bad.run_values))  # the starts before the search
    # What the inner calls compare against: the ends' values, replaced by their latest run each
    # time they are measured again (a drifting machine must not judge today by this morning).
    ref: dict[str, list[float]] = {"good": list(good.values), "bad": list(bad.values)}

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
        ref_good, ref_bad = statistics.fmean(ref["good"]), statistics.fmean(ref["bad"])
        floor = abs(ref_good - ref_bad) * 1e-3
        return Ends(ref_good, ref_bad, max(upper, floor), policy.error), max(pooled, floor)

    def search(lo: int, hi: int) -> tuple[int, int]:
        """The bisection proper between a commit judged good and one judged bad."""
        while True:
            candidates = [i for i in range(lo + 1, hi) if i not in skipped]
            if not candidates:
                return lo, hi
            mid_target = (lo + hi) / 2
            index = min(candidates, key=lambda i: (abs(i - mid_target), i))
            ends, spread = ends_now()
            point = run(index, policy.repeats, ends)
            while point.verdict != "skip":
                verdict, point.llr = between_verdict(
                    point.values, ends.good, ends.bad, ends.noise, ends.error
                )
                point.z = classify(point.values, ends.good, ends.bad, noise, policy.z_threshold)[1]
                side = ref["good"] if verdict == "good" else ref["bad"]
                if verdict is not None and not _like(point.values, side, spread, policy.like):
                    # The test only weighs good against bad; a mean far from both (a gradual or
                    # a second change) is neither, and must not pass as a confident call.
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

    lo, hi = search(0, last)
    tests: list[dict[str, Any]] = []
    warnings: list[str] = []
    confirmed: bool | None = None
    drift_said = False
    for round_no in range(1, policy.max_rounds + 1):
        if any(lo < i < hi for i in skipped):
            break  # a range, not one commit: nothing single to confirm
        outcome = confirm_answer(lo, hi, run, policy, sign, first_ends, good, bad)
        ref["good"], ref["bad"] = list(good.run_values[-1]), list(bad.run_values[-1])
        if outcome is None:
            warnings.append(
                f"{commits[lo][:12]} or {commits[hi][:12]} could not be measured again: "
                "the answer is not confirmed"
            )
            confirmed = False
            break
        test, looks, parent_now, first_now = outcome
        tests.append(
            {"round": round_no, "last_good": commits[lo], "first_bad": commits[hi],
             "looks": looks, "runs_each": len(parent_now), **asdict(test)}
        )  # fmt: skip
        drift = drift_sentence(first_ends, good, bad, [parent_now, first_now])
        if drift and not drift_said:
            drift_said = True
            warnings.append(drift)
        if test.p <= policy.confirm_error / policy.confirm_blocks:
            confirmed = True
            break
        confirmed = False
        # No step shown: the new runs, beside the ends measured now, say which call was wrong.
        mid = (statistics.fmean(ref["good"]) + statistics.fmean(ref["bad"])) / 2
        first_is_good = sign * (statistics.fmean(first_now) - mid) > 0
        parent_is_bad = sign * (statistics.fmean(parent_now) - mid) < 0
        if not (first_is_good or parent_is_bad) or round_no == policy.max_rounds:
            break
        if first_is_good and hi != last:
            points[hi].verdict, points[hi].rejudged = "good", True
            below = hi
            above = min(i for i, p in points.items() if i > hi and p.verdict == "bad")
        elif parent_is_bad and lo != 0:
            points[lo].verdict, points[lo].rejudged = "bad", True
            above = lo
            below = max(i for i, p in points.items() if i < lo and p.verdict == "good")
        else:
            break  # the new runs contradict an end itself: nothing left to search
        lo, hi = search(below, above)

    if confirmed and policy.probe:
        # One run in the widest stretch never tested on each side of the answer: a change
        # reverted and landed again shows as a bad commit below it or a good one above it.
        for side, span in (("good", range(0, lo + 1)), ("bad", range(hi, last + 1))):
            tested = sorted(i for i in span if i in points and points[i].verdict == side)
            gaps = [(b - a, a, b) for a, b in itertools.pairwise(tested) if b - a >= 2]
            if not gaps:
                continue
            _, a, b = max(gaps)
            ends = ends_now()[0]
            probe = run((a + b) // 2, policy.repeats, ends)
            probe.probe = True
            if probe.verdict != "skip":
                verdict, probe.llr = between_verdict(
                    probe.values, ends.good, ends.bad, ends.noise, ends.error
                )
                probe.verdict = "good" if verdict == "good" else "bad" if verdict else None

    between = [commits[i] for i in sorted(skipped) if lo < i < hi]
    if between:
        message = (
            f"the first bad commit could be any of {len(between) + 1}: "
            f"{', '.join([*between, commits[hi]])} (skipped commits could not be measured)"
        )
    else:
        message = f"{commits[hi]} is the first bad commit"
    confidence = None
    if tests and confirmed:
        confidence = 1.0 - policy.confirm_error * len(tests)
        t = tests[-1]
        message += (
            f" (confirmed: measured again beside its parent, interleaved, {t['runs_each']} "
            f"server starts each: {_pct(-t['step'], g_mean)} \u00b1 {_pct(t['se'], g_mean, '')}, "
            f"{100 * t['share']:.0f}% of the gap, one-sided p = {t['p']:.2g}; "
            f"confidence \u2265 {100 * confidence:.0f}%)"
        )
        if t["p_partial"] < PARTIAL_P:
            warnings.append(
                f"the step at {commits[hi][:12]} is {100 * t['share']:.0f}% of the gap: "
                "a second change (or a gradual one) lies elsewhere in the range"
            )
    elif tests:
        t = tests[-1]
        message = message.replace(" is the first bad commit", " is the likeliest first bad commit")
        message += (
            f" (NOT confirmed: measured again beside its parent, {t['runs_each']} server starts "
            f"each, the step {_pct(-t['step'], g_mean)} \u00b1 {_pct(t['se'], g_mean, '')} "
            f"was not shown, one-sided p = {t['p']:.2g} > "
            f"{policy.confirm_error / policy.confirm_blocks:.2g}; no confidence can be stated: "
            "add --end-repeats, or check the range for a noisy or non-monotone history)"
        )
    rejudged = [p for p in order if p.rejudged]
    if rejudged:
        warnings.append(
            "judged again when measured beside a neighbour (a one-run hiccup or a drift), the "
            f"search went back: {', '.join(f'{p.commit[:12]} -> {p.verdict}' for p in rejudged)}"
        )
    inversion = first_inversion(points)
    if inversion:
        early, late = inversion
        warnings.append(
            f"non-monotone history: {commits[early][:12]} was judged bad but its descendant "
            f"{commits[late][:12]} good: the change may have been reverted and landed again; "
            "the answer is one of its steps (bisect each side separately)"
        )
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
        confirmed=confirmed,
        confidence=confidence,
        confirmations=tests,
        warnings=warnings,
    )


def _pct(value: float, base: float, plus: str = "+") -> str:
    """`value` as a percentage of `base`, signed by default."""
    return f"{100 * value / base:{plus}.1f}%" if base else f"{value:.3g}"
