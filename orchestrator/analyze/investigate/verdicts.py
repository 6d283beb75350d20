"""`orch investigate`'s judgements, on samples alone: is the change real and still there, and
what does each controlled experiment move?

Step 1 (is it real, is it still there) judges as `orch diff` does (stats.compare). A controlled
experiment is judged on the log scale (equivalence.py): Welch's interval of the change, one centre
(the difference of mean logs) and one scale. Its verdict is one of

- "ruled out": two one-sided tests (Schuirmann 1987; Lakens 2017) at alpha each: the
  (1 - 2 alpha) interval lies inside +-tolerance. Never when the interval reaches past it.
- "explains" / "partly" / "worse": Welch's p, Holm-corrected over a family whose size is fixed
  when the investigation is planned (a verdict once printed never changes), is below alpha.
- "inconclusive": neither, said with what would decide it (more repeats, or a larger tolerance).

An experiment may be looked at twice (more repeats for an inconclusive one): each look spends
alpha / looks, so the stated rates hold over both looks (Bonferroni over looks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.analyze.investigate.equivalence import (
    LogEffect,
    log_effect,
    repeats_to_decide,
    share_interval,
)
from orchestrator.analyze.stats import compare, holm

# "unsettled": the record is too small to reach alpha (3 v 3 cannot) though its change passes
# the tolerance: only measuring again can tell, so step 1 measures before anything is judged.
Outcome = Literal["reproduces", "host_changed", "transient", "not_significant", "unsettled"]
RECORD_ALPHA = 0.05
Verdict = Literal["explains", "partly", "ruled_out", "inconclusive", "worse", "not_measured"]
# An experiment that brings back at least this share of the gap (on log scale) explains it.
EXPLAINS_SHARE = 0.5
# The share of the gap is said with this two-sided interval (Fieller's, on the log scale).
SHARE_LEVEL = 0.90


@dataclass(frozen=True)
class Effect:
    """B against A: the relative change (of geometric means: the centre of the interval) and a
    95 % Welch interval of it on the log scale; `significant`, `method` and `p_value` are
    `orch diff`'s judgement (step 1), `p_welch` the experiments' test."""

    change: float
    low: float
    high: float
    significant: bool
    method: str
    p_value: float | None
    n_a: int
    n_b: int
    p_welch: float = 1.0
    notes: tuple[str, ...] = ()
    bimodal: bool = False

    def said(self) -> str:
        """`+0.4% [-0.7%, +1.5%]`: the change and its 95 % interval, and what the screen did."""
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        if math.isinf(self.high - self.low):
            return f"{self.change:+.1%} (too few repeats for an interval){notes}"
        return f"{self.change:+.1%} [{self.low:+.1%}, {self.high:+.1%}]{notes}"


def _effect_of(logs: LogEffect, a: Sequence[float], b: Sequence[float], tolerance: float) -> Effect:
    judged = compare(a, b, ratio_threshold=tolerance)
    low, high = logs.interval(0.95)
    return Effect(
        math.expm1(logs.diff),
        low,
        high,
        judged.significant,
        judged.method,
        judged.p_value,
        len(a),
        len(b),
        logs.p_value(),
        logs.notes,
        logs.bimodal,
    )


def effect(
    a: Sequence[float],
    b: Sequence[float],
    *,
    tolerance: float,
    start_sd: float = 0.0,
    starts_a: Sequence[str] | None = None,
    starts_b: Sequence[str] | None = None,
) -> Effect:
    """How B moved from A (positive samples): `orch diff`'s judgement and Welch's interval on
    the log scale (`start_sd`: the between-start sd on the log scale, where a side has one)."""
    logs = log_effect(a, b, starts_a=starts_a, starts_b=starts_b, start_sd=start_sd)
    return _effect_of(logs, a, b, tolerance)


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
        if self.outcome == "unsettled":
            n = f"{self.recorded.n_a} v {self.recorded.n_b}"
            return (
                f"too few repeats recorded to judge: {rec} ({n} cannot reach "
                f"{RECORD_ALPHA:.0%}); GOOD and BAD are measured again before anything is judged"
            )
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


def recorded_reaches(good_then: Sequence[float], bad_then: Sequence[float]) -> bool:
    """True when the record's sizes can reach RECORD_ALPHA at all (3 v 3 cannot: p >= 0.1)."""
    return (compare(good_then, bad_then).smallest_p or 0.0) < RECORD_ALPHA


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
    if good_now is None or bad_now is None:
        outcome: Outcome = "not_significant"
        if recorded.significant:
            outcome = "reproduces"
        elif abs(recorded.change) > tolerance and not recorded_reaches(good_then, bad_then):
            outcome = "unsettled"
        return Reproduction(outcome, recorded, None, None, None)
    if not recorded.significant and recorded_reaches(good_then, bad_then):
        return Reproduction("not_significant", recorded, None, None, None)
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
    share_low: float | None = None  # SHARE_LEVEL interval of the share (None: unbounded)
    share_high: float | None = None
    look: int = 1  # which look at this experiment (2: after more repeats)
    more_repeats: int | None = None  # inconclusive: about this many repeats in all would decide
    logs: LogEffect | None = None

    def _share(self) -> str:
        if self.share is None:
            return ""
        if self.share_low is None or self.share_high is None:
            return f" ({self.share:.0%} of the gap, its range unbounded)"
        return (
            f" ({self.share:.0%} of the gap, {SHARE_LEVEL:.0%} range "
            f"{self.share_low:.0%} to {self.share_high:.0%})"
        )

    def measured(self) -> str:
        """`+0.4% [-0.7%, +1.5%] (2% of the gap, 90% range -9% to 13%), p 0.41`."""
        if self.effect is None:
            return "not measured (" + ("; ".join(self.notes) or "the cell failed") + ")"
        p = f", p {self.p_adjusted:.3g}" if self.p_adjusted is not None else ""
        return f"{self.effect.said()}{self._share()}{p}"

    def line(self) -> str:
        """`env NCCL_ALGO: (not set) -> Ring: +0.4% [-0.7%, +1.5%] ..., ruled out`."""
        if self.effect is None:
            return f"{self.label}: {self.measured()}"
        said = {
            "explains": "explains the change",
            "partly": "explains part of the change",
            "ruled_out": "ruled out",
            "inconclusive": "inconclusive",
            "worse": "makes BAD worse, not the cause",
            "not_measured": "not measured",
        }[self.verdict]
        extra = (
            f": {'; '.join(self.notes)}" if self.notes and self.verdict != "not_measured" else ""
        )
        return f"{self.label}: {self.measured()}, {said}{extra}"


