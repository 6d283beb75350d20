"""`orch report` shows an energy column when the cells have telemetry metrics."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.evidence import load_run
from orchestrator.analyze.plot.charts import plot_telemetry
from orchestrator.analyze.report.tables import build_report, chosen_metrics, render_report


def _report(tmp_path: Path, energy: dict[str, float]) -> str:
    cells = []
    for spec, tput in (("off", 80.0), ("eagle3", 95.0)):
        repeats = [{"output_throughput": tput + d, **energy} for d in (-0.5, 0.0, 0.5)]
        cells.append({"cell": base_cell(f"{spec}-0000", axes={"spec": spec}), "repeats": repeats})
    rep = build_report(load_run(write_run(tmp_path, "20261201-120000-e-0001", cells)).cells)
    rep.metrics = chosen_metrics(rep, [])
    return render_report(rep, "table")


def test_energy_per_output_token_is_a_column_when_present(tmp_path: Path) -> None:
    per_token = {"energy_j": 5000.0, "joules_per_output_token": 2.5, "throttle_s": 0.0}
    text = _report(tmp_path / "a", per_token)
    header = text.splitlines()[0].split()
    assert header.index("output_throughput") < header.index("joules_per_output_token")
    assert "energy_j" not in header and "throttle_s" not in header
    assert "2.50 ± 0.00" in text
    # without output tokens: the energy of the repeat
    header = _report(tmp_path / "b", {"energy_j": 5000.0}).splitlines()[0].split()
    assert "energy_j" in header
    # no telemetry: the table is as before
    header = _report(tmp_path / "c", {}).splitlines()[0].split()
    assert "energy_j" not in header and "joules_per_output_token" not in header


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs orch[plot]")
def test_plot_draws_a_telemetry_strip_beside_the_plot(tmp_path: Path) -> None:
    cells = [{"cell": base_cell("on-0000", axes={"spec": "on"}), "repeats": [{"energy_j": 1.0}]}]
    run = write_run(tmp_path, "20261201-120000-e-0002", cells)
    rep = build_report(load_run(run).cells)
    assert plot_telemetry(rep, tmp_path / "p.png") is None  # no telemetry: nothing drawn
    (cell,) = [p for p in (run / "cells").iterdir() if p.is_dir()]
    rows = ["t,index,clocks.sm,power.draw,clocks_event_reasons.active"]
    rows += [f"{100 + i / 2},{g},{1100 if 8 < i < 14 else 1980},{300 + g},0x0" for i in range(30)
             for g in (0, 1)]  # fmt: skip
    (cell / "telemetry.csv").write_text("\n".join(rows) + "\n")
    (cell / "bench" / "1").mkdir(parents=True)
    (cell / "bench" / "1" / "exit.json").write_text('{"rc": 0, "start": 103.0, "end": 108.0}')
    rep = build_report(load_run(run).cells)
    out = plot_telemetry(rep, tmp_path / "p.png")
    assert out == tmp_path / "p-telemetry.png"
    assert out.read_bytes().startswith(b"\x89PNG")
