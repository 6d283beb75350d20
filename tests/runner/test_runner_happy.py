"""The runner's happy path, end to end: real server, real bench, real files."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runner_helpers import (
    RUN_ID,
    RUNNER,
    STEP_ORDER,
    RunnerProcess,
    alive,
    archive_names,
    archive_path,
    cell_dir,
    free_port,
    load,
    make_cell,
    payload,
    port_free,
    run_cell,
    runner_env,
)

TRICKY = "a value with spaces, \"double\" and 'single' quotes, $HOME and `ticks`; rm -rf ~"


def _python38() -> str | None:
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8")))
    return found[0] if found else None


def _check_happy(home: Path, runner: RunnerProcess, port: int) -> None:
    done = runner.done
    assert done["status"] == "passed", done
    assert done["archive"] == f".orch/runs/{RUN_ID}/x-1-0000abcd.tar.gz"
    assert (home / done["archive"]).is_file()

    steps = [(e["step"], e["status"]) for e in runner.events if e["event"] == "step"]
    expected = []
    for step in STEP_ORDER:
        if step in ("repo", "setup", "nodes", "profile"):  # no repo, one node, no `profile:`
            expected.append((step, "skipped"))
        else:
            expected += [(step, "start"), (step, "ok")]
    assert steps == expected
    kinds = [(e["kind"], e["n"], e["rc"]) for e in runner.events if e["event"] == "repeat"]
    assert kinds == [("warmup", 1, 0), ("measure", 1, 0), ("measure", 2, 0)]
    order = [e["event"] for e in runner.events]
    assert order[-1] == "done" and order.count("done") == 1

    cdir = cell_dir(home)
    assert not (cdir.parent / ".x-1-0000abcd.partial").exists()
    for name in (
        "cell.json",
        "events.jsonl",
        "snapshot.pre.json",
        "snapshot.post.json",
        "server.log",
        "server.json",
        "env_check.json",
        "captures/info.ready.json",
        "captures/info.after-warmup-1.json",
        "captures/info.after-1.json",
        "captures/info.after-2.json",
        "captures/env.ready.json",
        "bench/warmup-1/stdout",
        "bench/warmup-1/exit.json",
        "bench/1/stdout",
        "bench/1/stderr",
        "bench/1/exit.json",
        "bench/1/result.json",
        "bench/2/result.json",
    ):
        assert (cdir / name).is_file(), name
    assert not (cdir / "repo.json").exists()

    cell_json = load(cdir / "cell.json")
    assert cell_json["status"] == "passed" and cell_json["failed_step"] is None
    assert cell_json["cell"]["id"] == "x-1-0000abcd"
    assert cell_json["steps"]["bench"]["status"] == "ok"
    assert cell_json["steps"]["repo"]["status"] == "skipped"
    assert cell_json["stop"]["graceful"] is True and cell_json["stop"]["port_free"] is True

    exit1 = load(cdir / "bench/1/exit.json")
    assert exit1["rc"] == 0 and exit1["timed_out"] is False and exit1["argv"][0] == sys.executable
    result = load(cdir / "bench/1/result.json")
    assert result["requests"] == 3 and result["repeat"] == "1" and result["kind"] == "measure"
    # The capture after repeat 2 saw the bench's requests: the server really was measured.
    assert load(cdir / "captures/info.after-2.json")["requests"] > 9

    env_check = load(cdir / "env_check.json")
    assert env_check["mode"] == "strict" and env_check["ok"] is True
    assert env_check["declared"] == ["NCCL_ALGO", "TRICKY"]
    assert len(env_check["processes"]) == 2  # the server and the child it spawned
    for proc in env_check["processes"]:
        assert proc["vars"]["TRICKY"] == {"expected": TRICKY, "observed": TRICKY, "ok": True}
    assert load(cdir / "captures/env.ready.json")["TRICKY"] == TRICKY

    server = load(cdir / "server.json")
    assert server["env_declared"] == {"TRICKY": TRICKY, "NCCL_ALGO": "Ring"}
    assert not alive(server["pid"])
    for proc in env_check["processes"]:
        assert not alive(proc["pid"])
    assert port_free(port)
    assert not list((home / ".orch" / "servers").glob("*.json"))
    assert "server stopped cleanly" in (cdir / "server.log").read_text()

    logged = [json.loads(line) for line in (cdir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in logged] == [e["event"] for e in runner.events]
    names = archive_names(home)
    assert "x-1-0000abcd/cell.json" in names and "x-1-0000abcd/bench/2/result.json" in names


def _happy_cell(port: int) -> dict[str, object]:
    return make_cell(
        port,
        server_args=("--child", "inherit", "--ready-delay", "0.3"),
        env={"TRICKY": TRICKY, "NCCL_ALGO": "Ring"},
        warmup=1,
        repeats=2,
        ready_log="fired up and ready",
        full_snapshots=True,
    )


def test_happy_path(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, _happy_cell(port))
    assert runner.proc.returncode == 0, runner.stderr_text()
    _check_happy(home, runner, port)
    # the full snapshot: the packages the server's interpreter has, before and after
    for name in ("snapshot.pre.json", "snapshot.post.json"):
        assert isinstance(load(cell_dir(home) / name)["pip_freeze"], list)


@pytest.mark.skipif(_python38() is None, reason="no python3.8 on this machine")
def test_happy_path_under_python38(home: Path) -> None:
    port = free_port()
    python = _python38()
    assert python is not None
    runner = RunnerProcess(home, payload(_happy_cell(port)), python=python)
    runner.finish(30)
    assert runner.proc.returncode == 0, runner.stderr_text()
    _check_happy(home, runner, port)
    assert load(cell_dir(home) / "cell.json")["runner"]["python_version"].startswith("3.8")


def test_collect_lists_finished_cells(home: Path) -> None:
    port = free_port()
    run_cell(home, make_cell(port, repeats=1))
    run_cell(home, make_cell(port, cell_id="y-2-0000beef", repeats=1, bench_args=("--rc", "2")))
    # A cell renamed into place but never archived (runner killed just then) is finished too.
    os.unlink(archive_path(home, "y-2-0000beef"))
    (home / ".orch" / "runs" / RUN_ID / ".z-3-partial.partial").mkdir()

    out = subprocess.run(
        [sys.executable, str(RUNNER), "collect", RUN_ID],
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    items = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(i["cell_id"], i["status"]) for i in items] == [
        ("x-1-0000abcd", "passed"),
        ("y-2-0000beef", "failed"),
    ]
    assert items[1]["failed_step"] == "bench"
    for item in items:
        assert (home / item["archive"]).is_file()

    other = subprocess.run(
        [sys.executable, str(RUNNER), "collect", "no-such-run"],
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert other.returncode == 0 and other.stdout == ""


def test_probe_command_prints_one_snapshot(home: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(RUNNER), "probe", "--python", sys.executable],
        cwd=home,
        env=runner_env(home),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    (line,) = out.stdout.splitlines()
    assert isinstance(json.loads(line), dict)
