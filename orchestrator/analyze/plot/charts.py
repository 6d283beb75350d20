"""`orch report --plot`: each metric against an axis, and GPU telemetry strips beside it."""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.analyze.energy import read_telemetry
from orchestrator.analyze.metrics import as_float
from orchestrator.analyze.pareto import SweepView, unknown_axis
from orchestrator.analyze.report.tables import (
    MetricStats,
    Report,
    axis_text,
    series_label,
    varying_axes,
)
from orchestrator.errors import InputError
from orchestrator.results.layout import TELEMETRY_CSV
from orchestrator.results.records import CellRecord


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
    # axis values, metric and host names are text: a `$` in one is drawn, never parsed as math
    matplotlib.rcParams["text.parse_math"] = False
    return importlib.import_module("matplotlib.pyplot")


PLOT_FORMATS: tuple[str, ...] = ("png", "svg", "pdf")


def _finite(stat: MetricStats) -> bool:
    """A point that can be drawn: its median, min and max are finite numbers."""
    return all(math.isfinite(v) for v in (stat.median, stat.min, stat.max))


def _spread(value: float) -> float:
    """An error bar's length: finite and not negative (two repeats near the float range's end
    give inf, rounding a tiny negative one)."""
    return value if math.isfinite(value) and value > 0 else 0.0


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


ERROR_BARS = "points: median of the measured repeats; error bars: min to max"


def series_colours(labels: Iterable[str]) -> dict[str, str]:
    """One colour per series label, the same in every panel: the labels sorted, then given the
    palette's colours in turn (a series missing from one panel shifts no other's colour)."""
    ordered = sorted(set(labels))
    palette = _TAB10 if len(ordered) <= len(_TAB10) else _TAB20
    return {label: palette[i % len(palette)] for i, label in enumerate(ordered)}


# matplotlib's tab10 and tab20, spelled out so the colours do not depend on its style settings
_TAB10 = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_TAB20 = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5",
)  # fmt: skip


def figure_title(report: Report) -> str:
    """`RUN-ID · started 2026-12-01T21:33:10+00:00`: which run a picture shows, and when."""
    parts = [report.run_id or "orch report"]
    if report.started:
        parts.append(f"started {report.started}")
    return "  ·  ".join(parts)


def draw_report(report: Report, axis: str, sweep: SweepView | None = None) -> Any:
    """The figure `plot_report` saves: one panel per metric against `axis` (and, for a sweep,
    one per latency against throughput), one legend, one colour per series in every panel."""
    if axis not in report.axes:
        raise unknown_axis(axis, report.axes, "to plot against", "--plot")
    if not report.metrics:
        raise InputError("no metrics to plot: no cell has measured repeats", key_path="--plot")
    plt = _import_pyplot()
    labels: list[str] = []
    for row in report.rows:
        label = axis_text(row.cell.axes.get(axis))
        if label not in labels:
            labels.append(label)
    numeric = [as_float(v) for v in labels]
    use_numbers = all(v is not None for v in numeric)
    positions = {
        label: (number if use_numbers and number is not None else float(i))
        for i, (label, number) in enumerate(zip(labels, numeric, strict=True))
    }
    others = varying_axes(report, axis)
    hosts = len({row.cell.host for row in report.rows})
    names = [series_label(row, others, hosts) for row in report.rows]
    if sweep is not None:
        names += [p.series for p in sweep.points]
    colours = series_colours(names)
    panels = len(report.metrics) + (len(sweep.latencies) if sweep is not None else 0)
    fig, subplots = plt.subplots(
        panels, 1, figsize=(8, 3.2 * panels + 1.2), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for metric, ax in zip(report.metrics, [s[0] for s in subplots], strict=False):
        series: dict[str, list[tuple[float, MetricStats]]] = {}
        for row, name in zip(report.rows, names, strict=False):
            stat = row.metrics.get(metric)
            if stat is None:
                continue
            x = positions[axis_text(row.cell.axes.get(axis))]
            series.setdefault(name, []).append((x, stat))
        for name in sorted(series):
            points = [p for p in sorted(series[name], key=lambda p: p[0]) if _finite(p[1])]
            if not points:
                continue  # nothing drawable (values past the float range)
            err = [
                [_spread(p[1].median - p[1].min) for p in points],
                [_spread(p[1].max - p[1].median) for p in points],
            ]
            drawn = ax.errorbar(
                [p[0] for p in points],
                [p[1].median for p in points],
                yerr=err,
                marker="o",
                capsize=3,
                color=colours[name],
                label=name,
            )
            handles.setdefault(name, drawn)
        ax.set_title(metric)
        ax.set_xlabel(axis)
        ax.set_ylabel(report.unit(metric) or "value (no unit recorded)")
        if not use_numbers:
            ax.set_xticks([positions[label] for label in labels], labels)
    if sweep is not None:
        from orchestrator.analyze.plot.sweep import draw_sweep

        rest = [s[0] for s in subplots][len(report.metrics) :]
        handles.update(draw_sweep(sweep, report, rest, colours, handles))
    fig.suptitle(figure_title(report))
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncols=min(3, len(handles)) or 1,
        fontsize="small",
        title=ERROR_BARS,
        title_fontsize="small",
    )
    return fig


def plot_report(report: Report, axis: str, path: Path, sweep: SweepView | None = None) -> Path:
    """Draw each metric's median (with min-max bars) against `axis`, one line per other point,
    units on the axes, the run and its date in the title, one legend for the figure.

    `path` must end in .png, .svg or .pdf and its folder must exist (InputError otherwise).
    """
    path = _check_plot_path(Path(path))
    return save_figure(draw_report(report, axis, sweep), path)


def save_figure(fig: Any, path: Path) -> Path:
    """Write `fig` to `path` and close it; a path that cannot be written is an InputError."""
    plt = _import_pyplot()
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
    fig, subplots = plt.subplots(
        len(strips), 1, figsize=(10, 2.6 * len(strips) + 0.6), squeeze=False, layout="constrained"
    )
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
    fig.suptitle(figure_title(report))
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
