"""Workers that re-title themselves (setproctitle zeroes /proc/PID/environ, as vLLM's
`VLLM::EngineCore` and SGLang's `sglang::scheduler` do): the env check calls them unreadable,
never "missing"; the adapters' SPT_NOENV=1 keeps them verifiable; and the session guard stops
them, and every other process of a cell, when the runner is killed, without a next run."""

from __future__ import annotations

from pathlib import Path

from runner_helpers import (
    RunnerProcess,
    alive,
    bench_started,
    cell_dir,
    free_port,
    gone,
    load,
    make_cell,
    payload,
    port_free,
    run_cell,
)

from orchestrator.runner.procs import REWRITTEN

OLD_RUN = "20261129-090000-old-0001"


def _worker(home: Path, run_id: str, server_pid: int) -> int:
    partial = home / ".orch" / "runs" / run_id / ".x-1-0000abcd.partial"
    processes = load(partial / "env_check.json")["processes"]
    (worker,) = [p["pid"] for p in processes if p["pid"] != server_pid]
    return int(worker)


def test_a_retitled_worker_is_unreadable_not_missing(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, make_cell(port, server_args=("--child", "retitle"), repeats=1))
    assert runner.done["status"] == "passed", runner.done
    check = load(cell_dir(home) / "env_check.json")
    assert check["ok"] is True and check["mismatches"] == []
    (unverified,) = check["unverified"]
    assert unverified["why"] == REWRITTEN
    (entry,) = [p for p in check["processes"] if p["pid"] == unverified["pid"]]
    assert entry["vars"] == {} and "was overwritten" in entry["error"]
    step = next(e for e in runner.events if e.get("step") == "verify_env" and e["status"] == "ok")
    assert "1 of 2 server processes not verified" in step["detail"]["warning"]
    assert REWRITTEN in step["detail"]["warning"]


def test_the_adapters_spt_noenv_keeps_every_worker_verified(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--child", "retitle"), repeats=1)
    cell["server"]["env_defaults"] = {"SPT_NOENV": "1"}
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    check = load(cell_dir(home) / "env_check.json")
    assert check["unverified"] == [] and len(check["processes"]) == 2
    for process in check["processes"]:
        assert process["vars"]["SPT_NOENV"] == {"expected": "1", "observed": "1", "ok": True}
    assert check["adapter_env"]["set"] == {"SPT_NOENV": "1"}
    assert load(cell_dir(home) / "server.json")["env_defaults"]["set"] == {"SPT_NOENV": "1"}


def test_a_declared_variable_wins_over_the_adapters_default(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, env={"SPT_NOENV": "yes"}, server_args=("--child", "inherit"))
    cell["server"]["env_defaults"] = {"SPT_NOENV": "1"}
    runner = run_cell(home, cell)
    assert runner.done["status"] == "passed", runner.done
    check = load(cell_dir(home) / "env_check.json")
    assert {p["vars"]["SPT_NOENV"]["observed"] for p in check["processes"]} == {"yes"}
    assert check["adapter_env"] == {}


def test_a_killed_runners_guard_stops_retitled_workers_and_daemons(home: Path) -> None:
    port = free_port()
    pidfile = home / "daemon.pid"
    cell = make_cell(
        port,
        server_args=("--child", "retitle", "--daemon-pidfile", str(pidfile)),
        bench_args=("--sleep", "30"),
    )
    first = RunnerProcess(home, payload(cell, run_id=OLD_RUN))
    first.wait_event(bench_started)
    guard = first.guard_pid()
    assert guard is not None
    server_pid = load(next((home / ".orch" / "servers").glob("*.json")))["pid"]
    worker = _worker(home, OLD_RUN, server_pid)
    daemon = int(pidfile.read_text())
    first.kill()  # SIGKILL: the runner cannot clean up; nothing else runs after it
    # The worker lost its marker with its environ and was re-parented: only its session says
    # whose it is. The daemon left the session: its marker says. Both go without a next run.
    assert gone(worker, 20), "the re-titled worker outlived its killed runner"
    assert gone(daemon, 20), "the daemon outlived its killed runner"
    assert gone(server_pid, 5) and port_free(port)
    assert gone(guard, 10), "the guard stays after it did its job"


def test_a_runner_that_ends_well_leaves_no_guard(home: Path) -> None:
    port = free_port()
    runner = RunnerProcess(home, payload(make_cell(port, repeats=1, bench_args=("--sleep", "1"))))
    runner.wait_event(bench_started)
    guard = runner.guard_pid()
    assert guard is not None and alive(guard)
    runner.finish()
    assert runner.done["status"] == "passed", runner.done
    assert gone(guard, 10)


def test_preflight_stops_a_retitled_orphan_when_the_guard_died_too(home: Path) -> None:
    port = free_port()
    cell = make_cell(port, server_args=("--child", "retitle"), bench_args=("--sleep", "30"))
    first = RunnerProcess(home, payload(cell, run_id=OLD_RUN))
    first.wait_event(bench_started)
    server_pid = load(next((home / ".orch" / "servers").glob("*.json")))["pid"]
    worker = _worker(home, OLD_RUN, server_pid)
    first.kill_guard_then_runner()
    assert gone(server_pid, 10)
    assert alive(worker)  # no marker to find it by: only the server record's session says

    second = run_cell(home, make_cell(port, cell_id="y-2-0000beef", repeats=1))
    assert second.done["status"] == "passed", second.done
    assert not alive(worker)
    detail = next(e for e in second.events if e.get("step") == "preflight" and e["status"] == "ok")[
        "detail"
    ]
    (record,) = detail["stopped_orphans"]
    assert record["run_id"] == OLD_RUN and record["processes"] == [worker]
