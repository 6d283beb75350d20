"""`orch bisect`'s verdict, measured: how often a named first bad commit is wrong, against the
error the answer states (1 - its confidence), on seeded simulations that call orch's own search.

    .venv/bin/python bench/verdicts/bisect.py [--quick] [--seed N]

Each trial: 32 commits, the change at a seeded random commit, measured by
`orchestrator.execute.bisect.search.bisect` with its default policy. Every measurement is one
server start (the unit of replication): a seeded start offset (sd 0, 1 or 2 %), a repeat noise
of 1 %, and per condition a 10 % slow start one run in ten (hiccups), the machine 0.4 % slower
every run (drift), or one repeat in five 20 % slow (outliers). A row's measured_rate is the
share of answers given as confirmed that name the wrong commit; its stated_rate the mean error
those answers state (1 - confidence). Answers the search gives as NOT confirmed state no
confidence: their share is in the condition's text. The per-commit row is the search's own
calls (before any confirmation) against the policy's stated error per call.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this folder leads sys.path and this file would stand in for the stdlib's
# bisect (which random and statistics import): drop it first.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import argparse
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.execute.bisect.search import (  # noqa: E402
    BisectError,
    BisectPolicy,
    BisectResult,
    Ends,
    bisect,
    run_until_decided,
)

COMMITS = 32
NOISE = 0.01  # one repeat's relative noise inside a start


@dataclass(frozen=True)
class World:
    """One simulated machine and change."""

    change: float  # the regression, relative (0.05: 5 % slower from the bad commit on)
    start_sd: float = 0.0
    drift: float = 0.0  # relative change per cell run, cumulative
    hiccups: float = 0.0  # chance a start is 10 % slow
    outliers: float = 0.0  # chance a repeat is 20 % slow


def _trial(world: World, seed: str) -> tuple[BisectResult | None, int, list[str]]:
    """One bisect: (result or None when refused, the true first bad index, the commits)."""
    rng = random.Random(seed)
    commits = [f"c{i:03d}" for i in range(COMMITS)]
    index = {c: i for i, c in enumerate(commits)}
    bad_from = rng.randrange(1, COMMITS)
    runs = [0]

    def measure(commit: str, repeats: int, ends: Ends | None) -> list[float]:
        base = 100.0 * (1 - world.change if index[commit] >= bad_from else 1.0)
        mean = base * (1 + world.drift * runs[0])
        runs[0] += 1
        offset = rng.gauss(0.0, world.start_sd) - (0.10 if rng.random() < world.hiccups else 0)

        def draw() -> float:
            value = mean * (1 + offset + rng.gauss(0.0, NOISE))
            return value * 0.8 if rng.random() < world.outliers else value

        return run_until_decided(draw, repeats, ends)

    try:
        return bisect(commits, measure), bad_from, commits
    except BisectError:
        return None, bad_from, commits


def _answers(label: str, world: World, trials: int, seed: int) -> list[dict[str, object]]:
    """The answer row and the per-commit call row for one world."""
    started = time.monotonic()
    stated: list[float] = []
    confirmed_wrong = confirmed = unconfirmed = refused = 0
    calls = wrong_calls = 0
    for trial in range(trials):
        result, bad_from, commits = _trial(world, f"{seed}-{label}-{trial}")
        if result is None:
            refused += 1
            continue
        for p in result.points:
            if p.index in (0, COMMITS - 1) or p.probe or p.verdict not in ("good", "bad"):
                continue
            calls += not p.uncertain
            # a commit measured again and moved to the other side was a wrong call at first
            wrong = (p.verdict == "bad") != (p.index >= bad_from)
            wrong_calls += not p.uncertain and (wrong or p.rejudged)
        if result.confirmed and result.confidence is not None:
            confirmed += 1
            stated.append(1.0 - result.confidence)
            confirmed_wrong += result.first_bad != commits[bad_from]
        else:
            unconfirmed += 1
    seconds = time.monotonic() - started
    answered = max(trials - refused, 1)
    condition = (
        f"{label}; {COMMITS} commits; confirmed {100 * confirmed / answered:.0f}%, "
        f"not confirmed {100 * unconfirmed / answered:.0f}%, refused {refused}"
    )
    policy = BisectPolicy()
    return [
        {
            "verdict": "bisect: confirmed first bad commit",
            "condition": condition,
            "trials": confirmed,
            "stated_rate": statistics.fmean(stated) if stated else 0.0,
            "measured_rate": confirmed_wrong / confirmed if confirmed else 0.0,
            "seconds": seconds,
        },
        {
            "verdict": "bisect: one commit's call in the search",
            "condition": f"{label}; calls later caught by the confirmation count as wrong",
            "trials": calls,
            "stated_rate": policy.error,
            "measured_rate": wrong_calls / calls if calls else 0.0,
            "seconds": 0.0,
        },
    ]


WORLDS: Sequence[tuple[str, World]] = (
    ("5% change, start sd 0%", World(0.05, start_sd=0.0)),
    ("5% change, start sd 1%", World(0.05, start_sd=0.01)),
    ("5% change, start sd 2%", World(0.05, start_sd=0.02)),
    ("10% change, start sd 2%", World(0.10, start_sd=0.02)),
    ("10% change, one start in 10 10% slow (hiccup)", World(0.10, hiccups=0.10)),
    ("5% change, drift -0.4% per run", World(0.05, drift=-0.004)),
    ("10% change, 20% slow outliers (1 repeat in 5)", World(0.10, outliers=0.20)),
)


def rows(seed: int = 0, quick: bool = False) -> list[dict[str, object]]:
    """Every condition's rows (verdict, condition, trials, stated_rate, measured_rate,
    seconds); `quick`: 60 trials a condition instead of 400."""
    trials = 60 if quick else 400
    out: list[dict[str, object]] = []
    for label, world in WORLDS:
        out += _answers(label, world, trials, seed)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rows as a table."""
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    table = [
        [r["verdict"], r["condition"], r["trials"], f"{100 * float(r['stated_rate']):.2f}%",  # type: ignore[arg-type]
         f"{100 * float(r['measured_rate']):.2f}%", f"{float(r['seconds']):.1f}"]  # type: ignore[arg-type]
        for r in rows(args.seed, args.quick)
    ]  # fmt: skip
    print(tabulate(table, headers=["verdict", "condition", "n", "stated", "measured", "s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
