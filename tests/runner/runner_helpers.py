"""Helpers for the runner tests: build cells, run the real runner as a subprocess, read results."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from orchestrator.cell import (
    BenchSpec,
    Capture,
    Cell,
    ReadyCheck,
    RepoPin,
    ServerSpec,
    SnapshotSpec,
)
from orchestrator.execute.ship import runner_hash, unpacked_runner, write_runner
from orchestrator.runner.procs import proc_info

ROOT = Path(__file__).resolve().parents[2]
# The runner as hosts run it: runner.pyz, built from orchestrator/runner/ (one per content hash),
# unpacked and byte-compiled beside itself by the same code the bootstrap runs.
RUNNER_PYZ = write_runner(Path(tempfile.gettempdir()) / f"orch-test-runner-{runner_hash()}")
RUNNER = unpacked_runner(RUNNER_PYZ)
PROGRAMS = Path(__file__).resolve().parent / "programs"
SERVER = PROGRAMS / "server.py"
BENCH = PROGRAMS / "bench.py"
RUN_ID = "20261130-120000-test-abcd"
STEP_ORDER = [
    "repo",
    "setup",
    "preflight",
    "snapshot_pre",
    "server_start",
    "ready",
    "capture_ready",
    "verify_env",
    "nodes",
    "bench",
    "profile",
    "stop",
    "snapshot_post",
]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_cell(
    port: int | None,
    *,
    cell_id: str = "x-1-0000abcd",
    server_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    secrets: tuple[str, ...] = (),
    bench_args: tuple[str, ...] = (),
    warmup: int = 0,
    repeats: int = 2,
    ready_timeout: float = 10.0,
    ready_log: str | None = None,
    verify_env: str = "strict",
    stop_grace: float = 3.0,
    bench_timeout: float = 20.0,
    repo: RepoPin | None = None,
    bench_argv: tuple[str, ...] | None = None,
    cell_timeout: float = 60.0,
    full_snapshots: bool = False,
) -> dict[str, Any]:
    """A Cell (validated by the real model) as the JSON the controller sends. Snapshots skip pip
    freeze and topology unless `full_snapshots` (pip freeze costs a second per snapshot)."""
    server = None
    if port is not None:
        base = f"http://127.0.0.1:{port}"
        server = ServerSpec(
            argv=(sys.executable, str(SERVER), "--port", str(port), *server_args),
            port=port,
            ready=ReadyCheck(
                url=f"{base}/health", log=ready_log, timeout=ready_timeout, interval=0.05
            ),
            captures=(
                Capture(name="info", urls=(f"{base}/missing", f"{base}/info")),
                Capture(name="env", urls=(f"{base}/env",)),
            ),
            stop_grace=stop_grace,
            verify_env=verify_env,  # type: ignore[arg-type]
        )
    if bench_argv is None:
        url = f"http://127.0.0.1:{port}" if port is not None else "http://127.0.0.1:9"
        bench_argv = (sys.executable, str(BENCH), "--url", url, "--n", "3", *bench_args)
    cell = Cell(
        id=cell_id,
        playbook="runner-test",
        host="local",
        axes={"x": 1},
        repo=repo,
        env=env or {},
        secrets=secrets,
        server=server,
        bench=BenchSpec(
            argv=bench_argv,
            warmup=warmup,
            repeats=repeats,
            timeout=bench_timeout,
            result_file="result.json",
        ),
        cell_timeout=cell_timeout,
        snapshot=SnapshotSpec(pip_freeze=full_snapshots, topo=full_snapshots),
    )
    return cell.model_dump(mode="json")


def payload(
    cell: dict[str, Any],
    workdir: str = ".orch",
    *,
    run_id: str = RUN_ID,
    secret_values: list[str | int] | None = None,
) -> dict[str, Any]:
    """The first stdin line of `runner.pyz run` (no secret_values key unless given, as before)."""
    data: dict[str, Any] = {"schema_version": 1, "run_id": run_id, "workdir": workdir, "cell": cell}
    if secret_values is not None:
        data["secret_values"] = secret_values
    return data


def runner_env(home: Path) -> dict[str, str]:
    """The test's environment with HOME pointing at a scratch directory."""
    env = dict(os.environ)
    env["HOME"] = str(home)
    return env


