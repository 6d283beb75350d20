"""`orch report`: cells × metrics, median and spread over repeats, optionally pivoted by an axis.

`table` and `md` are for people: one row per cell (or, with `by=AXIS`, that axis's values as
columns). `csv` and `json` are tidy for pandas: one row per cell × repeat × metric.
"""

from __future__ import annotations

import csv
import difflib
import importlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tabulate import tabulate

from orchestrator.analyze import stats
from orchestrator.analyze.energy import read_telemetry
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.metrics import HEADLINE_METRICS, cell_metric_unit, format_number
from orchestrator.cell import canonical_json
from orchestrator.errors import InputError
from orchestrator.results.records import CellRecord
from orchestrator.runner.telemetry import TELEMETRY_CSV

ReportFormat = Literal["table", "md", "csv", "json"]
FORMATS: tuple[str, ...] = ("table", "md", "csv", "json")
TIDY_FIXED = ("run_id", "cell_id", "host")
_RESERVED = {*TIDY_FIXED, "repeat", "metric", "value", "unit"}
OK_MARK, FAIL_MARK = "✓", "✗"
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


def _display(value: Any) -> str:
    """An axis value as text: scalars as they are, mappings/lists as canonical JSON."""
    if isinstance(value, dict | list):
        return canonical_json(value)
    if value is None:
        return ""
    return str(value)


def _expectation_marks(cell: CellEvidence) -> dict[str, ExpectationMark]:
    marks: dict[str, ExpectationMark] = {}
    for entry in cell.expectations:
        metric = str(entry.get("metric"))
        ok = bool(entry.get("ok"))
        bound = _display(entry.get("bound"))
        detail = (_display(entry.get("detail")),) if entry.get("detail") else ()
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
    # energy, when the run had telemetry: per output token where the bench reported tokens
    energy = next((m for m in ENERGY_METRICS if m in available), None)
    if chosen and energy is not None and energy not in chosen:
        chosen.append(energy)
    return chosen or available[:4]


def build_report(cells: Sequence[CellEvidence], *, by: str | None = None) -> Report:
    """Collect per-cell metric statistics; `by` must be one of the cells' axes."""
    axes: list[str] = []
    metrics: list[str] = []
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
    return Report(rows=rows, axes=axes, metrics=metrics, by=by)


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
    number = _as_float(value) if not isinstance(value, str) else None
    return format_number(number) if number is not None else str(value)


def _metric_text(row: ReportRow, metric: str) -> str:
    stat = row.metrics.get(metric)
    mark = row.expectations.get(metric)
    text = "-" if stat is None else median_and_spread(stat)
    if stat is None and row.failed:
        text = "failed"
    if mark is not None:
        text += f" {OK_MARK if mark.ok else FAIL_MARK}"
    return text


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _flat_table(report: Report) -> tuple[list[str], list[list[str]]]:
    any_failed = any(r.failed for r in report.rows)
    headers = [*report.axes, "host", "status", *report.metrics]
    if any_failed:
        headers.append("reason")
    body = []
    for row in report.rows:
        line = [_display(row.cell.axes.get(a)) for a in report.axes]
        line += [row.cell.host or "", row.cell.status or "?"]
        line += [_metric_text(row, m) for m in report.metrics]
        if any_failed:
            line.append(_first_line(row.cell.reason) if row.failed else "")
        body.append(line)
    return headers, body


def _pivot_table(report: Report) -> tuple[list[str], list[list[str]]]:
    by = report.by
    assert by is not None
    others = [a for a in report.axes if a != by]
    by_values: list[str] = []
    slots: dict[tuple[str, ...], dict[str, list[ReportRow]]] = {}
    for row in report.rows:
        value = _display(row.cell.axes.get(by))
        if value not in by_values:
            by_values.append(value)
        key = (*(_display(row.cell.axes.get(a)) for a in others), row.cell.host or "")
        slots.setdefault(key, {}).setdefault(value, []).append(row)
    headers = [*others, "host"]
    headers += [f"{m} [{by}={v}]" for m in report.metrics for v in by_values]
    body = []
    for key, by_value in slots.items():
        line = list(key)
        for metric in report.metrics:
            for value in by_values:
                line.append(" / ".join(_metric_text(r, metric) for r in by_value.get(value, [])))
        body.append(line)
    return headers, body


