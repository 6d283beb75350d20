"""A resumed run meets the runners its dead controller left behind, still cleaning up.

`orch run --resume` starts new runners while old ones (stdin EOF) are still stopping their
servers: the same cell must not be run twice at once, a finished result is not run again, and
the other cells wait for the old server instead of failing on it for good.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import (
    RUN_ID,
    RunnerProcess,
    alive,
    archive_path,
    cell_dir,
    free_port,
    load,
    make_cell,
    payload,
    port_free,
    run_cell,
    server_pid_on,
    via_shell,
)

X = "x-1-0000abcd"
Y = "y-2-0000beef"


def _bench_started(event: dict[str, Any]) -> bool:
    return (
        event.get("event") == "step"
        and event.get("step") == "bench"
        and (event.get("status") == "start")
    )


def _slow_stopping_runner(home: Path, port: int, cell_id: str = X) -> RunnerProcess:
    """A runner whose controller just went away, mid-bench, with a server slow to stop."""
    cell = make_cell(
        port,
        cell_id=cell_id,
        server_args=("--term-delay", "3"),
        stop_grace=10.0,
        bench_args=("--sleep", "30"),
    )
    runner = RunnerProcess(home, payload(cell))
    runner.wait_event(_bench_started)
    runner.close_stdin()
    return runner


def test_same_cell_waits_for_the_old_runner_then_reruns_an_interrupted_cell(home: Path) -> None:
    port = free_port()
    old = _slow_stopping_runner(home, port)
    new = RunnerProcess(home, payload(make_cell(port, repeats=1)))
    wait = new.wait_event(lambda e: e.get("event") == "wait")
    assert wait["for"] == "cell lock" and wait["pid"] == old.proc.pid
    # The old runner's cell directory is its own until it is done.
    old.finish(30)
    assert old.done["status"] == "interrupted" and old.done["archive"]
    new.finish(30)
    assert new.done["status"] == "passed", new.done
    assert "reused" not in new.done
    cell_json = load(cell_dir(home) / "cell.json")
    assert cell_json["status"] == "passed" and cell_json["runner"]["pid"] == new.proc.pid
    assert not (home / ".orch" / "runs" / RUN_ID / f".{X}.partial").exists()
    assert port_free(port)


@pytest.mark.parametrize("status", ["passed", "failed"])
def test_a_cell_finished_after_collect_is_not_run_again(home: Path, status: str) -> None:
    port = free_port()
    bench_args = ("--rc", "4") if status == "failed" else ()
    first = run_cell(home, make_cell(port, repeats=1, bench_args=bench_args))
    assert first.done["status"] == status
    archive = archive_path(home)
    before = archive.read_bytes()
    events_before = (cell_dir(home) / "events.jsonl").read_bytes()

    again = run_cell(home, make_cell(port, repeats=1))
    assert [e["event"] for e in again.events] == ["done"]
    done = again.done
    assert done["status"] == status and done["reused"] is True
    assert done["archive"] == first.done["archive"]
    assert done["reason"] == first.done["reason"] and done["step"] == first.done["step"]
    assert again.proc.returncode == (0 if status == "passed" else 1)
    assert archive.read_bytes() == before
    assert (cell_dir(home) / "events.jsonl").read_bytes() == events_before

    # Renamed but not archived yet (the old runner died in between): archived, then reused.
    archive.unlink()
    third = run_cell(home, make_cell(port, repeats=1))
    assert third.done["reused"] is True and third.done["status"] == status
    assert archive.is_file()
    assert load(cell_dir(home) / "cell.json")["runner"]["pid"] == first.proc.pid


def test_a_runner_that_never_lets_go_fails_the_cell_clearly(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_RUNNER_WAIT_MARGIN", "1")
    run_dir = home / ".orch" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    fd = os.open(run_dir / f".{X}.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"424242\n")
        started = time.monotonic()
        runner = run_cell(home, make_cell(free_port(), stop_grace=0.5))
        assert 1.4 < time.monotonic() - started < 15
    finally:
        os.close(fd)
    done = runner.done
    assert done["status"] == "failed" and done["archive"] is None
    assert done["reason"].startswith("another runner of this cell is still running (pid 424242)")
    assert runner.proc.returncode == 1
    assert "another runner of this cell is still running" in runner.stderr_text()
    assert not (run_dir / f".{X}.partial").exists() and not (run_dir / X).exists()


def test_other_cells_wait_for_a_server_its_runner_is_still_stopping(home: Path) -> None:
    old_port = free_port()
    old = _slow_stopping_runner(home, old_port)
    record = next((home / ".orch" / "servers").glob("*.json"))
    assert load(record)["runner_pid"] == old.proc.pid
    new = RunnerProcess(home, payload(make_cell(free_port(), cell_id=Y, repeats=1)))
    wait = new.wait_event(lambda e: e.get("event") == "wait")
    assert wait["for"] == "server" and wait["cell_id"] == X
    assert wait["runner_pid"] == old.proc.pid
    new.finish(40)
    old.finish(30)
    assert new.done["status"] == "passed", new.done
    # The old runner stopped its own server, gracefully, and archived its cell.
    assert old.done["status"] == "interrupted"
    stop = load(cell_dir(home, X) / "cell.json")["stop"]
    assert stop["graceful"] is True
    logged = (cell_dir(home, Y) / "events.jsonl").read_text()
    assert '"event": "wait"' in logged


def test_an_orphan_server_of_this_run_is_stopped_by_the_next_cell(home: Path) -> None:
    port = free_port()
    # Started through `sh -c`, so the server outlives its killed runner (the shell does not).
    cell = make_cell(port, server_args=("--child", "inherit"), bench_args=("--sleep", "30"))
    first = RunnerProcess(home, payload(via_shell(cell)))
    first.wait_event(_bench_started)
    server_pid = server_pid_on(port)
    # SIGKILL, the session guard first (as if it could not help): the runner is gone, its
    # server (and the child) an orphan of this run for the next cell's preflight
    first.kill_guard_then_runner()
    record = next((home / ".orch" / "servers").glob("*.json"))
    shell_pid = load(record)["pid"]
    assert alive(server_pid)

    second = run_cell(home, make_cell(free_port(), cell_id=Y, repeats=1))
    assert second.done["status"] == "passed", second.done
    assert not alive(server_pid) and not record.exists()
    assert port_free(port)
    preflight = next(
        e for e in second.events if e.get("step") == "preflight" and e["status"] == "ok"
    )
    (orphan,) = preflight["detail"]["stopped_orphans"]
    assert orphan["cell_id"] == X and orphan["pid"] == shell_pid and orphan["killed"] is False
    assert server_pid in orphan["processes"]
