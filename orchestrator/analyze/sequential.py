"""Comparisons that stop when they know: B against A, measured in interleaved rounds.

Each round measures A then B, so a host that drifts hits both sides alike. After each round from
`min_rounds` on, Sobel and Wald's three-decision test on the log values asks: is B's mean A's
(same), A's times 1 + tolerance (higher), or A's divided by it (lower)? Two sequential probability
ratio tests, "same" against each side, with Wald's bounds log((1 - error) / error); a side is
called when its test leaves "same" behind, "same" when both tests accept it. The noise is not
known: it is estimated from both samples (outliers by stats.outliers left out) and taken at its
upper confidence bound, so a lucky quiet start does not end the comparison. At `max_rounds`
without a decision the answer is "unsure", with the estimate: the comparison does not guess.

What that keeps is measured by simulation (tests/analyze/test_sequential.py,
bench/time_to_verdict.py), not asserted: a wrong call (a side for no change, "same" or the other
side for a change of the tolerance or more) stays near `error`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.analyze.stats import outliers
from orchestrator.runner.repeat_rule import noise_upper_bound

Call = Literal["higher", "lower", "same", "unsure"]


@dataclass(frozen=True)
class ComparePolicy:
    """How a sequential comparison decides and what it may spend."""

    tolerance: float = 0.04  # the smallest relative change worth calling (4%)
    error: float = 0.05  # each of the two tests' error (Wald's bounds)
    min_rounds: int = 2  # rounds before the first look (a round: one A, one B)
    max_rounds: int = 6  # then "unsure"
    noise_z: float = 1.645  # the noise at its 95% upper bound


@dataclass(frozen=True)
class Decision:
    """Where a comparison stands after `rounds` rounds."""

    call: Call | None  # None: not yet
    rounds: int
    change: float  # B's mean over A's, minus 1 (geometric means, outliers left out)
    llr_higher: float  # > 0 leans "higher" over "same"
    llr_lower: float  # > 0 leans "lower" over "same"


def _kept(logs: Sequence[float]) -> list[float]:
    """The log values less the outliers of their raw values (slow or lost repeats)."""
    out = set(outliers([math.exp(x) for x in logs]))
    return [x for i, x in enumerate(logs) if i not in out]


def look(a: Sequence[float], b: Sequence[float], policy: ComparePolicy) -> Decision:
    """The decision after the rounds so far (positive values; A and B the same length)."""
    rounds = min(len(a), len(b))
    la, lb = _kept([math.log(x) for x in a]), _kept([math.log(x) for x in b])
    ma, mb = math.fsum(la) / len(la), math.fsum(lb) / len(lb)
    change = math.expm1(mb - ma)
    if rounds < policy.min_rounds or len(la) + len(lb) < 3:
        return Decision(None if rounds < policy.max_rounds else "unsure", rounds, change, 0, 0)
    dof = len(la) + len(lb) - 2
    pooled = math.sqrt(
        (math.fsum((x - ma) ** 2 for x in la) + math.fsum((x - mb) ** 2 for x in lb)) / dof
    )
    step = math.log1p(policy.tolerance)
    noise = max(noise_upper_bound(pooled, dof, policy.noise_z), step * 1e-3)
    # the difference of means is one observation with variance noise^2 / weight
    weight = 1.0 / (1.0 / len(la) + 1.0 / len(lb))
    diff = mb - ma
    higher = weight * (step * diff - step * step / 2) / (noise * noise)
    lower = weight * (-step * diff - step * step / 2) / (noise * noise)
    bound = math.log((1 - policy.error) / policy.error)
    call: Call | None = None
    if higher >= bound:
        call = "higher"
    elif lower >= bound:
        call = "lower"
    elif higher <= -bound and lower <= -bound:
        call = "same"
    elif rounds >= policy.max_rounds:
        call = "unsure"
    return Decision(call, rounds, change, higher, lower)


def compare_in_rounds(
    measure_a: Callable[[], float],
    measure_b: Callable[[], float],
    policy: ComparePolicy | None = None,
) -> tuple[Decision, list[float], list[float]]:
    """Measure A then B, round after round, until `look` calls it; the decision and samples."""
    policy = policy or ComparePolicy()
    a: list[float] = []
    b: list[float] = []
    while True:
        a.append(measure_a())
        b.append(measure_b())
        decision = look(a, b, policy)
        if decision.call is not None:
            return decision, a, b
