"""A metric's history per configuration: its change points, and whether a new run starts one.

Each series (results/history/index.py) is judged on its runs' medians with E-Divisive means
(analyze/changepoints.py), every series of one query one family: Benjamini-Hochberg holds the
false discovery rate across them, and the expected false change points are said. A step is a
regression when it goes the way the metric is worse (its adapters' catalogues say which way is
better).

`track` judges the newest runs: where, among the last TRAILING runs, a new level most likely
began, against the runs since the last change point before them (a t test on the runs' medians:
the run, one server start, is the unit, so start-to-start spread is in the test), the family
again the series of the run. Tonight's run is named when the new level begins at it; the next
night the same step begins at yesterday's run, which was named yesterday, so it is not raised
again (the night before is judged again, from the history, to know). A step that only a second
run makes significant is raised then, once, with its true first bad run. The command that
settles a regression is named: `orch investigate LAST_GOOD FIRST_BAD`.
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from orchestrator.adapters import BENCH_ADAPTERS, COST_CATALOGUE, ENGINE_CATALOGUE
from orchestrator.adapters.base import Better
from orchestrator.analyze.changepoints import (
    FDR,
    MIN_CHANGE,
    WINDOW,
    ChangePoint,
    benjamini_hochberg,
    change_points,
    change_points_of_many,
    logs_of,
    split_p,
)
from orchestrator.analyze.outputs import OUTPUT_METRICS
from orchestrator.analyze.student import t_two_sided
from orchestrator.results.history.capacity import CAPACITY
from orchestrator.results.history.db import Point, Series

MIN_SETTLED = 3  # runs since the last change point before a new level is tested against them
TRAILING = 5  # the newest runs a new level may begin at, each night


@cache
def better_of(metric: str) -> Better:
    """Which way `metric` is better, from the bench adapters' catalogues, the engine's /metrics
    and the output checks' metrics ("neither" unknown); an SLO search's capacity
    (results/history/capacity.py) is better higher."""
    if metric == CAPACITY:
        return "higher"
    if metric in OUTPUT_METRICS:
        return OUTPUT_METRICS[metric]
    for infos in [*(make().catalogue() for make in BENCH_ADAPTERS.values()), ENGINE_CATALOGUE]:
        for info in infos:
            if info.name == metric:
                return info.better
    derived = {i.name: i.better for i in COST_CATALOGUE}  # per GPU, per user, $ per token
    return derived.get(metric, "neither")


@dataclass(frozen=True)
class Step:
    """A change point of one series, with its last good and first bad points."""

    series: Series
    point: ChangePoint
    last_good: Point
    first_bad: Point
    regression: bool
    newest_only: bool = False  # found by testing the newest run alone (not yet confirmed)
    confirmed_late: bool = False  # began before the newest run; only the newest made it sure

    def line(self, metric: str) -> str:
        """`demo nccl=tuned @h: output_throughput -33.0% at run R (commit abc -> def), p 0.005`."""
        a, b = self.last_good, self.first_bad
        commits = f"{(a.commit_sha or '?')[:12]} -> {(b.commit_sha or '?')[:12]}"
        kind = "REGRESSION" if self.regression else "change"
        p = f", p {self.point.p_value:.3g}" if self.point.p_value == self.point.p_value else ""
        note = " (the newest run alone: confirm with the next run)" if self.newest_only else ""
        note += " (began before this run; this run confirms it)" if self.confirmed_late else ""
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
    tests: int = 0  # splits tested across the series: the family Benjamini-Hochberg corrects
    fdr: float = FDR
    notes: tuple[str, ...] = ()  # what the answer leaves out, and why

    def false_alarms(self) -> str:
        """What the correction promises, in a line: expected false change points."""
        kept = sum(len(s) for s in self.steps.values())
        return (
            f"false discovery rate {self.fdr:.0%} across {len(self.series)} series "
            f"({self.tests} splits tested): of the {kept} change point(s) shown, about "
            f"{self.fdr * kept:.2g} may be false; with no real change anywhere, a night raises "
            f"one with probability at most {self.fdr:.0%}"
        )


def _is_regression(metric: str, change: float) -> bool:
    better = better_of(metric)
    return (better == "higher" and change < 0) or (better == "lower" and change > 0)


def steps_of_many(
    many: Sequence[Series], metric: str, *, min_change: float = MIN_CHANGE, fdr: float = FDR
) -> tuple[dict[str, list[Step]], int]:
    """Every change point of each series, the false discovery rate held at `fdr` across them:
    (series id -> its steps, splits tested)."""
    family = change_points_of_many([[p.median for p in s.points] for s in many], fdr=fdr,
                                   min_change=min_change)  # fmt: skip
    steps = {
        s.series: [Step(s, cp, s.points[cp.index - 1], s.points[cp.index],
                        _is_regression(metric, cp.change)) for cp in found]
        for s, found in zip(many, family.found, strict=True)
    }  # fmt: skip
    return steps, family.tests


def steps_of(series: Series, metric: str, *, min_change: float = MIN_CHANGE) -> list[Step]:
    """Every change point of one series (its own family)."""
    return steps_of_many([series], metric, min_change=min_change)[0][series.series]


@dataclass(frozen=True)
class _Newest:
    """Where a new level most likely begins among the newest runs, and its test."""

    first_bad: int  # -1: the newest runs move less than min_change
    p_value: float  # Bonferroni over the starts tried
    before: float
    after: float


Span = tuple[float | None, float | None]  # a run's smallest and largest repeat


def _agrees(span: Span | None, before: float, after: float) -> bool:
    """Every repeat of a run lies past half the step (None: not known, taken as agreeing): a
    run whose median moved because some of its repeats were slow is not a new level alone."""
    low, high = span or (None, None)
    halfway = (before + after) / 2
    if after < before:
        return high is None or high <= halfway
    return low is None or low >= halfway


def widened_p(left: Sequence[float], right: Sequence[float], start_sd: float) -> float:
    """`split_p` of runs' logs with the run-to-run variance at least `start_sd`^2 (a measured
    between-start sd, log scale): a few settled runs that happen to agree cannot make the
    test narrower than the configuration's start-to-start spread."""
    nl, nr = len(left), len(right)
    if not start_sd or nl < 1 or nr < 1 or nl + nr < 3:
        return split_p(left, right)
    ml, mr = math.fsum(left) / nl, math.fsum(right) / nr
    ss = math.fsum((v - ml) ** 2 for v in left) + math.fsum((v - mr) ** 2 for v in right)
    df = nl + nr - 2
    var = max(ss / df, start_sd * start_sd)
    return t_two_sided((mr - ml) / math.sqrt(var * (1.0 / nl + 1.0 / nr)), df)


