"""Secrets that must not destroy results or leak, servers that must not outlive their runner,
daemons that must not escape, and bench output the archive must survive (issue 10)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from runner_helpers import (
    RUN_ID,
    RUNNER,
    RunnerProcess,
    alive,
    archive_path,
    bench_started,
    cell_dir,
    free_port,
    gone,
    load,
    make_cell,
    payload,
    port_free,
    run_cell,
    runner_env,
    via_shell,
)

from orchestrator.runner.redaction import MIN_SECRET_LENGTH, short_secret_names

REDACTED = "***REDACTED***"


def _step_detail(runner: RunnerProcess, step: str) -> dict[str, Any]:
    event = next(e for e in runner.events if e.get("step") == step and e["status"] == "ok")
    return dict(event.get("detail") or {})


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def _archive_bytes(path: Path) -> list[tuple[str, bytes]]:
    with tarfile.open(path) as tar:
        out = []
        for member in tar.getmembers():
            fh = tar.extractfile(member)
            out.append((member.name, fh.read() if fh is not None else b""))
        return out


# -- item 1: a secret inside a path --------------------------------------------------------


def test_a_secret_inside_the_paths_leaves_the_results_where_done_says(home: Path) -> None:
    # `runs` and `orch` lie in every archive path; the run id's date in this one.
    long_secret = RUN_ID[:15]  # "20261130-120000": long enough to be redacted by value
    port = free_port()
    cell = make_cell(
        port,
        env={"API_KEY": "runs"},
        server_args=("--api-key", long_secret),
        repeats=1,
    )
    runner = RunnerProcess(home, payload(cell, secret_values=["orch", long_secret]))
    runner.finish(30)
    done = runner.done
    assert done["status"] == "passed", done
    archive = home / done["archive"]
    assert archive == archive_path(home) and archive.is_file()
    # The protocol carries the real path; the files written carry no long secret.
    assert long_secret in done["archive"]
    for name, data in _archive_bytes(archive):
        assert long_secret.encode() not in data, name
    cdir = cell_dir(home)
    assert "using api key " + REDACTED in (cdir / "server.log").read_text()
    # A short secret is redacted by name only: hidden under its name, left inside text.
    info = load(cdir / "cell.json")
    assert info["cell"]["env"]["API_KEY"] == REDACTED
    assert ".orch" in (cdir / "events.jsonl").read_text()
    out = subprocess.run(
        [sys.executable, str(RUNNER), "collect", RUN_ID],
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    (item,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert (home / item["archive"]).is_file()


def test_short_secrets_are_listed_for_the_plan_time_warning() -> None:
    assert MIN_SECRET_LENGTH == 8
    values = {"API_KEY": "runs", "MY_PASSWORD": "orch", "HF_TOKEN": "hf_abcdefgh", "PIN": 1201}
    assert short_secret_names(values) == ["API_KEY", "MY_PASSWORD", "PIN"]
    assert short_secret_names({"A_TOKEN": "12345678"}) == []


# -- item 2: secrets of the host's own environment -----------------------------------------


def test_secret_named_variables_of_the_host_environment_are_redacted_everywhere(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_hostEnvToken0123456789"
    monkeypatch.setenv("GITHUB_TOKEN", token)
    monkeypatch.setenv("SOME_API_KEY", "sk-host-987654321")
    port = free_port()
    cell = make_cell(
        port,
        server_args=("--print-env", "GITHUB_TOKEN", "--mode", "exit"),
        bench_args=("--print-all-env",),
        repeats=1,
    )
    # The server fails so its log tail (with the token) lands in the reason too.
    failed = run_cell(home, cell)
    assert failed.done["status"] == "failed" and failed.done["step"] == "ready"
    assert "GITHUB_TOKEN=" + REDACTED in failed.done["reason"]
    assert token not in "".join(failed.lines)

    cell = make_cell(
        port,
        cell_id="y-2-0000beef",
        server_args=("--print-all-env",),
        bench_args=("--print-all-env",),
    )
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    cdir = cell_dir(home, "y-2-0000beef")
    assert "GITHUB_TOKEN=" + REDACTED in (cdir / "server.log").read_text()
    assert "GITHUB_TOKEN=" + REDACTED in (cdir / "bench" / "1" / "stderr").read_text()
    for secret in (token, "sk-host-987654321"):
        assert secret not in "".join(runner.lines)
        for path in _files(cdir):
            assert secret.encode() not in path.read_bytes(), path
        for name, data in _archive_bytes(archive_path(home, "y-2-0000beef")):
            assert secret.encode() not in data, name


# -- item 10: the server does not outlive its runner ---------------------------------------


def test_killing_the_runner_takes_its_server_and_the_next_run_sweeps_the_rest(
    home: Path,
) -> None:
    port = free_port()
    old_run = "20261129-090000-old-0001"
    pidfile = home / "daemon.pid"
    cell = make_cell(
        port,
        server_args=("--child", "inherit", "--daemon-pidfile", str(pidfile)),
        bench_args=("--sleep", "30"),
    )
    first = RunnerProcess(home, payload(cell, run_id=old_run))
    first.wait_event(bench_started)
    server_pid = load(next((home / ".orch" / "servers").glob("*.json")))["pid"]
    partial = home / ".orch" / "runs" / old_run / ".x-1-0000abcd.partial"
    workers = load(partial / "env_check.json")["processes"]
    (worker,) = [p["pid"] for p in workers if p["pid"] != server_pid]
    daemon = int(pidfile.read_text())
    first.kill_guard_then_runner()  # SIGKILL, its guard too: the runner cannot clean up
    assert gone(server_pid), "the server outlived its runner"
    # The server's own child and its daemon: left for the next preflight to find.
    assert alive(worker) and alive(daemon)

    second = run_cell(home, make_cell(port, cell_id="y-2-0000beef", repeats=1))
    assert second.done["status"] == "passed", second.done
    assert not alive(worker) and not alive(daemon) and port_free(port)
    detail = _step_detail(second, "preflight")
    (record,) = detail["stopped_orphans"]  # found by the server record's process group
    assert record["run_id"] == old_run and record["processes"] == [worker]
    (orphan,) = detail["orphan_processes"]  # found by the marker alone
    assert orphan["run_id"] == old_run and orphan["cell_id"] == "x-1-0000abcd"
    assert [p["pid"] for p in orphan["processes"]] == [daemon]
    preflight = load(cell_dir(home, "y-2-0000beef") / "cell.json")["steps"]["preflight"]
    assert preflight["detail"]["orphan_processes"] == detail["orphan_processes"]


def test_an_orphan_server_of_another_run_is_stopped_not_a_reason_to_fail(home: Path) -> None:
    port = free_port()
    old_run = "20261129-090000-old-0001"
    cell = via_shell(make_cell(port, bench_args=("--sleep", "30")))
    first = RunnerProcess(home, payload(cell, run_id=old_run))
    first.wait_event(bench_started)
    record = next((home / ".orch" / "servers").glob("*.json"))
    first.kill_guard_then_runner()
    assert not port_free(port)  # the server inside the shell still holds its port

    # A runner of another workdir (another controller, same user) leaves it alone: its orphans
    # are its own workdir's to stop (two test suites at once each killed the other's).
    elsewhere = RunnerProcess(
        home, payload(make_cell(free_port(), cell_id="z-3-0000cafe", repeats=1), workdir=".b")
    )
    elsewhere.finish()
    assert elsewhere.done["status"] == "passed", elsewhere.done
    assert "orphan_processes" not in _step_detail(elsewhere, "preflight")
    assert not port_free(port) and record.exists()

    second = run_cell(home, make_cell(port, cell_id="y-2-0000beef", repeats=1))
    assert second.done["status"] == "passed", second.done
    (stopped,) = _step_detail(second, "preflight")["stopped_orphans"]
    assert stopped["run_id"] == old_run and stopped["cell_id"] == "x-1-0000abcd"
    assert not record.exists()


def test_a_server_of_a_live_run_fails_preflight_without_a_stop_all_hint(home: Path) -> None:
    old_run = "20261129-090000-old-0001"
    first = RunnerProcess(
        home, payload(make_cell(free_port(), bench_args=("--sleep", "30")), run_id=old_run)
    )
    first.wait_event(bench_started)
    server_pid = load(next((home / ".orch" / "servers").glob("*.json")))["pid"]
    second = run_cell(home, make_cell(free_port(), cell_id="y-2-0000beef", repeats=1))
    done = second.done
    assert done["status"] == "failed" and done["step"] == "preflight"
    assert f"run {old_run} cell x-1-0000abcd is running here (pid {server_pid})" in done["reason"]
    assert f"its runner (pid {first.proc.pid}) is alive" in done["reason"]
    assert "stop-all" not in done["reason"]
    assert alive(server_pid)
    first.close_stdin()
    assert first.finish(30)[-1]["status"] == "interrupted"
    assert not alive(server_pid)


# -- item 11: daemons are found by the marker ----------------------------------------------


def test_a_daemonized_child_is_found_by_its_marker_stopped_and_listed(home: Path) -> None:
    port = free_port()
    pidfile = home / "daemon.pid"
    cell = make_cell(port, server_args=("--daemon-pidfile", str(pidfile)), repeats=1)
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    daemon = int(pidfile.read_text())
    assert not alive(daemon), "the daemon escaped"
    escaped = _step_detail(runner, "stop")["escaped"]
    assert [e["pid"] for e in escaped] == [daemon]
    stop = load(cell_dir(home) / "cell.json")["stop"]
    assert daemon in stop["processes"] and stop["escaped"][0]["pid"] == daemon


def test_a_daemon_left_by_a_bench_without_server_is_stopped(home: Path) -> None:
    pidfile = home / "daemon.pid"
    code = (
        "import os,time,sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(600)\n"
        "    os._exit(0)\n"
        "os.wait(); print('bench ok')\n"
    )
    cell = make_cell(None, repeats=1, bench_argv=(sys.executable, "-c", code))
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    daemon = int(pidfile.read_text())
    assert gone(daemon, 1.0)
    assert [e["pid"] for e in _step_detail(runner, "stop")["escaped"]] == [daemon]


# -- item 13: links in a bench's output folder ---------------------------------------------


def test_links_in_the_bench_folder_are_recorded_as_links_and_the_rest_collected(
    home: Path,
) -> None:
    port = free_port()
    cell = make_cell(
        port,
        repeats=1,
        bench_args=(
            "--symlink",
            "host=/etc/hostname",
            "--symlink",
            "sub/up=../..",
            "--symlink",
            "dangling=/nonexistent/x",
        ),
    )
    fifo_code = "import os; os.mkfifo('pipe'); print('bench ok')"
    cell["bench"]["warmup"] = 0
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    bench = cell_dir(home) / "bench" / "1"
    assert load(bench / "links.json") == [
        {"name": "dangling", "target": "/nonexistent/x"},
        {"name": "host", "target": "/etc/hostname"},
    ]
    assert load(bench / "sub" / "links.json") == [{"name": "up", "target": "../.."}]
    assert (bench / "result.json").is_file() and (cell_dir(home) / "server.log").is_file()
    with tarfile.open(archive_path(home)) as tar:
        members = tar.getmembers()
    assert members and all(m.isfile() or m.isdir() for m in members)
    names = {m.name for m in members}
    assert "x-1-0000abcd/bench/1/result.json" in names
    assert "x-1-0000abcd/bench/1/host" not in names

    # A fifo (no link, no file) is recorded too and never blocks the archive.
    cell = make_cell(
        None, cell_id="y-2-0000beef", repeats=1, bench_argv=(sys.executable, "-c", fifo_code)
    )
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    ydir = cell_dir(home, "y-2-0000beef") / "bench" / "1"
    assert load(ydir / "links.json") == [{"name": "pipe", "kind": "fifo"}]
    assert not any(stat.S_ISFIFO(os.lstat(p).st_mode) for p in ydir.iterdir())
