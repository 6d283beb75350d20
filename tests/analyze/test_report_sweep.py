"""The throughput–latency view of a sweep: the Pareto front (a pure function), the text table
marking it, and the plot's panels (issue 16 item 10)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.pareto import (
    FRONT_MARK,
    build_sweep,
    pareto_front,
    render_sweep,
    sweep_axis,
)
from orchestrator.analyze.report.tables import load_report
from orchestrator.errors import InputError

# (spec, max_concurrency): output tok/s, TTFT ms, TPOT ms
SWEEP = {
    ("off", 1): (90.0, 40.0, 11.0),
    ("off", 4): (300.0, 60.0, 13.0),
    ("off", 16): (800.0, 200.0, 20.0),
    ("eagle", 1): (95.0, 38.0, 9.0),
    ("eagle", 4): (290.0, 70.0, 12.0),
    ("eagle", 16): (850.0, 150.0, 18.0),
}


def sweep_run(tmp_path: Path) -> Path:
    """spec × max_concurrency, two repeats each (see SWEEP)."""
    cells = []
    for (spec, level), (tput, ttft, tpot) in SWEEP.items():
        repeat = {"output_throughput": tput, "median_ttft_ms": ttft, "median_tpot_ms": tpot}
        cell = base_cell(f"{spec}-c{level}-0000", axes={"spec": spec, "max_concurrency": level})
        cells.append({"cell": cell, "repeats": [repeat, repeat]})
    return write_run(tmp_path, "20261201-100000-sweep-0001", cells)


def test_pareto_front() -> None:
    assert pareto_front([]) == []
    assert pareto_front([(5.0, 1.0)]) == [0]
    # (latency, throughput): lower latency and higher throughput win
    assert pareto_front([(1.0, 10.0), (2.0, 5.0), (3.0, 20.0)]) == [0, 2]
    assert pareto_front([(1.0, 10.0), (1.0, 9.0)]) == [0]  # same latency, less throughput
    assert pareto_front([(1.0, 10.0), (1.0, 10.0)]) == [0, 1]  # equal points: both
    assert pareto_front([(2.0, 10.0), (1.0, 10.0)]) == [1]  # same throughput, more latency
    assert pareto_front([(3.0, 3.0), (2.0, 2.0), (1.0, 1.0)]) == [0, 1, 2]  # a trade-off


def test_sweep_table_marks_the_front_across_configurations(tmp_path: Path) -> None:
    rep = load_report(sweep_run(tmp_path))
    assert sweep_axis(rep) == "max_concurrency"
    view = build_sweep(rep, "max_concurrency")
    assert view is not None and view.latencies == ["median_ttft_ms", "median_tpot_ms"]
    on_front = {
        metric: {(p.series, p.level) for i, p in enumerate(view.points) if i in front}
        for metric, front in view.front.items()
    }
    assert on_front["median_ttft_ms"] == {("spec=eagle", 1), ("spec=off", 4), ("spec=eagle", 16)}
    assert on_front["median_tpot_ms"] == {
        ("spec=eagle", 1), ("spec=eagle", 4), ("spec=off", 4), ("spec=eagle", 16),
    }  # fmt: skip
    text = render_sweep(view, rep)
    lines = text.splitlines()
    assert lines[0] == "throughput–latency over max_concurrency"
    head, units = lines[2].split(), lines[3].split()
    assert head == ["configuration", "max_concurrency", "output_throughput", "median_ttft_ms",
                    "median_tpot_ms"]  # fmt: skip
    assert units == ["tok/s", "ms", "ms"]
    row = next(line for line in lines if line.startswith("spec=off") and " 4 " in line)
    assert row.split()[2:] == ["300.00", "60.00", FRONT_MARK, "13.00", FRONT_MARK]
    row = next(line for line in lines if line.startswith("spec=off") and " 16 " in line)
    assert FRONT_MARK not in row
    assert "Pareto front" in text


def test_sweep_axis_detection_and_errors(tmp_path: Path) -> None:
    rep = load_report(sweep_run(tmp_path))
    assert sweep_axis(rep, "max_concurrency") == "max_concurrency"
    with pytest.raises(InputError, match="no sweep: it needs two or more numeric values"):
        sweep_axis(rep, "spec")
    with pytest.raises(InputError, match="did you mean 'max_concurrency'"):
        sweep_axis(rep, "max_concurency")
    cells = [{"cell": base_cell("a-0000", axes={"spec": "a"}), "repeats": [{"t": 1.0}]}]
    assert sweep_axis(load_report(write_run(tmp_path, "plain", cells))) is None


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]")
def test_the_plot_has_a_throughput_latency_panel_per_latency(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from orchestrator.analyze.plot.charts import draw_report
    from orchestrator.analyze.plot.sweep import FRONT_LABEL

    rep = load_report(sweep_run(tmp_path))
    rep.metrics = ["output_throughput"]
    view = build_sweep(rep, "max_concurrency")
    fig = draw_report(rep, "max_concurrency", view)
    try:
        metric_panel, ttft, tpot = fig.axes
        assert ttft.get_xlabel() == "median_ttft_ms (ms)"
        assert ttft.get_ylabel() == "output_throughput (tok/s)"
        front = next(line for line in ttft.get_lines() if line.get_label() == FRONT_LABEL)
        assert list(front.get_xdata()) == [38.0, 60.0, 150.0]
        assert (
            len(next(ln for ln in tpot.get_lines() if ln.get_label() == FRONT_LABEL).get_xdata())
            == 4
        )
        # a configuration has the same colour in the metric panel and the sweep panels
        colour = {c.get_label(): c.lines[0].get_color() for c in metric_panel.containers}
        for line in ttft.get_lines():
            if line.get_label() in colour:
                assert line.get_color() == colour[line.get_label()]
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        assert labels == ["spec=eagle", "spec=off", FRONT_LABEL]
    finally:
        plt.close(fig)
