"""`orch audit --rerun` spends only the repeats its verdict needs.

A rerun cell keeps its recorded id and gains a repeats rule: after `min` repeats, the runner
stops as soon as Sobel and Wald's three-decision test (runner/compare_rule.py) calls every
deciding metric the same as recorded, higher, or lower by the tolerance, each wrong call at most
about `error`; else it runs the cell's own count. The test looks only from 5 repeats a side,
where the outlier screen works, and not while a fifth or more of a side is screened out: with
20 % slow repeats an earlier look made 7-10 % wrong calls (tests/analyze/test_audit_stopping.py
measures it). A record of fewer than 5 readable repeats gets no stop. The recorded repeats are
the fixed side: they cannot be measured again, so unlike bisect's rounds nothing is
interleaved, and a host that drifted since the run is what the audit is there to find. The
reference values are read from the recorded repeats' files with the runner's own reader, so
both sides are in the runner's units.

The record's server starts are the unit of replication: where it ran more than one
(`bench.starts`), its measured start-to-start sd (metrics.json's `starts`, the largest over the
deciding metrics) is the stop's `start_noise`, taken for the record's mean over its starts and
the rerun's over those it has run so far; the rerun keeps the cell's starts and its first look
waits for the last start's first repeat, so it runs every declared start. A record of one start
has no measured spread: the stop assumes none, and `start_noise_line` says so.

The verdict stays the controller's (`verdicts.reproduction`, `orch diff`'s test on the parsed
repeats); the stop only saves repeats, and what it decided is shown beside the verdict.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.adapters import bench_adapter
from orchestrator.analyze.diff.model import deciding_metrics
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.replication import recorded_spread, start_spread, values_and_starts
from orchestrator.cell import Against, Cell, RepeatRule, Watch
from orchestrator.errors import BundleError
from orchestrator.results.documents import read_json
from orchestrator.results.layout import BENCH_DIR, REPEATS_JSON
from orchestrator.runner.compare_rule import OUTLIER_MIN_VALUES, noise_upper_bound
from orchestrator.runner.repeat_rule import watched_value
from orchestrator.runner.starts import runs_over_starts


@dataclass(frozen=True)
class AuditStopPolicy:
    """What a rerun's stop may risk and spend."""

    error: float = 0.05  # each of the test's two SPRTs
    noise_z: float = 1.645  # the noise at its 95% upper bound
    min_repeats: int = OUTLIER_MIN_VALUES  # before the first look: the outlier screen's minimum
    # sd (log scale) of a server start's own offset: the record and the rerun are two starts;
    # None: the record's measured start-to-start sd where it ran several, else 0
    start_noise: float | None = None


@dataclass(frozen=True)
class StartNoise:
    """What the stop is told of the start-to-start spread, and where it comes from."""

    between_sd: float | None  # measured (log scale) over the record's starts; None: not
    record_starts: int
    rerun_starts: int
    given: float | None = None  # the policy's own value, which wins
    noise_z: float = 1.645  # the measured sd is taken this far up its confidence interval

    @property
    def sd(self) -> float:
        """One start's offset sd, as told to the stop (0 where neither measured nor given):
        the measured one at its upper confidence bound, as the stop takes the repeat noise
        (3 starts give it 2 degrees of freedom; the estimate alone made 7 % wrong calls)."""
        if self.given is not None:
            return self.given
        if self.between_sd is None:
            return 0.0
        return noise_upper_bound(self.between_sd, self.record_starts - 1, self.noise_z)

    def text(self) -> str:
        """One line: which start-to-start sd the stop uses, or that it is not measured."""
        if self.given is not None:
            return f"start-to-start sd {self.given:.2%} as given"
        if self.between_sd is None:
            return (
                "one recorded server start: start-to-start spread not measured, the stop "
                "assumes none (bench.starts: N measures it)"
            )
        return (
            f"start-to-start sd {self.between_sd:.2%} measured over the record's "
            f"{self.record_starts} server starts, taken as {self.sd:.2%} (its upper bound); "
            f"the rerun runs {self.rerun_starts} starts"
        )


def recorded_start_noise(recorded: CellEvidence, metrics: Sequence[str]) -> float | None:
    """The largest between-start sd (log scale) of `metrics` over the record's server starts
    (metrics.json's `starts`, else recomputed from the repeats); None with one start."""
    found: list[float] = []
    for metric in metrics:
        spread = recorded_spread(recorded.metrics, metric)
        if spread is None:
            values, ids = values_and_starts(recorded.metrics, metric)
            spread = start_spread(values, ids) if len(values) > 1 else None
        if spread is not None and spread.between_sd is not None:
            found.append(spread.between_sd)
    return max(found) if found else None


def start_offset_share(repeats: int, starts: int, first: int) -> float:
    """The largest variance share sum(n_i^2) / n^2 of one start's offset in the mean of the
    first n of `repeats` over `starts` starts (`runs_over_starts`), n from `first`: 1 / starts
    when they are even, up to 1 with one start."""
    layout = [start for kind, _, start in runs_over_starts(0, repeats, starts) if kind == "measure"]
    worst = 0.0
    for n in range(max(1, first), len(layout) + 1):
        counts = Counter(layout[:n]).values()
        worst = max(worst, sum(c * c for c in counts) / (n * n))
    return worst


