"""The pure bisection: synthetic measurements with seeded noise, no hosts."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from orchestrator.execute.bisect.search import (
    BisectError,
    BisectPolicy,
    Ends,
    Measure,
    bisect,
    classify,
    run_until_decided,
)
from orchestrator.runner.compare_rule import noise_upper_bound
from orchestrator.sim.model import (
    DEMO_EAGLE3_2,
    DEMO_TUNED_NCCL,
    model_params,
    predict_output_throughput,
)
from orchestrator.sim.repo import apply_bug


def synthetic(
    n: int, regress_at: int, noise: float, seed: int, skip: set[int] | None = None
) -> tuple[list[str], dict[str, int], object]:
    commits = [f"c{i:03d}" for i in range(n)]
    index = {c: i for i, c in enumerate(commits)}
    rng = random.Random(seed)
    skip = skip or set()

    def measure(commit: str, repeats: int, ends: Ends | None) -> Sequence[float] | None:
        i = index[commit]
        if i in skip:
            return None
        base = 94.0 if i < regress_at else 60.0
        return run_until_decided(lambda: base * (1 + rng.gauss(0, noise)), repeats, ends)

    return commits, index, measure


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [32, 48, 64])
def test_finds_the_regression_within_log2_plus_two_points(n: int, seed: int) -> None:
    regress_at = random.Random(seed * 101 + n).randrange(1, n)
    commits, _, measure = synthetic(n, regress_at, 0.01, seed)
    result = bisect(commits, measure)  # type: ignore[arg-type]
    assert result.first_bad == commits[regress_at]
    assert len([p for p in result.points if not p.probe]) <= math.ceil(math.log2(n)) + 2


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

    def measure(commit: str, repeats: int, ends: Ends | None = None) -> list[float]:
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

    def flat(commit: str, repeats: int, ends: Ends | None = None) -> list[float]:
        return [90 + rng.gauss(0, 1) for _ in range(repeats)]

    with pytest.raises(BisectError, match="do not differ"):
        bisect(commits, flat)


def test_classify_direction_follows_the_ends() -> None:
    # Lower is better (e.g. latency): good 10 ms, bad 20 ms.
    assert classify([11.0, 10.5], 10.0, 20.0, 0.5, 3.0)[0] == "good"
    assert classify([19.0, 20.5], 10.0, 20.0, 0.5, 3.0)[0] == "bad"
    assert classify([15.0], 10.0, 20.0, 5.0, 3.0)[0] is None


# -- measurements from the simulator's performance model ------------------------------------

TUNED_NCCL = DEMO_TUNED_NCCL
EAGLE3_2 = DEMO_EAGLE3_2


def model_range(
    n: int, regress_at: int, noise: float, seed: int, bug: str = "verify"
) -> tuple[list[str], Measure]:
    """n commits; those from `regress_at` on carry `bug` (as `orch sim init-repo` writes it).

    Each repeat is the model's predicted output throughput (1024 in, 512 out) for the commit's
    parameters times (1 + a seeded gaussian of relative stdev `noise`).
    """
    good = model_params()
    tps = [
        predict_output_throughput(p, EAGLE3_2, TUNED_NCCL, 1024, 512)
        for p in (good, apply_bug(good, bug))
    ]
    commits = [f"{i:040x}" for i in range(n)]
    index = {c: i for i, c in enumerate(commits)}
    rng = random.Random(f"{seed}-{noise}-{bug}")

    def measure(commit: str, repeats: int, ends: Ends | None) -> list[float]:
        mean = tps[index[commit] >= regress_at]
        return run_until_decided(lambda: mean * (1 + rng.gauss(0.0, noise)), repeats, ends)

    return commits, measure


def test_model_numbers_are_the_demo_story() -> None:
    good = model_params()
    tps = [
        predict_output_throughput(p, EAGLE3_2, TUNED_NCCL, 1024, 512)
        for p in (good, apply_bug(good, "verify"), apply_bug(good, "verify:20"))
    ]
    assert tps[0] == pytest.approx(93.6, abs=0.5)
    assert tps[1] == pytest.approx(63.2, abs=0.5)
    assert tps[2] / tps[0] == pytest.approx(0.954, abs=0.005)  # the small regression: -4.6%


@pytest.mark.parametrize("noise", [0.01, 0.02, 0.05])
@pytest.mark.parametrize("n", [32, 64])
@pytest.mark.parametrize("seed", range(8))
def test_model_regression_found_at_every_noise_level(n: int, noise: float, seed: int) -> None:
    """EAGLE-3's verify 19 -> 29 ms (-33%): right, within ceil(log2 N) + 2 points, no extra runs
    at 1-2% noise."""
    regress_at = random.Random(f"pos-{seed}-{n}").randrange(1, n)
    commits, measure = model_range(n, regress_at, noise, seed)
    result = bisect(commits, measure)
    assert result.first_bad == commits[regress_at]
    assert result.last_good == commits[regress_at - 1]
    assert len([p for p in result.points if not p.probe]) <= math.ceil(math.log2(n)) + 2
    assert not any(p.uncertain for p in result.points)
    if noise <= 0.02:
        # One run per commit searched was always enough (the ends and the answer's pair are
        # measured again by design: the ends' starts and the confirmation).
        paired = {0, n - 1, regress_at - 1, regress_at}
        assert all(p.runs == 1 for p in result.points if p.index not in paired)


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_small_regression_found_with_adaptive_runs(noise: float) -> None:
    """verify 19 -> 20 ms (-4.6%): at 2% noise the ends and some points need more runs."""
    outcomes = []
    for seed in range(20):
        regress_at = random.Random(f"small-{seed}").randrange(1, 48)
        commits, measure = model_range(48, regress_at, noise, seed, bug="verify:20")
        try:
            result = bisect(commits, measure)
        except BisectError:
            outcomes.append("refused")
            continue
        outcomes.append("right" if result.first_bad == commits[regress_at] else "wrong")
        assert len([p for p in result.points if not p.probe]) <= math.ceil(math.log2(48)) + 2
    assert outcomes.count("right") >= 18, outcomes
    assert outcomes.count("wrong") <= 1, outcomes


def test_ends_are_measured_again_before_giving_up() -> None:
    """A first run of each end that does not separate them is followed by another, not a refusal."""
    calls: list[str] = []
    first = {"g": [100.0, 96.0, 98.0], "b": [96.0, 92.0, 94.0]}  # z 1.7 on the first run

    def measure(commit: str, repeats: int, ends: Ends | None = None) -> list[float]:
        calls.append(commit)
        if commit in first and calls.count(commit) == 1:
            return first[commit]
        centre = {"g": 100.0, "m": 100.0, "b": 90.0}[commit]
        return [centre + d for d in (-0.5, 0.0, 0.5)][:repeats]

    policy = BisectPolicy(end_repeats=3, repeats=3, end_runs=1)
    result = bisect(["g", "m", "b"], measure, policy)
    assert calls[:5] == ["g", "b", "g", "b", "m"]  # the ends twice, then the search
    assert result.first_bad == "b"


def test_ends_that_never_separate_are_refused_after_the_cap() -> None:
    calls: list[str] = []
    rng = random.Random(4)

    def flat(commit: str, repeats: int, ends: Ends | None = None) -> list[float]:
        calls.append(commit)
        return [90 + rng.gauss(0, 1) for _ in range(repeats)]

    with pytest.raises(BisectError, match="do not differ"):
        bisect(["g", "m", "b"], flat, BisectPolicy(max_end_runs=3))
    assert calls == ["g", "b"] * 3  # never an inner commit


def test_an_uncertain_call_is_said_in_the_answer() -> None:
    """A point still ambiguous after the cap is called by the nearer side, and the message says
    the answer rests on it."""
    rng = random.Random(2)

    def measure(commit: str, repeats: int, ends: Ends | None = None) -> list[float]:
        centre = {"g": 100.0, "m": 95.2, "b": 90.0}[commit]
        return [centre + rng.gauss(0, 1.0) for _ in range(repeats)]

    result = bisect(["g", "m", "b"], measure, BisectPolicy(max_runs_per_point=2))
    (middle,) = [p for p in result.points if p.commit == "m"]
    assert middle.uncertain
    assert "uncertain: 1 tested commit(s)" in result.message and "m" in result.message


# -- the sequential stop -------------------------------------------------------------------------


def test_a_plain_commit_costs_a_repeat_and_a_run_stops_once_decided() -> None:
    """Demo-sized change (-33%) at 2% noise: every inner commit is decided by its first repeat,
    and a run given `ends` stops there, where a run without them takes all its repeats."""
    asked: list[tuple[str, int, Ends | None]] = []
    commits, _, measure = synthetic(32, 13, 0.02, seed=5)

    def spy(commit: str, repeats: int, ends: Ends | None) -> Sequence[float] | None:
        asked.append((commit, repeats, ends))
        return measure(commit, repeats, ends)  # type: ignore[operator,no-any-return]

    result = bisect(commits, spy)
    assert result.first_bad == commits[13]
    # The ends and the answer's pair are measured again (starts, confirmation): not searched.
    paired = (commits[0], commits[-1], commits[12], commits[13])
    inner = [p for p in result.points if p.commit not in paired]
    assert inner and all(len(p.values) == 1 and p.runs == 1 for p in inner)
    assert all(ends is None for c, _, ends in asked if c in paired[:2])
    searched = [ends for c, _, ends in asked if c not in paired]
    assert all(ends is not None and ends.error == 0.001 for ends in searched)
    assert run_until_decided(lambda: 1.0, 4, None) == [1.0] * 4


@pytest.mark.parametrize("dof", [4, 8, 30])
def test_the_noise_bound_covers_the_true_noise_as_often_as_it_says(dof: int) -> None:
    """The test assumes the noise known; it takes the estimate's 95% upper bound, measured here
    to cover the true standard deviation about 95% of the time."""
    rng = random.Random(dof)
    trials, covered = 4000, 0
    for _ in range(trials):
        sample = [rng.gauss(0.0, 1.0) for _ in range(dof + 1)]
        mean = sum(sample) / len(sample)
        estimate = math.sqrt(sum((x - mean) ** 2 for x in sample) / dof)
        covered += noise_upper_bound(estimate, dof, 1.645) >= 1.0
    assert 0.93 <= covered / trials <= 0.97, covered / trials
