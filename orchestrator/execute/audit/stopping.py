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

The verdict stays the controller's (`verdicts.reproduction`, `orch diff`'s test on the parsed
repeats); the stop only saves repeats, and what it decided is shown beside the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.adapters import bench_adapter
from orchestrator.analyze.diff.model import deciding_metrics
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.cell import Against, Cell, RepeatRule, Watch
from orchestrator.errors import BundleError
from orchestrator.results.documents import read_json
from orchestrator.results.layout import BENCH_DIR, REPEATS_JSON
from orchestrator.runner.compare_rule import OUTLIER_MIN_VALUES
from orchestrator.runner.repeat_rule import watched_value


@dataclass(frozen=True)
class AuditStopPolicy:
    """What a rerun's stop may risk and spend."""

    error: float = 0.05  # each of the test's two SPRTs
    noise_z: float = 1.645  # the noise at its 95% upper bound
    min_repeats: int = OUTLIER_MIN_VALUES  # before the first look: the outlier screen's minimum
    # sd (log scale) of a server start's own offset: the record and the rerun are two starts
    start_noise: float = 0.0


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
    if source == "all" or cell.bench.repeats <= policy.min_repeats:
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
    rule = RepeatRule(
        min=policy.min_repeats,
        against=Against(
            reference=reference,
            tolerance=tolerance,
            error=policy.error,
            noise_z=policy.noise_z,
            start_noise=policy.start_noise,
        ),
        metrics=tuple(w.metric for w in watches),
        watch=tuple(watches),
        chosen="expect" if source == "expect" else "headline",
    )
    # The id stays the recorded one: `orch diff` pairs the rerun with its original by it.
    return cell.model_copy(update={"bench": cell.bench.model_copy(update={"settle": rule})})


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
