"""`orch investigate`'s judgements, on samples alone: is the change real and still there, and
what does each controlled experiment move?

Significance is `orch diff`'s (stats.compare: the threshold AND Mann-Whitney with 5+ repeats a
side, non-overlapping ranges with fewer), Holm-corrected across the experiments of one
investigation. The effect's interval is a t interval of the difference of mean logs (outliers
left out), said as a relative change: what "ruled out: +0.4 % ± 1.1 %" means.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.analyze.stats import compare, holm, median
from orchestrator.runner.compare_rule import log_difference

Outcome = Literal["reproduces", "host_changed", "transient", "not_significant"]
Verdict = Literal["explains", "partly", "ruled_out", "worse", "not_measured"]
# t quantiles for a two-sided 95 % interval, by degrees of freedom; 1.96 beyond the table.
_T975: tuple[float, ...] = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)
_T975 += (2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
# An experiment that brings back at least this share of the gap (on log scale) explains it.
EXPLAINS_SHARE = 0.5


@dataclass(frozen=True)
class Effect:
    """B against A: the relative change of the medians and a 95 % interval of the change."""

    change: float
    low: float
    high: float
    significant: bool
    method: str
    p_value: float | None
    n_a: int
    n_b: int

    def said(self) -> str:
        """`+0.4 % ± 1.1 %` (the interval's half-width, on the change)."""
        if math.isinf(self.high - self.low):
            return f"{self.change:+.1%} (too few repeats for an interval)"
        return f"{self.change:+.1%} ± {(self.high - self.low) / 2:.1%}"


def _t(dof: int) -> float:
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def effect(a: Sequence[float], b: Sequence[float], *, tolerance: float) -> Effect:
    """How B moved from A (positive samples), judged as `orch diff` judges."""
    judged = compare(a, b, ratio_threshold=tolerance)
    logs = log_difference(a, b)
    change = median(b) / median(a) - 1.0
    if logs.dof < 1 or min(logs.n_a, logs.n_b) < 2:
        low, high = -math.inf, math.inf
    else:
        half = _t(logs.dof) * logs.sd * math.sqrt(1 / logs.n_a + 1 / logs.n_b)
        low, high = math.expm1(logs.diff - half), math.expm1(logs.diff + half)
    return Effect(
        change,
        low,
        high,
        judged.significant,
        judged.method,
        judged.p_value,
        len(a),
        len(b),
    )


@dataclass(frozen=True)
class Reproduction:
    """Step 1's answer: the outcome and the comparisons behind it."""

    outcome: Outcome
    recorded: Effect  # BAD-then against GOOD-then
    now: Effect | None  # BAD-now against GOOD-now
    good_moved: Effect | None  # GOOD-now against GOOD-then
    bad_moved: Effect | None  # BAD-now against BAD-then

    def line(self, metric: str) -> str:
        """The outcome in one sentence."""
        rec = f"{metric} {self.recorded.said()} from GOOD to BAD as recorded"
        if self.outcome == "not_significant" and self.now is None:
            return f"not significant: {rec}, within noise or the tolerance; nothing to explain"
        now = self.now.said() if self.now else "?"
        if self.outcome == "reproduces":
            return f"the regression reproduces: {rec}, {now} measured now"
        if self.outcome == "host_changed":
            moved = self.good_moved.said() if self.good_moved else "?"
            return (
                f"GOOD is as slow as BAD today ({rec}, {now} now; GOOD itself {moved}): "
                "the host or its environment changed since GOOD was measured"
            )
        if self.outcome == "transient":
            moved = self.bad_moved.said() if self.bad_moved else "?"
            return (
                f"BAD is as fast as GOOD today ({rec}, {now} now; BAD itself {moved}): "
                "it was transient, something was different while BAD ran"
            )
        return f"not significant now: {rec}, but {now} measured now and neither side moved"


def _toward(moved: Effect, direction: float) -> bool:
    return moved.significant and moved.change * direction > 0


def reproduction(
    good_then: Sequence[float],
    bad_then: Sequence[float],
    good_now: Sequence[float] | None,
    bad_now: Sequence[float] | None,
    *,
    tolerance: float,
) -> Reproduction:
    """Step 1: with no measurement now (None), only whether the recorded change is significant."""
    recorded = effect(good_then, bad_then, tolerance=tolerance)
    if not recorded.significant or good_now is None or bad_now is None:
        outcome: Outcome = "not_significant" if not recorded.significant else "reproduces"
        return Reproduction(outcome, recorded, None, None, None)
    now = effect(good_now, bad_now, tolerance=tolerance)
    good_moved = effect(good_then, good_now, tolerance=tolerance)
    bad_moved = effect(bad_then, bad_now, tolerance=tolerance)
    sign = 1.0 if recorded.change > 0 else -1.0
    if now.significant and now.change * sign > 0:
        outcome = "reproduces"
    elif _toward(good_moved, sign):  # GOOD now measures like BAD did
        outcome = "host_changed"
    elif _toward(bad_moved, -sign):  # BAD now measures like GOOD did
        outcome = "transient"
    else:
        outcome = "not_significant"
    return Reproduction(outcome, recorded, now, good_moved, bad_moved)


@dataclass
class Finding:
    """One controlled experiment: BAD with `label` set back to GOOD's, against BAD now."""

    label: str
    effect: Effect | None  # None: the experiment measured nothing (it failed)
    share: float | None = None  # of the gap GOOD-now / BAD-now, on log scale
    p_adjusted: float | None = None
    verdict: Verdict = "not_measured"
    notes: list[str] = field(default_factory=list)

    def measured(self) -> str:
        """`+0.4 % ± 1.1 % (2 % of the gap), p 0.41`: the effect on BAD, without the label."""
        if self.effect is None:
            return "not measured (" + ("; ".join(self.notes) or "the cell failed") + ")"
        share = f" ({self.share:.0%} of the gap)" if self.share is not None else ""
        p = f", p {self.p_adjusted:.3g}" if self.p_adjusted is not None else ""
        return f"{self.effect.said()}{share}{p}"

    def line(self) -> str:
        """`env NCCL_ALGO: (not set) -> Ring: +0.4 % ± 1.1 %, ruled out`."""
        if self.effect is None:
            return f"{self.label}: {self.measured()}"
        said = {
            "explains": "explains the change",
            "partly": "explains part of the change",
            "ruled_out": "ruled out",
            "worse": "makes BAD worse, not the cause",
            "not_measured": "not measured",
        }[self.verdict]
        return f"{self.label}: {self.measured()}, {said}"


def judge(
    bad_now: Sequence[float],
    good_now: Sequence[float],
    experiments: Mapping[str, Sequence[float] | None],
    *,
    tolerance: float,
    alpha: float = 0.05,
) -> list[Finding]:
    """Each experiment's effect on BAD-now, Holm-corrected across the experiments, and its
    share of the gap to GOOD-now."""
    gap = math.log(median(good_now) / median(bad_now))
    found = [
        Finding(label, effect(bad_now, xs, tolerance=tolerance) if xs else None)
        for label, xs in experiments.items()
    ]
    tested = [f for f in found if f.effect is not None and f.effect.p_value is not None]
    adjusted = holm([f.effect.p_value for f in tested if f.effect and f.effect.p_value is not None])
    for f, p in zip(tested, adjusted, strict=True):
        f.p_adjusted = p
    for f in found:
        if f.effect is None:
            continue
        moved = math.log1p(f.effect.change)
        f.share = moved / gap if gap else None
        # the test, the correction and the interval must all agree: a report never calls an
        # effect whose interval holds zero
        significant = (
            f.effect.significant
            and (f.p_adjusted is None or f.p_adjusted < alpha)
            and (f.effect.low > 0 or f.effect.high < 0)
        )
        if not significant:
            f.verdict = "ruled_out"
        elif f.share is None or f.share < 0:
            f.verdict = "worse"
        elif f.share >= EXPLAINS_SHARE:
            f.verdict = "explains"
        else:
            f.verdict = "partly"
    return found
