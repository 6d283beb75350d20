"""E-Divisive means located, a t test at the split, Benjamini-Hochberg across series: steps
found where they are, pure noise quiet; the rates measured by simulation over seeded synthetic
series, not asserted one case at a time."""

from __future__ import annotations

import itertools
import random

from orchestrator.analyze.changepoints import (
    _best_split,
    benjamini_hochberg,
    change_points,
    change_points_of_many,
    right_lengths,
)
from orchestrator.analyze.student import t_two_sided


def series(n: int, steps: dict[int, float], noise: float, seed: int) -> list[float]:
    """n runs around 100 with `noise` (relative sd), times each step's factor from its index."""
    rng = random.Random(seed)
    out, level = [], 100.0
    for i in range(n):
        level *= steps.get(i, 1.0)
        out.append(level * (1 + noise * rng.gauss(0, 1)))
    return out


def _slow_best_split(values: list[float], min_size: int) -> tuple[int, int, float]:
    """The definition, pair by pair, over the split t and the right segment's end k (its
    lengths as the search takes them)."""
    n, best = len(values), (-1, -1, 0.0)
    for t, k in ((a, a + m) for a in range(min_size, n - min_size + 1)
                 for m in right_lengths(n - a, min_size)):  # fmt: skip
        a, b = values[:t], values[t:k]
        between = sum(abs(x - y) for x in a for y in b) / (len(a) * len(b))
        within_a = sum(abs(a[i] - a[j]) for i in range(len(a)) for j in range(i + 1, len(a)))
        within_b = sum(abs(b[i] - b[j]) for i in range(len(b)) for j in range(i + 1, len(b)))
        ea = within_a / (len(a) * (len(a) - 1) / 2) if len(a) > 1 else 0.0
        eb = within_b / (len(b) * (len(b) - 1) / 2) if len(b) > 1 else 0.0
        q = t * (k - t) / k * (2 * between - ea - eb)
        if q > best[2]:
            best = (t, k, q)
    return best


def test_the_fast_statistic_is_the_definition() -> None:
    rng = random.Random(5)
    for n in (4, 7, 20, 33):
        values = [rng.choice([1.0, 2.0, 2.0, 3.5]) + rng.random() for _ in range(n)]
        for min_size in (1, 2, 3):
            fast, slow = _best_split(values, min_size), _slow_best_split(values, min_size)
            assert fast[:2] == slow[:2] and abs(fast[2] - slow[2]) < 1e-9 * max(1.0, slow[2])


def test_every_right_length_is_searched_up_to_8_then_a_quarter_apart() -> None:
    assert right_lengths(5, 2) == (2, 3, 4, 5)
    lengths = right_lengths(198, 2)
    assert lengths[:7] == (2, 3, 4, 5, 6, 7, 8) and lengths[-1] == 198 and len(lengths) < 30
    assert all(b / a <= 1.34 for a, b in itertools.pairwise(lengths[6:]))  # rounded


def test_the_energy_statistic_peaks_at_the_step() -> None:
    values = [100.0] * 10 + [70.0] * 10
    assert _best_split(values, 2)[:2] == (10, 20)
    assert _best_split([1.0, 2.0], 2) == (-1, -1, 0.0, 0)  # too short to split


def test_a_regression_is_found_at_its_run() -> None:
    values = series(30, {21: 0.66}, 0.02, seed=1)
    (cp,) = change_points(values)
    assert cp.index == 21 and cp.change < -0.3 and cp.p_value <= 1e-6


def test_two_steps_both_found() -> None:
    values = series(40, {12: 0.85, 28: 1.25}, 0.01, seed=2)
    assert [cp.index for cp in change_points(values)] == [12, 28]


def test_rates_over_seeded_series() -> None:
    """200 noise-only series of 30 runs at 2 % noise, 100 with a -10 % step at a random run:
    false alarms at most a few percent, the step found (within one run) nearly always."""
    false_alarms = sum(bool(change_points(series(30, {}, 0.02, seed=s))) for s in range(200))
    found = 0
    for s in range(100):
        at = random.Random(s).randrange(5, 26)
        cps = change_points(series(30, {at: 0.9}, 0.02, seed=1000 + s))
        found += any(abs(cp.index - at) <= 1 for cp in cps)
    assert false_alarms <= 6, false_alarms  # 3 % of 200
    assert found >= 90, found


