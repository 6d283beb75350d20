"""The SLO search's decision rule (runner/slo_rule.py): its error rates measured over seeded
simulations of the runner's own loop (a stop after every repeat), and its walk to an answer."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.runner.slo_rule import (
    bound_verdict,
    capacity,
    decide_slo,
    judge_level,
    level_verdict,
    repeat_values,
)

BOUND, CONFIDENCE, MOST = 500.0, 0.95, 8
RULE = {
    "min": 5,
    "max": MOST,
    "confidence": CONFIDENCE,
    "metrics": ["p99_ttft_ms"],
    "slo": {"p99_ttft_ms": {"max": BOUND}},
}


def measure_level(rng: random.Random, ratio: float, sd: float) -> tuple[str | None, int]:
    """A level whose true median p99 is `ratio` x the bound, measured as the runner does:
    decide_slo after every repeat, then the controller's verdict over what was recorded."""
    values: list[float] = []
    for n in range(1, MOST + 1):
        values.append(BOUND * ratio * math.exp(rng.gauss(0.0, sd)))
        reason, _ = decide_slo({"p99_ttft_ms": values}, RULE, n)
        if reason is not None:
            break
    return bound_verdict(values, {"max": BOUND}, CONFIDENCE, MOST, 5)["verdict"], len(values)


def wilson_low(rate: float, trials: int, z: float = 1.96) -> float:
    """The lower end of the 95 % Wilson range of a measured rate."""
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
    return centre - half / (1 + z * z / trials)


@pytest.mark.parametrize("sd", [0.05, 0.2, 0.5])
def test_a_level_at_its_bound_is_called_either_way_at_most_5_percent(sd: float) -> None:
    rng, trials = random.Random(38), 3000
    verdicts = [measure_level(rng, 1.0, sd)[0] for _ in range(trials)]
    for wrong in ("holds", "fails"):
        rate = verdicts.count(wrong) / trials
        assert wilson_low(rate, trials) <= 1 - CONFIDENCE, (wrong, rate)


def test_a_level_far_from_its_bound_is_decided_on_the_fewest_repeats() -> None:
    rng, trials = random.Random(7), 1000
    low = [measure_level(rng, 0.6, 0.1) for _ in range(trials)]
    high = [measure_level(rng, 1.6, 0.1) for _ in range(trials)]
    assert sum(v == "holds" for v, _ in low) / trials > 0.97
    assert sum(v == "fails" for v, _ in high) / trials > 0.97
    # Bonferroni over the looks 6..8: the first decidable look is the 6th repeat
    assert max(n for _, n in low + high) <= 7 and min(n for _, n in low) == 6


def search(rng: random.Random, ratios: tuple[float, ...], sd: float) -> tuple[int, bool]:
    """A search over levels at `ratios` x the bound: (its answer's index, decided)."""
    verdicts: list[str | None] = []
    for ratio in ratios:
        verdicts.append(measure_level(rng, ratio, sd)[0])
        if verdicts[-1] != "holds":
            break
    best, edge = capacity(verdicts)
    return best, edge is None or verdicts[edge] == "fails"


def test_the_answer_overstates_the_capacity_at_most_5_percent() -> None:
    """The third level sits exactly at the bound (the worst case): an answer naming it or
    above overstates the capacity."""
    rng, trials = random.Random(1), 1500
    answers = [search(rng, (0.5, 0.8, 1.0, 2.0), 0.15)[0] for _ in range(trials)]
    over = sum(a >= 2 for a in answers) / trials
    assert wilson_low(over, trials) <= 1 - CONFIDENCE, over


def test_a_clear_boundary_is_named_and_decided() -> None:
    rng, trials = random.Random(2), 500
    found = [search(rng, (0.5, 0.8, 1.25, 2.0), 0.1) for _ in range(trials)]
    assert sum(a == 1 and decided for a, decided in found) / trials > 0.75
    assert all(a <= 1 for a, _ in found)


def test_a_level_fails_on_any_bound_and_holds_only_on_all() -> None:
    holds, fails, open_ = {"verdict": "holds"}, {"verdict": "fails"}, {"verdict": None}
    assert level_verdict({"a": holds, "b": fails}) == "fails"
    assert level_verdict({"a": open_, "b": fails}) == "fails"
    assert level_verdict({"a": holds, "b": open_}) is None
    assert level_verdict({"a": holds, "b": holds}) == "holds"
    assert capacity(["holds", "holds", "fails", "holds"]) == (1, 2)
    assert capacity(["fails", "holds"]) == (-1, 0)
    assert capacity(["holds", "holds"]) == (1, None)


def test_error_rate_and_a_min_bound_are_judged_from_the_repeats() -> None:
    repeats = [{"n": i, "failed": 0, "completed": 8, "request_goodput": 3.0 + i} for i in range(6)]
    assert repeat_values(repeats, "error_rate") == [0.0] * 6
    judged, verdict = judge_level(
        repeats,
        {"slo": {"error_rate": {"max": 0.01}, "request_goodput": {"min": 2.0}}, "confidence": 0.9},
        6,
    )
    assert verdict == "holds"
    assert judged["request_goodput"]["bound"] == {"min": 2.0}
    assert judge_level(repeats, {"slo": {"request_goodput": {"min": 9.0}}}, 6)[1] == "fails"
    # nothing recorded: undecided, never holds
    assert judge_level([{"n": 1}], {"slo": {"p99_ttft_ms": {"max": 5.0}}}, 6)[1] is None
