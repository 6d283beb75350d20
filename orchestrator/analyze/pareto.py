"""The throughput–latency view of a sweep (`vllm bench sweep plot`'s question): for each
configuration, throughput against TTFT and TPOT along a concurrency or request-rate axis, with
the Pareto front across every configuration marked."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tabulate import tabulate

from orchestrator.analyze.metrics import as_float, format_number
from orchestrator.analyze.report.tables import Report, series_label, varying_axes
from orchestrator.errors import InputError

# Axis names a sweep goes along (the bench client's flags, in either spelling).
SWEEP_AXES = ("concurrency", "max_concurrency", "request_rate", "rate", "qps")
THROUGHPUTS = ("output_throughput", "total_token_throughput", "request_throughput")
LATENCIES = ("median_ttft_ms", "median_tpot_ms")
FRONT_MARK = "★"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices (ascending) of the `(latency, throughput)` points no other point dominates.

    A point dominates another when its latency is lower or equal and its throughput higher or
    equal, one of them strictly: lower latency and higher throughput are better. Equal points
    are all on the front.
    """
    front = []
    for i, (lat, tput) in enumerate(points):
        dominated = any(
            other_lat <= lat and other_tput >= tput and (other_lat < lat or other_tput > tput)
            for j, (other_lat, other_tput) in enumerate(points)
            if j != i
        )
        if not dominated:
            front.append(i)
    return front


@dataclass(frozen=True)
class SweepPoint:
    """One cell of a sweep: its configuration (every other axis, and the host) and medians."""

    series: str
    level: float  # the sweep axis's value
    cell_id: str
    throughput: float
    latency: dict[str, float]


@dataclass
class SweepView:
    """Points along `axis`, and for each latency metric the indices on the Pareto front."""

    axis: str
    throughput: str
    latencies: list[str]
    points: list[SweepPoint]
    front: dict[str, set[int]] = field(default_factory=dict)


def _normal(name: str) -> str:
    return name.lower().replace("-", "_")


def _levels(report: Report, axis: str) -> list[float] | None:
    values = [as_float(row.cell.axes.get(axis)) for row in report.rows]
    numbers = [v for v in values if v is not None]
    if len(numbers) != len(values) or len(set(numbers)) < 2:
        return None
    return numbers


def sweep_axis(report: Report, asked: str | None = None) -> str | None:
    """The axis a sweep goes along: `asked` (InputError when it is no numeric axis), else the
    first axis named like a concurrency or request rate with two or more numeric values."""
    if asked:
        if asked not in report.axes:
            raise unknown_axis(asked, report.axes, "to sweep along", "--sweep")
        if _levels(report, asked) is None:
            raise InputError(
                f"axis {asked!r} is no sweep: it needs two or more numeric values",
                key_path="--sweep",
            )
        return asked
    for axis in report.axes:
        name = _normal(axis)
        named = name in SWEEP_AXES or "concurrency" in name or "request_rate" in name
        if named and _levels(report, axis) is not None:
            return axis
    return None


def build_sweep(report: Report, axis: str) -> SweepView | None:
    """The sweep's points and fronts; None when the cells report no throughput or no latency."""
    measured = {m for row in report.rows for m in row.metrics}
    throughput = next((m for m in THROUGHPUTS if m in measured), None)
    latencies = [m for m in LATENCIES if m in measured]
    if throughput is None or not latencies:
        return None
    others = varying_axes(report, axis)
    hosts = len({row.cell.host for row in report.rows})
    points = []
    for row in report.rows:
        level = as_float(row.cell.axes.get(axis))
        tput = row.metrics.get(throughput)
        if level is None or tput is None:
            continue
        latency = {m: row.metrics[m].median for m in latencies if m in row.metrics}
        points.append(
            SweepPoint(series_label(row, others, hosts), level, row.cell.id, tput.median, latency)
        )
    points.sort(key=lambda p: (p.series, p.level))
    view = SweepView(axis, throughput, latencies, points)
    for metric in latencies:
        having = [i for i, p in enumerate(points) if metric in p.latency]
        front = pareto_front([(points[i].latency[metric], points[i].throughput) for i in having])
        view.front[metric] = {having[k] for k in front}
    return view


def _label(report: Report, metric: str, two_lines: bool) -> str:
    unit = report.unit(metric)
    return f"{metric}\n{unit}" if two_lines and unit else report.label(metric)


def sweep_cells(
    view: SweepView, report: Report, *, two_lines: bool = True
) -> tuple[list[str], list[list[str]]]:
    """The sweep table as headers and rows of text: one row per point, each latency marked ★
    where the point is on that latency's front; units as in `report.table_cells`."""
    headers = ["configuration", view.axis, _label(report, view.throughput, two_lines)]
    headers += [_label(report, m, two_lines) for m in view.latencies]
    body = []
    for i, point in enumerate(view.points):
        line = [point.series, f"{point.level:g}", format_number(point.throughput)]
        for metric in view.latencies:
            value = point.latency.get(metric)
            mark = f" {FRONT_MARK}" if i in view.front[metric] else ""
            line.append("-" if value is None else format_number(value) + mark)
        body.append(line)
    return headers, body


