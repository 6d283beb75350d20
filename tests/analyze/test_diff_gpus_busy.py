"""`orch diff` names a stray GPU process: the hardware section compares the compute apps and the
GPU memory in use that `snapshot.pre.json` recorded before the server started."""

from __future__ import annotations

from pathlib import Path

from analyze_fixtures import gpu, snapshot, write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.host import BUSY_BEFORE
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence

GOOD = [{"output_throughput": v} for v in (94.1, 93.8, 94.3, 94.0, 93.9)]
BAD = [{"output_throughput": v} for v in (60.2, 60.9, 59.8, 60.4, 60.1)]
STRAY = [
    {"pid": 4242, "process_name": "python", "used_memory_mib": 43000},
    {"pid": 4243, "process_name": "python", "used_memory_mib": 43000},
]


def _busy_snapshot() -> dict:
    snap = snapshot(gpus=2, compute_apps=STRAY)
    snap["gpus"]["devices"] = [gpu(i, **{"memory.used": 43000}) for i in range(2)]
    return snap


def test_a_stray_gpu_process_before_start_is_named(tmp_path: Path) -> None:
    a = write_cell(tmp_path / "a", repeats=GOOD, snapshot_pre=snapshot(gpus=2, compute_apps=[]))
    b = write_cell(tmp_path / "b", repeats=BAD, snapshot_pre=_busy_snapshot())
    diff = diff_cells(CellEvidence.load(a), CellEvidence.load(b))
    assert "hardware" in [s.name for s in diff.differing]
    entries = {e.key: e for e in diff.section("hardware").entries}
    busy = entries[BUSY_BEFORE]
    assert busy.a == "none"
    assert busy.b.startswith("2 holding 86000 MiB: pid 4242 python (43000 MiB)")
    assert entries["GPU 1 memory.used before start"].b == 43000
    assert not entries["GPU 1 memory.used before start"].within_tolerance
    text = render_diff(diff)
    assert "GPU processes before start: none -> 2 holding 86000 MiB" in text, text


def test_other_pids_holding_the_same_memory_are_no_difference(tmp_path: Path) -> None:
    other = [dict(app, pid=app["pid"] + 100) for app in STRAY]
    a = write_cell(tmp_path / "a", repeats=GOOD, snapshot_pre=_busy_snapshot())
    b_snap = _busy_snapshot()
    b_snap["compute_apps"] = other
    b = write_cell(tmp_path / "b", repeats=GOOD, snapshot_pre=b_snap)
    diff = diff_cells(CellEvidence.load(a), CellEvidence.load(b))
    assert diff.section("hardware").entries == []


def test_memory_within_noise_is_a_small_change(tmp_path: Path) -> None:
    a = write_cell(tmp_path / "a", repeats=GOOD, snapshot_pre=snapshot(gpus=1))
    snap = snapshot(gpus=1)
    snap["gpus"]["devices"] = [gpu(0, **{"memory.used": 300})]
    b = write_cell(tmp_path / "b", repeats=GOOD, snapshot_pre=snap)
    diff = diff_cells(CellEvidence.load(a), CellEvidence.load(b))
    (entry,) = diff.section("hardware").entries
    assert entry.key == "GPU 0 memory.used before start" and entry.within_tolerance
