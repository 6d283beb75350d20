"""When a cell has measured enough: the median's distribution-free confidence interval.

`bench.repeats: {min, max, until, confidence}` stops after `min` as soon as every deciding
metric's median is known to within `until` (relative), else at `max` ("did not settle"). The
interval is the order-statistic one, [x_(k), x_(n+1-k)] with the largest k whose exact binomial
coverage, 1 - 2 P(Bin(n, 1/2) < k), reaches the confidence: it assumes nothing of the shape of
the repeats' distribution (GPU benchmarks are skewed, with slow outliers), and an outlier moves
it only when it is one of the two chosen order statistics. A bootstrap interval of the median
needs no more data but covers well below its nominal level at the 3-12 repeats a GPU budget
allows. The price: an interval exists only from the n where [min, max] covers enough (5 repeats
at 90%, 6 at 95%), so a cell never settles on fewer.

Stopping when the interval is narrow looks once per repeat, and a sample narrow by chance is
the one that stops: given "settled", the 90 % interval covered the true median 88 % of the time
(normal), 78-85 % (skewed), 55-60 % (bimodal), 34-49 % (autocorrelated) in seeded simulations.
So the confidence is spent across the looks (Bonferroni: each look's interval at 1 - (1 - c) /
looks, `look_confidence`; the wider interval is the one recorded), and a sample with an
outlying repeat does not settle. What that holds, and what no rule on 12 repeats can (a mode
not yet seen, repeats that drift together), is measured in bench/verdicts/diff_audit.py.

Stdlib only, Python 3.8: the runner decides on the host, between repeats; the controller
recomputes the same figures from its own parse (analyze/verdict.py).
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from orchestrator.runner.compare_rule import outlier_indexes, three_decision

DEFAULT_CONFIDENCE = 0.9


def _below(n: int, k: int) -> float:
    """P(Bin(n, 1/2) < k)."""
    return sum(math.comb(n, i) for i in range(k)) / 2.0**n


def order_statistic_rank(n: int, confidence: float) -> Optional[int]:
    """The largest k with [x_(k), x_(n+1-k)] covering the median at `confidence`, or None."""
    best = None
    for k in range(1, n // 2 + 1):
        if 1.0 - 2.0 * _below(n, k) >= confidence:
            best = k
        else:
            break
    return best


def fewest_repeats(confidence: float) -> int:
    """The smallest n whose widest interval, [min, max], reaches `confidence`."""
    n = 1
    while order_statistic_rank(n, confidence) is None:
        n += 1
    return n


def look_confidence(confidence: float, most: int, least: int = 1) -> float:
    """Each look's confidence so that over every look from `least` repeats to `most` (one per
    repeat, from the first n with an interval) the chance that any interval misses stays at
    most 1 - `confidence` (Bonferroni); `confidence` itself when one look is all there is."""
    for looks in range(1, max(most, 1) + 1):
        each = 1.0 - (1.0 - confidence) / looks
        if most - max(least, fewest_repeats(each)) + 1 <= looks:
            return each
    return 1.0 - (1.0 - confidence) / max(most, 1)


def median_interval(
    values: Sequence[float], confidence: float
) -> Optional[Tuple[float, float, float, float]]:
    """(median, low, high, coverage) of the values, or None with too few for the confidence."""
    data = sorted(float(v) for v in values)
    n = len(data)
    if n == 0:
        return None
    k = order_statistic_rank(n, confidence)
    if k is None:
        return None
    mid = n // 2
    med = data[mid] if n % 2 else (data[mid - 1] + data[mid]) / 2.0
    return med, data[k - 1], data[n - k], 1.0 - 2.0 * _below(n, k)


def relative_half_width(median: float, low: float, high: float) -> float:
    """How far the interval reaches from the median, relative to it (inf at a zero median)."""
    if median == 0.0:
        return 0.0 if low == high == 0.0 else math.inf
    return max(median - low, high - median) / abs(median)


def judge(
    values: Sequence[float],
    until: float,
    confidence: float,
    most: Optional[int] = None,
    least: int = 1,
) -> Dict[str, Any]:
    """One metric's state: n, and from enough repeats its median, interval and whether settled.

    `most` (the rule's max) and `least` (its min): the interval is taken at the per-look
    confidence that keeps `confidence` over every look (`look_confidence`); without `most`, at
    `confidence` (one look). An outlying repeat keeps the sample from settling ("unsteady")."""
    each = confidence if most is None else look_confidence(confidence, most, least)
    out: Dict[str, Any] = {"n": len(values), "settled": False}
    got = median_interval(values, each)
    if got is not None:
        med, low, high, coverage = got
        width = relative_half_width(med, low, high)
        outlying = outlier_indexes(values)
        out.update(
            median=med,
            low=low,
            high=high,
            coverage=round(coverage, 4),
            half_width=width if math.isfinite(width) else None,
            settled=width <= until and not outlying,
        )
        if outlying:
            out["unsteady"] = "an outlying repeat"
    return out


def between_verdict(
    values: Sequence[float], good: float, bad: float, noise: float, error: float
) -> Tuple[Optional[str], float]:
    """Wald's sequential probability ratio test of "the mean is `good`" against "it is `bad`",
    normal repeats of known standard deviation `noise`: ("good" | "bad" | None, the log
    likelihood ratio, > 0 leaning good). Wald's bounds log((1 - e) / e) keep each wrong call
    at most about `error`, however many repeats it takes."""
    if not values or noise <= 0:
        return None, 0.0
    llr = math.fsum((x - bad) ** 2 - (x - good) ** 2 for x in values) / (2.0 * noise * noise)
    bound = math.log((1.0 - error) / error)
    if llr >= bound:
        return "good", llr
    if llr <= -bound:
        return "bad", llr
    return None, llr


def decide(
    values: Mapping[str, Sequence[float]], rule: Mapping[str, Any], ran: int
) -> Tuple[Optional[str], Dict[str, Dict[str, Any]]]:
    """Whether to stop after `ran` measured repeats: ("settled" | "decided" | "max" | None, per
    metric). `until`: the median rule; `between`: bisect's test against its two ends;
    `against`: audit's three-decision test against the recorded repeats (compare_rule.py);
    none: the values are only recorded."""
    low, high = int(rule["min"]), int(rule["max"])
    between, against = rule.get("between"), rule.get("against")
    judged: Dict[str, Dict[str, Any]] = {}
    if between:
        for m in rule["metrics"]:
            verdict, llr = between_verdict(
                list(values.get(m, [])),
                float(between["good"]),
                float(between["bad"]),
                float(between["noise"]),
                float(between["error"]),
            )
            judged[m] = {"n": len(values.get(m, [])), "verdict": verdict, "llr": round(llr, 4)}
        if ran >= low and judged and all(j["verdict"] is not None for j in judged.values()):
            return "decided", judged
    elif rule.get("until") is not None:
        until = float(rule["until"])
        confidence = float(rule.get("confidence", DEFAULT_CONFIDENCE))
        judged = {
            m: judge(list(values.get(m, [])), until, confidence, high, low) for m in rule["metrics"]
        }
        if ran >= low and judged and all(j["settled"] for j in judged.values()):
            return "settled", judged
    elif against:
        for m in rule["metrics"]:
            got = list(values.get(m, []))
            call, change, higher, lower = three_decision(
                [float(x) for x in against["reference"].get(m, [])],
                got,
                float(against["tolerance"]),
                float(against["error"]),
                float(against["noise_z"]),
                float(against.get("start_noise", 0.0)),
            )
            judged[m] = {
                "n": len(got),
                "verdict": call,
                "change": round(change, 6),
                "llr_higher": round(higher, 4),
                "llr_lower": round(lower, 4),
            }
        if ran >= low and judged and all(j["verdict"] is not None for j in judged.values()):
            return "decided", judged
    else:
        judged = {m: {"n": len(values.get(m, []))} for m in rule["metrics"]}
    if ran >= high:
        return "max", judged
    return None, judged


def watched_value(repeat_dir: str, watch: Mapping[str, Any]) -> Optional[float]:
    """The deciding metric as the repeat's client wrote it, or None when it cannot be read.

    `format` json: `key` of the JSON object in `file` (or of its last line); jsonl: of its last
    line; regex: the
    first match of `pattern` in `file` (its group 1 when it has one), as the adapters read them.
    """
    path = os.path.join(repeat_dir, str(watch["file"]))
    kind = watch.get("format")
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    raw: Any = None
    if kind == "regex":
        match = re.search(str(watch["pattern"]).encode(), data, re.MULTILINE)
        if match is not None:
            raw = match.group(1) if match.re.groups else match.group(0)
            raw = raw.decode("utf-8", "replace") if raw is not None else None
    else:
        doc = _json_object(data.decode("utf-8", "replace"), whole=kind == "json")
        raw = doc.get(str(watch["key"])) if isinstance(doc, dict) else None
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _json_object(text: str, whole: bool) -> Any:
    """The file's JSON (`whole`), else its last non-empty line's, as the generic adapter reads."""
    if whole:
        try:
            return json.loads(text)
        except ValueError:
            pass
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        return None


def summary(
    rule: Mapping[str, Any], ran: int, stopped: str, judged: Mapping[str, Mapping[str, Any]]
) -> Dict[str, Any]:
    """bench/repeats.json: the rule, the measured repeats run, why they stopped, per metric."""
    return {
        "min": int(rule["min"]),
        "max": int(rule["max"]),
        "until": rule.get("until"),
        "confidence": float(rule.get("confidence", DEFAULT_CONFIDENCE)),
        "ran": ran,
        "stopped": stopped,
        "metrics": {m: dict(j) for m, j in judged.items()},
    }


def values_so_far(values: Dict[str, List[float]], repeat: Mapping[str, Optional[float]]) -> None:
    """Add one repeat's watched values (those read) to the per-metric lists."""
    for metric, value in repeat.items():
        if value is not None:
            values.setdefault(metric, []).append(value)
