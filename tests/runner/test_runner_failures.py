"""Each way a cell goes wrong gives its own clear reason, and the host is left clean."""

from __future__ import annotations

import json
import shlex
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import (
    RUNNER,
    RUNNER_PYZ,
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
    runner_env,
    server_pid_on,
    via_shell,
)

from orchestrator.cell import NodePart


def _server_pids(home: Path, cell_id: str = "x-1-0000abcd") -> list[int]:
    cdir = cell_dir(home, cell_id)
    pids = [load(cdir / "server.json")["pid"]]
    if (cdir / "env_check.json").exists():
        pids += [p["pid"] for p in load(cdir / "env_check.json")["processes"]]
    return pids


def test_server_exits_during_startup(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, make_cell(port, server_args=("--mode", "exit", "--exit-rc", "3")))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "ready"
    assert done["reason"].startswith("server exited during startup (rc 3)")
    assert "boom: this server refuses to start" in done["reason"]
    assert runner.proc.returncode == 1
    cell_json = load(cell_dir(home) / "cell.json")
    assert cell_json["failed_step"] == "ready"
    assert cell_json["steps"]["bench"]["status"] == "not_run"
    assert cell_json["steps"]["stop"]["status"] == "ok"
    assert cell_json["steps"]["snapshot_post"]["status"] == "ok"
    assert not (cell_dir(home) / "bench").exists()


