"""`orch report --plot`'s per-GPU vs per-user figure (beside the report's, `NAME-pareto.png`):
every cell's throughput per GPU against its interactivity, the Pareto front drawn, as
InferenceX draws it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analyze.pareto import PER_USER, GpuUserView
from orchestrator.analyze.plot.charts import (
    _check_plot_path,
    _import_pyplot,
    figure_title,
    save_figure,
    series_colours,
)
from orchestrator.analyze.report.tables import Report

FRONT_LABEL = "Pareto front"


def plot_gpu_user(view: GpuUserView, report: Report, path: Path) -> Path:
    """Draw `view` to `NAME-pareto.SUFFIX` beside `path`; the file written."""
    out = _check_plot_path(Path(path)).with_name(f"{Path(path).stem}-pareto{Path(path).suffix}")
    plt = _import_pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5), layout="constrained")
    colours = series_colours(p.label for p in view.points)
    for p in view.points:
        ax.plot(p.per_user, p.per_gpu, marker="o", color=colours[p.label], label=p.label)
    front = view.front
    ax.plot(
        [p.per_user for p in front],
        [p.per_gpu for p in front],
        linestyle="--",
        marker="o",
        markersize=11,
        markerfacecolor="none",
        color="black",
        label=FRONT_LABEL,
    )
    ax.set_xlabel(report.label(PER_USER))
    ax.set_ylabel(report.label(view.per_gpu))
    ax.set_title(f"{view.per_gpu} vs {PER_USER}")
    ax.legend(fontsize="x-small")
    fig.suptitle(figure_title(report))
    return save_figure(fig, out)
