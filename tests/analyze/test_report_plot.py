"""`orch report --plot`: one legend, a colour per series that holds across panels, the run and
its date in the title, units on the axes, and what the error bars are (issue 16 item 8)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.plot.charts import ERROR_BARS, draw_report, series_colours
from orchestrator.analyze.report.tables import load_report

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]"
)


def _run(tmp_path: Path) -> Path:
    """nccl × spec; accept_length only where speculation is on (the panel that lacks a series,
    where the colours used to shift)."""
    cells = []
    for nccl in ("default", "tuned"):
        for spec in ("off", "eagle3-2"):
            repeat: dict[str, float] = {"output_throughput": 90.0, "median_ttft_ms": 40.0}
            if spec != "off":
                repeat["accept_length"] = 1.9
            cell = base_cell(f"{nccl}-{spec}-0000", axes={"nccl": nccl, "spec": spec})
            cells.append({"cell": cell, "repeats": [repeat, repeat]})
    run = write_run(tmp_path, "20261201-090000-plot-0001", cells)
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "started": "2026-12-01T09:00:00+00:00"}))
    return run


def _colours(ax: Any) -> dict[str, Any]:
    """Series label -> the colour its line is drawn in, for one panel."""
    return {c.get_label(): c.lines[0].get_color() for c in ax.containers}


def test_one_legend_stable_colours_title_and_units(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    rep = load_report(_run(tmp_path))
    rep.metrics = ["output_throughput", "accept_length", "median_ttft_ms"]
    fig = draw_report(rep, "nccl")
    try:
        panels = fig.axes
        seen = [_colours(ax) for ax in panels]
        assert set(seen[1]) == {"spec=eagle3-2"}  # no off series in accept_length
        for label in ("spec=eagle3-2", "spec=off"):
            assert len({panel[label] for panel in seen if label in panel}) == 1, seen
        assert seen[0]["spec=eagle3-2"] != seen[0]["spec=off"]
        assert all(ax.get_legend() is None for ax in panels) and len(fig.legends) == 1
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == [
            "spec=eagle3-2",
            "spec=off",
        ]
        assert legend.get_title().get_text() == ERROR_BARS
        title = fig._suptitle.get_text()
        assert "20261201-090000-plot-0001" in title and "2026-12-01T09:00:00" in title
        assert [ax.get_ylabel() for ax in panels] == ["tok/s", "tokens/step", "ms"]
        assert [ax.get_xlabel() for ax in panels] == ["nccl"] * 3
    finally:
        plt.close(fig)


def test_series_colours_depend_on_the_label_alone() -> None:
    both = series_colours(["b", "a"])
    assert both == series_colours(["a", "b", "a"])
    assert both["a"] != both["b"]
    assert len(set(series_colours(str(i) for i in range(15)).values())) == 15
