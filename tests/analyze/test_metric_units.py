"""metrics.json records each metric's unit, and a client/server output-length mismatch is a flag
that `orch show` prints (issue 11 items 7 and 9), through the real verdict and show code."""

from __future__ import annotations

import json
from pathlib import Path

from analyze_fixtures import base_cell, write_cell

from orchestrator.analyze.verdict import score_cell
from orchestrator.cell import Cell
from orchestrator.results.layout import METRICS_JSON
from orchestrator.results.records import CellRecord
from orchestrator.results.show import describe_cell

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang" / "bench_serving.2026.jsonl"


def test_units_are_recorded_and_a_length_mismatch_is_flagged(tmp_path: Path) -> None:
    spec = base_cell()
    spec["bench"]["repeats"] = 1
    spec["bench"]["result_file"] = "result.jsonl"
    spec["bench"]["metrics"] = {"my_gauge": r"gauge (\d+)"}
    cell_dir = write_cell(tmp_path, cell=spec)
    row = json.loads(FIXTURE.read_text())
    row.update(total_output_tokens=210, total_output_tokens_retokenized=82)
    repeat = cell_dir / "bench" / "1"
    repeat.mkdir(parents=True)
    (repeat / "result.jsonl").write_text(json.dumps(row) + "\n")
    (repeat / "stdout").write_text("gauge 7\n")
    verdict = score_cell(cell_dir, Cell.model_validate(spec))
    units = verdict.metrics["units"]
    assert units["output_throughput"] == "tok/s" and units["median_ttft_ms"] == "ms"
    assert units["total_output_tokens"] == "tokens" and units["accept_length"] == "tokens/step"
    assert units["my_gauge"] is None  # a regex: its unit is the user's
    assert set(units) >= set(verdict.metrics["summary"])
    (cell_dir / METRICS_JSON).write_text(json.dumps(verdict.metrics))
    shown = describe_cell(CellRecord(cell_dir))
    assert "flag: retokenized output 82 tokens vs the server's 210" in shown, shown
