"""`orch report`: cells × metrics, median and spread over repeats, optionally pivoted by an axis.

`table` and `md` are for people: one row per cell (or, with `by=AXIS`, that axis's values as
columns), each metric with its unit, and with a baseline a Δ% against it. `csv` and `json` are
tidy for pandas: one row per cell × repeat × metric. HTML is in `report_html.py`, plots in
`plot.py`, the throughput–latency view of sweeps in `pareto.py`.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tabulate import tabulate

from orchestrator.adapters import COST_METRIC
from orchestrator.analyze import stats
from orchestrator.analyze.baseline import baseline_cells
from orchestrator.analyze.cost import cost_notes
from orchestrator.analyze.evidence import CellEvidence, load_cells, load_run
from orchestrator.analyze.metrics import HEADLINE_METRICS, as_float, cell_metric_unit, format_number
from orchestrator.analyze.replication import starts_footer
from orchestrator.analyze.report.engine import engine_section
from orchestrator.analyze.report.slo import capacity_rows, render_searches
from orchestrator.cell import canonical_json
from orchestrator.errors import InputError
from orchestrator.plan.select import axis_text as axis_text
from orchestrator.results.layout import CELLS_DIR

ReportFormat = Literal["table", "md", "csv", "json"]
FORMATS: tuple[str, ...] = ("table", "md", "csv", "json")
BASELINE_MARK = "base"  # the Δ% of a baseline cell against itself
TIDY_FIXED = ("run_id", "cell_id", "host")
_RESERVED = {*TIDY_FIXED, "repeat", "metric", "value", "unit", "baseline_cell"}
OK_MARK, FAIL_MARK = "✓", "✗"
UNSETTLED_MARK = "≈"  # repeats: {until} reached max with the median still loose
ENERGY_METRICS = ("joules_per_output_token", "energy_j")  # the report's energy column, first found


@dataclass(frozen=True)
class MetricStats:
    """One metric of one cell over its repeats; `spread` is the MAD (median absolute deviation)."""

    median: float
    spread: float
    min: float
    max: float
    n: int


@dataclass(frozen=True)
class ExpectationMark:
    """Whether a metric met its expectations in this cell, with the bounds as recorded."""

    ok: bool
    bounds: tuple[str, ...]
    value: Any
    details: tuple[str, ...] = ()  # the checker's own words, e.g. "60 < min 85"


@dataclass
class ReportRow:
    """One cell: its evidence, metric statistics and expectation marks."""

    cell: CellEvidence
    metrics: dict[str, MetricStats] = field(default_factory=dict)
    expectations: dict[str, ExpectationMark] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """True when the cell did not pass (its reason is shown)."""
        return self.cell.status not in (None, "passed")


@dataclass
class Report:
    """What `render_report` and `plot_report` draw from."""

    rows: list[ReportRow]
    axes: list[str]
    metrics: list[str]
    by: str | None = None
    units: dict[str, str | None] = field(default_factory=dict)  # from the adapters' catalogues
    run_id: str | None = None
    started: str | None = None  # run.json's start time, for titles
    baseline: str | None = None  # the selector the Δ% columns compare against
    baselines: dict[str, ReportRow | None] = field(default_factory=dict)  # cell id -> its base
    # run.json's cells with no directory to read (never run, interrupted): id -> its entry
    unread: dict[str, dict[str, Any]] = field(default_factory=dict)

    def unit(self, metric: str) -> str | None:
        """The metric's unit, None where no catalogue says (a regex or generic metric)."""
        return self.units.get(metric)

    def label(self, metric: str) -> str:
        """`output_throughput (tok/s)`, or the bare name without a known unit."""
        unit = self.unit(metric)
        return f"{metric} ({unit})" if unit else metric

    def delta(self, row: ReportRow, metric: str) -> str:
        """The Δ% of the row's median against its baseline's; `base` for the baseline itself,
        empty when there is no baseline or either side has no value."""
        base = self.baselines.get(row.cell.id)
        if base is None:
            return ""
        if base is row:
            return BASELINE_MARK if metric in row.metrics else ""
        ours, theirs = row.metrics.get(metric), base.metrics.get(metric)
        if ours is None or theirs is None or theirs.median == 0:
            return ""
        return f"{(ours.median - theirs.median) / abs(theirs.median) * 100:+.1f}%"


def varying_axes(report: Report, but: str) -> list[str]:
    """The axes other than `but` with two or more values: what tells series apart."""
    return [
        a
        for a in report.axes
        if a != but and len({axis_text(r.cell.axes.get(a)) for r in report.rows}) > 1
    ]


