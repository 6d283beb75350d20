"""`orch report` shows an energy column when the cells have telemetry metrics."""

from __future__ import annotations

from pathlib import Path

from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.evidence import load_run
from orchestrator.analyze.report import build_report, chosen_metrics, render_report


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
