"""Does one level of an SLO search meet its SLO: the median's order-statistic interval against
each bound.

A level's SLO metric (a repeat's p99 TTFT, say) varies from repeat to repeat; the level meets
the bound when the median over repeats does. "holds" means the whole interval is on the good
side of the bound, "fails" the whole interval on the bad side, None that it straddles it (the
boundary: more repeats, or "undecided" at the most). The interval is repeat_rule.py's
distribution-free one at two-sided confidence 2c - 1, so each one-sided call is wrong at most
1 - c of the time; taken after every repeat, the confidence is spent over the looks
(`look_confidence`, Bonferroni), so stopping at the first decided look keeps that bound.
The error rates are measured in bench/verdicts/slo.py.

Stdlib only, Python 3.8: the runner stops a level's repeats with it, and the controller judges
the recorded repeats with the same function (analyze/slo.py).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from orchestrator.runner.repeat_rule import fewest_repeats, look_confidence, median_interval

DEFAULT_SLO_CONFIDENCE = 0.95
ERROR_RATE = "error_rate"  # failed / (failed + completed) per repeat: no client writes it


def two_sided(confidence: float) -> float:
    """The two-sided interval whose each tail is 1 - `confidence`."""
    return 2.0 * confidence - 1.0


def bound_verdict(
    values: Sequence[float],
    bound: Mapping[str, Any],
    confidence: float,
    most: Optional[int] = None,
    least: int = 1,
) -> Dict[str, Any]:
    """One SLO metric at one level: n, the median and its interval, and the verdict ("holds",
    "fails" or None) of `bound` ({max: X} or {min: X}) at one-sided `confidence`, spent over
    the looks from `least` to `most` repeats (one look when `most` is None)."""
    wanted = two_sided(confidence)
    each = wanted if most is None else look_confidence(wanted, most, least)
    out: Dict[str, Any] = {"n": len(values), "verdict": None}
    got = median_interval(values, each)
    if got is None:
        return out
    med, low, high, coverage = got
    out.update(median=med, low=low, high=high, coverage=round(coverage, 4))
    if bound.get("max") is not None:
        limit = float(bound["max"])
        out["verdict"] = "holds" if high <= limit else "fails" if low > limit else None
    else:
        limit = float(bound["min"])
        out["verdict"] = "holds" if low >= limit else "fails" if high < limit else None
    return out


def level_verdict(judged: Mapping[str, Mapping[str, Any]]) -> Optional[str]:
    """A level from its metrics' verdicts: "fails" when any fails, "holds" when all hold, else
    None (undecided)."""
    verdicts = [j.get("verdict") for j in judged.values()]
    if "fails" in verdicts:
        return "fails"
    if verdicts and all(v == "holds" for v in verdicts):
        return "holds"
    return None


def decide_slo(
    values: Mapping[str, Sequence[float]], rule: Mapping[str, Any], ran: int
) -> Tuple[Optional[str], Dict[str, Dict[str, Any]]]:
    """Whether a level has measured enough after `ran` repeats, as repeat_rule.decide says it:
    ("decided" | "max" | None, each watched SLO metric judged). A level is decided once any
    metric fails or every one holds, from `min` repeats on."""
    slo = rule["slo"]
    confidence = float(rule.get("confidence", DEFAULT_SLO_CONFIDENCE))
    low, high = int(rule["min"]), int(rule["max"])
    judged = {
        m: bound_verdict(list(values.get(m, [])), slo[m], confidence, high, low)
        for m in rule["metrics"]
        if m in slo
    }
    if ran >= low and judged and level_verdict(judged) is not None:
        return "decided", judged
    if ran >= high:
        return "max", judged
    return None, judged


def repeat_values(repeats: Sequence[Mapping[str, Any]], metric: str) -> List[float]:
    """A metric's finite value per recorded repeat (metrics.json's `repeats`); `error_rate`
    from each repeat's `failed` and `completed`, which clients write instead."""
    out: List[float] = []
    for repeat in repeats:
        if metric == ERROR_RATE:
            failed: Any = repeat.get("failed")
            completed: Any = repeat.get("completed")
            if _number(failed) and _number(completed) and failed + completed > 0:
                out.append(float(failed) / (failed + completed))
        elif _number(repeat.get(metric)) and math.isfinite(float(repeat[metric])):
            out.append(float(repeat[metric]))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def judge_level(
    repeats: Sequence[Mapping[str, Any]], search: Mapping[str, Any], most: int
) -> Tuple[Dict[str, Dict[str, Any]], Optional[str]]:
    """A level's recorded repeats judged as its runner judged them (`most`: the level's
    repeats at most): each SLO metric's state with its bound, and the level's verdict."""
    confidence = float(search.get("confidence", DEFAULT_SLO_CONFIDENCE))
    least = fewest_repeats(two_sided(confidence))
    judged: Dict[str, Dict[str, Any]] = {}
    for metric, bound in dict(search["slo"]).items():
        got = bound_verdict(
            repeat_values(repeats, metric), bound, confidence, max(most, least), least
        )
        got["bound"] = dict(bound)
        judged[str(metric)] = got
    return judged, level_verdict(judged)


def capacity(verdicts: Sequence[Optional[str]]) -> Tuple[int, Optional[int]]:
    """The levels' verdicts, ascending, walked from the lowest: (the index of the highest that
    holds with every one below it, -1 when the lowest does not; the index of the first that
    does not hold, None when all do)."""
    for i, verdict in enumerate(verdicts):
        if verdict != "holds":
            return i - 1, i
    return len(verdicts) - 1, None