def series_label(row: ReportRow, others: Sequence[str], hosts: int) -> str:
    """A plotted series' name: `nccl=tuned, spec=off` (`others`, the axes that vary), with
    `@ host` when the report has several hosts (or no other axis)."""
    name = ", ".join(f"{a}={axis_text(row.cell.axes.get(a))}" for a in others)
    if hosts > 1 or not name:
        return f"{name} @ {row.cell.host}" if name else str(row.cell.host)
    return name


def _expectation_marks(cell: CellEvidence) -> dict[str, ExpectationMark]:
    marks: dict[str, ExpectationMark] = {}
    for entry in cell.expectations:
        metric = str(entry.get("metric"))
        ok = bool(entry.get("ok"))
        bound = axis_text(entry.get("bound"))
        detail = (axis_text(entry.get("detail")),) if entry.get("detail") else ()
        previous = marks.get(metric)
        if previous is None:
            marks[metric] = ExpectationMark(ok, (bound,), entry.get("value"), detail)
        else:  # several bounds on one metric: all must hold
            marks[metric] = ExpectationMark(
                previous.ok and ok,
                (*previous.bounds, bound),
                previous.value,
                previous.details + detail,
            )
    return marks


def chosen_metrics(rep: Report, asked: Sequence[str]) -> list[str]:
    """What a table shows: the asked metrics, else expected ones plus the headline ones.

    A terminal cannot hold every metric of a bench client side by side; CSV/JSON keep all.
    """
    available = rep.metrics
    if "all" in asked:
        return available
    if asked:
        unknown = [m for m in asked if m not in available]
        if unknown:
            raise InputError(
                f"no metric {unknown[0]!r} in this run", hint=f"metrics: {', '.join(available)}"
            )
        return list(asked)
    expected = [
        str(e.get("metric"))
        for row in rep.rows
        for e in row.cell.expectations
        if e.get("metric") in available
    ]
    chosen = [*dict.fromkeys([*expected, *(m for m in HEADLINE_METRICS if m in available)])]
    # energy (with telemetry: per output token where the bench reported tokens), then $/M tokens
    extra = [next((m for m in ENERGY_METRICS if m in available), None), COST_METRIC]
    chosen += [m for m in extra if m is not None and chosen and m in available and m not in chosen]
    return chosen or available[:4]


def build_report(
    cells: Sequence[CellEvidence],
    *,
    by: str | None = None,
    baseline: str | None = None,
    started: str | None = None,
) -> Report:
    """Collect per-cell metric statistics and units; `by` must be one of the cells' axes.

    `baseline` is a cell selector (`commit=good`): each cell is compared with the cell that has
    the selector's values and the same value of every other axis (`baseline.py`).
    """
    axes: list[str] = []
    metrics: list[str] = []
    units: dict[str, str | None] = {}
    rows: list[ReportRow] = []
    for cell in cells:
        axes += [a for a in cell.axes if a not in axes]
        row = ReportRow(cell, expectations=_expectation_marks(cell))
        for name in cell.metric_names:
            values = cell.values(name)
            if not values:
                continue
            if name not in metrics:
                metrics.append(name)
            if units.get(name) is None:
                units[name] = cell_metric_unit(cell.cell, cell.metrics, name)
            row.metrics[name] = MetricStats(
                median=stats.median(values),
                spread=stats.mad(values),
                min=min(values),
                max=max(values),
                n=len(values),
            )
        rows.append(row)
    if by is not None and by not in axes:
        close = difflib.get_close_matches(by, axes, n=1)
        raise InputError(
            f"no axis {by!r} in these cells (axes: {', '.join(axes) or 'none'})",
            key_path="--by",
            hint=f"did you mean {close[0]!r}?" if close else None,
        )
    rep = Report(rows=rows, axes=axes, metrics=metrics, by=by, units=units, started=started)
    rep.run_id = next((c.run_id for c in cells if c.run_id), None)
    if baseline:
        by_id = {row.cell.id: row for row in rows}
        bases = baseline_cells(cells, baseline)
        rep.baseline = baseline
        rep.baselines = {cid: by_id[b] if b else None for cid, b in bases.items()}
    return rep


def load_report(path: Path, *, by: str | None = None, baseline: str | None = None) -> Report:
    """`build_report` over a run directory's cells (with its run id and start time for titles),
    or over one cell directory."""
    path = Path(path)
    if (path / CELLS_DIR).is_dir():
        run = load_run(path)
        started = run.run.get("started")
        rep = build_report(
            run.cells, by=by, baseline=baseline, started=str(started) if started else None
        )
        listed = run.run.get("cells")
        read = {c.id for c in run.cells}
        if isinstance(listed, dict):
            rep.unread = {
                str(cid): entry if isinstance(entry, dict) else {}
                for cid, entry in listed.items()
                if cid not in read
            }
        return rep
    return build_report(load_cells(path), by=by, baseline=baseline)