def _inconclusive_notes(
    f: Finding, logs: LogEffect, n_b: int, *, tolerance: float, alpha: float, looks: int
) -> tuple[list[str], int | None]:
    """What it would take to decide: about how many repeats, or which tolerance."""
    a_look = alpha / looks
    low, high = logs.interval(1.0 - 2.0 * a_look)
    reach = max(abs(math.log1p(low)), abs(math.log1p(high))) if low > -1 else math.inf
    notes = [
        f"its {1.0 - 2.0 * a_look:.0%} interval reaches {math.expm1(reach):.1%}, past the "
        f"±{tolerance:.0%} tolerance, and the change is not significant"
    ]
    needed = repeats_to_decide(
        logs, n_b, tolerance=tolerance, alpha_equivalence=a_look, alpha=a_look
    )
    if needed is not None:
        notes.append(f"about {needed} repeats in all would decide (from the spread seen)")
    else:
        notes.append("more repeats of this experiment alone would not decide (BAD now's spread)")
    if math.isfinite(reach):
        notes.append(f"a tolerance above ±{math.expm1(reach):.1%} would rule it out")
    return notes, needed


def judge(
    bad_now: Sequence[float],
    good_now: Sequence[float],
    experiments: Mapping[str, Sequence[float] | None],
    *,
    tolerance: float,
    alpha: float = 0.05,
    family: int | None = None,
    looks: int = 1,
    look: Mapping[str, int] | None = None,
    start_sd: float = 0.0,
    starts: Mapping[str, Sequence[str]] | None = None,
    start_dof: float = math.inf,
) -> list[Finding]:
    """Each experiment's effect on BAD-now, its verdict and its share of the gap to GOOD-now.

    `family`: the number of experiments declared at plan time (Holm's m; the ones not measured
    yet count as p = 1, so a verdict given now stands whatever comes later); `looks`: how many
    times an experiment may be judged (alpha is split between them); `look`: which look each
    label is at; `starts`: the server start of each value, by label ("BAD now" and "GOOD now"
    for the references) where known, `start_sd` the between-start sd (log scale) otherwise,
    estimated with `start_dof` degrees of freedom (inf: known)."""
    starts = starts or {}
    gap = log_effect(
        bad_now,
        good_now,
        starts_a=starts.get("BAD now"),
        starts_b=starts.get("GOOD now"),
        start_sd=start_sd,
        start_dof=start_dof,
    )
    found: list[Finding] = []
    for label, xs in experiments.items():
        if not xs:
            found.append(Finding(label, None))
            continue
        logs = log_effect(
            bad_now,
            xs,
            starts_a=starts.get("BAD now"),
            starts_b=starts.get(label),
            start_sd=start_sd,
            start_dof=start_dof,
        )
        found.append(
            Finding(
                label,
                _effect_of(logs, bad_now, xs, tolerance),
                logs=logs,
                look=(look or {}).get(label, 1),
            )
        )
    tested = [f for f in found if f.effect is not None]
    m = max(family or len(tested), len(tested))
    raw = [min(1.0, f.effect.p_welch * looks) for f in tested if f.effect is not None]
    adjusted = holm(raw + [1.0] * (m - len(tested)))
    for f, p in zip(tested, adjusted, strict=False):
        f.p_adjusted = p
    for f in tested:
        assert f.effect is not None and f.logs is not None
        f.share = f.logs.diff / gap.diff if gap.diff else None
        if f.share is not None:
            f.share_low, f.share_high = share_interval(f.logs, gap, SHARE_LEVEL)
        if f.logs.equivalent(tolerance, alpha / looks):
            f.verdict = "ruled_out"
        elif f.p_adjusted is not None and f.p_adjusted < alpha:
            if f.share is None or f.share < 0:
                f.verdict = "worse"
            elif f.share >= EXPLAINS_SHARE:
                f.verdict = "explains"
            else:
                f.verdict = "partly"
        else:
            f.verdict = "inconclusive"
            f.notes, f.more_repeats = _inconclusive_notes(
                f, f.logs, f.effect.n_b, tolerance=tolerance, alpha=alpha, looks=looks
            )
    return found
