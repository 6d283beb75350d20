"""The nightly watch's verdicts measured: `orch apply --track` and `orch history` on seeded
synthetic histories, through orch's own functions (analyze/history.py, analyze/changepoints.py).

    .venv/bin/python bench/verdicts/nightly.py [--quick] [--seed 0]

A night is one run of every series; a run is one server start (start-to-start sd 0, 1 or 2 %,
drawn per run) of 5 repeats (1 % within-start noise, and in one condition 20 % of repeats 10 %
slow), judged by its median. Rows:

- track, false alarms per night per 1,000 noise series (50 configurations x 20 metrics: the
  family is the 1,000), stated: Benjamini-Hochberg at 5 %, so with nothing changed a night
  raises anything with probability at most 0.05;
- history, new false change points (and vanished ones) per night per 1,000 noise series (the
  whole history of each judged again with one more run, as `orch history` does each morning);
- track, a -10 % regression at tonight's run: named tonight with the right last-good/first-bad
  runs (power, nothing stated); and raised again on a later night (stated: never);
- history, a 10-run -10 % dip in the middle of 200 runs: both of its edges found (within a run).

"measured" rows give newest_steps each series' between-start sd (as a run with bench.starts > 1
records it): it floors the runs' spread in the newest-run test, which never narrows it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from orchestrator.results.history.db import Point, Series

Row = dict[str, object]
METRIC = "output_throughput"  # higher is better: a drop is a regression


Run = tuple[float, float, float]  # a run's median, smallest and largest repeat


def run_of(rng: random.Random, level: float, start_sd: float, slow: float = 0.0) -> Run:
    """One run: one server start (its offset drawn once), 5 repeats inside it: their median,
    smallest and largest."""
    offset = 1.0 + start_sd * rng.gauss(0.0, 1.0)
    repeats = []
    for _ in range(5):
        value = level * offset * (1.0 + 0.01 * rng.gauss(0.0, 1.0))
        repeats.append(value * 0.9 if rng.random() < slow else value)
    return statistics.median(repeats), min(repeats), max(repeats)


def as_series(name: str, runs: list[Run]) -> Series:
    """A history series of these runs, run i named r{i:05d} at commit c{i}."""
    points = [
        Point(f"r{i:05d}", "cell", float(i), f"c{i}", None, None, "ok", "cell", r[0], 5, "tok/s")
        for i, r in enumerate(runs)
    ]
    return Series(name, name, "bench", None, points)


def spans_of(many: list[list[Run]]) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(series, run) -> the run's smallest and largest repeat, as the history index holds."""
    return {(f"s{i}", f"r{k:05d}"): (r[1], r[2]) for i, v in enumerate(many)
            for k, r in enumerate(v)}  # fmt: skip


def histories(
    rng: random.Random,
    count: int,
    runs: int,
    start_sd: float,
    slow: float = 0.0,
    steps: Callable[[int], dict[int, float]] | None = None,
) -> list[list[Run]]:
    """`count` series of `runs` run medians around 100; `steps(i)` gives series i's steps."""
    out = []
    for i in range(count):
        factors, level, values = (steps(i) if steps else {}), 100.0, []
        for k in range(runs):
            level *= factors.get(k, 1.0)
            values.append(run_of(rng, level, start_sd, slow))
        out.append(values)
    return out


def track_false_alarms(seed: int, nights: int, count: int, runs: int, start_sd: float,
                       slow: float, measured: bool = False) -> float:  # fmt: skip
    """Mean regressions raised per night by newest_steps over `count` noise series
    (`measured`: each series' between-start sd known, as a run with bench.starts records)."""
    from orchestrator.analyze.history import newest_steps

    rng = random.Random(seed)
    raised = 0
    for _ in range(nights):
        grown = histories(rng, count, runs, start_sd, slow)
        many = [as_series(f"s{i}", v) for i, v in enumerate(grown)]
        last = many[0].points[-1].run_id
        sds = {s.series: start_sd for s in many} if measured else None
        found = newest_steps(many, last, METRIC, spans=spans_of(grown), start_sds=sds)
        raised += sum(s.regression for s in found)
    return raised / nights


def history_churn(seed: int, nights: int, count: int, runs: int, start_sd: float,
                  scale: float = 1.0) -> tuple[float, float]:  # fmt: skip
    """(change points that appear, and that vanish) per night over `count` noise series whose
    history grows by one run a night, times `scale`."""
    from orchestrator.analyze.changepoints import change_points_of_many

    rng = random.Random(seed)
    grown = [[r[0] for r in v] for v in histories(rng, count, runs + nights, start_sd)]
    before = change_points_of_many([v[:runs] for v in grown]).found
    new = gone = 0
    for night in range(1, nights + 1):
        now = change_points_of_many([v[: runs + night] for v in grown]).found
        for a, b in zip(now, before, strict=True):
            new += len({c.index for c in a} - {c.index for c in b})
            gone += len({c.index for c in b} - {c.index for c in a})
        before = now
    return scale * new / nights, scale * gone / nights


