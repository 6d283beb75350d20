"""The bisect's answer tested again: the first bad commit and its parent measured anew,
interleaved, each server start one replicate.

A search makes a call at every commit it tests, and one wrong call (a 10 % hiccup in one run, a
start that came up slow, the machine drifting under the ends' first means) moves the answer to a
commit where nothing changed. Whatever the path, a right answer has one property a wrong one
lacks: its parent is good and it is bad. So the answer is measured again beside its parent in
the order P F F P (then F P P F), which cancels a steady drift, and a one-sided Student t on the
runs' means (the server start is the unit of replication: Kalibera & Jones 2013) asks whether F
is worse than P. With no step between them that test passes at most `alpha` of the time, which
is the answer's stated error.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.analyze.student import t_sf


class Point(Protocol):
    """What the confirmation reads of a tested commit (search.Point)."""

    @property
    def index(self) -> int: ...
    @property
    def verdict(self) -> str | None: ...
    @property
    def run_values(self) -> list[list[float]]: ...


class BisectPolicy(Protocol):
    """What the confirmation reads of the policy (search.BisectPolicy)."""

    @property
    def end_repeats(self) -> int: ...
    @property
    def confirm_blocks(self) -> int: ...
    @property
    def confirm_error(self) -> float: ...


# An end measured again is said to have moved when a two-sided t test puts it this far out.
DRIFT_P = 0.01


@dataclass(frozen=True)
class StepTest:
    """Parent against first-bad, on the means of their interleaved runs."""

    step: float  # how much worse F is than P (in the metric's units, > 0: worse)
    se: float  # its standard error, from the pooled start-to-start spread
    dof: int
    p: float  # one-sided: F is no worse than P
    share: float  # step / the ends' gap measured now
    spread: float = 0.0  # the pooled start-to-start standard deviation of one run's mean
    # one-sided: the step is the whole gap (small: a second change lies elsewhere)
    p_partial: float = 1.0

    @property
    def shown(self) -> bool:
        """Whether there is any test at all (enough starts to estimate the spread)."""
        return self.dof > 0


def pooled_run_spread(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Pooled standard deviation of run means about each group's own mean, and its dof."""
    usable = [g for g in groups if len(g) >= 2]
    dof = sum(len(g) - 1 for g in usable)
    if dof == 0:
        return 0.0, 0
    ss = sum((x - statistics.fmean(g)) ** 2 for g in usable for x in g)
    return math.sqrt(ss / dof), dof


def step_test(
    parent: Sequence[float],
    first_bad: Sequence[float],
    others: Sequence[Sequence[float]],
    sign: float,
    gap: float,
) -> StepTest:
    """Is F worse than P? `parent` and `first_bad` are run means; `others` more groups of run
    means (the ends) that only lend their spread; `sign` +1 when higher is better; `gap` the
    ends' difference now (> 0)."""
    step = sign * (statistics.fmean(parent) - statistics.fmean(first_bad))
    spread, dof = pooled_run_spread([parent, first_bad, *others])
    # A floor keeps identical runs (a noiseless simulation) from dividing by zero.
    spread = max(spread, abs(gap) * 1e-6, 1e-12)
    se = spread * math.sqrt(1 / len(parent) + 1 / len(first_bad))
    p = t_sf(step / se, dof) if dof > 0 else 1.0
    # The gap now is one run of each end: its error adds two runs' variance to the step's.
    se_rest = spread * math.sqrt(1 / len(parent) + 1 / len(first_bad) + 2)
    partial = t_sf((gap - step) / se_rest, dof) if dof > 0 else 1.0
    return StepTest(step, se, dof, p, step / gap if gap else 0.0, spread, partial)


def confirm_answer(
    lo: int,
    hi: int,
    run: Callable[[int, int], Point],
    policy: BisectPolicy,
    sign: float,
    first_ends: tuple[list[list[float]], list[list[float]]],
    good: Point,
    bad: Point,
) -> tuple[StepTest, int, list[float], list[float]] | None:
    """The answer `hi` tested beside its parent `lo`: the ends measured again, then blocks of
    P F F P (then F P P F) runs of the two, until the step is shown or the blocks run out: the
    test, the looks it took, and the parent's and the answer's run means. None when a run
    could not measure."""
    parent_now: list[float] = []
    first_now: list[float] = []
    test: StepTest | None = None
    looks = 0
    for end in (good, bad):  # the ends as they are now: the drift, the gap, the next calls
        if run(end.index, policy.end_repeats).verdict == "skip" or not end.run_values[-1]:
            return None
    gap = sign * (statistics.fmean(good.run_values[-1]) - statistics.fmean(bad.run_values[-1]))
    # The ends' first starts lend their spread (adjacent runs: a drift barely enters it).
    others = [[statistics.fmean(r) for r in runs] for runs in first_ends]
    for block in range(policy.confirm_blocks):
        for index in (lo, hi, hi, lo) if block % 2 == 0 else (hi, lo, lo, hi):
            point = run(index, policy.end_repeats)
            if point.verdict == "skip" or not point.run_values[-1]:
                return None
            (parent_now if index == lo else first_now).append(
                statistics.fmean(point.run_values[-1])
            )
        looks += 1
        test = step_test(parent_now, first_now, others, sign, abs(gap) or 1.0)
        if test.p <= policy.confirm_error / policy.confirm_blocks:
            break
    assert test is not None
    return test, looks, parent_now, first_now


def drift_sentence(
    first_ends: tuple[list[list[float]], list[list[float]]],
    good: Point,
    bad: Point,
    paired: Sequence[Sequence[float]],
) -> str | None:
    """A sentence when the ends, measured again, moved beyond the start-to-start spread (of
    their first starts and of the confirmation's `paired` run means, all taken close in time)."""
    firsts = [[statistics.fmean(r) for r in runs] for runs in first_ends]
    spread, dof = pooled_run_spread([*firsts, *paired])
    moves = []
    for name, point, first in (("good", good, firsts[0]), ("bad", bad, firsts[1])):
        now = statistics.fmean(point.run_values[-1])
        then = statistics.fmean(first)
        se = max(spread * math.sqrt(1 + 1 / len(first)), 1e-12)
        far = dof > 0 and 2 * t_sf(abs(now - then) / se, dof) < DRIFT_P
        moves.append((name, (now - then) / then if then else 0.0, far))
    if dof == 0 or not any(far for _, _, far in moves):
        return None
    said = ", ".join(f"{name} {100 * move:+.1f}%" for name, move, _ in moves)
    return (
        f"the ends moved during the bisect ({said} since their first runs): a drift, or a "
        "start-to-start spread wider than the first runs showed; the later calls and the "
        "confirmation used the ends as measured again"
    )


def first_inversion(points: Mapping[int, Point]) -> tuple[int, int] | None:
    """(a commit judged bad, a descendant judged good), the first such pair, or None."""
    bads = sorted(i for i, p in points.items() if p.verdict == "bad")
    goods = sorted(i for i, p in points.items() if p.verdict == "good")
    for early in bads:
        late = next((g for g in goods if g > early), None)
        if late is not None:
            return early, late
    return None
