"""`orch apply` end to end: the real CLI, real sshd hosts, real servers and benchmark clients.

Every test drives `python -m orchestrator apply` as a subprocess against the session's SSH test
hosts (tests/sshhosts.py). The server (programs/server.py) records its argv and environment, the
bench (programs/bench.py) measures it and appends a line per run to a per-cell counter file, so
the tests can check what arrived where and how often each cell ran.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sshhosts import SSHTestHosts

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"
SERVER = PROGRAMS / "server.py"
BENCH = PROGRAMS / "bench.py"
MSG = 'it\'s a "quoted" value with  two spaces'


# -- helpers ---------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on here (and, in namespace mode, nowhere yet)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def marker_pids(marker: str) -> list[int]:
    """Processes whose argv holds `marker`: hosts share this machine's process table."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in argv and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll `condition` until true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class E2E:
    """One test's playbook, inventory, record directory and CLI runs."""

    def __init__(self, hosts: SSHTestHosts, tmp: Path) -> None:
        self.hosts = hosts
        self.tmp = tmp
        self.records = tmp / "records"
        self.records.mkdir()
        self.results = tmp / "results"
        self.marker = f"orch-e2e-{secrets.token_hex(6)}"
        self.ports = {h.name: free_port() for h in hosts.hosts}

    def inventory(
        self,
        *,
        extra_host_vars: dict[str, dict[str, Any]] | None = None,
        extra_hosts: dict[str, dict[str, Any]] | None = None,
    ) -> Path:
        """Every test host with its own server port; `extra_hosts` are added as written."""
        host_vars = {name: {"srv_port": port} for name, port in self.ports.items()}
        for name, more in (extra_host_vars or {}).items():
            host_vars.setdefault(name, {}).update(more)
        path: Path = self.hosts.write_inventory(self.tmp / "hosts.yml", extra_host_vars=host_vars)
        if extra_hosts:
            data = yaml.safe_load(path.read_text())
            data["all"]["hosts"].update(extra_hosts)
            path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def playbook(
        self,
        matrix: dict[str, Any],
        *,
        server_extra: str = "",
        bench_extra: str = "",
        port: str = "{{ srv_port }}",
        repeats: int = 1,
        ready_timeout: float = 10.0,
        env: dict[str, str] | None = None,
    ) -> Path:
        """A generic playbook: programs/server.py measured by programs/bench.py."""
        data = {
            "name": "e2e",
            "vars": {"server_py": str(SERVER), "bench_py": str(BENCH), "rec": str(self.records)},
            "matrix": matrix,
            "env": env if env is not None else {"MSG": MSG},
            "server": {
                "command": "{{ orch_python }} {{ server_py }} --port " + port
                + " --record-dir {{ rec }} --marker " + self.marker + " " + server_extra,
                "port": port,
                "host": "127.0.0.1",
                "ready": {"path": "/health", "timeout": ready_timeout, "interval": 0.05},
                "stop_grace": 3,
            },
            "bench": {
                "command": "{{ orch_python }} {{ bench_py }} --url http://127.0.0.1:" + port
                + " --record-dir {{ rec }} " + bench_extra,
                "repeats": repeats,
                "timeout": 20,
                "result_file": "result.json",
            },
            "snapshot": {"pip_freeze": False, "topo": False},
            "timeouts": {"cell": 60},
        }  # fmt: skip
        path = self.tmp / "playbook.yml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def argv(self, playbook: Path, inventory: Path, *more: str) -> list[str]:
        """The `orch apply` command line."""
        return [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i",
                str(inventory), "--results", str(self.results), *more]  # fmt: skip

    def apply(self, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """Run the CLI to the end."""
        return subprocess.run(
            list(argv), cwd=self.tmp, capture_output=True, text=True, timeout=timeout
        )

    def run_dir(self) -> Path:
        """The only run under results/."""
        runs = [p for p in self.results.iterdir() if p.is_dir()]
        assert len(runs) == 1, runs
        return runs[0]

    def count(self, cell_id: str) -> int:
        """How many measured bench runs of this cell finished (lines in its counter file)."""
        path = self.records / f"{cell_id}.count"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def server_record(self, cell_id: str) -> dict[str, Any]:
        """What the server of this cell recorded: argv and environment."""
        data: dict[str, Any] = json.loads((self.records / f"{cell_id}.server.json").read_text())
        return data


def run_json(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "run.json").read_text())
    return data


