"""Expectations: per-metric bounds (min/max) or a reference with a tolerance, as ReFrame does;
`equal` for a recorded value such as the greedy outputs' fingerprint digest."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.cell import Expectation


@dataclass(frozen=True)
class ExpectationResult:
    """One metric checked against its expectation."""

    metric: str
    ok: bool
    value: float | None  # the median over repeats; None when the metric was not measured
    bound: str  # human form of the expectation, e.g. ">= 85" or "94 ± 5%"
    detail: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (metrics.json `expectations` entries)."""
        return asdict(self)


def describe(exp: Expectation) -> str:
    """The expectation in a form a person reads at a glance."""
    parts: list[str] = []
    if exp.ref is not None:
        tol = exp.tolerance or 0.0
        parts.append(f"{exp.ref:g} ± {tol * 100:g}%")
    if exp.min is not None:
        parts.append(f">= {exp.min:g}")
    if exp.max is not None:
        parts.append(f"<= {exp.max:g}")
    return ", ".join(parts) or "any"


def check_equal(metric: str, exp: Expectation, text: str | None) -> ExpectationResult:
    """A recorded value (the outputs' fingerprint digest) against the one it must equal."""
    bound = f"== {exp.equal}"
    if text is None:
        return ExpectationResult(metric, False, None, bound, f"{metric} was not recorded")
    if text != exp.equal:
        return ExpectationResult(metric, False, None, bound, f"{text} != {exp.equal}")
    return ExpectationResult(metric, True, None, bound, f"{text} as expected")


def check(metric: str, exp: Expectation, value: float | None) -> ExpectationResult:
    """Check one measured value (the median) against its expectation."""
    bound = describe(exp)
    if value is None:
        return ExpectationResult(metric, False, None, bound, f"{metric} was not measured")
    problems: list[str] = []
    if exp.min is not None and value < exp.min:
        problems.append(f"{value:g} < min {exp.min:g}")
    if exp.max is not None and value > exp.max:
        problems.append(f"{value:g} > max {exp.max:g}")
    if exp.ref is not None:
        tol = exp.tolerance or 0.0
        lo, hi = exp.ref * (1 - tol), exp.ref * (1 + tol)
        lo, hi = min(lo, hi), max(lo, hi)
        if not lo <= value <= hi:
            problems.append(f"{value:g} outside {bound} [{lo:g}, {hi:g}]")
    if problems:
        return ExpectationResult(metric, False, value, bound, "; ".join(problems))
    return ExpectationResult(metric, True, value, bound, f"{value:g} within {bound}")


def check_all(
    expect: Mapping[str, Expectation],
    medians: Mapping[str, float],
    recorded: Mapping[str, str] | None = None,
) -> list[ExpectationResult]:
    """Every expectation of a cell against the medians of its repeats (an `equal` one against
    `recorded`, e.g. {"fingerprint": digest}), in declared order."""
    return [
        check_equal(metric, exp, (recorded or {}).get(metric))
        if exp.equal is not None
        else check(metric, exp, medians.get(metric))
        for metric, exp in expect.items()
    ]
