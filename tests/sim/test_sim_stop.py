"""`sim serve` stops promptly when SIGTERM arrives more than once.

The cell runner signals the server's process group and then each of its processes, so the server
gets SIGTERM twice in quick succession. A handler that called `Event.set()` could be re-entered by
the second signal while the first call still held the event's lock, and the main thread deadlocked
on itself until the runner's SIGKILL (15 s later). That took ~1 stop in 450 here and 2 cells in 40
in QA. A dense burst of SIGTERMs right after the group's makes the interleaving likely (~1 stop in
4 without the fix), so a few rounds of servers catch it. The burst is kept finite: an endless flood
nests the re-entered handler until RecursionError kills the deadlocked server, which hides the bug.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .simhelpers import TIME_SCALE, free_port, get, group_members

ROUNDS = 6
SERVERS_PER_ROUND = 5
BURST = 3000
GONE_WITHIN_S = 5.0


def start(cwd: Path, port: int) -> subprocess.Popen[bytes]:
    """`sim serve --tp-size 2` in its own session, as the runner starts it."""
    argv = [sys.executable, "-m", "orchestrator.sim", "serve", "--port", str(port)]
    argv += ["--tp-size", "2", "--time-scale", str(TIME_SCALE)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    with open(cwd / f"server-{port}.log", "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_ready(proc: subprocess.Popen[bytes], port: int) -> None:
    """Until /health_generate answers 200 (fails if the server exits)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited rc={proc.returncode}"
        try:
            if get(f"http://127.0.0.1:{port}/health_generate", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("server not ready in 30 s")


def test_sigterm_twice_stops_the_whole_group(tmp_path: Path) -> None:
    slow: list[str] = []
    for round_no in range(ROUNDS):
        servers = []
        try:
            ports: set[int] = set()
            while len(ports) < SERVERS_PER_ROUND:  # free_port may hand out one twice
                ports.add(free_port())
            for port in sorted(ports):
                servers.append((start(tmp_path, port), port))
            for proc, port in servers:
                wait_ready(proc, port)
            sent = time.monotonic()
            for proc, _port in servers:
                os.killpg(proc.pid, signal.SIGTERM)
                # The runner's second SIGTERM, repeated back to back: the window (a signal
                # landing while the handler holds the lock) is microseconds wide. The leader is
                # not reaped yet, so its pid cannot have been reused.
                for _ in range(BURST):
                    os.kill(proc.pid, signal.SIGTERM)
            while time.monotonic() - sent < GONE_WITHIN_S:
                for proc, _port in servers:
                    proc.poll()  # reap the leader so it does not linger as a zombie
                if not any(group_members(proc.pid) for proc, _port in servers):
                    break
                time.sleep(0.02)
            slow += [
                f"round {round_no}, port {port}"
                for proc, port in servers
                if group_members(proc.pid)
            ]
        finally:
            for proc, _port in servers:
                if group_members(proc.pid):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert not slow, (
        f"server group still alive {GONE_WITHIN_S:g} s after SIGTERM: {slow} "
        f"(of {ROUNDS * SERVERS_PER_ROUND} servers)"
    )