def cell_json(run_dir: Path, cell_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "cells" / cell_id / "cell.json").read_text())
    return data


def summary_rows(stdout: str) -> dict[str, str]:
    """cell id -> its line in the CLI's summary table."""
    rows = {}
    for line in stdout.splitlines():
        words = line.split()  # host, cell, status, ...
        if len(words) >= 3 and "-" in words[1].strip("-"):
            rows[words[1]] = line
    return rows


@pytest.fixture
def e2e(ssh_hosts: SSHTestHosts, tmp_path: Path) -> Iterator[E2E]:
    env = E2E(ssh_hosts, tmp_path)
    yield env
    left = marker_pids(env.marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"servers left running: {left}"


# -- tests -----------------------------------------------------------------------------------


def test_three_hosts_small_matrix(e2e: E2E) -> None:
    """12 cells over 3 hosts: every cell measured and recorded; env with quotes intact."""
    inventory = e2e.inventory()
    playbook = e2e.playbook({"size": [10, 20], "kind": ["a", "b"]}, bench_extra=
                            "--requests {{ matrix.size }} --label {{ matrix.kind }}")  # fmt: skip
    started = time.monotonic()
    proc = e2e.apply(*e2e.argv(playbook, inventory))
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = e2e.run_dir()
    doc = run_json(run)
    assert doc["status"] == "passed"
    assert len(doc["cells"]) == 12
    assert {c["status"] for c in doc["cells"].values()} == {"passed"}
    assert sorted({c["host"] for c in doc["cells"].values()}) == ["host1", "host2", "host3"]
    assert (run / "MANIFEST.sha256").is_file()
    starts = {"host1": 0, "host2": 0, "host3": 0}
    for cid in doc["cells"]:
        cell_dir = run / "cells" / cid
        assert cell_json(run, cid)["status"] == "passed"
        metrics = json.loads((cell_dir / "metrics.json").read_text())
        assert metrics["summary"]["req_per_s"]["median"] > 0
        check = json.loads((cell_dir / "env_check.json").read_text())
        assert check["ok"] and check["mode"] == "strict"
        # the value with spaces and quotes arrived whole, in the server and as it saw it
        # (the server its session started: size and kind are bench axes, one start per host)
        session = cell_json(run, cid)["session"]
        assert e2e.server_record(session["first_cell"])["env"]["MSG"] == MSG
        starts[doc["cells"][cid]["host"]] += int(session["started_server"])
        assert check["processes"][0]["vars"]["MSG"]["observed"] == MSG
        assert e2e.count(cid) == 1
    assert starts == {"host1": 1, "host2": 1, "host3": 1}  # one server start per host
    hostnames = {}
    for name in ("host1", "host2", "host3"):
        facts = json.loads((run / "hosts" / name / "facts.json").read_text())
        hostnames[name] = facts.get("hostname")
    if e2e.hosts.isolated:
        assert hostnames == {"host1": "host1", "host2": "host2", "host3": "host3"}
    # non-TTY progress: plain lines, no terminal control sequences
    assert "\x1b[" not in proc.stderr
    assert "[host1]" in proc.stderr and "PASSED" in proc.stderr
    rows = summary_rows(proc.stdout)
    assert set(rows) == set(doc["cells"])
    print(f"3 hosts x 4 cells: {wall:.1f} s wall")

    # the runner was shipped once per host per content hash, and a second run reuses it
    libs = {h.name: sorted((h.home / ".orch" / "lib").iterdir()) for h in e2e.hosts.hosts}
    assert all(len(v) == 1 for v in libs.values()), libs
    stamps = {n: (v[0] / "runner.pyz").stat().st_mtime_ns for n, v in libs.items()}
    again = e2e.apply(*e2e.argv(playbook, inventory, "--limit", "host1"))
    assert again.returncode == 0, again.stdout + again.stderr
    for name, lib in libs.items():
        assert (lib[0] / "runner.pyz").stat().st_mtime_ns == stamps[name]


def test_scrubbed_child_env_is_caught(e2e: E2E) -> None:
    """A server whose worker drops the environment fails with the table; the other cell passes."""
    inventory = e2e.inventory()
    playbook = e2e.playbook({"mode": ["ok", "scrub"]}, server_extra="--mode {{ matrix.mode }}")
    proc = e2e.apply(*e2e.argv(playbook, inventory, "--limit", "host1"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = e2e.run_dir()
    cells = run_json(run)["cells"]
    by_mode = {cell_json(run, cid)["cell"]["axes"]["mode"]: cid for cid in cells}
    ok, bad = by_mode["ok"], by_mode["scrub"]
    assert cells[ok]["status"] == "passed"
    assert cells[bad]["status"] == "failed"
    reason = cells[bad]["reason"]
    assert cell_json(run, bad)["failed_step"] == "verify_env"
    assert cell_json(run, bad)["reason"] == reason
    # the table: which process misses which variable
    assert "missing" in reason and "MSG" in reason
    child = [line for line in reason.splitlines() if "time.sleep(600)" in line]
    assert child and "MSG" in child[0], reason
    check = json.loads((run / "cells" / bad / "env_check.json").read_text())
    assert not check["ok"]
    assert any(m["name"] == "MSG" and m["observed"] is None for m in check["mismatches"])
    assert bad in summary_rows(proc.stdout) and "env" in summary_rows(proc.stdout)[bad]


def _start_and_wait_mid_bench(e2e: E2E, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """Start the CLI; return once some cell is done and another is in its bench."""
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, cwd=e2e.tmp, stdout=subprocess.DEVNULL, stderr=err)

    def mid_run() -> bool:
        # hosts run in step: wait for a bench that started well after the first ones ended
        counted = {p.name.removesuffix(".count") for p in e2e.records.glob("*.count")}
        now = time.time()
        benching = [
            p
            for p in e2e.records.glob("*.bench.json")
            if p.name.removesuffix(".bench.json") not in counted
            and 0.3 < now - p.stat().st_mtime < 1.0
        ]
        return bool(counted) and bool(benching) and _some_cell_passed(e2e)

    try:
        wait_for(mid_run, 60, "a finished cell and another mid-bench")
    except BaseException:
        proc.kill()
        raise
    return proc


def _some_cell_passed(e2e: E2E) -> bool:
    """A cell of the run is installed in the bundle as passed."""
    return any(
        json.loads(p.read_text()).get("status") == "passed"
        for p in e2e.results.glob("*/cells/*/cell.json")
        if not p.parent.name.startswith(".")
    )


def _resume_and_check(e2e: E2E, run: Path, inventory: Path, playbook: Path) -> None:
    # Only cells installed in the bundle as passed are done. A bench can count its run and
    # still be stopped before its runner sees it exit (interrupted: measured again), or its
    # runner may finish it after the controller died (collected by the resume: not measured).
    finished = [
        d.name
        for d in (run / "cells").iterdir()
        if not d.name.startswith(".") and cell_json(run, d.name)["status"] == "passed"
    ]
    counted = {p.name.removesuffix(".count") for p in e2e.records.glob("*.count")}
    before = {cid: e2e.count(cid) for cid in counted}
    proc = e2e.apply(*e2e.argv(playbook, inventory, "--resume", str(run)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = run_json(run)
    assert doc["status"] == "passed"
    assert {c["status"] for c in doc["cells"].values()} == {"passed"}
    cells = sorted(p.name for p in (run / "cells").iterdir() if not p.name.startswith("."))
    assert cells == sorted(doc["cells"])
    for cid in doc["cells"]:
        assert cell_json(run, cid)["status"] == "passed"
        n, was = e2e.count(cid), before.get(cid, 0)
        if cid in finished:  # never re-run
            assert was == 1 and n == 1, f"{cid} passed having measured {was}, now {n} times"
        elif cid in counted:  # collected from its runner, or measured once more
            assert n in (was, was + 1), f"{cid} measured {n} times, {was} before the resume"
        else:
            assert n == 1, f"{cid} measured {n} times"
    assert finished
    listed = {cid: line for line in proc.stdout.splitlines() for cid in doc["cells"] if cid in line}
    assert sorted(listed) == sorted(doc["cells"]), proc.stdout  # the summary is the whole run
    assert all(("(earlier)" in listed[cid]) == (cid in finished) for cid in listed), proc.stdout
    assert (run / "MANIFEST.sha256").is_file()


def test_controller_killed_then_resume(e2e: E2E, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL mid-run: servers gone on every host within seconds; --resume finishes each once,
    and clears the staging folder the killed controller left in the temp folder."""
    temp = e2e.tmp / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the controllers' system temp folder
    inventory = e2e.inventory()
    playbook = e2e.playbook({"a": [1, 2, 3]}, bench_extra="--sleep 1.5")
    proc = _start_and_wait_mid_bench(e2e, e2e.argv(playbook, inventory), e2e.tmp / "err.log")
    assert marker_pids(e2e.marker), "no server running at the moment of the kill"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_for(lambda: not marker_pids(e2e.marker), 8, "every server to stop after the kill")
    run = e2e.run_dir()
    assert run_json(run)["status"] == "running"  # the dead controller could not say more
    left = [p.name for p in temp.iterdir()]
    assert [n.startswith("orch-staging-") for n in left] == [True], left
    _resume_and_check(e2e, run, inventory, playbook)
    assert len(run_json(run)["resumed"]) == 1
    assert list(temp.iterdir()) == []  # issue 23 item 21: what the killed one left is gone


def _interrupt_mid_bench(e2e: E2E, signals: int) -> tuple[Path, Path, Path, float]:
    """Apply a 3-cell run, SIGINT it `signals` times mid-bench; (inventory, playbook, log, t)
    with t when the first signal was sent; the controller exited 130."""
    inventory = e2e.inventory()
    playbook = e2e.playbook({"a": [1, 2, 3]}, bench_extra="--sleep 1.5")
    log = e2e.tmp / "err.log"
    proc = _start_and_wait_mid_bench(e2e, e2e.argv(playbook, inventory), log)
    t = time.monotonic()
    for i in range(signals):
        time.sleep(0.3 if i else 0)
        os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 130, log.read_text()
    return inventory, playbook, log, t


def test_ctrl_c_stops_cleanly_then_resume(e2e: E2E) -> None:
    """SIGINT: exit 130, no server left, run.json says interrupted; --resume completes it."""
    inventory, playbook, log, t = _interrupt_mid_bench(e2e, signals=1)
    print("SIGINT exit after", time.monotonic() - t)
    print(log.read_text()[-2500:])
    print(json.dumps(run_json(e2e.run_dir())["cells"], indent=1))
    assert not marker_pids(e2e.marker)
    run = e2e.run_dir()
    doc = run_json(run)
    assert doc["status"] == "interrupted"
    statuses = [c["status"] for c in doc["cells"].values()]
    assert "passed" in statuses and "interrupted" in statuses, statuses
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
    _resume_and_check(e2e, run, inventory, playbook)


def test_ctrl_c_twice_closes_connections_and_fails_no_cell(e2e: E2E) -> None:
    """A second SIGINT drops the connections: the cell in flight is interrupted, not failed."""
    _, _, log, _ = _interrupt_mid_bench(e2e, signals=2)
    deadline = time.monotonic() + 20  # the runners stop their servers on stdin EOF
    while marker_pids(e2e.marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not marker_pids(e2e.marker)
    doc = run_json(e2e.run_dir())
    statuses = [c["status"] for c in doc["cells"].values()]
    failed = {cid: c for cid, c in doc["cells"].items() if c["status"] == "failed"}
    assert doc["status"] == "interrupted" and not failed, failed
    assert "interrupted" in statuses, statuses
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]


def test_failure_reasons(e2e: E2E) -> None:
    """Each failure has its own reason in run.json, cell.json and the summary; others pass."""
    good = ["host1", "host3"]
    held = {name: free_port() for name in good}
    holders = []
    holder_marker = f"{e2e.marker}-holder"
    code = (
        "import socket,sys,time; s=socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('held', flush=True); "
        "time.sleep(120)"
    )
    for name in good:
        argv = e2e.hosts.ssh_argv(e2e.hosts.host(name), sys.executable, "-c", shlex.quote(code),
                                  str(held[name]), holder_marker)  # fmt: skip
        holder = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == b"held"
        holders.append(holder)
    wrong_known_hosts = e2e.hosts.write_known_hosts(e2e.tmp / "wrong_kh", wrong_key_for=["host2"])
    address, port = e2e.hosts.unreachable_address()
    ghost = e2e.hosts.inventory_vars(e2e.hosts.hosts[0]) | {
        "ansible_host": address,
        "ansible_port": port,
        "srv_port": 1,
        "held_port": 1,
    }
    inventory = e2e.inventory(
        extra_host_vars={
            "host2": {"orch_known_hosts": str(wrong_known_hosts), "held_port": 1},
            **{name: {"held_port": held[name]} for name in good},
        },
        extra_hosts={"ghost": ghost},
    )
    port_expr = "{{ held_port if matrix.mode == 'taken' else srv_port }}"
    playbook = e2e.playbook(
        {"mode": ["ok", "exit", "never", "taken"]},
        server_extra="--mode {{ 'ok' if matrix.mode == 'taken' else matrix.mode }}",
        port=port_expr,
        ready_timeout=2.0,
    )
    try:
        proc = e2e.apply(*e2e.argv(playbook, inventory))
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        for pid in marker_pids(holder_marker):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    run = e2e.run_dir()
    doc = run_json(run)
    assert doc["status"] == "failed"
    print(proc.stdout)
    print(proc.stderr[-3000:])
    rows = summary_rows(proc.stdout)
    expected = {
        "ok": "passed",
        "exit": "server exited during startup (rc 4)",
        "never": "server not ready after",
        "taken": "is already in use",
    }
    plan = json.loads((run / "plan.json").read_text())["cells"]
    seen = set()
    for cell in plan:
        cid, host, mode = cell["id"], cell["host"], cell["axes"]["mode"]
        entry = doc["cells"][cid]
        if host in good:
            want = expected[mode]
            if mode == "ok":
                assert entry["status"] == "passed", entry
                continue
            assert entry["status"] == "failed", entry
            assert want in entry["reason"], entry
            assert cell_json(run, cid)["reason"] == entry["reason"]
            if mode == "exit":
                assert "refuses to start" in entry["reason"]  # the log tail
            if mode == "taken":
                assert str(held[host]) in entry["reason"]
        elif host == "host2":
            want = "has CHANGED"
            assert entry["status"] == "failed" and want in entry["reason"], entry
        else:
            want = "connection refused"
            assert entry["status"] == "failed" and "cannot connect to ghost" in entry["reason"]
            assert want in entry["reason"], entry
        assert want in rows[cid], rows.get(cid)
        seen.add((host, mode))
    assert len(seen) == 14  # 2 good hosts x 3 failures + 2 unreachable hosts x 4


def test_shell_metacharacters_stay_literal(e2e: E2E) -> None:
    """Axis values with $(...) and ; reach the server's and bench's argv as single words."""
    pwned = Path(f"/tmp/pwned-{secrets.token_hex(6)}")
    values = [f"$(touch {pwned})", "; rm -rf ~", f"`touch {pwned}`"]
    inventory = e2e.inventory()
    playbook = e2e.playbook(
        {"arg": values},
        server_extra="--label {{ matrix.arg }}",
        bench_extra="--label {{ matrix.arg }}",
    )
    proc = e2e.apply(*e2e.argv(playbook, inventory, "--limit", "host1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = e2e.run_dir()
    for cid in run_json(run)["cells"]:
        value = cell_json(run, cid)["cell"]["axes"]["arg"]
        server_argv = e2e.server_record(cid)["argv"]
        bench_argv = json.loads((e2e.records / f"{cid}.bench.json").read_text())["argv"]
        for argv in (server_argv, bench_argv):
            assert argv[argv.index("--label") + 1] == value
    assert not pwned.exists()

    # A resume whose arguments plan other cells (here: another host) would mix two experiments
    # in one bundle: refused before anything runs, naming the run's own command.
    before = (run / "run.json").read_text()
    more = e2e.apply(*e2e.argv(playbook, inventory, "--limit", "host2", "--resume", str(run)))
    assert more.returncode == 2, more.stdout + more.stderr
    assert "does not hold" in more.stderr and "--limit host1" in more.stderr, more.stderr
    assert (run / "run.json").read_text() == before


def _ancestors(pid: int) -> list[tuple[int, str]]:
    """(pid, cmdline) of each ancestor of `pid`, nearest first."""
    chain = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            break
        chain.append((pid, cmd.strip()))
    return chain


def test_connection_lost_mid_cell(e2e: E2E) -> None:
    """The SSH connection dies mid-bench: that cell fails with its reason and its server
    stops; the controller reconnects and the host's next cells pass; --resume redoes it."""
    inventory = e2e.inventory()
    playbook = e2e.playbook({"a": [1, 2, 3]}, bench_extra="--sleep 2.0")
    log = e2e.tmp / "err.log"
    with log.open("wb") as err:
        argv = e2e.argv(playbook, inventory, "--limit", "host1")
        proc = subprocess.Popen(argv, cwd=e2e.tmp, stdout=subprocess.PIPE, stderr=err)

    def benching() -> bool:
        now = time.time()
        return any(now - p.stat().st_mtime > 0.3 for p in e2e.records.glob("*.bench.json"))

    wait_for(benching, 30, "the first cell's bench")
    (server,) = marker_pids(e2e.marker)
    cut = [
        pid
        for pid, cmd in _ancestors(server)
        if cmd.startswith("sshd:") and "[listener]" not in cmd and " -D " not in cmd
    ]
    assert cut, _ancestors(server)
    for pid in cut:  # the connection's own sshd processes: the TCP connection drops
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not marker_pids(e2e.marker), 8, "the server to stop after the cut")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, log.read_text()
    run = e2e.run_dir()
    cells = run_json(run)["cells"]
    failed = [cid for cid, c in cells.items() if c["status"] == "failed"]
    assert len(failed) == 1, cells
    assert cells[failed[0]]["failed_step"] == "connection"
    assert "lost the connection" in cells[failed[0]]["reason"]
    assert "lost the connection" in summary_rows(out.decode())[failed[0]]
    assert [c["status"] for c in cells.values()].count("passed") == 2
    assert "reconnecting" in log.read_text()
    again = e2e.apply(*e2e.argv(playbook, inventory, "--limit", "host1", "--resume", str(run)))
    assert again.returncode == 0, again.stdout + again.stderr
    assert {c["status"] for c in run_json(run)["cells"].values()} == {"passed"}
    assert all(e2e.count(cid) == 1 for cid in cells)