def tonight(seed: int, trials: int, runs: int, start_sd: float, drop: float = 0.9,
            family: int = 50, measured: bool = False) -> tuple[float, float]:  # fmt: skip
    """(named tonight with the right range; raised more than once over tonight and the two
    next nights, or with a wrong range): a regression at tonight's run of one series among
    `family` noise series."""
    from orchestrator.analyze.history import newest_steps

    rng = random.Random(seed)
    named = again = 0
    for _ in range(trials):
        grown = histories(rng, family, runs + 2, start_sd,
                          steps=lambda i: {runs - 1: drop} if i == 0 else {})  # fmt: skip
        raised, spans = [], spans_of(grown)
        for night in range(3):
            many = [as_series(f"s{i}", v[: runs + night]) for i, v in enumerate(grown)]
            sds = {s.series: start_sd for s in many} if measured else None
            raised += [(night, s.last_good.run_id, s.first_bad.run_id)
                       for s in newest_steps(many, many[0].points[-1].run_id, METRIC,
                                             spans=spans, start_sds=sds)
                       if s.series.series == "s0" and s.regression]  # fmt: skip
        named += (0, f"r{runs - 2:05d}", f"r{runs - 1:05d}") in raised
        right = {(f"r{runs - 2:05d}", f"r{runs - 1:05d}")}
        again += len(raised) > 1 or any((a, b) not in right for _, a, b in raised)
    return named / trials, again / trials


def _every(steps: dict[int, float], series: int) -> dict[int, float]:
    """The same steps for every series."""
    return steps


def dips_found(seed: int, trials: int, start_sd: float) -> float:
    """A 10-run -10 % dip at a random place in the middle of 200 runs: both edges found."""
    from orchestrator.analyze.changepoints import change_points

    rng = random.Random(seed)
    found = 0
    for _ in range(trials):
        at = rng.randrange(60, 130)
        dip = {at: 0.9, at + 10: 1 / 0.9}
        (values,) = histories(rng, 1, 200, start_sd, steps=partial(_every, dip))
        cuts = [c.index for c in change_points([r[0] for r in values])]
        found += any(abs(c - at) <= 1 for c in cuts) and any(abs(c - at - 10) <= 1 for c in cuts)
    return found / trials


def rows(seed: int = 0, quick: bool = False) -> list[Row]:
    """The nightly watch's measured rates, one row per verdict and condition."""
    out: list[Row] = []
    nights, count = (2, 1000) if quick else (5, 1000)

    def timed(verdict: str, condition: str, trials: int, stated: float | None,
              measure: Callable[[], float]) -> float:  # fmt: skip
        began = time.perf_counter()
        measured = measure()
        out.append({"verdict": verdict, "condition": condition, "trials": trials,
                    "stated_rate": stated, "measured_rate": measured,
                    "seconds": round(time.perf_counter() - began, 1)})  # fmt: skip
        return measured

    for sd, slow in ((0.0, 0.0), (0.01, 0.0), (0.02, 0.0), (0.02, 0.2)):
        timed("track: false alarms per night per 1,000 noise series",
              f"30-run histories, start sd {sd:.0%}, {slow:.0%} slow repeats", nights * count,
              0.05, partial(track_false_alarms, seed, nights, count, 30, sd, slow))  # fmt: skip
    for sd, slow in ((0.01, 0.0), (0.02, 0.0), (0.02, 0.2)):
        timed("track: false alarms per night per 1,000 noise series",
              f"30-run histories, start sd {sd:.0%} measured (bench.starts), {slow:.0%} slow "
              "repeats", nights * count, 0.05,
              partial(track_false_alarms, seed, nights, count, 30, sd, slow, True))  # fmt: skip
    for runs, n_series, sd in ((30, count, 0.02), (30, count, 0.03), (1000, 50, 0.03)):
        began = time.perf_counter()
        new, gone = history_churn(seed, nights if runs < 1000 else 2, n_series, runs, sd,
                                  1000 / n_series)  # fmt: skip
        seconds = round(time.perf_counter() - began, 1)
        condition = f"{runs}-run histories, start sd {sd:.0%} ({n_series} series, per 1,000)"
        for verdict, rate, stated in (("new false change points", new, 0.05),
                                      ("change points that vanish", gone, None)):  # fmt: skip
            row: Row = {"verdict": f"history: {verdict} per night per 1,000 noise series",
                        "condition": condition, "trials": (nights if runs < 1000 else 2) * n_series,
                        "stated_rate": stated, "measured_rate": rate}  # fmt: skip
            out.append({**row, "seconds": seconds})
    trials = 20 if quick else 100
    for sd in (0.0, 0.01, 0.02):
        began = time.perf_counter()
        named, again = tonight(seed, trials, 30, sd)
        seconds = round(time.perf_counter() - began, 1)
        out.append({"verdict": "track: a -10% regression at tonight's run named tonight, "
                    "right range", "condition": f"30-run history, start sd {sd:.0%}, 1 of 50 "
                    "series", "trials": trials, "stated_rate": None, "measured_rate": named,
                    "seconds": seconds})  # fmt: skip
        out.append({"verdict": "track: the same regression raised twice or with a wrong range",
                    "condition": f"30-run history, start sd {sd:.0%}, tonight and 2 nights after",
                    "trials": trials, "stated_rate": 0.0, "measured_rate": again,
                    "seconds": 0.0})  # fmt: skip
        timed(
            "history: a 10-run -10% dip in 200 runs found (both edges)",
            f"start sd {sd:.0%}",
            trials,
            None,
            partial(dips_found, seed, trials, sd),
        )
    for sd in (0.01, 0.02):
        began = time.perf_counter()
        named, again = tonight(seed, trials, 30, sd, measured=True)
        out.append({"verdict": "track: a -10% regression at tonight's run named tonight, "
                    "right range", "condition": f"30-run history, start sd {sd:.0%} measured "
                    "(bench.starts), 1 of 50 series", "trials": trials, "stated_rate": None,
                    "measured_rate": named,
                    "seconds": round(time.perf_counter() - began, 1)})  # fmt: skip
    return out


def main() -> None:
    """Print the rows as a table."""
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(tabulate(rows(args.seed, args.quick), headers="keys"))


if __name__ == "__main__":
    main()
