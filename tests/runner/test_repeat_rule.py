"""The repeats stopping rule (runner/repeat_rule.py): the median's order-statistic interval, the
decision between repeats, reading the deciding metric, and the interval's coverage under
sequential stopping measured by simulation on known distributions."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.runner.repeat_rule import (
    between_verdict,
    decide,
    fewest_repeats,
    median_interval,
    order_statistic_rank,
    watched_value,
)


def _coverage(n: int, k: int) -> float:
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("n", range(1, 16))
def test_the_rank_is_the_largest_whose_exact_coverage_reaches_the_confidence(
    n: int, confidence: float
) -> None:
    k = order_statistic_rank(n, confidence)
    if k is None:
        assert _coverage(n, 1) < confidence
    else:
        assert _coverage(n, k) >= confidence
        assert k == n // 2 or _coverage(n, k + 1) < confidence


def test_fewest_repeats_for_common_confidences() -> None:
    assert (fewest_repeats(0.8), fewest_repeats(0.9), fewest_repeats(0.95)) == (4, 5, 6)


def test_the_interval_is_order_statistics_so_one_outlier_does_not_move_it() -> None:
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 10.0]
    med, low, high, coverage = median_interval(values, 0.9)  # type: ignore[misc]
    assert (low, high) == (99.0, 100.5)  # k = 2 of 8: the outlier is x_(1)
    assert med == pytest.approx(99.9)
    assert coverage == pytest.approx(_coverage(8, 2))
    assert median_interval([1.0, 2.0, 3.0], 0.9) is None


RULE = {"min": 3, "max": 8, "until": 0.02, "confidence": 0.9, "metrics": ["t"]}


def test_decide_waits_for_min_and_an_interval_then_settles_or_stops_at_max() -> None:
    quiet = [100.0, 100.1, 99.9, 100.0, 100.2, 99.8, 100.1]
    # 90% over the looks from 6 to 8 repeats: each look's interval at 96.7%, none from 5
    assert decide({"t": quiet[:5]}, RULE, 5)[0] is None
    reason, judged = decide({"t": quiet[:6]}, RULE, 6)
    assert reason == "settled" and judged["t"]["half_width"] == pytest.approx(0.002, rel=0.1)
    assert decide({"t": quiet[:6]}, {**RULE, "min": 7}, 6)[0] is None
    loud = [100.0, 130.0, 70.0, 120.0, 80.0, 125.0, 75.0, 110.0]
    assert decide({"t": loud[:7]}, RULE, 7)[0] is None
    reason, judged = decide({"t": loud}, RULE, 8)
    assert reason == "max" and not judged["t"]["settled"]
    # a metric never read stays unsettled: the rule runs to max
    assert decide({}, RULE, 5)[0] is None and decide({}, RULE, 8)[0] == "max"


def test_every_deciding_metric_must_settle() -> None:
    rule = {**RULE, "metrics": ["a", "b"]}
    a = [100.0, 100.1, 99.9, 100.0, 100.2, 100.1]
    assert decide({"a": a, "b": a}, rule, 6)[0] == "settled"
    assert decide({"a": a, "b": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}, rule, 6)[0] is None


@pytest.mark.parametrize(
    ("name", "text", "watch", "value"),
    [
        ("r.json", '{"t": 93.5, "x": 1}', {"format": "json", "key": "t"}, 93.5),
        ("r.json", '{"t": 1}\n{"t": 2.5}\n', {"format": "json", "key": "t"}, 2.5),
        ("r.jsonl", '{"t": 1}\n{"t": 7}\n\n', {"format": "jsonl", "key": "t"}, 7.0),
        ("out", "a\ntput=41.5 tok/s\n", {"format": "regex", "pattern": r"tput=([0-9.]+)"}, 41.5),
        ("out", "12.5\n", {"format": "regex", "pattern": r"^[0-9.]+"}, 12.5),
        ("r.json", '{"t": true}', {"format": "json", "key": "t"}, None),
        ("r.json", '{"t": "NaN"}', {"format": "json", "key": "t"}, None),
        ("r.json", "not json", {"format": "json", "key": "t"}, None),
        ("out", "nothing", {"format": "regex", "pattern": r"tput=([0-9.]+)"}, None),
    ],
)
def test_watched_value_reads_as_the_adapters_do(
    tmp_path: Path, name: str, text: str, watch: dict[str, str], value: float | None
) -> None:
    (tmp_path / name).write_text(text)
    assert watched_value(str(tmp_path), {"metric": "t", "file": name, **watch}) == value
    assert watched_value(str(tmp_path), {"metric": "t", "file": "missing", **watch}) is None


def _sequential_miss_rate(
    draw: Callable[[random.Random], float], true_median: float, confidence: float
) -> tuple[float, float]:
    """How often the final interval misses the true median when each run stops by the rule."""
    rng = random.Random(20261204)
    rule = {**RULE, "max": 12, "confidence": confidence}
    misses, ran, trials = 0, 0, 2000
    for _ in range(trials):
        values: list[float] = []
        for n in range(1, 13):
            values.append(draw(rng))
            if decide({"t": values}, rule, n)[0] is not None:
                break
        _, low, high, _ = median_interval(values, confidence)  # type: ignore[misc]
        misses += not low <= true_median <= high
        ran += len(values)
    return misses / trials, ran / trials


@pytest.mark.parametrize("confidence", [0.9, 0.95])
@pytest.mark.parametrize(
    ("draw", "true_median"),
    [
        (lambda r: 100 * (1 + 0.01 * r.gauss(0, 1)), 100.0),  # quiet: settles early
        (lambda r: 100 * (1 + 0.03 * r.gauss(0, 1)), 100.0),  # loud: mostly runs to max
        (lambda r: 100 * math.exp(0.02 * r.gauss(0, 1)), 100.0),  # skewed
        # slow outliers: 10% of repeats 20% lower; the median of the mixture, found numerically
        (lambda r: (80 if r.random() < 0.1 else 100) * (1 + 0.01 * r.gauss(0, 1)), 99.86),
    ],
    ids=["normal-1pct", "normal-3pct", "lognormal", "outliers"],
)
def test_stopping_by_the_rule_keeps_the_intervals_coverage(
    draw: Callable[[random.Random], float], true_median: float, confidence: float
) -> None:
    miss, _ = _sequential_miss_rate(draw, true_median, confidence)
    # 2000 runs: the standard error of a 10% rate is 0.7%; stopping on width must not erode it
    assert miss <= (1 - confidence) + 0.02, miss


# -- bisect's stop: Wald's test between two known means ------------------------------------------


def test_between_verdict_leans_with_the_log_likelihood_ratio() -> None:
    assert between_verdict([100.0], 100.0, 60.0, 2.0, 0.001)[0] == "good"
    assert between_verdict([61.0], 100.0, 60.0, 2.0, 0.001)[0] == "bad"
    verdict, llr = between_verdict([80.5], 100.0, 60.0, 20.0, 0.001)
    assert verdict is None and llr > 0  # a hair above the midpoint, the noise large
    assert between_verdict([], 100.0, 60.0, 2.0, 0.001) == (None, 0.0)
    # lower is better (a latency): the sides follow the ends, not the sign
    assert between_verdict([10.2, 9.9], 10.0, 20.0, 1.0, 0.001)[0] == "good"


def test_decide_stops_a_bisect_step_once_the_test_decides() -> None:
    rule = {
        "min": 1,
        "max": 6,
        "metrics": ["t"],
        "between": {"good": 100.0, "bad": 60.0, "noise": 2.0, "error": 0.001},
    }
    reason, judged = decide({"t": [99.0]}, rule, 1)
    assert reason == "decided" and judged["t"]["verdict"] == "good"
    close = {**rule, "between": {**rule["between"], "noise": 30.0}}
    assert decide({"t": [81.0]}, close, 1)[0] is None
    assert decide({"t": [81.0] * 6}, close, 6)[0] in ("decided", "max")
    # neither rule: the values are only recorded, every repeat runs
    record = {"min": 5, "max": 5, "metrics": ["t"]}
    assert decide({"t": [1.0] * 4}, record, 4)[0] is None
    assert decide({"t": [1.0] * 5}, record, 5)[0] == "max"


@pytest.mark.parametrize("gap", [0.25, 0.5, 1.0])
def test_the_sequential_test_keeps_its_error_and_needs_fewer_repeats_than_a_fixed_one(
    gap: float,
) -> None:
    """Measured, not assumed: at error 5%, repeats drawn from the good side are called bad at
    most about 5% of the time, and the mean number of repeats is well below what a fixed-size
    test against the midpoint needs for the same error (Wald's classic result)."""
    rng = random.Random(7)
    error, good, bad, noise, trials = 0.05, 100.0, 100.0 - gap, 1.0, 4000
    wrong, used = 0, 0
    for _ in range(trials):
        values: list[float] = []
        verdict = None
        while verdict is None and len(values) < 400:
            values.append(rng.gauss(good, noise))
            verdict = between_verdict(values, good, bad, noise, error)[0]
        wrong += verdict == "bad"
        used += len(values)
    # fixed n with the same error: the mean beats the midpoint by z(0.95) standard errors
    fixed = (1.6449 * noise / (gap / 2)) ** 2
    assert wrong / trials <= error + 0.01, wrong / trials
    assert used / trials <= 0.75 * fixed, (used / trials, fixed)


def _coverage_given_settled(draw: Callable[[random.Random], float], true_median: float) -> float:
    """Of the runs the rule settled (until 2%, 90%, 3..12 repeats), the share whose recorded
    interval holds the true median."""
    rule = {"min": 3, "max": 12, "until": 0.02, "confidence": 0.9, "metrics": ["t"]}
    settled = covered = 0
    for trial in range(1500):
        rng = random.Random(f"settled-{trial}")
        values: list[float] = []
        for n in range(1, 13):
            values.append(draw(rng))
            stopped, judged = decide({"t": values}, rule, n)
            if stopped is not None:
                break
        if stopped == "settled":
            settled += 1
            covered += judged["t"]["low"] <= true_median <= judged["t"]["high"]
    return covered / settled


@pytest.mark.parametrize(
    ("draw", "true_median"),
    [
        (lambda r: 100 * (1 + 0.02 * r.gauss(0, 1)), 100.0),
        (lambda r: 100 * (1 + 0.02 * r.expovariate(1.0)), 100 * (1 + 0.02 * math.log(2))),
    ],
    ids=["normal-2pct", "skewed"],
)
def test_a_settled_interval_keeps_its_coverage(
    draw: Callable[[random.Random], float], true_median: float
) -> None:
    """Issue 36 item 10: stopping at the first narrow interval made "settled" intervals cover
    88 % (normal, 2 % noise, until 2 %) where 90 % was stated; spent across the looks they
    cover 95 % or more."""
    assert _coverage_given_settled(draw, true_median) >= 0.9