def test_server_never_ready(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--mode", "never"), ready_timeout=1.0)
    started = time.monotonic()
    runner = run_cell(home, cell)
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "ready"
    assert done["reason"].startswith("server not ready after 1")
    assert f"last HTTP status 503 from http://127.0.0.1:{port}/health" in done["reason"]
    assert "listening on" in done["reason"]  # the log tail
    assert time.monotonic() - started < 15
    assert all(not alive(p) for p in _server_pids(home))
    assert port_free(port)


def test_port_already_taken(home: Path) -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        runner = run_cell(home, make_cell(port))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "preflight"
    assert done["reason"].startswith(f"port {port} is already in use")
    assert "held by pid" in done["reason"]
    assert not (cell_dir(home) / "server.json").exists()


def _head_cell(port: int, dist_port: int) -> dict[str, Any]:
    """A multi-node cell's head as its runner gets it: one more node, joining on `dist_port`."""
    cell = make_cell(port)
    node = NodePart(
        host="other", address="10.0.0.2", rank=1, head_address="10.0.0.1", head_port=dist_port
    )
    cell["nodes"] = [node.model_dump(mode="json")]
    return cell


def test_dist_port_already_taken_on_the_head(home: Path) -> None:
    port, dist = free_port(), free_port()
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", dist))
        sock.listen()
        runner = run_cell(home, _head_cell(port, dist))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "preflight"
    assert done["reason"].startswith(f"dist port {dist} (server.dist_port")
    assert "is already in use" in done["reason"] and "held by pid" in done["reason"]
    assert not (cell_dir(home) / "server.json").exists()


def test_a_free_dist_port_is_recorded_at_preflight(home: Path) -> None:
    port, dist = free_port(), free_port()
    runner = run_cell(home, _head_cell(port, dist))
    assert runner.done["status"] == "passed", runner.done
    preflight = load(cell_dir(home) / "cell.json")["steps"]["preflight"]
    assert preflight["detail"]["port"] == port and preflight["detail"]["dist_port"] == dist


def test_a_value_that_is_not_utf8_is_named_not_a_crash(home: Path) -> None:
    """Issue 23 item 11: verify_env raised UnicodeEncodeError on a worker's b"R\\xffng"."""
    port = free_port()
    cell = make_cell(port, server_args=("--child", "bytes"), env={"NCCL_ALGO": "Ring"})
    run_cell(home, cell)
    check = load(cell_dir(home) / "env_check.json")
    (mismatch,) = check["mismatches"]
    assert mismatch["name"] == "NCCL_ALGO" and mismatch["observed"] == "R\\xffng"
    done = load(cell_dir(home) / "cell.json")
    assert done["failed_step"] == "verify_env"
    assert "NCCL_ALGO='R\\xffng' (expected 'Ring')" in done["reason"]


@pytest.mark.parametrize("mode", ["strict", "warn"])
def test_scrubbed_child_environment_is_caught(home: Path, mode: str) -> None:
    port = free_port()
    env = {"NCCL_MIN_NCHANNELS": "32", "NCCL_ALGO": "Ring"}
    cell = make_cell(port, server_args=("--child", "scrub"), env=env, verify_env=mode)
    runner = run_cell(home, cell)
    check = load(cell_dir(home) / "env_check.json")
    assert check["mode"] == mode and check["ok"] is False
    server_pid = load(cell_dir(home) / "server.json")["pid"]
    by_pid = {p["pid"]: p for p in check["processes"]}
    assert set(by_pid) - {server_pid}, "the child was not found"
    (child,) = [p for pid, p in by_pid.items() if pid != server_pid]
    assert child["ppid"] == server_pid and "time.sleep(600)" in child["cmdline"]
    assert child["vars"]["NCCL_ALGO"] == {"expected": "Ring", "observed": None, "ok": False}
    assert by_pid[server_pid]["vars"]["NCCL_ALGO"]["ok"] is True
    assert {(m["pid"], m["name"]) for m in check["mismatches"]} == {
        (child["pid"], "NCCL_ALGO"),
        (child["pid"], "NCCL_MIN_NCHANNELS"),
    }
    if mode == "strict":
        done = runner.done
        assert done["status"] == "failed" and done["step"] == "verify_env"
        reason = done["reason"]
        assert reason.startswith("environment mismatch in 1 of 2 server processes")
        assert "pid" in reason and "missing" in reason
        assert f"{child['pid']}" in reason and "NCCL_ALGO, NCCL_MIN_NCHANNELS" in reason
        assert not (cell_dir(home) / "bench").exists()
    else:
        assert runner.done["status"] == "passed"
        # passed, and says so: the step's detail carries the warning apply prints
        step = [e for e in runner.events if e.get("step") == "verify_env"][-1]
        assert step["status"] == "ok"
        assert step["detail"]["warning"] == (
            "environment mismatch in 1 of 2 server processes (verify_env: warn; env_check.json)"
        )
    assert all(not alive(p) for p in by_pid)


def test_bench_failure_keeps_its_files(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, make_cell(port, bench_args=("--rc", "4")))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "bench"
    assert done["reason"].startswith("bench repeat 1 failed (rc 4)")
    assert "bench failing on purpose" in done["reason"]
    rdir = cell_dir(home) / "bench" / "1"
    assert load(rdir / "exit.json")["rc"] == 4
    assert (rdir / "result.json").is_file()
    assert not (cell_dir(home) / "bench" / "2").exists()


def test_server_ignoring_sigterm_is_killed(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--ignore-term", "--child", "inherit"), stop_grace=0.5)
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed"
    stop = load(cell_dir(home) / "cell.json")["stop"]
    assert stop["graceful"] is False and stop["killed"] and stop["leftover"] == []
    assert "ignoring SIGTERM" in (cell_dir(home) / "server.log").read_text()
    assert all(not alive(p) for p in _server_pids(home))
    assert port_free(port)


def _bench_started(event: dict[str, object]) -> bool:
    return event == {**event, "event": "step", "step": "bench", "status": "start"}


@pytest.mark.parametrize("how", ["stdin-eof", "sigterm", "sigterm-burst", "parent-killed"])
def test_controller_gone_mid_bench(home: Path, how: str) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--child", "inherit"), bench_args=("--sleep", "30"))
    wrapper = None
    if how == "parent-killed":
        # A parent that dies while the runner's stdin stays open: only getppid() can tell.
        wrapper = [sys.executable, "-c", "import subprocess,sys; subprocess.call(sys.argv[1:])"]
    runner = RunnerProcess(home, payload(cell), wrapper=wrapper)
    runner.wait_event(_bench_started)
    time.sleep(0.5)
    started = time.monotonic()
    if how == "stdin-eof":
        runner.close_stdin()
    elif how == "sigterm":
        runner.proc.send_signal(signal.SIGTERM)
    elif how == "sigterm-burst":
        # `kill` repeated, or a group then each pid: a handler re-entered while it holds a
        # lock deadlocked the runner
        for _ in range(3000):
            runner.proc.send_signal(signal.SIGTERM)
    else:
        runner.kill()
    if how == "parent-killed":
        # The wrapper is gone, so nothing reads events: wait for the archive instead.
        deadline = time.monotonic() + 20
        while not archive_path(home).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        runner.close_stdin()
        done = json.loads((cell_dir(home) / "events.jsonl").read_text().splitlines()[-1])
    else:
        runner.finish(20)
        done = runner.done
        assert runner.proc.returncode == 3
    assert time.monotonic() - started < 15
    assert done["status"] == "interrupted" and done["step"] == "bench", done
    expected = {
        "stdin-eof": "controller gone (stdin closed)",
        "sigterm": "signal SIGTERM",
        "sigterm-burst": "signal SIGTERM",
        "parent-killed": "controller gone (parent process exited)",
    }[how]
    assert done["reason"] == expected
    assert archive_path(home).is_file()
    cdir = cell_dir(home)
    cell_json = load(cdir / "cell.json")
    assert cell_json["status"] == "interrupted"
    assert cell_json["steps"]["stop"]["status"] == "ok"
    assert load(cdir / "bench" / "1" / "exit.json")["interrupted"] is True
    assert (cdir / "snapshot.post.json").is_file()
    assert all(not alive(p) for p in _server_pids(home))
    assert port_free(port)
    assert not list((home / ".orch" / "servers").glob("*.json"))


def test_secret_values_reach_no_file(home: Path) -> None:
    port = free_port()
    token = "hf_abcdef123456"
    cell = make_cell(
        port,
        server_args=("--print-env", "HF_TOKEN", "--child", "inherit"),
        bench_args=("--print-env", "HF_TOKEN", "--print-env", "PIN"),
        env={"HF_TOKEN": token, "PIN": "ab7", "VISIBLE": "plain"},
        secrets=("HF_TOKEN", "PIN"),
    )
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    assert token not in "".join(runner.lines)
    cdir = cell_dir(home)
    for path in cdir.rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path
    with tarfile.open(archive_path(home)) as tar:
        for member in tar.getmembers():
            fh = tar.extractfile(member)
            if fh is not None:
                assert token.encode() not in fh.read(), member.name
    assert "HF_TOKEN=***REDACTED***" in (cdir / "server.log").read_text()
    # The real values were still compared in the server's processes.
    check = load(cdir / "env_check.json")
    assert check["ok"] is True
    for proc in check["processes"]:
        assert proc["vars"]["HF_TOKEN"] == {
            "expected": "***REDACTED***",
            "observed": "***REDACTED***",
            "ok": True,
        }
        assert proc["vars"]["PIN"]["expected"] == "***REDACTED***"
        assert proc["vars"]["VISIBLE"]["observed"] == "plain"
    # Short secrets are not replaced inside logs, but never written where orch writes env.
    assert load(cdir / "cell.json")["cell"]["env"] == {
        "HF_TOKEN": "***REDACTED***",
        "PIN": "***REDACTED***",
        "VISIBLE": "plain",
    }
    assert load(cdir / "server.json")["env_declared"]["PIN"] == "***REDACTED***"


@pytest.mark.parametrize("mode", ["ok", "exit"])
def test_secret_values_from_vars_reach_no_file_and_no_event(home: Path, mode: str) -> None:
    # Not an env value: only the controller's secret_values say it is secret.
    key = "sk-live-0123456789"
    port = free_port()
    cell = make_cell(port, server_args=("--api-key", key, "--mode", mode), repeats=1)
    runner = RunnerProcess(home, payload(cell, secret_values=[key, "ab", 98765432101]))
    runner.finish(30)
    done = runner.done
    if mode == "exit":
        # The log tail in the reason would show the key.
        assert done["status"] == "failed" and done["step"] == "ready"
        assert "using api key ***REDACTED***" in done["reason"]
    else:
        assert done["status"] == "passed", done
    assert runner.lines and key not in "".join(runner.lines)
    cdir = cell_dir(home)
    assert "using api key ***REDACTED***" in (cdir / "server.log").read_text()
    assert load(cdir / "server.json")["argv"][-3:] == ["***REDACTED***", "--mode", mode]
    assert "***REDACTED***" in json.dumps(load(cdir / "cell.json")["cell"]["server"]["argv"])
    for path in cdir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    with tarfile.open(archive_path(home)) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        assert any(m.name.endswith("/server.log") for m in members)
        for member in members:
            fh = tar.extractfile(member)
            assert fh is not None and key.encode() not in fh.read(), member.name


def test_leftover_server_of_another_run_blocks_preflight_until_stop_all(home: Path) -> None:
    port = free_port()
    old_run = "20261129-090000-old-0001"
    # Started through `sh -c`, so the server outlives its killed runner (the shell does not).
    first = RunnerProcess(
        home, payload(via_shell(make_cell(port, bench_args=("--sleep", "3"))), run_id=old_run)
    )
    first.wait_event(_bench_started)
    server_pid = server_pid_on(port)
    # SIGKILL, the session guard first: the runner cannot clean up, its server is orphaned
    first.kill_guard_then_runner()
    record = next((home / ".orch" / "servers").glob("*.json"))
    # The shell gets its parent-death signal a moment later: until it is gone, the record's
    # live processes are [shell, server] and the reason names the shell's pid, the lower one.
    shell = load(record)["pid"]
    deadline = time.monotonic() + 10
    while alive(shell) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(shell) and shell != server_pid
    # As a runner that did not record itself left it: whether that run is live is unknown
    # (a record whose runner is known dead is an orphan, stopped by the next preflight).
    rec = load(record)
    del rec["runner_pid"], rec["runner_start_time"]
    record.write_text(json.dumps(rec))
    assert alive(server_pid)

    second = run_cell(home, make_cell(free_port(), cell_id="y-2-0000beef"))
    done = second.done
    assert done["status"] == "failed" and done["step"] == "preflight"
    assert done["reason"].startswith(
        f"an orch server from run {old_run} cell x-1-0000abcd is still running (pid {server_pid})"
    )
    assert alive(server_pid)  # another run's server is never touched
    # The hint is the runner's real command line, runnable as printed.
    hint = done["reason"].split("stop it with: ", 1)[1]
    argv = shlex.split(hint)
    assert Path(argv[0]).is_absolute() and argv[1] == str(RUNNER_PYZ)
    assert argv[2:] == ["stop-all", old_run, "--workdir", str(home / ".orch")]

    out = subprocess.run(
        argv, cwd="/", env=runner_env(home), capture_output=True, text=True, check=True, timeout=30
    )
    (item,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert item["pid"] == rec["pid"] and item["stopped"] is True
    assert not alive(server_pid) and not record.exists()
    third = run_cell(home, make_cell(free_port(), cell_id="z-3-0000cafe"))
    assert third.done["status"] == "passed"


def test_stale_server_record_is_removed(home: Path) -> None:
    servers = home / ".orch" / "servers"
    servers.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = servers / f"{dead.pid}.json"
    stale.write_text(
        json.dumps({"pid": dead.pid, "pgid": dead.pid, "run_id": "old", "cell_id": "c"})
    )
    runner = run_cell(home, make_cell(free_port(), repeats=1))
    assert runner.done["status"] == "passed"
    assert not stale.exists()


def test_bad_input_is_refused(home: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "run"],
        input=b"not json\n",
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 2
    done = json.loads(proc.stdout)
    assert done["status"] == "failed" and done["reason"].startswith("bad input")


def test_server_dying_during_bench_fails_the_cell(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--die-after", "1.0"), bench_args=("--sleep", "20"))
    started = time.monotonic()
    runner = run_cell(home, cell)
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "bench"
    assert done["reason"].startswith("server exited during bench repeat 1 (rc 9)")
    assert "crashing on purpose" in done["reason"]
    assert time.monotonic() - started < 15
    assert port_free(port)


def test_cell_timeout_stops_a_long_bench(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, bench_args=("--sleep", "30"), cell_timeout=3.0)
    started = time.monotonic()
    runner = run_cell(home, cell)
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "bench"
    assert done["reason"] == "cell timeout (3s) reached during step bench"
    assert time.monotonic() - started < 15
    cell_json = load(cell_dir(home) / "cell.json")
    assert cell_json["steps"]["stop"]["status"] == "ok"
    assert all(not alive(p) for p in _server_pids(home))


def test_bench_timeout_fails_the_repeat(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, make_cell(port, bench_args=("--sleep", "30"), bench_timeout=1.0))
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "bench"
    assert done["reason"].startswith("bench repeat 1 failed (timed out after 1s)")
    exit1 = load(cell_dir(home) / "bench" / "1" / "exit.json")
    assert exit1["timed_out"] is True and exit1["rc"] != 0


def test_unwritable_workdir_still_answers(home: Path) -> None:
    (home / "blocked").write_text("a file where the workdir should be\n")
    data = payload(make_cell(free_port()), workdir="blocked")
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "run"],
        input=(json.dumps(data) + "\n").encode(),
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        timeout=30,
    )
    done = json.loads(proc.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["status"] == "failed" and done["archive"] is None
    assert done["reason"].startswith("runner crashed")
