"""E-Divisive means with a permutation test: steps found where they are, pure noise quiet; the
rates measured by simulation over seeded synthetic series, not asserted one case at a time."""

from __future__ import annotations

import random

from orchestrator.analyze.changepoints import _best_split, change_points


def series(n: int, steps: dict[int, float], noise: float, seed: int) -> list[float]:
    """n runs around 100 with `noise` (relative sd), times each step's factor from its index."""
    rng = random.Random(seed)
    out, level = [], 100.0
    for i in range(n):
        level *= steps.get(i, 1.0)
        out.append(level * (1 + noise * rng.gauss(0, 1)))
    return out


def _slow_best_split(values: list[float], min_size: int) -> tuple[int, float]:
    """The definition, pair by pair: what the fast sums must equal."""
    n, best = len(values), (-1, 0.0)
    for t in range(min_size, n - min_size + 1):
        a, b = values[:t], values[t:]
        between = sum(abs(x - y) for x in a for y in b) / (len(a) * len(b))
        within_a = sum(abs(a[i] - a[j]) for i in range(len(a)) for j in range(i + 1, len(a)))
        within_b = sum(abs(b[i] - b[j]) for i in range(len(b)) for j in range(i + 1, len(b)))
        ea = within_a / (len(a) * (len(a) - 1) / 2) if len(a) > 1 else 0.0
        eb = within_b / (len(b) * (len(b) - 1) / 2) if len(b) > 1 else 0.0
        q = t * (n - t) / n * (2 * between - ea - eb)
        if q > best[1]:
            best = (t, q)
    return best


def test_the_fast_statistic_is_the_definition() -> None:
    rng = random.Random(5)
    for n in (4, 7, 20, 33):
        values = [rng.choice([1.0, 2.0, 2.0, 3.5]) + rng.random() for _ in range(n)]
        for min_size in (1, 2, 3):
            fast, slow = _best_split(values, min_size), _slow_best_split(values, min_size)
            assert fast[0] == slow[0] and abs(fast[1] - slow[1]) < 1e-9 * max(1.0, slow[1])


def test_the_energy_statistic_peaks_at_the_step() -> None:
    values = [100.0] * 10 + [70.0] * 10
    assert _best_split(values, 2)[0] == 10
    assert _best_split([1.0, 2.0], 2) == (-1, 0.0)  # too short to split


def test_a_regression_is_found_at_its_run() -> None:
    values = series(30, {21: 0.66}, 0.02, seed=1)
    (cp,) = change_points(values)
    assert cp.index == 21 and cp.change < -0.3 and cp.p_value <= 0.01


def test_two_steps_both_found() -> None:
    values = series(40, {12: 0.85, 28: 1.25}, 0.01, seed=2)
    assert [cp.index for cp in change_points(values)] == [12, 28]


def test_rates_over_seeded_series() -> None:
    """200 noise-only series of 30 runs at 2 % noise, 100 with a -10 % step at a random run:
    false alarms at most a few percent, the step found (within one run) nearly always."""
    false_alarms = sum(
        bool(change_points(series(30, {}, 0.02, seed=s), permutations=99)) for s in range(200)
    )
    found = 0
    for s in range(100):
        at = random.Random(s).randrange(5, 26)
        cps = change_points(series(30, {at: 0.9}, 0.02, seed=1000 + s), permutations=99)
        found += any(abs(cp.index - at) <= 1 for cp in cps)
    assert false_alarms <= 6, false_alarms  # 3 % of 200
    assert found >= 90, found


def test_a_small_significant_step_is_not_a_change_point() -> None:
    values = series(40, {20: 0.99}, 0.001, seed=3)  # -1 %, very clean: real but small
    assert change_points(values) == []
    assert change_points(values, min_change=0.005)[0].index == 20


def test_a_long_series_is_searched_window_by_window() -> None:
    """10,000 runs: two steps found where they are (overlapping windows report each once)."""
    values = series(10_000, {2000: 0.9, 7000: 1.12}, 0.02, seed=1)
    found = change_points(values)
    assert [cp.index for cp in found] == [2000, 7000]
    assert found[0].change < -0.09 and found[1].change > 0.1
    # the same search without windows finds the same steps
    short = values[1500:2500] + values[6500:7500]
    assert [cp.index for cp in change_points(short, window=len(short))] == [500, 1500]