def _footer(report: Report) -> list[str]:
    lines = ["median ± MAD over the measured repeats"]
    for row in report.rows:
        if row.failed:
            lines.append(f"{row.cell.id} ({row.cell.host}) {row.cell.status}: {row.cell.reason}")
        for metric, mark in row.expectations.items():
            if not mark.ok:
                value = _value_text(mark.value) if mark.value is not None else "not measured"
                why = f" ({'; '.join(mark.details)})" if mark.details else ""
                lines.append(
                    f"{FAIL_MARK} {row.cell.id} {metric} = {value}: "
                    f"expected {' and '.join(mark.bounds)}{why}"
                )
    return lines


def tidy_rows(report: Report) -> list[dict[str, Any]]:
    """One row per cell × repeat × metric of `report.metrics`: run_id, cell_id, host, each axis,
    repeat, metric, value, unit (None where no adapter catalogue says, e.g. a regex metric).

    An axis whose name clashes with a fixed column is written as `axis.<name>`.
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
        for repeat, metric, value in cell.repeat_rows():
            if metric in chosen:
                unit = cell_metric_unit(cell.cell, cell.metrics, metric)
                rows.append(
                    {**base, "repeat": repeat, "metric": metric, "value": value, "unit": unit}
                )
    return rows


def render_report(report: Report, fmt: ReportFormat = "table") -> str:
    """Render as `table` (terminal), `md` (GitHub markdown), or tidy `csv` / `json`."""
    if fmt in ("csv", "json"):
        rows = tidy_rows(report)
        if fmt == "json":
            return json.dumps(rows, indent=2, default=str) + "\n"
        columns = list(TIDY_FIXED)
        columns += [f"axis.{a}" if a in _RESERVED else a for a in report.axes]
        columns += ["repeat", "metric", "value", "unit"]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    if fmt not in ("table", "md"):
        raise InputError(f"unknown report format {fmt!r}", hint=f"one of {', '.join(FORMATS)}")
    headers, body = _pivot_table(report) if report.by else _flat_table(report)
    table = tabulate(
        body,
        headers=headers,
        tablefmt="github" if fmt == "md" else "simple",
        disable_numparse=True,
    )
    footer = _footer(report)
    if fmt == "md":
        return table + "\n\n" + "\n".join(f"- {line}" for line in footer) + "\n"
    return table + "\n\n" + "\n".join(footer) + "\n"


# --- plot ---------------------------------------------------------------------------------------


def _import_pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise InputError(
            "plotting needs matplotlib, which is not installed",
            key_path="--plot",
            hint="install orch[plot], e.g. pip install 'orch[plot]'",
        ) from None
    matplotlib.use("Agg")  # files only: never needs a display
    return importlib.import_module("matplotlib.pyplot")


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


PLOT_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")


def _check_plot_path(path: Path) -> Path:
    """The file `--plot` names, checked before any drawing: a known format, an existing folder."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise InputError(
            f"cannot plot to {str(path)!r}: "
            + (f"unknown format {suffix!r}" if suffix else "the name has no format suffix"),
            key_path="--plot",
            hint=f"name a .{', .'.join(PLOT_FORMATS)} file, e.g. {path.stem or 'plot'}.png",
        )
    folder = path.parent
    if not folder.is_dir():
        raise InputError(
            f"cannot plot to {str(path)!r}: folder {str(folder)!r} "
            + ("is not a folder" if folder.exists() else "does not exist"),
            key_path="--plot",
            hint="the folder must exist; create it first (mkdir -p) or pick another path",
        )
    return path