def first_look(repeats: int, starts: int, least: int) -> int:
    """The first repeat the stop may look at: `least`, and not before the last start's first
    repeat, so a rerun of several starts runs every one of them."""
    layout = [start for kind, _, start in runs_over_starts(0, repeats, starts) if kind == "measure"]
    last = max(layout) if layout else 1
    return max(least, layout.index(last) + 1 if layout else 1)


def stop_start_noise(noise: StartNoise, repeats: int, first: int) -> float:
    """The `start_noise` for the three-decision test, which adds 2 x its square: the record's
    mean carries sd^2 / its starts, the rerun's sd^2 x its largest offset share from `first`."""
    record = 1.0 / max(1, noise.record_starts)
    rerun = start_offset_share(repeats, noise.rerun_starts, first)
    return noise.sd * math.sqrt((record + rerun) / 2.0)


def recorded_values(cell_dir: Path, watch: Watch) -> list[float]:
    """The deciding metric of each recorded measured repeat, read as the runner reads it."""
    bench = cell_dir / BENCH_DIR
    if not bench.is_dir():
        return []
    numbered = sorted((int(p.name), p) for p in bench.iterdir() if p.is_dir() and p.name.isdigit())
    values = [watched_value(str(p), watch.model_dump(mode="json")) for _, p in numbered]
    return [v for v in values if v is not None and v > 0]


def with_audit_stop(
    cell: Cell,
    recorded: CellEvidence,
    *,
    tolerance: float,
    policy: AuditStopPolicy | None = None,
) -> Cell:
    """The cell with the rule that stops its rerun once the comparison is decided; unchanged
    (every repeat runs) when the runner cannot read a deciding metric between repeats or the
    record holds fewer readable repeats of one than the outlier screen needs (5)."""
    policy = policy or AuditStopPolicy()
    deciding, source = deciding_metrics(recorded)
    first = first_look(cell.bench.repeats, cell.bench.starts, policy.min_repeats)
    if source == "all" or cell.bench.repeats <= first:
        return cell
    adapter = bench_adapter(cell.bench.adapter)
    watches: list[Watch] = []
    reference: dict[str, tuple[float, ...]] = {}
    for metric in deciding:
        watch = adapter.watch(cell.bench, metric)
        if watch is None:
            return cell
        values = recorded_values(recorded.path, watch)
        if len(values) < OUTLIER_MIN_VALUES:
            return cell
        watches.append(watch)
        reference[metric] = tuple(values)
    noise = start_noise(cell, recorded, deciding, policy)
    rule = RepeatRule(
        min=first,
        against=Against(
            reference=reference,
            tolerance=tolerance,
            error=policy.error,
            noise_z=policy.noise_z,
            start_noise=stop_start_noise(noise, cell.bench.repeats, first),
        ),
        metrics=tuple(w.metric for w in watches),
        watch=tuple(watches),
        chosen="expect" if source == "expect" else "headline",
    )
    # The id stays the recorded one: `orch diff` pairs the rerun with its original by it.
    return cell.model_copy(update={"bench": cell.bench.model_copy(update={"settle": rule})})


def start_noise(
    cell: Cell,
    recorded: CellEvidence,
    deciding: Sequence[str] | None = None,
    policy: AuditStopPolicy | None = None,
) -> StartNoise:
    """The start-to-start spread a rerun of `cell` against `recorded` is judged with: the
    policy's, else the record's measured one (several starts), else none, said."""
    policy = policy or AuditStopPolicy()
    names = list(deciding) if deciding is not None else deciding_metrics(recorded)[0]
    record_starts = len(set(values_and_starts(recorded.metrics, names[0])[1])) if names else 1
    return StartNoise(
        recorded_start_noise(recorded, names),
        max(1, record_starts),
        max(1, min(cell.bench.starts, cell.bench.repeats)),
        policy.start_noise,
        policy.noise_z,
    )


def start_noise_line(cell: Cell, recorded: CellEvidence) -> str:
    """What the plan says of a rerun's stop and the starts: one line per cell."""
    return f"  {cell.id}: {start_noise(cell, recorded).text()}"


def stop_line(cell_id: str, cell_dir: Path, tolerance: float) -> str | None:
    """What the rerun's stop decided, in one line; None when it had no rule."""
    try:
        doc = read_json(cell_dir / REPEATS_JSON)
    except BundleError:  # a damaged file only loses this line
        return None
    if not isinstance(doc, Mapping):
        return None
    metrics = doc.get("metrics") if isinstance(doc.get("metrics"), Mapping) else {}
    calls = [f"{name} {_said(j)}" for name, j in (metrics or {}).items() if isinstance(j, Mapping)]
    ran, most = doc.get("ran"), doc.get("max")
    why = "decided" if doc.get("stopped") == "decided" else "undecided at its max"
    return (
        f"  {cell_id}: rerun {why} after {ran} of {most} repeats"
        + (f": {', '.join(calls)}" if calls else "")
        + f" (sequential test, tolerance {tolerance:.0%})"
    )


def _said(judged: Mapping[str, Any]) -> str:
    verdict = judged.get("verdict")
    change = judged.get("change")
    shown = f" ({float(change):+.1%})" if isinstance(change, int | float) else ""
    if verdict == "same":
        return "same as recorded" + shown
    if verdict in ("higher", "lower"):
        return f"{verdict} than recorded" + shown
    return "undecided" + shown