class RunnerProcess:
    """`runner.pyz run` as a real subprocess: stdin kept open, events read as they come."""

    started: ClassVar[list[subprocess.Popen[bytes]]] = []

    @classmethod
    def kill_all(cls) -> None:
        """SIGKILL every runner still alive (a failed test must not leave one behind)."""
        while cls.started:
            proc = cls.started.pop()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def __init__(
        self,
        home: Path,
        data: dict[str, Any],
        python: str | None = None,
        wrapper: list[str] | None = None,
    ) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the runner)
        # ORCH_TEST_RUNNER_PYTHON runs every runner test under another interpreter (e.g. 3.8).
        python = python or os.environ.get("ORCH_TEST_RUNNER_PYTHON") or sys.executable
        argv = [*(wrapper or []), python, str(RUNNER), "run"]
        self.proc = subprocess.Popen(
            argv,
            cwd=home,
            env=runner_env(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
        )
        RunnerProcess.started.append(self.proc)
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(data) + "\n").encode())
        self.proc.stdin.flush()
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode()
            self.lines.append(line)
            self._queue.put(json.loads(line))
        self._queue.put(None)

    def wait_event(self, pred: Any, timeout: float = 20.0) -> dict[str, Any]:
        """The next event for which pred(event) is true."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no matching event within {timeout}s; got {self.events}"
            event = self._queue.get(timeout=left)
            assert event is not None, f"runner ended first: {self.events} {self.stderr_text()}"
            self.events.append(event)
            if pred(event):
                return event

    def finish(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Read every event until the runner exits; then close its stdin."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"runner still running after {timeout}s: {self.events}"
            event = self._queue.get(timeout=left)
            if event is None:
                break
            self.events.append(event)
        self.proc.wait(timeout=10)
        self.close_stdin()
        return self.events

    def close_stdin(self) -> None:
        """EOF on the runner's stdin: the controller is gone."""
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def kill(self) -> None:
        """SIGKILL the runner (or its wrapper)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def guard_pid(self) -> int | None:
        """The runner's session guard (runner/guard.py), a child of the runner, while it runs."""
        return guard_of(self.proc.pid)

    def kill_guard_then_runner(self) -> None:
        """SIGKILL the session guard first, then the runner: what a host where the guard could
        not help sees (the OOM killer took it too), so the next preflight is all that is left."""
        guard = self.guard_pid()
        assert guard is not None, "the runner started no session guard"
        info = proc_info(guard)
        assert info is not None, "the session guard ended by itself"
        runner = info.ppid  # the guard's parent is the runner itself, wrapper or not
        # Held still meanwhile: a runner that sees its guard die starts another (runner/guard.py),
        # which would then stop the session this test means to leave behind.
        os.kill(runner, signal.SIGSTOP)
        os.kill(guard, signal.SIGKILL)
        self.kill()
        if runner != self.proc.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(runner, signal.SIGCONT)  # a wrapper's runner goes on as it would have

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    @property
    def done(self) -> dict[str, Any]:
        """The final `done` event."""
        assert self.events and self.events[-1]["event"] == "done", self.events
        return self.events[-1]


GUARD_SIGNATURE = b"orchestrator.runner.guard import serve"


def guard_of(root: int) -> int | None:
    """The session guard among `root`'s descendants (None when there is none)."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, bytes] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmdlines[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(name)] = int(stat[stat.rfind(")") + 2 :].split()[1])
    for pid, cmd in cmdlines.items():
        ancestor = parents.get(pid)
        while ancestor and ancestor != root:
            ancestor = parents.get(ancestor)
        if ancestor == root and GUARD_SIGNATURE in cmd:
            return pid
    return None


def run_cell(home: Path, cell: dict[str, Any], timeout: float = 30.0) -> RunnerProcess:
    """Run one cell to the end."""
    runner = RunnerProcess(home, payload(cell))
    runner.finish(timeout)
    return runner


def cell_dir(home: Path, cell_id: str = "x-1-0000abcd") -> Path:
    """The finished cell directory on the 'host'."""
    return home / ".orch" / "runs" / RUN_ID / cell_id


def load(path: Path) -> Any:
    """Parse a JSON file."""
    return json.loads(path.read_text())


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def archive_names(home: Path, cell_id: str = "x-1-0000abcd") -> list[str]:
    """Member names of the cell's archive."""
    with tarfile.open(archive_path(home, cell_id)) as tar:
        return tar.getnames()


def archive_path(home: Path, cell_id: str = "x-1-0000abcd") -> Path:
    """Where the runner writes the cell's archive."""
    return home / ".orch" / "runs" / RUN_ID / f"{cell_id}.tar.gz"


def via_shell(cell: dict[str, Any]) -> dict[str, Any]:
    """The cell's server started through `sh -c`: the shell dies with a killed runner (its
    parent-death signal), the server inside it is left behind, as a wrapper script's would be."""
    argv = cell["server"]["argv"]
    cell["server"]["argv"] = ["sh", "-c", shlex.join(argv) + "; exit 0"]
    return cell


def server_pid_on(port: int) -> int:
    """The pid of the test server answering on `port` (its /info says)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/info", timeout=5) as resp:
        return int(json.loads(resp.read())["pid"])


def bench_started(event: dict[str, Any]) -> bool:
    """The event that says a cell's bench step began."""
    return event == {**event, "event": "step", "step": "bench", "status": "start"}


def gone(pid: int, within: float = 10.0) -> bool:
    """`pid` ends within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False