def test_a_small_significant_step_is_not_a_change_point() -> None:
    values = series(40, {20: 0.99}, 0.001, seed=3)  # -1 %, very clean: real but small
    assert change_points(values) == []
    assert change_points(values, min_change=0.005)[0].index == 20


def test_a_long_series_is_searched_window_by_window() -> None:
    """4,000 runs: two steps found where they are (overlapping windows report each once)."""
    values = series(4_000, {1000: 0.9, 2800: 1.12}, 0.02, seed=1)
    found = change_points(values)
    assert [cp.index for cp in found] == [1000, 2800]
    assert found[0].change < -0.09 and found[1].change > 0.1
    # the same search without windows finds the same steps
    short = values[850:1150] + values[2650:2950]
    assert [cp.index for cp in change_points(short, window=len(short))] == [150, 450]


def test_a_short_dip_mid_series_is_found() -> None:
    """A 10-run -10 % dip somewhere in the middle of 200 runs (2 % noise): with the right
    segment's end fixed at the series end (the old search) it was missed every time; searching
    it (Matteson & James's kappa) finds both edges."""
    found = 0
    for s in range(20):
        at = random.Random(s).randrange(60, 130)
        cuts = [cp.index for cp in change_points(series(200, {at: 0.9, at + 10: 1 / 0.9},
                                                        0.02, seed=500 + s))]  # fmt: skip
        found += any(abs(c - at) <= 1 for c in cuts) and any(abs(c - at - 10) <= 1 for c in cuts)
    assert found >= 18, found


def test_one_step_near_a_window_seam_is_one_step_of_its_size() -> None:
    """-5 % steps a few runs from where windows of 200 meet (3 % noise, 500 runs): each is
    said once with its size, never as two sub-threshold steps a few runs apart (the old
    windows did that for seed 37: -1.7 % at 303 and -3.4 % at 306)."""
    for s in range(30, 42):
        at = random.Random(s).choice([297, 298, 299, 301, 302, 303])
        near = [cp for cp in change_points(series(500, {at: 0.95}, 0.03, seed=s))
                if abs(cp.index - at) <= 10]  # fmt: skip
        assert len(near) == 1 and abs(near[0].index - at) <= 5, (s, at, near)  # 3 % noise
        assert -0.07 < near[0].change < -0.03, (s, near)


def test_pure_noise_across_1000_series_stays_quiet_night_after_night() -> None:
    """1,000 noise series (50 configurations x 20 metrics, 2 % noise) judged as one family,
    three nights running: Benjamini-Hochberg at 5 % keeps false change points to at most a
    couple over the three nights (each series at its own 1 % made 4-6 new ones a night), and
    the ones kept stay put from one night to the next."""
    rng = random.Random(7)
    grown = [[100 * (1 + 0.02 * rng.gauss(0, 1)) for _ in range(33)] for _ in range(1000)]
    nights = [change_points_of_many([v[: 30 + k] for v in grown]) for k in range(4)]
    assert all(f.tests >= 1000 for f in nights)
    new = 0
    for before, now in itertools.pairwise(nights):
        new += sum(len({c.index for c in a} - {c.index for c in b})
                   for a, b in zip(now.found, before.found, strict=True))  # fmt: skip
    assert new <= 2, new
    assert sum(f.kept for f in nights) <= 4


def test_benjamini_hochberg_rejects_what_the_step_up_rule_says() -> None:
    ps = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216]
    assert benjamini_hochberg(ps, 0.05) == [True, True] + [False] * 8
    assert benjamini_hochberg([0.01, 0.02, 0.03], 0.05) == [True, True, True]


def test_the_t_tail_is_right_far_out() -> None:
    assert abs(t_two_sided(2.045, 29) - 0.05) < 1e-3
    assert abs(t_two_sided(12.706, 1) - 0.05) < 1e-4
    assert 1e-16 < t_two_sided(15.0, 28) < 1e-13  # 6.5e-15
