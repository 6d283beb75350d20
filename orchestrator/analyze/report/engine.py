"""The report's engine table: what each cell's engine said on /metrics during its measured
repeats (KV-cache use, running and waiting requests, prefix-cache hit rate, speculative
acceptance, preemptions), medians over the repeats, and what an engine lacked, said per cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tabulate import tabulate

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.metrics import format_number
from orchestrator.results.show import absent_lines


class _Stat(Protocol):
    @property
    def median(self) -> float: ...


class _Row(Protocol):
    @property
    def cell(self) -> CellEvidence: ...
    @property
    def metrics(self) -> Mapping[str, _Stat]: ...


class ReportView(Protocol):
    """What the engine table reads of a report (tables.py's Report)."""

    @property
    def rows(self) -> Sequence[_Row]: ...
    @property
    def units(self) -> Mapping[str, Any]: ...


# the columns, in order; the rest of the engine_* metrics are in csv/json and --metric
ENGINE_COLUMNS = (
    "engine_kv_cache_usage_max",
    "engine_requests_running_mean",
    "engine_requests_waiting_max",
    "engine_prefix_cache_hit_rate",
    "engine_spec_acceptance_rate",
    "engine_spec_accept_length",
    "engine_preemptions",
)


def engine_section(report: ReportView, fmt: str) -> str:
    """The engine table under the report's own (empty when no cell scraped its engine)."""
    rows = [r for r in report.rows if isinstance(r.cell.metrics.get("engine_metrics"), dict)]
    if not rows:
        return ""
    columns = [c for c in ENGINE_COLUMNS if any(c in r.metrics for r in rows)]
    headers = ["cell"] + [
        f"{c.removeprefix('engine_')}\n{report.units.get(c) or ''}" for c in columns
    ]
    body = [
        [r.cell.id]
        + [format_number(r.metrics[c].median) if c in r.metrics else "-" for c in columns]
        for r in rows
    ]
    lines = [
        f"{r.cell.id}: {line}"
        for r in rows
        for line in absent_lines(r.cell.metrics["engine_metrics"])
    ]
    table = tabulate(
        body, headers=headers, tablefmt="github" if fmt == "md" else "simple", disable_numparse=True
    )
    bullet = "- " if fmt == "md" else ""
    text = "\n\nengine /metrics, median over the measured repeats:\n\n" + table + "\n"
    return text + "".join(f"\n{bullet}{line}" for line in lines) + ("\n" if lines else "")
