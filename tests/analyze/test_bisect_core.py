"""The pure bisection: synthetic measurements with seeded noise, no hosts."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from orchestrator.analyze.bisect import BisectError, BisectPolicy, bisect, classify


def synthetic(
    n: int, regress_at: int, noise: float, seed: int, skip: set[int] | None = None
) -> tuple[list[str], dict[str, int], object]:
    commits = [f"c{i:03d}" for i in range(n)]
    index = {c: i for i, c in enumerate(commits)}
    rng = random.Random(seed)
    skip = skip or set()

    def measure(commit: str, repeats: int) -> Sequence[float] | None:
        i = index[commit]
        if i in skip:
            return None
        base = 94.0 if i < regress_at else 60.0
        return [base * (1 + rng.gauss(0, noise)) for _ in range(repeats)]

    return commits, index, measure


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [32, 48, 64])
def test_finds_the_regression_within_log2_plus_two_points(n: int, seed: int) -> None:
    regress_at = random.Random(seed * 101 + n).randrange(1, n)
    commits, _, measure = synthetic(n, regress_at, 0.01, seed)
    result = bisect(commits, measure)  # type: ignore[arg-type]
    assert result.first_bad == commits[regress_at]
    assert len(result.points) <= math.ceil(math.log2(n)) + 2


@pytest.mark.parametrize("noise", [0.02, 0.05])
def test_noisier_ranges_still_land(noise: float) -> None:
    commits, _, measure = synthetic(40, 23, noise, seed=7)
    result = bisect(commits, measure)  # type: ignore[arg-type]
    assert result.first_bad == commits[23]


def test_skipped_commit_is_gone_around() -> None:
    commits, _, measure = synthetic(33, 16, 0.01, seed=3, skip={16})
    result = bisect(commits, measure)  # type: ignore[arg-type]
    # 16 itself cannot be measured: like git bisect, the answer is a range ending at 17.
    assert result.first_bad is None
    assert commits[16] in result.skipped
    assert commits[16] in result.message and commits[17] in result.message
    assert result.last_good == commits[15]


def test_skip_not_in_the_way_does_not_hide_the_answer() -> None:
    commits, _, measure = synthetic(33, 20, 0.01, seed=3, skip={16})
    result = bisect(commits, measure)  # type: ignore[arg-type]
    assert result.first_bad == commits[20]
    assert commits[16] in result.skipped


def test_ambiguous_point_gets_more_repeats() -> None:
    commits = ["g", "m", "b"]
    calls: list[tuple[str, int]] = []
    rng = random.Random(1)

    def measure(commit: str, repeats: int) -> list[float]:
        calls.append((commit, repeats))
        centre = {"g": 100.0, "b": 90.0, "m": 95.5}[commit]
        return [centre + rng.gauss(0, 1.0) for _ in range(repeats)]

    result = bisect(commits, measure, BisectPolicy(max_runs_per_point=4))
    runs_at_m = sum(1 for c, _ in calls if c == "m")
    assert runs_at_m >= 2  # one run could not decide
    assert result.cell_runs == len(calls)


def test_ends_that_do_not_differ_are_refused() -> None:
    commits, _, _ = synthetic(8, 4, 0.0, 0)
    rng = random.Random(0)

    def flat(commit: str, repeats: int) -> list[float]:
        return [90 + rng.gauss(0, 1) for _ in range(repeats)]

    with pytest.raises(BisectError, match="do not differ"):
        bisect(commits, flat)


def test_classify_direction_follows_the_ends() -> None:
    # Lower is better (e.g. latency): good 10 ms, bad 20 ms.
    assert classify([11.0, 10.5], 10.0, 20.0, 0.5, 3.0)[0] == "good"
    assert classify([19.0, 20.5], 10.0, 20.0, 0.5, 3.0)[0] == "bad"
    assert classify([15.0], 10.0, 20.0, 5.0, 3.0)[0] is None
