"""Issue 11, item 11: `orch audit --rerun` judges with `orch diff`'s noise-aware test, per metric,
on the metrics the playbook cares about; a TTFT wobble diff calls noise does not fail it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.execute.audit.verdicts import deciding_lines, render_reproductions, reproduction

# The demo's figure: median TTFT 131.9 -> 87.18 over a few noisy requests, throughput 1.008.
TTFT_RECORDED = [131.9, 84.0, 176.3]
TTFT_RERUN = [87.18, 140.2, 61.5]
THROUGHPUT_RECORDED = [84.1, 85.0, 84.6]
THROUGHPUT_RERUN = [85.4, 84.9, 85.3]


def _rows(tput: list[float], ttft: list[float]) -> list[dict[str, float]]:
    return [
        {"output_throughput": a, "median_ttft_ms": b, "p99_itl_ms": 30.0 + b / 10}
        for a, b in zip(tput, ttft, strict=True)
    ]


def _cells(
    tmp: Path, recorded: list[dict[str, float]], rerun: list[dict[str, float]], **cell: Any
) -> tuple[CellEvidence, CellEvidence]:
    spec = base_cell("demo-1a2b3c4d")
    spec.update(cell)
    a = write_cell(tmp / "recorded", cell=spec, repeats=recorded)
    b = write_cell(tmp / "rerun", cell=spec, repeats=rerun)
    return CellEvidence.load(a), CellEvidence.load(b)


def test_a_ttft_wobble_diff_calls_noise_does_not_fail_the_audit(tmp_path: Path) -> None:
    recorded, rerun = _cells(
        tmp_path, _rows(THROUGHPUT_RECORDED, TTFT_RECORDED), _rows(THROUGHPUT_RERUN, TTFT_RERUN)
    )
    ttft_diff = next(
        m for m in diff_cells(recorded, rerun).section("metrics").metrics
        if m.metric == "median_ttft_ms"
    )  # fmt: skip
    assert ttft_diff.significant is False  # orch diff: within noise
    verdict = reproduction(recorded, rerun, tolerance=0.05)
    assert verdict.reproduces and verdict.deciding_from == "headline"
    by_name = {m.metric: m for m in verdict.metrics}
    assert by_name["output_throughput"].judged and by_name["output_throughput"].reproduces
    ttft = by_name["median_ttft_ms"]
    assert not ttft.judged and not ttft.within_tolerance and ttft.reproduces
    rows = {r[1]: r[-1] for r in render_reproductions([verdict])}
    assert rows == {
        "output_throughput": "yes",
        "median_ttft_ms": "yes (not judged)",
        "p99_itl_ms": "yes (not judged)",
    }
    said = "\n".join(deciding_lines([verdict]))
    assert "judged on: output_throughput (the headline throughput metric" in said
    assert "repeats of one start: each side ran one server start" in said
    assert "bench.starts: N" in said and "Welch" not in said.split("note:")[1]


def test_an_expected_metric_decides_and_moves_only_when_significant(tmp_path: Path) -> None:
    expect = {"expect": {"median_ttft_ms": {"max": 200}}}
    wobble = _cells(
        tmp_path / "wobble",
        _rows(THROUGHPUT_RECORDED, TTFT_RECORDED),
        _rows(THROUGHPUT_RERUN, TTFT_RERUN),
        **expect,
    )
    verdict = reproduction(*wobble, tolerance=0.05)
    (judged,) = [m for m in verdict.metrics if m.judged]
    assert judged.metric == "median_ttft_ms" and verdict.reproduces
    rows = {r[1]: r[-1] for r in render_reproductions([verdict])}
    assert rows["median_ttft_ms"] == (
        "can't tell (outside tolerance; 3 v 3: cannot reach 5%; smallest p 0.1: add repeats); "
        "repeats unstable"
    )
    assert rows["output_throughput"] == "yes (not judged)"

    slower = _cells(
        tmp_path / "slower",
        _rows([*THROUGHPUT_RECORDED, 84.3], [100.0, 101.0, 99.0, 100.5]),
        _rows([*THROUGHPUT_RERUN, 85.1], [150.0, 151.0, 149.0, 150.5]),
        **expect,
    )
    verdict = reproduction(*slower, tolerance=0.05)
    assert not verdict.reproduces
    rows = {r[1]: r[-1] for r in render_reproductions([verdict])}
    assert rows["median_ttft_ms"] == (
        "NO (outside tolerance, significant (mann-whitney, p=0.0286; repeats of one start))"
    )


def test_one_repeat_a_side_falls_back_to_the_tolerance(tmp_path: Path) -> None:
    same = _cells(tmp_path / "same", _rows([84.0], [100.0]), _rows([85.0], [140.0]))
    assert reproduction(*same, tolerance=0.05).reproduces  # TTFT is not judged
    moved = _cells(tmp_path / "moved", _rows([84.0], [100.0]), _rows([70.0], [100.0]))
    verdict = reproduction(*moved, tolerance=0.05)
    assert not verdict.reproduces
    rows = {r[1]: r[-1] for r in render_reproductions([verdict])}
    assert rows["output_throughput"].startswith("NO (outside tolerance; one repeat on a side")
