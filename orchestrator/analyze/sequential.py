"""Comparisons that stop when they know: B against A, measured in interleaved rounds.

Each round measures A then B, so a host that drifts hits both sides alike. After each round from
`min_rounds` on, Sobel and Wald's three-decision test on the log values (runner/compare_rule.py,
which the runner uses too) asks: is B's mean A's (same), A's times 1 + tolerance (higher), or
A's divided by it (lower)? At `max_rounds` without a decision the answer is "unsure", with the
estimate: the comparison does not guess.

What that keeps is measured by simulation (tests/analyze/test_sequential.py,
bench/time_to_verdict.py), not asserted: a wrong call (a side for no change, "same" or the other
side for a change of the tolerance or more) stays near `error`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from orchestrator.runner.compare_rule import three_decision

Call = Literal["higher", "lower", "same", "unsure"]


@dataclass(frozen=True)
class ComparePolicy:
    """How a sequential comparison decides and what it may spend."""

    tolerance: float = 0.04  # the smallest relative change worth calling (4%)
    error: float = 0.05  # each of the two tests' error (Wald's bounds)
    min_rounds: int = 5  # rounds before the first look: the outlier screen needs 5 a side
    max_rounds: int = 10  # then "unsure"
    noise_z: float = 1.645  # the noise at its 95% upper bound


@dataclass(frozen=True)
class Decision:
    """Where a comparison stands after `rounds` rounds."""

    call: Call | None  # None: not yet
    rounds: int
    change: float  # B's mean over A's, minus 1 (geometric means, outliers left out)
    llr_higher: float  # > 0 leans "higher" over "same"
    llr_lower: float  # > 0 leans "lower" over "same"


def look(a: Sequence[float], b: Sequence[float], policy: ComparePolicy) -> Decision:
    """The decision after the rounds so far (positive values; A and B the same length)."""
    rounds = min(len(a), len(b))
    call, change, higher, lower = three_decision(
        a, b, policy.tolerance, policy.error, policy.noise_z
    )
    if rounds < policy.min_rounds:
        call = None
    if call is None and rounds >= policy.max_rounds:
        call = "unsure"
    return Decision(cast(Call | None, call), rounds, change, higher, lower)


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