# --- human formats ------------------------------------------------------------------------------


def _spread_text(median_text: str, spread: float) -> str:
    """The spread to the precision the median is shown with: `1.91 ± 0.01`, not `± 0.009525`."""
    if "e" in median_text or "n" in median_text:  # exponent form, nan or inf: 2 significant
        return f"{spread:.2g}"
    _, _, decimals = median_text.partition(".")
    return f"{spread:.{len(decimals)}f}"


def median_and_spread(stat: MetricStats) -> str:
    """`median ± spread`, both with the digits the median is shown with."""
    median = format_number(stat.median)
    return f"{median} ± {_spread_text(median, stat.spread)}"


def _value_text(value: Any) -> str:
    """A recorded value as the table shows numbers; anything else as it is."""
    number = as_float(value) if not isinstance(value, str) else None
    return format_number(number) if number is not None else str(value)


def _metric_text(row: ReportRow, metric: str) -> str:
    stat = row.metrics.get(metric)
    mark = row.expectations.get(metric)
    text = "-" if stat is None else median_and_spread(stat)
    if stat is None and row.failed:
        text = "failed"
    if mark is not None:
        text += f" {OK_MARK if mark.ok else FAIL_MARK}"
    if stat is not None and metric in unsettled(row.cell):
        text += f" {UNSETTLED_MARK}"
    return text


def unsettled(cell: CellEvidence) -> dict[str, dict[str, Any]]:
    """The deciding metrics of a cell whose `repeats: {until}` reached max still loose."""
    settle = cell.metrics.get("settle")
    if not isinstance(settle, dict) or settle.get("settled"):
        return {}
    metrics = settle.get("metrics")
    return {
        str(m): j
        for m, j in (metrics.items() if isinstance(metrics, dict) else ())
        if isinstance(j, dict) and not j.get("settled")
    }


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _header(report: Report, metric: str, two_lines: bool, suffix: str = "") -> str:
    """A metric column's header: the unit on a second line in a terminal table (narrower), in
    brackets in markdown (whose header is one line)."""
    unit = report.unit(metric)
    if not unit:
        return f"{metric}{suffix}"
    return f"{metric}{suffix}\n{unit}" if two_lines else f"{metric} ({unit}){suffix}"


def _flat_table(report: Report, two_lines: bool) -> tuple[list[str], list[list[str]]]:
    any_failed = any(r.failed for r in report.rows)
    headers = [*report.axes, "host", "status"]
    for metric in report.metrics:
        headers.append(_header(report, metric, two_lines))
        if report.baseline:
            headers.append("Δ%")
    if any_failed:
        headers.append("reason")
    body = []
    for row in report.rows:
        line = [axis_text(row.cell.axes.get(a)) for a in report.axes]
        line += [row.cell.host or "", row.cell.status or "?"]
        for metric in report.metrics:
            line.append(_metric_text(row, metric))
            if report.baseline:
                line.append(report.delta(row, metric) or "-")
        if any_failed:
            line.append(_first_line(row.cell.reason) if row.failed else "")
        body.append(line)
    return headers, body


def _pivot_table(report: Report, two_lines: bool) -> tuple[list[str], list[list[str]]]:
    by = report.by
    assert by is not None
    others = [a for a in report.axes if a != by]
    by_values: list[str] = []
    slots: dict[tuple[str, ...], dict[str, list[ReportRow]]] = {}
    for row in report.rows:
        value = axis_text(row.cell.axes.get(by))
        if value not in by_values:
            by_values.append(value)
        key = (*(axis_text(row.cell.axes.get(a)) for a in others), row.cell.host or "")
        slots.setdefault(key, {}).setdefault(value, []).append(row)
    headers = [*others, "host"]
    headers += [
        _header(report, m, two_lines, f" [{by}={v}]") for m in report.metrics for v in by_values
    ]
    body = []
    for key, by_value in slots.items():
        line = list(key)
        for metric in report.metrics:
            for value in by_values:
                texts = []
                for r in by_value.get(value, []):
                    delta = report.delta(r, metric) if report.baseline else ""
                    texts.append(_metric_text(r, metric) + (f" ({delta})" if delta else ""))
                line.append(" / ".join(texts))
        body.append(line)
    return headers, body


def table_cells(report: Report, *, two_lines: bool) -> tuple[list[str], list[list[str]]]:
    """The human table as headers and rows of text (pivoted with `report.by`); `two_lines`
    puts each unit on a header's second line, else in brackets after the name."""
    return _pivot_table(report, two_lines) if report.by else _flat_table(report, two_lines)


