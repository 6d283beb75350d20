"""metrics.json: per-repeat values and their summary in the documented shape."""

from __future__ import annotations

import json
import math
from pathlib import Path

from orchestrator.analyze.metrics import metrics_document, summarize, write_metrics_json


def test_summarize() -> None:
    repeats = [
        {"n": 1, "tput": 90.0, "ttft": 10.0},
        {"n": 2, "tput": 94.0},
        {"n": 3, "tput": 92.0, "ttft": math.nan},
    ]
    summary = summarize(repeats)
    assert summary["tput"] == {
        "median": 92.0,
        "min": 90.0,
        "max": 94.0,
        "mean": 92.0,
        "stdev": 2.0,
        "n": 3,
    }
    assert summary["ttft"]["n"] == 1  # NaN is not a measurement
    assert "n" not in summary
    assert summarize([{"x": "text"}]) == {}


def test_document_shape_and_file(tmp_path: Path) -> None:
    doc = metrics_document(
        [{"tput": 90.0}, {"tput": 94.0, "bad": math.inf}],
        sources={"adapter": "sglang.bench_serving"},
    )
    assert doc["schema_version"] == 1
    assert doc["repeats"] == [{"n": 1, "tput": 90.0}, {"n": 2, "tput": 94.0, "bad": None}]
    assert doc["summary"]["tput"]["median"] == 92.0 and "bad" not in doc["summary"]
    assert doc["expectations"] == []
    assert doc["sources"] == {"adapter": "sglang.bench_serving"}
    expectation = {"metric": "tput", "ok": True, "bound": ">= 85", "value": 92.0}
    path = tmp_path / "metrics.json"
    written = write_metrics_json(path, [{"tput": 90.0}], expectations=[expectation])
    assert json.loads(path.read_text()) == written
    assert written["expectations"] == [expectation]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
