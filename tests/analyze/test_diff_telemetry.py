"""`orch diff` names a throttling episode from the run's telemetry first in the hardware section,
with the seconds it overlapped measured repeats, above the metric change it explains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze_fixtures import write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.host import THROTTLED
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence

FAST = [{"output_throughput": v, "energy_j": 900.0 + v} for v in (94.1, 93.8, 94.3, 94.0, 93.9)]
SLOW = [{"output_throughput": v, "energy_j": 1100.0 + v} for v in (60.2, 60.9, 59.8, 60.4, 60.1)]
EPISODE = {
    "start": 1000.0,
    "seconds": 10.0,
    "reasons": ["sw_power_cap"],
    "gpus": [2, 3],
    "sm_clock_before_mhz": 1980.0,
    "sm_clock_min_mhz": 1100.0,
    "clock_drop_mhz": 880.0,
    "measured_overlap_s": 9.5,
    "measured_repeats": [2, 3],
}


def _cell(root: Path, repeats: list[dict[str, float]], episodes: list[Any] | None) -> Path:
    path = write_cell(root, repeats=repeats)
    if episodes is not None:
        doc = json.loads((path / "metrics.json").read_text())
        doc["telemetry"] = {"file": "telemetry.csv", "gpus": [0, 1, 2, 3], "episodes": episodes}
        (path / "metrics.json").write_text(json.dumps(doc))
    return path


def test_a_throttle_episode_is_the_first_difference_with_its_measured_seconds(
    tmp_path: Path,
) -> None:
    a = CellEvidence.load(_cell(tmp_path / "a", FAST, []))
    b = CellEvidence.load(_cell(tmp_path / "b", SLOW, [EPISODE]))
    diff = diff_cells(a, b)
    assert [s.name for s in diff.differing] == ["hardware", "metrics"]
    first = diff.section("hardware").entries[0]
    assert first.key == THROTTLED and first.a == "none"
    assert first.b == (
        "sw_power_cap on GPU 2, 3 for 10.0 s (9.5 s in measured repeat 2, 3), "
        "SM clock 1980 -> 1100 MHz"
    )
    assert first.note == "B: 9.5 s of measured repeats throttled"
    assert not first.within_tolerance
    text = render_diff(diff)
    assert text.index(THROTTLED) < text.index("output_throughput")
    assert text.index(THROTTLED) < text.index("energy_j")
    assert "9.5 s in measured repeat 2, 3" in text


def test_no_episode_on_either_side_or_no_telemetry_adds_nothing(tmp_path: Path) -> None:
    a = CellEvidence.load(_cell(tmp_path / "a", FAST, []))
    b = CellEvidence.load(_cell(tmp_path / "b", FAST, None))
    assert diff_cells(a, b).differing == []
    c = CellEvidence.load(_cell(tmp_path / "c", FAST, [EPISODE]))
    entry = diff_cells(b, c).section("hardware").entries[0]
    assert (entry.key, entry.a) == (THROTTLED, "no telemetry")
    between = dict(EPISODE, measured_overlap_s=0.0, measured_repeats=[])
    d = CellEvidence.load(_cell(tmp_path / "d", FAST, [between]))
    entry = diff_cells(a, d).section("hardware").entries[0]
    assert (
        "(outside measured repeats)" in entry.b
        and entry.note == "B: 0.0 s of measured repeats throttled"
    )
