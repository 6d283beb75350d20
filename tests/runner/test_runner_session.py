"""Server sessions and streamed archives: the real runner runs a queue of cells in one process."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

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
)

from orchestrator.execute.apply.stream import ArchiveStream
from orchestrator.runner.procs import proc_info


def queue_payload(cells: list[dict[str, Any]], sessions: list[str], **extra: Any) -> dict[str, Any]:
    """`run`'s payload for a queue: each cell with its session key."""
    data = payload(cells[0])
    del data["cell"]
    data["queue"] = [{"cell": c, "session": k} for c, k in zip(cells, sessions, strict=True)]
    data.update(extra)
    return data


def run_queue(home: Path, data: dict[str, Any], timeout: float = 60.0) -> RunnerProcess:
    runner = RunnerProcess(home, data)
    runner.finish(timeout)
    return runner


def dones(runner: RunnerProcess) -> dict[str, dict[str, Any]]:
    return {e["cell"]: e for e in runner.events if e["event"] == "done"}


def cells_of_one_server(port: int, n: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [make_cell(port, cell_id=f"x-{i}-0000abc{i}", **kwargs) for i in range(n)]


def test_cells_of_one_session_share_one_server_start(home: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 3, repeats=1)
    runner = run_queue(home, queue_payload(cells, ["s1"] * 3))
    assert {cid: d["status"] for cid, d in dones(runner).items()} == {
        c["id"]: "passed" for c in cells
    }
    docs = [load(cell_dir(home, c["id"]) / "cell.json") for c in cells]
    first, second, third = docs
    assert first["session"]["started_server"] is True and first["session"]["index"] == 0
    assert first["steps"]["server_start"]["status"] == "ok"
    assert first["steps"]["stop"]["status"] == "skipped"
    pid = first["session"]["server_pid"]
    for i, doc in enumerate((second, third), start=1):
        assert doc["session"]["started_server"] is False and doc["session"]["index"] == i
        assert doc["session"]["first_cell"] == cells[0]["id"]
        assert doc["session"]["server_pid"] == pid
        assert doc["steps"]["server_start"]["status"] == "skipped"
        assert doc["steps"]["server_start"]["detail"]["shared_with"] == cells[0]["id"]
        assert doc["ready"]["shared"] is True
        # the server.json of a later cell points at the start
        assert load(cell_dir(home, doc["cell"]["id"]) / "server.json")["pid"] == pid
    assert second["steps"]["stop"]["status"] == "skipped"
    assert third["steps"]["stop"]["status"] == "ok"  # the last cell stops it
    assert not alive(pid) and port_free(port)
    assert not list((home / ".orch" / "servers").glob("*.json"))
    # each later server.log: the start-up part, orch's note, then only its own part
    first_log = (cell_dir(home, cells[0]["id"]) / "server.log").read_text()
    later_log = (cell_dir(home, cells[2]["id"]) / "server.log").read_text()
    assert "listening on" in first_log and "listening on" in later_log
    assert f"server started by cell {cells[0]['id']}" in later_log
    assert "[orch]" not in first_log
    log = third["session"]["log"]
    assert log["from"] == second["session"]["log"]["to"] and log["to"] >= log["from"]
    # the session's own log is gone once its server stopped
    assert not list((home / ".orch" / "runs").rglob(".*.server.log"))


def test_a_server_that_dies_mid_session_fails_that_cell_and_is_started_again(home: Path) -> None:
    port = free_port()
    # Dies 2 s after start: the first cell's bench (1 repeat) ends well before; the second
    # cell's bench sleeps past it.
    cells = [
        make_cell(port, cell_id="x-0-0000abc0", server_args=("--die-after", "2"), repeats=1),
        make_cell(
            port,
            cell_id="x-1-0000abc1",
            server_args=("--die-after", "2"),
            repeats=1,
            bench_args=("--sleep", "3"),
        ),
        make_cell(port, cell_id="x-2-0000abc2", server_args=("--die-after", "2"), repeats=1),
    ]
    runner = run_queue(home, queue_payload(cells, ["s1"] * 3))
    status = {cid: d["status"] for cid, d in dones(runner).items()}
    assert status["x-0-0000abc0"] == "passed"
    assert status["x-1-0000abc1"] == "failed"
    assert "server exited" in dones(runner)["x-1-0000abc1"]["reason"]
    third = load(cell_dir(home, "x-2-0000abc2") / "cell.json")
    # started anew for the rest of the session
    assert third["session"]["started_server"] is True
    assert third["steps"]["server_start"]["status"] == "ok"


def test_restart_per_cell_starts_the_server_for_every_cell(home: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 2, repeats=1)
    for c in cells:
        c["server"]["restart"] = "per_cell"
    run_queue(home, queue_payload(cells, ["s1", "s1"]))
    for c in cells:
        doc = load(cell_dir(home, c["id"]) / "cell.json")
        assert doc["status"] == "passed"
        assert doc["session"]["started_server"] is True
        assert doc["steps"]["stop"]["status"] == "ok"


def test_different_sessions_do_not_share(home: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 2, repeats=1)
    run_queue(home, queue_payload(cells, ["s1", "s2"]))
    for c in cells:
        assert load(cell_dir(home, c["id"]) / "cell.json")["session"]["started_server"] is True


def test_between_command_and_reset_run_between_cells(home: Path) -> None:
    port = free_port()
    marker = home / "between-ran"
    cells = cells_of_one_server(port, 2, repeats=1)
    for c in cells:
        c["server"]["between"] = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"]
    data = queue_payload(cells, ["s1", "s1"])
    # the test server has no POST endpoint: the reset is noted as not done, the cell still runs
    data["queue"][1]["reset"] = {"url": f"http://127.0.0.1:{port}/flush_cache"}
    run_queue(home, data)
    assert marker.read_text() == "x"  # once: between the two cells, not before the first
    second = load(cell_dir(home, cells[1]["id"]) / "cell.json")
    assert second["status"] == "passed"
    assert second["session"]["reset"]["reset"]["ok"] is False
    assert second["session"]["reset"]["between"]["rc"] == 0


def test_a_failing_between_command_fails_the_cell(home: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 2, repeats=1)
    for c in cells:
        c["server"]["between"] = [sys.executable, "-c", "import sys; print('no'); sys.exit(4)"]
    runner = run_queue(home, queue_payload(cells, ["s1", "s1"]))
    second = dones(runner)[cells[1]["id"]]
    assert second["status"] == "failed" and second["step"] == "ready"
    assert "server.between" in second["reason"] and "no" in second["reason"]


def test_archives_stream_back_whole(home: Path, tmp_path: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 2, repeats=1)
    runner = run_queue(home, queue_payload(cells, ["s1", "s1"], stream=True))
    stream = ArchiveStream(tmp_path)
    got: dict[str, Path | str] = {}
    for event in runner.events:
        if event["event"].startswith("archive"):
            result = stream.feed(event)
            if result is not None:
                got[result[0]] = result[1]
    assert set(got) == {c["id"] for c in cells}
    for c in cells:
        local = got[c["id"]]
        assert isinstance(local, Path)
        assert local.read_bytes() == archive_path(home, c["id"]).read_bytes()
        with tarfile.open(local) as tar:
            assert f"{c['id']}/cell.json" in tar.getnames()
    # every archive line comes after its cell's done event
    order = [(e["event"], e.get("cell")) for e in runner.events]
    for c in cells:
        assert order.index(("done", c["id"])) < order.index(("archive", c["id"]))


def test_a_damaged_stream_is_refused(tmp_path: Path) -> None:
    data = b"not really a tarball"
    stream = ArchiveStream(tmp_path)
    head = {"event": "archive", "cell": "c", "bytes": len(data)}
    assert stream.feed({**head, "sha256": hashlib.sha256(b"other").hexdigest()}) is None
    chunk = base64.b64encode(data).decode()
    assert stream.feed({"event": "archive_data", "cell": "c", "data": chunk}) is None
    cid, why = stream.feed({"event": "archive_end", "cell": "c"}) or ("", "")
    assert cid == "c" and isinstance(why, str) and "damaged" in why
    assert stream.feed({"event": "archive", "cell": "d", "error": "gone"}) == (
        "d",
        "the runner could not read the archive: gone",
    )


def test_stdin_eof_stops_the_queue_after_the_cell_in_flight(home: Path) -> None:
    port = free_port()
    cells = cells_of_one_server(port, 3, repeats=1, bench_args=("--sleep", "5"))
    runner = RunnerProcess(home, queue_payload(cells, ["s1"] * 3, stream=True))
    runner.wait_event(lambda e: e.get("step") == "bench" and e.get("status") == "start")
    runner.close_stdin()
    events = runner.finish(30)
    done = {e["cell"]: e for e in events if e["event"] == "done"}
    assert list(done) == [cells[0]["id"]] and done[cells[0]["id"]]["status"] == "interrupted"
    assert any(e["event"] == "archive_end" for e in events)  # the interrupted cell still comes
    assert port_free(port)


def test_facts_arrive_in_the_stream(home: Path) -> None:
    cells = [make_cell(None, cell_id="x-0-0000abc0", repeats=1)]
    runner = run_queue(home, queue_payload(cells, ["a"], facts={}))
    (facts,) = [e for e in runner.events if e["event"] == "facts"]
    assert isinstance(facts["data"], dict) and "os" in json.dumps(facts["data"])


def test_tar_roundtrip_of_streamed_bytes(tmp_path: Path) -> None:
    # a real archive through ArchiveStream in several chunks
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("c/cell.json")
        body = b"{}" * 70000
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    data = buffer.getvalue()
    stream = ArchiveStream(tmp_path)
    stream.feed(
        {
            "event": "archive",
            "cell": "c",
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    )
    for i in range(0, len(data), 1000):
        chunk = base64.b64encode(data[i : i + 1000]).decode()
        stream.feed({"event": "archive_data", "cell": "c", "data": chunk})
    _cid, path = stream.feed({"event": "archive_end", "cell": "c"}) or ("", "")
    assert isinstance(path, Path) and path.read_bytes() == data


def test_a_server_that_dies_after_a_cell_is_said_in_that_cells_record(home: Path) -> None:
    """Issue 23 item 24: the server died after cell 0 had passed with it; cell 1 failed with
    'server exited between cells' and cell 0's record said nothing."""
    port = free_port()
    cells = cells_of_one_server(port, 2, repeats=1, server_args=("--die-after", "2"))
    # cell 1's `between` outlives the server: it is found gone right after it
    cells[1]["server"]["between"] = [sys.executable, "-c", "import time; time.sleep(3)"]
    runner = run_queue(home, queue_payload(cells, ["s1", "s1"]))
    first, second = (dones(runner)[c["id"]] for c in cells)
    assert first["status"] == "passed", first
    assert second["status"] == "failed" and second["step"] == "ready", second
    assert "between cells of its session, after cell x-0-0000abc0" in second["reason"]
    (note,) = [e for e in runner.events if e["event"] == "note"]
    assert note["cell"] == "x-0-0000abc0"
    assert "server exited" in note["note"] and "before cell x-1-0000abc1" in note["note"]
    doc = load(cell_dir(home, "x-1-0000abc1") / "cell.json")
    assert doc["session"]["after_cell"] == "x-0-0000abc0"


def test_session_folders_go_with_their_session_and_a_killed_ones_with_the_next_run(
    home: Path,
) -> None:
    """Issue 23 item 24: a session killed with -9 left runs/<run>/.<cell>.server/ for good."""
    run_dir = home / ".orch" / "runs" / RUN_ID
    stale = run_dir / ".x-9-0000dead.server"
    stale.mkdir(parents=True)
    (stale / "left.txt").write_text("by a runner killed with -9")
    # A session of another cell of this run whose process still lives (its runner: this test)
    live = run_dir / ".x-8-0000b0b0.server"
    live.mkdir()
    own = proc_info(os.getpid())
    assert own is not None
    marker = f"{RUN_ID}/x-8-0000b0b0/{os.getpid()}-{own.start}-0000beef"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, "ORCH_CELL_MARKER": marker},
    )
    try:
        port = free_port()
        cells = cells_of_one_server(port, 2, repeats=1)
        runner = run_queue(home, queue_payload(cells, ["s1", "s1"]))
        assert holder.poll() is None  # a live run's process is not touched
    finally:
        holder.kill()
        holder.wait()
    assert {d["status"] for d in dones(runner).values()} == {"passed"}
    assert not stale.exists() and live.is_dir()
    # the session's own folder went with it too
    assert list(run_dir.glob(".*.server")) == [live]
    first = load(cell_dir(home, "x-0-0000abc0") / "cell.json")
    assert first["steps"]["preflight"]["detail"]["stale_session_folders"] == [stale.name]