def footer_lines(report: Report) -> list[str]:
    """What the table's marks mean, each failed cell's whole reason, each missed expectation."""
    lines = ["median ± MAD over the measured repeats"]
    if report.baseline:
        lines.append(
            f"Δ%: median against the baseline {report.baseline} with the other axes equal "
            f"({BASELINE_MARK}: the baseline itself)"
        )
    for row in report.rows:
        if row.failed:
            lines.append(f"{row.cell.id} ({row.cell.host}) {row.cell.status}: {row.cell.reason}")
        loose = unsettled(row.cell)
        if loose:
            settle = row.cell.metrics["settle"]
            widths = ", ".join(
                f"{m} ±{j['half_width']:.1%}" if isinstance(j.get("half_width"), float) else m
                for m, j in loose.items()
            )
            lines.append(
                f"{UNSETTLED_MARK} {row.cell.id}: did not settle in {settle.get('ran')} repeats "
                f"({widths}; until {settle.get('until', 0):.1%})"
            )
        for metric, mark in row.expectations.items():
            if not mark.ok:
                value = _value_text(mark.value) if mark.value is not None else "not measured"
                why = f" ({'; '.join(mark.details)})" if mark.details else ""
                lines.append(
                    f"{FAIL_MARK} {row.cell.id} {metric} = {value}: "
                    f"expected {' and '.join(mark.bounds)}{why}"
                )
    cells = [(row.cell.id, row.cell.metrics) for row in report.rows if not row.failed]
    lines += cost_notes(cells) if COST_METRIC in report.metrics else []
    return lines + (starts_footer(cells, report.metrics[0]) if report.metrics and cells else [])


def tidy_rows(report: Report) -> list[dict[str, Any]]:
    """One row per cell × repeat × metric of `report.metrics`: run_id, cell_id, host, each axis,
    repeat, metric, value, unit (None where no adapter catalogue says, e.g. a regex metric).

    An axis whose name clashes with a fixed column is written as `axis.<name>`. With a baseline,
    `baseline_cell` names the cell each row is compared with (None where there is none).
    """
    rows: list[dict[str, Any]] = []
    chosen = set(report.metrics)
    for row in report.rows:
        cell = row.cell
        base: dict[str, Any] = {"run_id": cell.run_id, "cell_id": cell.id, "host": cell.host}
        for axis in report.axes:
            column = f"axis.{axis}" if axis in _RESERVED else axis
            value = cell.axes.get(axis)
            base[column] = canonical_json(value) if isinstance(value, dict | list) else value
        extra: dict[str, Any] = {}
        if report.baseline:
            against = report.baselines.get(cell.id)
            extra["baseline_cell"] = against.cell.id if against is not None else None
        for repeat, metric, value in cell.repeat_rows():
            if metric in chosen:
                unit = cell_metric_unit(cell.cell, cell.metrics, metric)
                rows.append(
                    {
                        **base,
                        "repeat": repeat,
                        "metric": metric,
                        "value": value,
                        "unit": unit,
                        **extra,
                    }
                )
    return rows


def render_report(report: Report, fmt: ReportFormat = "table") -> str:
    """Render as `table` (terminal), `md` (GitHub markdown), or tidy `csv` / `json`."""
    cells = [row.cell for row in report.rows]
    if fmt in ("csv", "json"):
        rows = tidy_rows(report) + capacity_rows(cells, report.run_id)  # an SLO search's answer
        if fmt == "json":
            return json.dumps(rows, indent=2, default=str) + "\n"
        columns = list(TIDY_FIXED)
        columns += [f"axis.{a}" if a in _RESERVED else a for a in report.axes]
        columns += ["repeat", "metric", "value", "unit"]
        columns += ["baseline_cell"] if report.baseline else []
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([_csv_safe(c) for c in columns])
        writer.writerows([_csv_safe(row.get(c, "")) for c in columns] for row in rows)
        return out.getvalue()
    if fmt not in ("table", "md"):
        raise InputError(f"unknown report format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    headers, body = table_cells(report, two_lines=fmt == "table")
    table = tabulate(
        body,
        headers=headers,
        tablefmt="github" if fmt == "md" else "simple",
        disable_numparse=True,
    )
    footer, table = footer_lines(report), table + engine_section(report, fmt)
    slo = render_searches(cells, fmt)  # each SLO search's table and answer, if any
    if fmt == "md":
        return table + "\n\n" + "\n".join(f"- {line}" for line in footer) + "\n" + slo
    return table + "\n\n" + "\n".join(footer) + "\n" + slo


# What a spreadsheet reads as a formula: a cell starting with one of these (OWASP's list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_safe(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (`=HYPERLINK(...)` in an axis value or
    a host name from someone's bundle) starts with `'`; numbers are left as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
