"""The server start as the unit of replication: the two noise levels and a comparison that
counts starts, proved by seeded simulations that measure their error rates."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.analyze import stats
from orchestrator.analyze.replication import (
    NOT_MEASURED,
    ONE_START_EACH,
    compare_starts,
    start_spread,
    starts_document,
    starts_footer,
)
from orchestrator.analyze.student import t_two_sided
from orchestrator.results.show import starts_line as describe_starts


def _side(
    rng: random.Random,
    starts: int,
    repeats: int,
    start_sd: float,
    within_sd: float,
    scale: float = 1.0,
) -> tuple[list[float], list[int]]:
    """One cell as the simulator makes it: a speed factor per start, noise per repeat."""
    values, ids = [], []
    for start in range(starts):
        factor = math.exp(rng.gauss(0.0, start_sd))
        for _ in range(repeats):
            values.append(1000.0 * scale * factor * math.exp(rng.gauss(0.0, within_sd)))
            ids.append(start)
    return values, ids


def _rates(
    seed: int, trials: int, starts: int, repeats: int, start_sd: float, within_sd: float
) -> tuple[float, float]:
    """False-positive rates of A against an identical B: repeats taken as independent (orch's
    `stats.compare`, as `orch diff` does) and the start-level comparison."""
    rng = random.Random(seed)
    naive = by_start = 0
    for _ in range(trials):
        a, a_ids = _side(rng, starts, repeats, start_sd, within_sd)
        b, b_ids = _side(rng, starts, repeats, start_sd, within_sd)
        naive += stats.compare(a, b, ratio_threshold=0.0).significant
        by_start += compare_starts(a, a_ids, b, b_ids).significant
    return naive / trials, by_start / trials


def test_t_distribution_matches_its_tables() -> None:
    assert t_two_sided(2.776445, 4) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(2.228139, 10) == pytest.approx(0.05, abs=1e-5)
    assert t_two_sided(1.959964, 1e6) == pytest.approx(0.05, abs=1e-4)
    assert t_two_sided(0.0, 3) == pytest.approx(1.0)


def test_anova_estimator_recovers_both_levels() -> None:
    rng = random.Random(11)
    values, ids = _side(rng, 300, 4, 0.02, 0.005)
    spread = start_spread(values, ids)
    assert spread.starts == 300 and spread.repeats == 1200
    assert spread.between_sd == pytest.approx(0.02, rel=0.12)
    assert spread.within_sd == pytest.approx(0.005, rel=0.06)
    # 4 repeats of a start with icc ~0.94 are worth little more than one value
    assert spread.effective_n is not None and 300 < spread.effective_n < 340
    assert spread.text().startswith("300 server starts: start-to-start sd 1.88 %, within-start")


def test_unbalanced_starts_and_no_start_spread() -> None:
    rng = random.Random(5)
    values, ids = _side(rng, 200, 3, 0.0, 0.01)
    values += [1000.0 * math.exp(rng.gauss(0.0, 0.01)) for _ in range(50)]
    ids += [1000 + i // 5 for i in range(50)]  # 10 more starts of 5 repeats
    spread = start_spread(values, ids)
    assert spread.between_sd is not None and spread.between_sd < 0.003
    assert spread.within_sd == pytest.approx(0.01, rel=0.08)


def test_one_start_is_said_not_measured() -> None:
    spread = start_spread([100.0, 101.0, 99.0], [1, 1, 1])
    assert not spread.measured and spread.between_sd is None and spread.effective_n is None
    assert spread.text().startswith(NOT_MEASURED)
    result = compare_starts([100.0, 101.0], [1, 1], [103.0, 104.0], [1, 1])
    assert result.p_value is None and not result.significant
    assert result.note == ONE_START_EACH and ONE_START_EACH in result.text()
    assert result.ratio == pytest.approx(1.0299, abs=1e-3)


def test_one_start_against_several_uses_the_pooled_t() -> None:
    rng = random.Random(3)
    a, a_ids = _side(rng, 1, 5, 0.01, 0.005)
    b, b_ids = _side(rng, 4, 3, 0.01, 0.005)
    result = compare_starts(a, a_ids, b, b_ids)
    assert result.method == "Student's t" and result.p_value is not None
    assert "one side has one start" in result.text()


@pytest.mark.parametrize(("start_sd", "within_sd"), [(0.02, 0.005), (0.01, 0.005)])
def test_repeats_as_independent_make_false_calls_the_start_level_comparison_does_not(
    start_sd: float, within_sd: float
) -> None:
    """Issue 36 item 2: with a start-to-start sd of 1-2 % repeats compared as independent
    replicates call identical cells different far more often than 5 % (the issue measured
    12-42 %); comparing start means holds its 5 %. 3 starts of 4 repeats a side, 2,000 trials
    (simulation error of a 5 % rate: 0.5 %)."""
    naive, by_start = _rates(2026, 2000, 3, 4, start_sd, within_sd)
    assert naive > 0.25  # measured: 0.35 at 2 %, 0.31 at 1 %
    assert by_start < 0.05 + 3 * math.sqrt(0.05 * 0.95 / 2000)


def test_today_one_start_a_cell_is_worse_still() -> None:
    """One start a cell, 10 repeats each (every cell today): most identical pairs differ."""
    naive, by_start = _rates(7, 1000, 1, 10, 0.02, 0.005)
    assert naive > 0.7 and by_start == 0.0  # no start-level test: it says it cannot tell


def test_without_start_spread_both_hold_and_a_real_change_is_found() -> None:
    naive, by_start = _rates(9, 2000, 3, 4, 0.0, 0.005)
    assert naive < 0.065 and by_start < 0.065
    rng = random.Random(4)
    found = 0
    for _ in range(500):
        a, a_ids = _side(rng, 4, 3, 0.005, 0.005)
        b, b_ids = _side(rng, 4, 3, 0.005, 0.005, scale=1.02)
        found += compare_starts(a, a_ids, b, b_ids).significant
    assert found / 500 > 0.8  # a 2 % change against 0.5 % start spread, 4 v 4 starts


def _metrics(values: list[float], starts: list[int] | None) -> dict[str, object]:
    """A metrics.json as the controller writes it (analyze/verdict.py)."""
    repeats = [{"n": i, "output_throughput": v} for i, v in enumerate(values, start=1)]
    doc: dict[str, object] = {"repeats": repeats}
    if starts is not None:
        doc["starts"] = starts_document(repeats, dict(enumerate(starts, start=1)))
    return doc


def test_show_report_and_diff_say_whether_the_spread_was_measured() -> None:
    rng = random.Random(2)
    a, a_ids = _side(rng, 3, 2, 0.02, 0.005)
    b, _ = _side(rng, 3, 2, 0.02, 0.005)
    several, single = _metrics(a, a_ids), _metrics(b, None)
    assert describe_starts(several, "output_throughput").startswith(
        "starts    3 server starts: output_throughput start-to-start sd "
    )
    assert describe_starts(single, "output_throughput") == (
        "starts    one server start: start-to-start spread not measured"
    )
    footer = starts_footer([("c1", several), ("c2", single)], "output_throughput")
    assert footer[0].startswith("c1 output_throughput: 3 server starts: start-to-start sd")
    assert footer[1].startswith("1 cell(s) on one server start each: start-to-start spread not")
