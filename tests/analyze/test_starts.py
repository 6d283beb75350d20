"""Server starts of a run: counted per host from real bundles, with and without server sessions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from analyze_fixtures import base_cell, write_run

from orchestrator.analyze.starts import HostStarts, count_starts, run_starts
from orchestrator.results.archive import pack
from orchestrator.results.read import open_run

ROOT = Path(__file__).resolve().parents[2]


def _steps(start: float | None, ready: float | None, status: str = "ok") -> dict[str, Any]:
    """cell.json steps where the server was started at `start` and answered at `ready`."""
    steps: dict[str, Any] = {"repo": {"status": "ok", "start": 1.0, "end": 2.0}}
    if start is None:
        steps["server_start"] = {"status": "not_run"}
        steps["ready"] = {"status": "not_run"}
        return steps
    steps["server_start"] = {"status": status, "start": start, "end": start + 0.01}
    if ready is not None:
        steps["ready"] = {"status": "ok", "start": start + 0.01, "end": ready}
    return steps


def _session(key: str, index: int, first: str, started: bool) -> dict[str, Any]:
    return {"key": key, "index": index, "first_cell": first, "started_server": started}


def _cell(cell_id: str, host: str, **kwargs: Any) -> dict[str, Any]:
    return {"cell": base_cell(cell_id, host=host, axes={"n": cell_id}), **kwargs}


def _session_run(tmp_path: Path) -> Path:
    """gpu01: one session of 3 cells, then a restart after the server died, for 2 more cells;
    gpu02: one session of 2 cells; plus a cell that runs no server."""
    reused = {"status": "skipped"}
    cells = [
        _cell("a0", "gpu01", steps=_steps(100.0, 130.5), session=_session("k1", 0, "a0", True)),
        _cell(
            "a1",
            "gpu01",
            steps={"server_start": reused, "ready": {"status": "ok", "start": 131, "end": 131.1}},
            session=_session("k1", 1, "a0", False),
        ),
        _cell(
            "a2",
            "gpu01",
            status="failed",
            reason="server died",
            steps={"server_start": reused},
            session=_session("k1", 2, "a0", False),
        ),
        # the server died in a2: a3 starts it again for the rest of the session
        _cell("a3", "gpu01", steps=_steps(200.0, 210.25), session=_session("k1", 3, "a0", True)),
        _cell(
            "a4", "gpu01", steps={"server_start": reused}, session=_session("k1", 4, "a0", False)
        ),
        _cell("b0", "gpu02", steps=_steps(50.0, 70.0), session=_session("k2", 0, "b0", True)),
        _cell(
            "b1", "gpu02", steps={"server_start": reused}, session=_session("k2", 1, "b0", False)
        ),
    ]
    no_server = base_cell("c0", host="gpu02", axes={"n": "c0"})
    no_server["server"] = None
    cells.append({"cell": no_server, "steps": _steps(None, None)})
    return write_run(tmp_path, "sessions", cells)


def test_sessions_count_one_start_per_session_and_each_restart(tmp_path: Path) -> None:
    with open_run(_session_run(tmp_path)) as run:
        starts = run_starts(run)
    assert starts.hosts == (
        HostStarts("gpu01", starts=2, cells=5, seconds=30.5 + 10.25),
        HostStarts("gpu02", starts=1, cells=2, seconds=20.0),
    )
    assert (starts.starts, starts.cells, starts.untimed) == (3, 7, 0)
    assert starts.text() == "3 for 7 cells, 60.8 s start-up"
    assert starts.host_texts() == {
        "gpu01": "2 for 5 cells, 40.8 s start-up",
        "gpu02": "1 for 2 cells, 20.0 s start-up",
    }


def test_a_bundle_without_sessions_counts_every_server_that_started(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path,
        "old",
        [
            _cell("x0", "gpu01", steps=_steps(10.0, 15.0)),
            _cell("x1", "gpu01", steps=_steps(20.0, 22.5)),
            # the server never started: a cell with a server, but no start
            _cell("x2", "gpu01", status="failed", steps=_steps(30.0, None, status="failed")),
            # stopped at the repo step: the server step never ran
            _cell("x3", "gpu01", status="failed", steps=_steps(None, None)),
        ],
    )
    with open_run(run_dir) as run:
        starts = run_starts(run)
    assert starts.hosts == (HostStarts("gpu01", starts=2, cells=4, seconds=7.5),)
    assert starts.text() == "2 for 4 cells, 7.5 s start-up"


def test_a_start_without_its_ready_time_is_counted_and_said_untimed() -> None:
    cell = base_cell("u0", host="gpu01")
    cut_short = {
        "cell": cell,
        "steps": _steps(10.0, None),  # interrupted before the server answered
        "session": _session("k", 0, "u0", True),
    }
    timed = {"cell": cell, "steps": _steps(10.0, 12.0), "session": _session("k", 0, "u0", True)}
    starts = count_starts([cut_short, timed])
    assert (starts.starts, starts.cells, starts.untimed) == (2, 2, 1)
    assert starts.seconds == 2.0
    assert starts.text() == "2 for 2 cells, 2.0 s start-up (1 of them not timed)"


def test_session_says_what_the_steps_do_not() -> None:
    # a reused server's cell may record its own server step as ok: the session decides
    steps = _steps(10.0, 12.0)
    reused = {"cell": base_cell(host="h"), "steps": steps, "session": _session("k", 1, "z", False)}
    assert count_starts([reused]).starts == 0
    assert count_starts([{"cell": base_cell(host="h"), "steps": steps}]).starts == 1


def test_no_cells_make_no_starts() -> None:
    starts = count_starts([])
    assert (starts.starts, starts.cells, starts.seconds, starts.hosts) == (0, 0, 0.0, ())
    assert starts.text() == "0 for 0 cells, 0.0 s start-up"


def test_a_packed_run_reads_the_same(tmp_path: Path) -> None:
    run_dir = _session_run(tmp_path)
    archive = pack(run_dir)
    with open_run(archive) as run:
        assert run_starts(run).text() == "3 for 7 cells, 60.8 s start-up"


def test_orch_show_prints_the_starts_per_host(tmp_path: Path) -> None:
    run_dir = _session_run(tmp_path)
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "show", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "starts    3 for 7 cells, 60.8 s start-up" in lines, shown.stdout
    assert "            gpu01  2 for 5 cells, 40.8 s start-up" in lines, shown.stdout
    assert "            gpu02  1 for 2 cells, 20.0 s start-up" in lines, shown.stdout
