"""`orch report --plot`: each metric against an axis, and GPU telemetry strips beside it."""

from __future__ import annotations

import difflib
import importlib
from pathlib import Path
from typing import Any

from orchestrator.analyze.energy import read_telemetry
from orchestrator.analyze.report import MetricStats, Report, as_float, axis_text
from orchestrator.errors import InputError
from orchestrator.results.records import CellRecord
from orchestrator.runner.telemetry import TELEMETRY_CSV


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
        label = axis_text(row.cell.axes.get(axis))
        if label not in labels:
            labels.append(label)
    numeric = [as_float(v) for v in labels]
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
            name = ", ".join(f"{a}={axis_text(row.cell.axes.get(a))}" for a in others)
            name = f"{name} @ {row.cell.host}" if name else str(row.cell.host)
            x = positions[axis_text(row.cell.axes.get(axis))]
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
