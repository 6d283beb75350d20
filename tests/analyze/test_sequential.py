"""Sequential comparisons in interleaved rounds (analyze/sequential.py): the calls, and their
error rates measured by simulation on known distributions, not assumed."""

from __future__ import annotations

import random

import pytest

from orchestrator.analyze.sequential import ComparePolicy, compare_in_rounds, look

POLICY = ComparePolicy()


def test_a_plain_change_is_called_at_the_first_look() -> None:
    a, b = [100.0, 100.5, 99.8, 100.2, 100.1], [89.8, 90.3, 90.1, 89.9, 90.0]
    assert look(a[:4], b[:4], POLICY).call is None  # the outlier screen needs 5 a side
    decision = look(a, b, POLICY)
    assert decision.call == "lower" and decision.rounds == 5
    assert decision.change == pytest.approx(-0.1, abs=0.003)
    assert look(b, a, POLICY).call == "higher"


def test_no_look_before_min_rounds_and_unsure_at_max() -> None:
    assert look([100.0], [80.0], POLICY).call is None
    loose = [106.0, 92.0, 96.0, 102.0, 94.0, 100.0, 101.0, 95.0, 92.0, 101.0]
    other = [106.0, 96.0, 98.0, 110.0, 97.0, 97.0, 114.0, 91.0, 105.0, 88.0]
    assert look(loose[:9], other[:9], POLICY).call is None
    decision = look(loose, other, POLICY)
    assert decision.call == "unsure" and decision.rounds == 10


def test_an_outlier_repeat_does_not_make_a_change() -> None:
    a = [100.0, 100.2, 99.8, 100.1, 99.9, 85.0]  # one slow repeat
    b = [100.1, 99.9, 100.0, 100.2, 99.8, 100.0]
    assert look(a, b, POLICY).call == "same"


def _rates(
    change: float, noise: float, trials: int = 1500, outliers: int = 0
) -> tuple[dict[str, float], float]:
    rng = random.Random(f"{change}-{noise}-{outliers}")
    calls: dict[str, float] = {"higher": 0, "lower": 0, "same": 0, "unsure": 0}
    rounds = 0
    for _ in range(trials):
        slow = set(rng.sample(range(POLICY.max_rounds), outliers))
        count = iter(range(POLICY.max_rounds))

        def draw_a(slow: set[int] = slow, count: object = count) -> float:
            value = 100 * (1 + noise * rng.gauss(0, 1))
            return value * 0.85 if next(count) in slow else value  # type: ignore[call-overload]

        def draw_b() -> float:
            return 100 * (1 + change) * (1 + noise * rng.gauss(0, 1))

        decision, _, _ = compare_in_rounds(draw_a, draw_b, POLICY)
        calls[str(decision.call)] += 1
        rounds += decision.rounds
    return {k: v / trials for k, v in calls.items()}, rounds / trials


@pytest.mark.parametrize("noise", [0.01, 0.02, 0.05])
def test_no_change_is_seldom_called_a_change(noise: float) -> None:
    rates, _ = _rates(0.0, noise)
    assert rates["higher"] + rates["lower"] <= POLICY.error, rates


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_a_change_of_the_tolerance_or_more_is_seldom_missed(noise: float) -> None:
    for change in (-0.05, -0.10):
        rates, rounds = _rates(change, noise)
        assert rates["same"] + rates["higher"] <= POLICY.error, (change, rates)
    # plain at 1%: decided long before the cap
    rates, rounds = _rates(-0.10, 0.01)
    assert rates["lower"] >= 0.99 and rounds < 5.5, (rates, rounds)


def test_two_slow_repeats_on_a_quiet_host_are_not_a_change() -> None:
    rates, _ = _rates(0.0, 0.01, outliers=2)
    assert rates["higher"] + rates["lower"] <= POLICY.error, rates
