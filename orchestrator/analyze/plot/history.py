"""`orch history --plot F.png`: one panel per configuration, the runs' medians in order, change
points drawn where they are (red when a regression); needs matplotlib (`orch[plot]`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.analyze.history import History
from orchestrator.analyze.plot.charts import _check_plot_path, _import_pyplot, save_figure
from orchestrator.errors import InputError

PANEL_HEIGHT = 2.4  # inches a configuration's panel takes


def plot_history(view: History, path: Path) -> Path:
    """Draw every series of `view` into `path` (.png, .svg or .pdf in an existing folder)."""
    path = _check_plot_path(Path(path))
    if not view.series:
        raise InputError(f"nothing to plot: no run reports {view.metric}", key_path="--plot")
    plt = _import_pyplot()
    fig, axes = plt.subplots(
        len(view.series), 1, figsize=(9, PANEL_HEIGHT * len(view.series)), squeeze=False
    )
    for ax, series in zip(axes[:, 0], view.series, strict=True):
        values = [p.median for p in series.points]
        ax.plot(range(len(values)), values, marker="o", markersize=3, linewidth=1)
        for step in view.steps.get(series.series, []):
            colour = "#a4161a" if step.regression else "#555555"
            ax.axvline(step.point.index - 0.5, color=colour, linestyle="--", linewidth=1)
            ax.annotate(f"{step.point.change:+.1%}", (step.point.index - 0.5, max(values)),
                        color=colour, fontsize=8)  # fmt: skip
        unit = next((p.unit for p in series.points if p.unit), "")
        ax.set_title(series.label, fontsize=9, loc="left")
        ax.set_ylabel(f"{view.metric} ({unit})" if unit else view.metric, fontsize=8)
    axes[-1, 0].set_xlabel("run, in order")
    fig.tight_layout()
    return save_figure(fig, path)
