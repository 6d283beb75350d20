"""An SLO search read back from a bundle (analyze/slo.py): the answer and its boundary, an
undecided boundary said, saturation found, the report's table and JSON, diff's capacity."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.diff.cells import diff_runs
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import load_run
from orchestrator.analyze.report.html import render_html
from orchestrator.analyze.report.tables import load_report, render_report
from orchestrator.analyze.slo import searches

SEARCH = {"axis": "rate", "slo": {"p99_ttft_ms": {"max": 500.0}}, "confidence": 0.95}


def level(rate: float, ttft: list[float], tput: float, **extra: Any) -> dict[str, Any]:
    """write_cell's kwargs for one level: p99 TTFT per repeat, a steady throughput."""
    cell = base_cell(f"r{rate:g}-00000000", axes={"rate": rate, "spec": "off"})
    cell["bench"] = {**cell["bench"], "repeats": 6, "search": SEARCH}
    repeats = [
        {"n": i + 1, "p99_ttft_ms": t, "request_throughput": tput, "median_ttft_ms": t / 2}
        for i, t in enumerate(ttft)
    ]
    return {"cell": cell, "repeats": repeats, **extra}


LOW = [100.0, 110, 105, 98, 120, 101]
NEAR = [480.0, 530, 470, 510, 495, 520]
HIGH = [900.0, 950, 1000, 980, 920, 990]


def run_of(tmp_path: Path, name: str, levels: list[dict[str, Any]]) -> Path:
    return write_run(tmp_path, name, levels)


def test_the_answer_is_the_last_level_holding_before_one_fails(tmp_path: Path) -> None:
    run = run_of(tmp_path, "a", [level(1, LOW, 1.0), level(2, LOW, 2.0), level(4, HIGH, 2.1)])
    (search,) = searches(load_run(run).cells)
    assert [lv.verdict for lv in search.levels] == ["holds", "holds", "fails"]
    assert search.answer is not None and search.answer.value == 2 and search.decided
    assert search.sentence() == (
        "highest rate meeting the SLO: 2 (p99_ttft_ms 103 ≤ 500; holds with 95% confidence "
        "over 6 repeats); 4 fails (p99_ttft_ms 965 > 500, 95% confidence)"
    )
    assert search.saturation_sentence() == (
        "saturated at rate=4: request_throughput +5% for rate +100%, while p99_ttft_ms +837%"
    )
    text = render_report(load_report(run))
    assert "SLO search along rate (spec=off) on gpu01: p99_ttft_ms ≤ 500" in text
    assert search.sentence() in text
    rows = json.loads(render_report(load_report(run), "json"))
    (capacity,) = [r for r in rows if r["metric"] == "slo_capacity"]
    assert capacity["value"] == 2 and capacity["confidence"] == 0.95
    assert capacity["slo_search"]["levels"][2]["verdict"] == "fails"
    assert capacity["cell_id"] == "r2-00000000" and capacity["spec"] == "off"
    page = render_html(load_report(run))
    assert '<section id="slo"><h2>SLO search</h2>' in page
    assert html.escape(search.sentence(), quote=False) in page


def test_a_boundary_its_repeats_could_not_decide_is_said(tmp_path: Path) -> None:
    run = run_of(tmp_path, "a", [level(1, LOW, 1.0), level(2, NEAR, 2.0), level(4, LOW, 4.0)])
    (search,) = searches(load_run(run).cells)
    assert [lv.verdict for lv in search.levels] == ["holds", None, "holds"]
    assert not search.decided and search.saturation is None
    assert search.sentence().endswith(
        "the boundary could not be decided at 2 (6 repeats leave it undecided); "
        "4 holds above it (not monotone)"
    )


def test_no_level_holding_and_a_failed_cell_are_said(tmp_path: Path) -> None:
    failed = level(1, [], 0.0, status="failed", reason="server died")
    failed["repeats"] = []
    run = run_of(tmp_path, "a", [failed, level(2, HIGH, 2.0)])
    (search,) = searches(load_run(run).cells)
    assert search.answer is None and search.levels[0].verdict is None
    assert "the cell failed: server died" in search.sentence()
    assert search.sentence().startswith("no rate meets the SLO")


def test_diff_gives_the_capacity_of_each_side(tmp_path: Path) -> None:
    a = run_of(tmp_path, "a", [level(1, LOW, 1.0), level(2, LOW, 2.0), level(4, HIGH, 2.1)])
    b = run_of(tmp_path, "b", [level(1, LOW, 1.0), level(2, HIGH, 1.1), level(4, HIGH, 1.1)])
    diff = diff_runs(load_run(a).cells, load_run(b).cells)
    (change,) = diff.capacity
    assert (change["a"], change["b"], change["change"]) == (2, 1, "lower")
    assert "slo_capacity (rate, spec=off on gpu01): 2 -> 1 (lower)" in render_diff(diff)
    assert json.loads(render_diff(diff, "json"))["capacity"][0]["b"] == 1