def front_note(view: SweepView) -> str:
    """What ★ means."""
    return (
        f"{FRONT_MARK}: on the Pareto front of that latency: no point of any configuration has "
        f"both more {view.throughput} and less latency (medians over the repeats)"
    )


def render_sweep(view: SweepView, report: Report, fmt: str = "table") -> str:
    """The sweep table in a terminal (`table`) or markdown (`md`), with what ★ means."""
    headers, body = sweep_cells(view, report, two_lines=fmt != "md")
    return _titled_table(
        f"throughput–latency over {view.axis}", headers, body, front_note(view), fmt
    )


def _titled_table(
    title: str, headers: list[str], body: list[list[str]], note: str, fmt: str
) -> str:
    """A front's table under its title, what ★ means below, in a terminal or markdown."""
    table = tabulate(
        body, headers=headers, tablefmt="github" if fmt == "md" else "simple", disable_numparse=True
    )
    if fmt == "md":
        return f"**{title}**\n\n{table}\n\n- {note}\n"
    return f"{title}\n\n{table}\n\n{note}\n"


def unknown_axis(name: str, axes: Sequence[str], purpose: str, option: str) -> InputError:
    """'no axis X <purpose>' for a report option naming an axis the run does not have."""
    close = difflib.get_close_matches(name, axes, n=1)
    return InputError(
        f"no axis {name!r} {purpose} (axes: {', '.join(axes) or 'none'})",
        key_path=option,
        hint=f"did you mean {close[0]!r}?" if close else None,
    )


# --- throughput per GPU against per user (InferenceX's chart) -----------------------------------

PER_GPU = ("total_throughput_per_gpu", "output_throughput_per_gpu")  # the first measured
PER_USER = "interactivity"


@dataclass(frozen=True)
class GpuUserPoint:
    """One cell: its name in the report, medians per GPU and per user, on the front or not."""

    label: str
    cell_id: str
    per_gpu: float
    per_user: float
    on_front: bool


@dataclass
class GpuUserView:
    """Every cell's throughput per GPU against its interactivity, the Pareto front marked."""

    per_gpu: str
    points: list[GpuUserPoint]

    @property
    def front(self) -> list[GpuUserPoint]:
        """The points on the front, by interactivity."""
        return sorted((p for p in self.points if p.on_front), key=lambda p: p.per_user)


def gpu_user_front(report: Report) -> GpuUserView | None:
    """The per-GPU vs per-user view of the report's cells (InferenceX's throughput per GPU
    against interactivity: more of both is better); None with fewer than two cells having both."""
    measured = {m for row in report.rows for m in row.metrics}
    per_gpu = next((m for m in PER_GPU if m in measured), None)
    if per_gpu is None:
        return None
    rows = [r for r in report.rows if per_gpu in r.metrics and PER_USER in r.metrics]
    if len(rows) < 2:
        return None
    others = varying_axes(report, "")
    hosts = len({row.cell.host for row in report.rows})
    values = [(r.metrics[per_gpu].median, r.metrics[PER_USER].median) for r in rows]
    # pareto_front wants (lower-is-better, higher-is-better): less interactivity is worse
    front = set(pareto_front([(-user, gpu) for gpu, user in values]))
    points = [
        GpuUserPoint(series_label(r, others, hosts), r.cell.id, gpu, user, i in front)
        for i, (r, (gpu, user)) in enumerate(zip(rows, values, strict=True))
    ]
    return GpuUserView(per_gpu, sorted(points, key=lambda p: p.per_user))


def gpu_user_cells(
    view: GpuUserView, report: Report, *, two_lines: bool = True
) -> tuple[list[str], list[list[str]]]:
    """The per-GPU vs per-user table as headers and rows of text, ★ on the front."""
    headers = ["configuration", _label(report, PER_USER, two_lines)]
    headers += [_label(report, view.per_gpu, two_lines), "front"]
    body = [
        [p.label, format_number(p.per_user), format_number(p.per_gpu), FRONT_MARK * p.on_front]
        for p in view.points
    ]
    return headers, body


def gpu_user_note(view: GpuUserView) -> str:
    """What ★ means in the per-GPU vs per-user table."""
    return (
        f"{FRONT_MARK}: on the Pareto front: no cell has both more {view.per_gpu} and more "
        f"{PER_USER} (1000 / median_tpot_ms, tok/s per user, as InferenceX); medians over repeats"
    )


def render_gpu_user(view: GpuUserView, report: Report, fmt: str = "table") -> str:
    """The per-GPU vs per-user table in a terminal (`table`) or markdown (`md`)."""
    headers, body = gpu_user_cells(view, report, two_lines=fmt != "md")
    return _titled_table(f"{view.per_gpu} vs {PER_USER}", headers, body, gpu_user_note(view), fmt)


def front_rows(rows: list[dict[str, Any]], view: GpuUserView) -> list[dict[str, Any]]:
    """Tidy report rows with `pareto_front`: whether the row's cell is on the per-GPU vs
    per-user front (None for a cell without both figures)."""
    on = {p.cell_id: p.on_front for p in view.points}
    return [{**row, "pareto_front": on.get(str(row.get("cell_id")))} for row in rows]
