"""What a whole queue of cells in one Slurm job needs from srun: lines streamed as they come,
megabytes of stdout without deadlock, binary stdin kept open, and its EOF when the controller
goes away."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmcluster import SlurmTestCluster

from orchestrator.config.host import Host
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.connection import SlurmConnection, SlurmOptions

pytestmark = [pytest.mark.slow]

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def login(slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    """The login side is this machine: srun and friends find the test cluster via SLURM_CONF."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield Host(name="login", vars={}, groups=(), connection="local", python=PY)


def slurm(login: Host) -> SlurmConnection:
    return SlurmConnection(LocalConnection(login), SlurmOptions())


# 5 MB of numbered lines, then one 3 MB line (an archive as one JSON line), while stdin stays
# open; then it waits for stdin's EOF, as the runner does
BIG_OUTPUT = """
import sys
for i in range(50000):
    sys.stdout.write("line %06d %s\\n" % (i, "x" * 89))
sys.stdout.write("big " + "y" * 3000000 + "\\n")
sys.stdout.flush()
sys.stdin.buffer.read()
print("eof", flush=True)
"""


def test_megabytes_of_stdout_stream_through_while_stdin_stays_open(login: Host) -> None:
    lines: list[str] = []
    stop = threading.Event()

    def on_line(line: str) -> None:
        lines.append(line)
        if line.startswith("big "):
            stop.set()  # all of it arrived while the program still waited on stdin

    result = slurm(login).run(
        [PY, "-c", BIG_OUTPUT], keep_stdin_open=True, on_stdout_line=on_line, stop=stop, timeout=120
    )
    assert result.rc == 0, result.stderr
    assert len(lines) == 50002
    assert lines[:2] == [f"line 000000 {'x' * 89}", f"line 000001 {'x' * 89}"]
    assert lines[49999] == f"line 049999 {'x' * 89}"
    assert lines[50000] == "big " + "y" * 3000000  # one long line stays one line
    assert lines[50001] == "eof"
    assert sum(len(line) + 1 for line in lines) == 50000 * 102 + 3000005 + 4  # 8.1 MB, every byte
    # what was streamed is not held twice: the result keeps only a tail, for error messages
    assert result.stdout.endswith("y" * 1000 + "\neof\n")
    assert len(result.stdout) <= 3000005 + 4


# reads an exact number of bytes, says their hash, then reads on until EOF
BINARY_STDIN = """
import hashlib, sys
size = int(sys.argv[1])
data = b""
while len(data) < size:
    chunk = sys.stdin.buffer.read1(size - len(data))
    if not chunk:
        break
    data += chunk
print("got", len(data), hashlib.sha256(data).hexdigest(), flush=True)
rest = sys.stdin.buffer.read()
print("eof after", len(rest), flush=True)
"""


def test_binary_stdin_arrives_byte_for_byte_and_eof_comes_on_stop(login: Host) -> None:
    payload = bytes(range(256)) * 8192 + b"\r\n\x00\xff no newline at the end"
    stop = threading.Event()

    def on_line(line: str) -> None:
        if line.startswith("got "):
            stop.set()  # the controller leaves: the program must see EOF

    result = slurm(login).run(
        [PY, "-c", BINARY_STDIN, str(len(payload))],
        stdin=payload,
        keep_stdin_open=True,
        on_stdout_line=on_line,
        stop=stop,
        timeout=120,
    )
    assert result.rc == 0, result.stderr
    digest = hashlib.sha256(payload).hexdigest()
    assert result.stdout.splitlines() == [f"got {len(payload)} {digest}", "eof after 0"]


# the "controller": opens a SlurmConnection, runs a program that waits for stdin's EOF
CONTROLLER = """
import sys
from orchestrator.config.host import Host
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.connection import SlurmConnection, SlurmOptions

host = Host(name="login", vars={}, groups=(), connection="local", python=sys.executable)
connection = SlurmConnection(LocalConnection(host), SlurmOptions())
# after EOF it still prints (to a reader that is gone) while it cleans up, as the runner does
program = (
    "import sys, time, pathlib; print('waiting', flush=True); sys.stdin.buffer.read(); "
    "[print('stopping', i, flush=True) or time.sleep(0.1) for i in range(10)]; "
    "pathlib.Path(sys.argv[1]).write_text('eof')"
)
connection.run(
    [sys.executable, "-c", program, sys.argv[1]],
    stdin=b"payload\\n",
    keep_stdin_open=True,
    on_stdout_line=lambda line: print(line, connection.job_names[0], flush=True),
)
"""


def test_a_killed_controller_is_eof_for_the_program_in_the_job(
    slurm_cluster: SlurmTestCluster, login: Host, tmp_path: Path
) -> None:
    marker = tmp_path / "saw-eof"
    controller = subprocess.Popen(
        [PY, "-c", CONTROLLER, str(marker)],
        cwd=ROOT,
        env={**slurm_cluster.env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert controller.stdout is not None
        said, job_name = controller.stdout.readline().split()
        assert said == "waiting"
        os.kill(controller.pid, signal.SIGKILL)  # no goodbye: only its pipes close
        controller.wait(timeout=10)
        job_id = slurm_cluster.job_id(job_name)
        state = slurm_cluster.wait_for_job(job_id, ["COMPLETED", "FAILED", "CANCELLED"])
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        # the program read EOF and finished its cleanup: srun outlived its closed stdout
        assert marker.read_text() == "eof"
        assert state == "COMPLETED"
    finally:
        if controller.poll() is None:
            controller.kill()
