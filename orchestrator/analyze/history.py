"""A metric's history per configuration: its change points, and whether a new run starts one.

Each series (results/history/index.py) is judged on its runs' medians with E-Divisive means
(analyze/changepoints.py). A step is a regression when it goes the way the metric is worse
(its adapters' catalogues say which way is better). A new run can only be the first of a new
level once a later run confirms it, so `track` also tests the newest run by itself: its repeats
against the medians of the runs since the last change point, as `orch diff` judges (the
threshold AND Mann-Whitney or ranges). The command that settles a regression is named:
`orch investigate LAST_GOOD FIRST_BAD`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from orchestrator.adapters import BENCH_ADAPTERS
from orchestrator.adapters.base import Better
from orchestrator.analyze.changepoints import MIN_CHANGE, ChangePoint, change_points
from orchestrator.analyze.stats import compare
from orchestrator.results.history.db import Point, Series

MIN_SETTLED = 3  # runs since the last change point before a new run is tested alone


@cache
def better_of(metric: str) -> Better:
    """Which way `metric` is better, from the bench adapters' catalogues ("neither" unknown)."""
    for make in BENCH_ADAPTERS.values():
        for info in make().catalogue():
            if info.name == metric:
                return info.better
    return "neither"


@dataclass(frozen=True)
class Step:
    """A change point of one series, with its last good and first bad points."""

    series: Series
    point: ChangePoint
    last_good: Point
    first_bad: Point
    regression: bool
    newest_only: bool = False  # found by testing the newest run alone (not yet confirmed)

    def line(self, metric: str) -> str:
        """`demo nccl=tuned @h: output_throughput -33.0% at run R (commit abc -> def), p 0.005`."""
        a, b = self.last_good, self.first_bad
        commits = f"{(a.commit_sha or '?')[:12]} -> {(b.commit_sha or '?')[:12]}"
        kind = "REGRESSION" if self.regression else "change"
        p = f", p {self.point.p_value:.3g}" if self.point.p_value == self.point.p_value else ""
        note = " (the newest run alone: confirm with the next run)" if self.newest_only else ""
        return (
            f"{kind} {self.series.label}: {metric} {self.point.before:.4g} -> "
            f"{self.point.after:.4g} ({self.point.change:+.1%}) from run {b.run_id} "
            f"(commits {commits}){p}{note}"
        )

    def command(self, results_dir: Path, runs: dict[str, str]) -> str:
        """The `orch investigate` command that settles it, paths as the index holds them."""
        good = Path(runs.get(self.last_good.run_id, str(results_dir / self.last_good.run_id)))
        bad = Path(runs.get(self.first_bad.run_id, str(results_dir / self.first_bad.run_id)))
        return shlex.join(
            ["orch", "investigate", str(good / self.last_good.path),
             str(bad / self.first_bad.path)]
        )  # fmt: skip


@dataclass(frozen=True)
class History:
    """Series of one metric, each with its change points."""

    metric: str
    series: list[Series]
    steps: dict[str, list[Step]]  # series id -> its change points
    runs: dict[str, str]  # run id -> its bundle's path, as indexed
    notes: tuple[str, ...] = ()  # what the answer leaves out, and why


def _is_regression(metric: str, change: float) -> bool:
    better = better_of(metric)
    return (better == "higher" and change < 0) or (better == "lower" and change > 0)


def steps_of(series: Series, metric: str, *, min_change: float = MIN_CHANGE) -> list[Step]:
    """Every change point of one series."""
    values = [p.median for p in series.points]
    return [
        Step(series, cp, series.points[cp.index - 1], series.points[cp.index],
             _is_regression(metric, cp.change))
        for cp in change_points(values, min_change=min_change)
    ]  # fmt: skip


def newest_step(
    series: Series, metric: str, repeats: Sequence[float], *, min_change: float = MIN_CHANGE
) -> Step | None:
    """The newest point tested alone: its repeats against the medians of the runs since the
    last change point (at least MIN_SETTLED of them), with `orch diff`'s test."""
    points = series.points
    if len(points) < MIN_SETTLED + 1 or len(repeats) < 2:
        return None
    before = [p.median for p in points[:-1]]
    cuts = [cp.index for cp in change_points(before, min_change=min_change)]
    settled = before[cuts[-1] if cuts else 0 :]
    if len(settled) < MIN_SETTLED:
        return None
    judged = compare(settled, list(repeats), ratio_threshold=min_change)
    if not judged.significant or judged.ratio is None:
        return None
    point = ChangePoint(len(points) - 1, judged.median_a, judged.median_b,
                        judged.p_value if judged.p_value is not None else float("nan"))  # fmt: skip
    return Step(series, point, points[-2], points[-1], _is_regression(metric, point.change),
                newest_only=True)  # fmt: skip