def _newest_level(values: Sequence[float], min_change: float, fdr: float,
                  span_of: Callable[[int], Span | None],
                  start_sd: float = 0.0) -> _Newest | None:  # fmt: skip
    """The newest runs against the runs since the last change point before them: for each
    start j among the last TRAILING runs (MIN_SETTLED settled runs before it at least), the
    t test of runs [j, n) against [settled, j); the likeliest start, its p times the starts
    tried. Every run since j, and every repeat of each where known (`span_of`), must lie past
    half the step: runs whose medians moved because some repeats were slow are no new level.
    `start_sd`: the series' measured between-start sd, a floor on the runs' spread (0: not
    measured). None when too few runs are settled to test anything."""
    n = len(values)
    if n < MIN_SETTLED + 1:
        return None
    cuts = [cp.index for cp in change_points(values[:-1], fdr=fdr, min_change=min_change)]
    base = max(cuts[-1] if cuts else 0, n - 1 - WINDOW)  # a step is local
    starts = range(max(base + MIN_SETTLED, n - TRAILING), n)
    if not starts:
        return None
    logs = logs_of(values)
    best = _Newest(-1, 1.0, 0.0, 0.0)
    for j in starts:
        before, after = statistics.median(values[base:j]), statistics.median(values[j:])
        if before and abs(after / before - 1.0) < min_change:
            continue
        halfway = (before + after) / 2  # every run since j is past it: one slow run is no level
        if any((v > halfway) == (after < before) for v in values[j:]):
            continue
        if not all(_agrees(span_of(k), before, after) for k in range(j, n)):
            continue
        p = min(1.0, len(starts) * widened_p(logs[base:j], logs[j:], start_sd))
        if best.first_bad < 0 or p < best.p_value:
            best = _Newest(j, p, before, after)
    return best


def _significant(found: Sequence[_Newest | None], fdr: float) -> list[bool]:
    """Benjamini-Hochberg over the series that could be tested (the others are not tests)."""
    tested = [i for i, f in enumerate(found) if f is not None]
    rejected = benjamini_hochberg([found[i].p_value for i in tested], fdr)  # type: ignore[union-attr]
    out = [False] * len(found)
    for i, r in zip(tested, rejected, strict=True):
        out[i] = r and found[i].first_bad >= 0  # type: ignore[union-attr]
    return out


def newest_steps(
    many: Sequence[Series],
    run_id: str,
    metric: str,
    *,
    min_change: float = MIN_CHANGE,
    fdr: float = FDR,
    spans: Mapping[tuple[str, str], Span] | None = None,
    start_sds: Mapping[str, float] | None = None,
) -> list[Step]:
    """The steps run `run_id` raises, as `orch apply --track` says them: of the series whose
    newest point it is, those where a new level begins among the newest runs (the false
    discovery rate held at `fdr` across the series), said once: a level that began at an
    earlier run which the night before already raised is not raised again. `spans`:
    (series id, run id) -> the run's smallest and largest repeat, where known; `start_sds`:
    series id -> its measured between-start sd (a run with `bench.starts` > 1), which widens
    the test where the runs alone look quieter."""
    judged = [s for s in many if s.points and s.points[-1].run_id == run_id]
    known = spans or {}
    sds = start_sds or {}

    def span_of(s: Series) -> Callable[[int], Span | None]:
        return lambda j: known.get((s.series, s.points[j].run_id))

    medians = [[p.median for p in s.points] for s in judged]
    now = [_newest_level(v, min_change, fdr, span_of(s), sds.get(s.series, 0.0))
           for s, v in zip(judged, medians, strict=True)]  # fmt: skip
    before = [_newest_level(v[:-1], min_change, fdr, span_of(s), sds.get(s.series, 0.0))
              for s, v in zip(judged, medians, strict=True)]  # fmt: skip
    out = []
    for s, found, raised, raised_before in zip(judged, now, _significant(now, fdr),
                                               _significant(before, fdr), strict=True):  # fmt: skip
        if not raised or found is None:
            continue
        newest = found.first_bad == len(s.points) - 1
        if not newest and raised_before:
            continue  # the night before raised this level already
        point = ChangePoint(found.first_bad, found.before, found.after, found.p_value)
        out.append(Step(s, point, s.points[found.first_bad - 1], s.points[found.first_bad],
                        _is_regression(metric, point.change), newest_only=newest,
                        confirmed_late=not newest))  # fmt: skip
    return out
