"""SlurmConnection against the real test Slurm: commands as jobs through srun, streamed."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
from slurmcluster import SlurmTestCluster

from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure, ExecutionError
from orchestrator.execute.transport.connect import CommandTimeout
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.connection import SlurmConnection, SlurmOptions

pytestmark = [pytest.mark.slow]

PY = sys.executable


@pytest.fixture
def login(slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    """The login side is this machine: srun and friends find the test cluster via SLURM_CONF."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield Host(name="login", vars={}, groups=(), connection="local", python=PY)


def slurm(login: Host, **options: object) -> SlurmConnection:
    return SlurmConnection(LocalConnection(login), SlurmOptions(**options))  # type: ignore[arg-type]


ECHO_UNTIL_EOF = """
import os, sys
print("job", os.environ["SLURM_JOB_ID"], os.environ["SLURM_JOB_NAME"], flush=True)
print("payload", sys.stdin.readline().strip(), flush=True)
rest = sys.stdin.read()  # returns at EOF: only once `stop` is set
print("eof after", repr(rest), flush=True)
"""


def test_streams_stdout_and_forwards_stdin_and_its_eof(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    lines: list[str] = []
    stop = threading.Event()

    def on_line(line: str) -> None:
        lines.append(line)
        if line.startswith("payload"):
            stop.set()  # the program is still running and waiting on stdin: streamed, not at exit

    with slurm(login, gres="gpu:1") as connection:
        result = connection.run(
            [PY, "-c", ECHO_UNTIL_EOF],
            stdin=b"hello\n",
            keep_stdin_open=True,
            on_stdout_line=on_line,
            stop=stop,
            timeout=60,
        )
    assert result.rc == 0, result.stderr
    job_id, job_name = lines[0].split()[1:]
    assert job_name == connection.job_names[0]
    assert lines[1:] == ["payload hello", "eof after ''"]
    assert result.stdout.splitlines() == lines
    # srun returns when the step ends; the job itself may still be COMPLETING a moment
    assert slurm_cluster.wait_for_job(job_id, ["COMPLETED", "FAILED", "CANCELLED"]) == "COMPLETED"
    job = slurm_cluster.job(job_id)
    assert job["JobName"] == job_name
    assert job["TresPerNode"] == "gres:gpu:1"


def test_two_nodes_run_one_task_each(slurm_cluster: SlurmTestCluster, login: Host) -> None:
    connection = slurm(login, nodes=2, gres="gpu:8")
    script = "import os; print(os.environ['SLURM_NODEID'], os.environ['SLURMD_NODENAME'])"
    result = connection.run([PY, "-c", script], timeout=60)
    assert sorted(result.stdout.splitlines()) == ["0 node1", "1 node2"]


def test_timeout_cancels_the_job(slurm_cluster: SlurmTestCluster, login: Host) -> None:
    connection = slurm(login)
    with pytest.raises(CommandTimeout, match="job cancelled") as caught:
        connection.run([PY, "-c", "print('started', flush=True); import time; time.sleep(300)"],
                       timeout=5)  # fmt: skip
    assert caught.value.result.stdout == "started\n"
    (name,) = connection.job_names
    assert slurm_cluster.job(slurm_cluster.job_id(name))["JobState"] == "CANCELLED"


def test_slurm_refusing_the_job_is_an_execution_error(login: Host) -> None:
    connection = slurm(login, gres="gpu:9")
    with pytest.raises(ExecutionError, match="Requested node configuration is not available"):
        connection.run(["true"], timeout=30)


def test_the_programs_exit_code_comes_back(login: Host) -> None:
    result = slurm(login).run([PY, "-c", "import sys; sys.exit(3)"], timeout=60)
    assert result.rc == 3


def test_closing_the_connection_ends_the_job(slurm_cluster: SlurmTestCluster, login: Host) -> None:
    """The controller going away is EOF on the task's stdin: the job ends, nothing stays."""
    connection = slurm(login)
    script = "import sys; print('waiting', flush=True); sys.stdin.read(); print('eof', flush=True)"
    with pytest.raises(ConnectionFailure):
        connection.run(
            [PY, "-c", script],
            keep_stdin_open=True,
            on_stdout_line=lambda line: line == "waiting" and connection.close(),
            timeout=60,
        )
    (name,) = connection.job_names
    ended = slurm_cluster.wait_for_job(slurm_cluster.job_id(name), ["COMPLETED", "FAILED"])
    assert ended == "COMPLETED"  # the program read EOF and exited by itself
