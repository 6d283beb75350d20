"""False-positive rates with the server start as the unit of replication (issue 36 item 2).

    .venv/bin/python bench/verdicts/starts.py [--seed 0] [--quick]

Two identical cells (no true change) measured on the simulator's two levels of noise: a speed
factor per server start (sd 0, 1, 2 %) and noise per repeat (sd 0.5 %, or 1.5 % as the
simulator's default), optionally with 20 % of repeats slow by 10 %. Each cell is 3 server starts
of 4 repeats (and, as every cell is today, 1 start of 10 repeats). Two verdicts on "changed":
- repeats as independent: `analyze.stats.compare(a, b, ratio_threshold=0)` over all repeats
  (Mann-Whitney U, as `orch diff` decides a metric), stated rate 5 %;
- start level: `analyze.replication.compare_starts` (Welch's t on the start means), stated 5 %;
  with one start each it makes no call (rate 0: it says the spread was not measured).
`rows()` is what bench/verdict_accuracy.py collects.
"""

from __future__ import annotations

import argparse
import math
import random
import time

from tabulate import tabulate

from orchestrator.analyze import stats
from orchestrator.analyze.replication import compare_starts

STATED = 0.05
SLOW_SHARE, SLOW_FACTOR = 0.2, 1.10


def _side(
    rng: random.Random,
    starts: int,
    repeats: int,
    start_sd: float,
    within_sd: float,
    slow: bool,
) -> tuple[list[float], list[int]]:
    """One cell's throughputs: a factor per start, noise per repeat, optionally slow repeats."""
    values: list[float] = []
    ids: list[int] = []
    for start in range(starts):
        factor = math.exp(rng.gauss(0.0, start_sd))
        for _ in range(repeats):
            value = 1000.0 / factor * math.exp(rng.gauss(0.0, within_sd))
            if slow and rng.random() < SLOW_SHARE:
                value /= SLOW_FACTOR
            values.append(value)
            ids.append(start)
    return values, ids


def _measure(
    seed: int, trials: int, starts: int, repeats: int, start_sd: float, within_sd: float, slow: bool
) -> tuple[float, float, float, float]:
    """(naive rate, its seconds, start-level rate, its seconds) over `trials` null pairs."""
    rng = random.Random(seed)
    pairs = [
        (
            _side(rng, starts, repeats, start_sd, within_sd, slow),
            _side(rng, starts, repeats, start_sd, within_sd, slow),
        )
        for _ in range(trials)
    ]
    began = time.perf_counter()
    naive = sum(stats.compare(a[0], b[0], ratio_threshold=0.0).significant for a, b in pairs)
    naive_s = time.perf_counter() - began
    began = time.perf_counter()
    level = sum(compare_starts(a[0], a[1], b[0], b[1]).significant for a, b in pairs)
    level_s = time.perf_counter() - began
    return naive / trials, naive_s, level / trials, level_s


def rows(seed: int = 0, quick: bool = False) -> list[dict[str, object]]:
    """One row per verdict and condition: measured false-positive rate against the stated."""
    trials = 400 if quick else 4000
    out: list[dict[str, object]] = []
    designs = [(3, 4), (1, 10)]
    for starts, repeats in designs:
        for start_sd in (0.0, 0.01, 0.02):
            for within_sd, slow in ((0.005, False), (0.015, False), (0.005, True)):
                if starts == 1 and (within_sd, slow) != (0.005, False):
                    continue  # one start a cell: one noise level is enough to show it
                naive, naive_s, level, level_s = _measure(
                    seed, trials, starts, repeats, start_sd, within_sd, slow
                )
                condition = (
                    f"{starts} start(s) x {repeats} repeats a cell, start sd {start_sd:.0%}, "
                    f"within sd {within_sd:.1%}" + (", 20% slow repeats (+10%)" if slow else "")
                )
                common = {"condition": condition, "trials": trials, "stated_rate": STATED}
                out.append(
                    {
                        "verdict": "diff: repeats as independent (Mann-Whitney)",
                        **common,
                        "measured_rate": naive,
                        "seconds": round(naive_s, 3),
                    }
                )
                out.append(
                    {
                        "verdict": "start level (Welch's t on start means)",
                        **common,
                        "stated_rate": STATED if starts > 1 else 0.0,
                        "measured_rate": level,
                        "seconds": round(level_s, 3),
                    }
                )
    return out


def main() -> None:
    """Print the rows as a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(tabulate(rows(args.seed, args.quick), headers="keys"))


if __name__ == "__main__":
    main()
