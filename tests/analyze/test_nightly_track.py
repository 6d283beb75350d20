"""`orch apply --track`'s verdict (analyze/history.py newest_steps) measured on seeded nightly
histories: a run is one server start (start-to-start sd drawn per run) of 5 repeats, judged by
its median; the family is every series of the night."""

from __future__ import annotations

import random
import statistics

from orchestrator.analyze.history import newest_steps
from orchestrator.results.history.db import Point, Series

METRIC = "output_throughput"  # higher is better


def nights(rng: random.Random, count: int, runs: int, start_sd: float, slow: float = 0.0,
           drop_at: int | None = None) -> list[list[list[float]]]:  # fmt: skip
    """`count` series of `runs` runs, each run its 5 repeats; series 0 drops 10 % at
    `drop_at`."""
    out = []
    for i in range(count):
        series = []
        for k in range(runs):
            level = 90.0 if i == 0 and drop_at is not None and k >= drop_at else 100.0
            offset = 1 + start_sd * rng.gauss(0, 1)
            series.append([level * offset * (1 + 0.01 * rng.gauss(0, 1))
                           * (0.9 if rng.random() < slow else 1.0) for _ in range(5)])  # fmt: skip
        out.append(series)
    return out


def judge(many: list[list[list[float]]], upto: int,
          start_sd: float | None = None) -> list[tuple[str, str, str]]:  # fmt: skip
    """The regressions the night of run `upto - 1` raises: (series, last good, first bad);
    `start_sd`: every series' measured between-start sd, as a run with bench.starts records."""
    found = [
        Series(f"s{i}", f"s{i}", "nightly", None, [
            Point(f"r{k:03d}", "cell", float(k), f"c{k}", None, None, "ok", "cell",
                  statistics.median(rs), 5, None) for k, rs in enumerate(runs[:upto])])
        for i, runs in enumerate(many)
    ]  # fmt: skip
    spans = {(f"s{i}", f"r{k:03d}"): (min(rs), max(rs)) for i, runs in enumerate(many)
             for k, rs in enumerate(runs)}  # fmt: skip
    sds = {f"s{i}": start_sd for i in range(len(many))} if start_sd is not None else None
    return [(s.series.series, s.last_good.run_id, s.first_bad.run_id)
            for s in newest_steps(found, f"r{upto - 1:03d}", METRIC, spans=spans,
                                  start_sds=sds)
            if s.regression]  # fmt: skip


def test_tonights_regression_is_named_tonight_once_with_its_range() -> None:
    """A -10 % regression at tonight's run (1 % start-to-start sd, 1 of 20 series): the old
    watch named tonight, then raised it again the next night as beginning at the next run
    (98-100 % of the time); now it is named on its night with last good = the night before,
    and not raised on the two nights after."""
    rng = random.Random(3)
    named = wrong = 0
    for _ in range(30):
        many = nights(rng, 20, 32, 0.01, drop_at=29)
        raised = [(night, *r) for night in range(3) for r in judge(many, 30 + night)]
        named += (0, "s0", "r028", "r029") in raised
        wrong += len(raised) > 1 or any(r[2:] != ("r028", "r029") for r in raised)
    assert named >= 27, named
    assert wrong <= 1, wrong


def test_noise_raises_nothing_across_1000_series() -> None:
    """1,000 noise series (50 configurations x 20 metrics), 2 % start-to-start sd and 20 % of
    repeats 10 % slow, two nights: Benjamini-Hochberg at 5 % across the series, and a run whose
    median moved only because 3 of its 5 repeats were slow is no new level (the old watch
    raised about 3 a night at 1 % start-to-start sd, none slow)."""
    rng = random.Random(4)
    raised = sum(len(judge(nights(rng, 1000, 30, 0.02, slow=0.2), 30)) for _ in range(2))
    assert raised <= 1, raised


def test_a_measured_start_spread_widens_the_newest_run_test() -> None:
    """Settled runs that happen to agree closely (0.2 % apart) and one run 4 % lower: alone,
    the runs' own spread makes it a regression; with the configuration's measured 2 %
    start-to-start sd (one start's offset alone reaches 4 % one night in 20) it is not."""
    rng = random.Random(5)
    runs = [[100.0 * (1 + 0.002 * rng.gauss(0, 1))] * 5 for _ in range(12)] + [[96.0] * 5]
    assert judge([runs], 13) == [("s0", "r011", "r012")]
    assert judge([runs], 13, start_sd=0.02) == []


def test_the_widened_test_keeps_its_rate_and_its_power() -> None:
    """With the spread measured (2 % and 1 %): 1,000 noise series raise nothing on 2 nights
    (Benjamini-Hochberg intact), and tonight's -10 % regression is still named tonight."""
    rng = random.Random(6)
    raised = sum(len(judge(nights(rng, 1000, 30, 0.02), 30, start_sd=0.02)) for _ in range(2))
    assert raised <= 1, raised
    named = 0
    for _ in range(30):
        many = nights(rng, 20, 30, 0.01, drop_at=29)
        named += ("s0", "r028", "r029") in judge(many, 30, start_sd=0.01)
    assert named >= 27, named
