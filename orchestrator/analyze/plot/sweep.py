"""The sweep panels of `orch report --plot`: throughput against each latency, one line per
configuration along the sweep axis, the Pareto front across configurations marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.analyze.pareto import SweepView
from orchestrator.analyze.report.tables import Report

FRONT_LABEL = "Pareto front (all configurations)"


def draw_sweep(
    sweep: SweepView,
    report: Report,
    panels: Sequence[Any],
    colours: Mapping[str, str],
    handles: Mapping[str, Any],
) -> dict[str, Any]:
    """Draw one panel per latency metric on `panels`; returns the legend handles it adds."""
    added: dict[str, Any] = {}
    for metric, ax in zip(sweep.latencies, panels, strict=False):
        series: dict[str, list[int]] = {}
        for i, point in enumerate(sweep.points):
            if metric in point.latency:
                series.setdefault(point.series, []).append(i)
        for name in sorted(series):
            points = [sweep.points[i] for i in series[name]]  # in sweep order
            (line,) = ax.plot(
                [p.latency[metric] for p in points],
                [p.throughput for p in points],
                marker="o",
                color=colours[name],
                label=name,
            )
            for p in points:  # which concurrency / rate each point is
                ax.annotate(
                    f"{p.level:g}",
                    (p.latency[metric], p.throughput),
                    textcoords="offset points",
                    xytext=(4, 4),
                    fontsize="x-small",
                )
            if name not in handles and name not in added:
                added[name] = line
        front = sorted(sweep.front[metric], key=lambda i: sweep.points[i].latency[metric])
        (marked,) = ax.plot(
            [sweep.points[i].latency[metric] for i in front],
            [sweep.points[i].throughput for i in front],
            linestyle="--",
            drawstyle="steps-post",
            marker="o",
            markersize=11,
            markerfacecolor="none",
            color="black",
            label=FRONT_LABEL,
        )
        added.setdefault(FRONT_LABEL, marked)
        ax.set_title(f"{sweep.throughput} vs {metric} over {sweep.axis}")
        ax.set_xlabel(report.label(metric))
        ax.set_ylabel(report.label(sweep.throughput))
    return added