def plot_report(report: Report, axis: str, path: Path) -> Path:
    """Draw each metric's median (with min-max bars) against `axis`, one line per other point.

    `path` must end in .png, .svg or .pdf and its folder must exist (InputError otherwise).
    """
    path = _check_plot_path(Path(path))
    if axis not in report.axes:
        close = difflib.get_close_matches(axis, report.axes, n=1)
        raise InputError(
            f"no axis {axis!r} to plot against (axes: {', '.join(report.axes) or 'none'})",
            key_path="--plot",
            hint=f"did you mean {close[0]!r}?" if close else None,
        )
    if not report.metrics:
        raise InputError("no metrics to plot: no cell has measured repeats", key_path="--plot")
    plt = _import_pyplot()
    labels: list[str] = []
    for row in report.rows:
        label = _display(row.cell.axes.get(axis))
        if label not in labels:
            labels.append(label)
    numeric = [_as_float(v) for v in labels]
    use_numbers = all(v is not None for v in numeric)
    positions = {
        label: (number if use_numbers and number is not None else float(i))
        for i, (label, number) in enumerate(zip(labels, numeric, strict=True))
    }
    others = [a for a in report.axes if a != axis]
    fig, subplots = plt.subplots(
        len(report.metrics), 1, figsize=(8, 3.2 * len(report.metrics)), squeeze=False
    )
    for metric, ax in zip(report.metrics, [s[0] for s in subplots], strict=True):
        series: dict[str, list[tuple[float, MetricStats]]] = {}
        for row in report.rows:
            stat = row.metrics.get(metric)
            if stat is None:
                continue
            name = ", ".join(f"{a}={_display(row.cell.axes.get(a))}" for a in others)
            name = f"{name} @ {row.cell.host}" if name else str(row.cell.host)
            x = positions[_display(row.cell.axes.get(axis))]
            series.setdefault(name, []).append((x, stat))
        for name, points in series.items():
            points.sort(key=lambda p: p[0])
            xs = [p[0] for p in points]
            ys = [p[1].median for p in points]
            err = [
                [p[1].median - p[1].min for p in points],
                [p[1].max - p[1].median for p in points],
            ]
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
        ax.set_title(metric)
        ax.set_xlabel(axis)
        if not use_numbers:
            ax.set_xticks([positions[label] for label in labels], labels)
        if len(series) > 1:
            ax.legend(fontsize="small")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:  # e.g. no permission to write there
        raise InputError(
            f"cannot write the plot to {str(path)!r}: {exc.strerror or exc}",
            key_path="--plot",
            hint="pick a path you can write to",
        ) from None
    finally:
        plt.close(fig)
    return path


def plot_telemetry(report: Report, path: Path) -> Path | None:
    """Beside `path` (`NAME-telemetry.png`): one strip per cell with telemetry, every GPU's SM
    clock and power over the cell's time, its measured repeats shaded; None without telemetry."""
    from orchestrator.analyze.verdict import repeat_window

    strips = []
    for row in report.rows:
        tel = read_telemetry(row.cell.path / TELEMETRY_CSV)
        if tel.gpus:
            strips.append((row, tel))
    if not strips:
        return None
    out = _check_plot_path(Path(path)).with_name(f"{Path(path).stem}-telemetry{Path(path).suffix}")
    plt = _import_pyplot()
    fig, subplots = plt.subplots(len(strips), 1, figsize=(10, 2.6 * len(strips)), squeeze=False)
    nan = float("nan")
    for (row, tel), ax in zip(strips, [s[0] for s in subplots], strict=True):
        t0 = min(s.t[0] for s in tel.gpus.values())
        power = ax.twinx()
        for gpu, s in tel.gpus.items():
            xs = [t - t0 for t in s.t]
            (line,) = ax.plot(xs, [nan if v is None else v for v in s.sm], lw=1, label=f"GPU {gpu}")
            power.plot(
                xs,
                [nan if v is None else v for v in s.power],
                lw=0.6,
                ls="--",
                color=line.get_color(),
            )
        for record in CellRecord(row.cell.path).repeats:
            window = repeat_window(record)
            if window is not None:
                ax.axvspan(window.start - t0, window.end - t0, color="tab:gray", alpha=0.15)
        ax.set_title(f"{row.cell.id} @ {row.cell.host}  (measured repeats shaded)")
        ax.set_xlabel("seconds")
        ax.set_ylabel("SM clock (MHz)")
        power.set_ylabel("power (W, dashed)")
        if len(tel.gpus) > 1:
            ax.legend(fontsize="x-small", loc="lower left")
    fig.tight_layout()
    try:
        fig.savefig(out)
    except OSError as exc:
        raise InputError(
            f"cannot write the telemetry plot to {str(out)!r}: {exc.strerror or exc}",
            key_path="--plot",
        ) from None
    finally:
        plt.close(fig)
    return out
