"""Cells of two server sessions: the session's own folder is no server-flag change, and a
refused cache reset (the cell ran on a warm cache) is named where people look."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analyze_fixtures import write_cell

from orchestrator.analyze.diff.cells import diff_cells
from orchestrator.analyze.diff.render import render_diff
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.results.records import CellRecord, cache_state
from orchestrator.results.show import describe_cell

GOOD = [{"output_throughput": v} for v in (94.1, 93.8, 94.3, 94.0, 93.9)]
RESET_URL = "http://127.0.0.1:8000/reset_prefix_cache"
REFUSED = {"reset": {"reset": {"status": 404, "body": "", "url": RESET_URL, "ok": False}}}


def _cell(root: Path, cwd: str, session: dict[str, Any]) -> Path:
    path = write_cell(root, repeats=GOOD, session=session)
    server = json.loads((path / "server.json").read_text())
    (path / "server.json").write_text(json.dumps({**server, "cwd": cwd}))
    return path


def test_two_sessions_folders_are_no_cwd_change(tmp_path: Path) -> None:
    runs = "/home/u/.orch/runs/20261203-101010-demo-0001"
    a = _cell(tmp_path / "a", f"{runs}/.x-1-1a2b3c4d.server", {"started_server": True})
    b = _cell(tmp_path / "b", f"{runs}/.x-2-5e6f7a8b.server", {"started_server": True})
    diff = diff_cells(CellEvidence.load(a), CellEvidence.load(b))
    assert "server_flags" not in [s.name for s in diff.differing]
    other = _cell(tmp_path / "c", "/srv/elsewhere", {"started_server": True})
    moved = diff_cells(CellEvidence.load(a), CellEvidence.load(other))
    (flags,) = [s for s in moved.differing if s.name == "server_flags"]
    assert [e.key for e in flags.entries] == ["cwd"]


def test_a_refused_reset_is_a_server_difference(tmp_path: Path) -> None:
    a = _cell(tmp_path / "a", "/srv/x", {"started_server": True})
    b = _cell(tmp_path / "b", "/srv/x", {"started_server": False, **REFUSED})
    diff = diff_cells(CellEvidence.load(a), CellEvidence.load(b))
    (flags,) = [s for s in diff.differing if s.name == "server_flags"]
    (entry,) = flags.entries
    assert entry.key == "cache before the bench" and entry.a == "fresh start"
    assert str(entry.b).startswith(f"NOT reset (HTTP 404 from {RESET_URL})")
    assert "warm cache" in render_diff(diff)


def test_cache_state_in_words() -> None:
    assert cache_state({}) is None
    assert cache_state({"session": {"started_server": True}}) == "fresh start"
    ok = {"reset": {"reset": {"status": 200, "ok": True, "url": RESET_URL}}}
    assert cache_state({"session": {"started_server": False, **ok}}) == "reset"
    assert cache_state({"session": {"started_server": False}}) == "shared, no reset declared"
    between = {"reset": {"between": {"argv": ["true"], "rc": 0}}}
    assert cache_state({"session": between}) == "shared (server.between ran, no reset)"
    down = {"reset": {"reset": {"error": "URLError: refused", "ok": False, "url": RESET_URL}}}
    assert "NOT reset (URLError: refused" in str(cache_state({"session": down}))


def test_show_says_the_cache_was_not_reset(tmp_path: Path) -> None:
    path = _cell(tmp_path / "a", "/srv/x", {"started_server": False, **REFUSED})
    text = describe_cell(CellRecord(path))
    assert f"cache     NOT reset (HTTP 404 from {RESET_URL})" in text
