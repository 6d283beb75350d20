"""Slurm's own verdicts on a job reach the caller: PENDING too long, cancelled, job ids."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from slurmcluster import SlurmTestCluster

from orchestrator.config.host import Host
from orchestrator.execute.transport.base import CommandTimeout, SchedulerJob
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.connection import (
    SlurmConnection,
    SlurmJobEnded,
    SlurmOptions,
)

pytestmark = [pytest.mark.slow]

PY = sys.executable


@pytest.fixture
def login(slurm_cluster: SlurmTestCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    """The login side is this machine: srun and friends find the test cluster via SLURM_CONF."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    yield Host(name="login", vars={}, groups=(), connection="local", python=PY)


def test_more_nodes_than_the_partition_has_fail_after_the_pending_timeout(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    connection = SlurmConnection(LocalConnection(login), SlurmOptions(nodes=3, pending_timeout=2))
    with pytest.raises(SlurmJobEnded) as caught:
        connection.run(["true"], timeout=60)
    message = str(caught.value)
    # Slurm's reason: PartitionNodeLimit or PartitionConfig, depending on when it looked
    assert re.search(r"stayed PENDING \(Partition\w+\) past slurm_pending_timeout \(2 s\)", message)
    (job,) = connection.jobs
    assert caught.value.job == job
    assert job.job_id is not None and f"Slurm job {job.job_id} ({job.name})" in message
    assert slurm_cluster.job(job.job_id)["JobState"] == "CANCELLED"  # nothing left queued


def test_without_a_pending_timeout_the_commands_timeout_says_it_never_started(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    connection = SlurmConnection(
        LocalConnection(login), SlurmOptions(nodes=3, pending_timeout=None)
    )
    with pytest.raises(CommandTimeout, match=r"never started: PENDING \(Partition\w+\)"):
        connection.run(["true"], timeout=4)
    (job,) = connection.jobs
    assert job.job_id is not None
    assert slurm_cluster.job(job.job_id)["JobState"] == "CANCELLED"


def test_no_free_gpu_fails_after_the_pending_timeout_with_slurms_reason(
    slurm_cluster: SlurmTestCluster, login: Host, all_gpus_taken: str
) -> None:
    connection = SlurmConnection(
        LocalConnection(login), SlurmOptions(gres="gpu:1", pending_timeout=3)
    )
    with pytest.raises(SlurmJobEnded, match=r"stayed PENDING \(Resources\)"):
        connection.run(["true"], timeout=60)
    (job,) = connection.jobs
    assert job.job_id is not None
    assert slurm_cluster.job(job.job_id)["JobState"] == "CANCELLED"


def test_a_stop_while_the_job_waits_cancels_it_at_once(
    slurm_cluster: SlurmTestCluster, login: Host, all_gpus_taken: str
) -> None:
    """Issue 23 item 1: Ctrl-C while the job was PENDING hung the controller for good (srun
    reads no stdin before the job starts; the payload filled the pipe and closing stdin waited
    on the writer) and left the job queued. The stop now cancels the waiting job."""
    stop = threading.Event()

    def on_job(job: SchedulerJob) -> None:
        if job.state == "PENDING":
            stop.set()  # Ctrl-C, once squeue shows the job waiting

    connection = SlurmConnection(
        LocalConnection(login), SlurmOptions(gres="gpu:1", pending_timeout=600), on_job=on_job
    )
    started = time.monotonic()
    with pytest.raises(SlurmJobEnded):
        connection.run(
            [PY, "-c", "import sys; sys.stdin.read()"],
            stdin=b"x" * (4 << 20),  # runner.pyz and the payload: more than a pipe holds
            keep_stdin_open=True,
            timeout=600,
            stop=stop,
        )
    assert time.monotonic() - started < 120
    (job,) = connection.jobs
    assert job.job_id is not None
    assert slurm_cluster.job(job.job_id)["JobState"] == "CANCELLED"  # nothing left queued


def test_a_waiting_job_is_reported_pending_then_running(
    slurm_cluster: SlurmTestCluster, login: Host, all_gpus_taken: str
) -> None:
    """The watcher tells `on_job` why the job waits; once resources free up, it runs."""
    seen: list[SchedulerJob] = []

    def on_job(job: SchedulerJob) -> None:
        seen.append(job)
        if job.state == "PENDING" and job.reason == "Resources":
            slurm_cluster.run("scancel", all_gpus_taken)

    connection = SlurmConnection(
        LocalConnection(login), SlurmOptions(gres="gpu:1", pending_timeout=60), on_job=on_job
    )
    result = connection.run([PY, "-c", "import os; print(os.environ['SLURM_JOB_ID'])"], timeout=90)
    assert result.rc == 0, result.stderr
    assert (seen[0].state, seen[0].reason) == ("PENDING", "Resources")
    assert seen[-1].state in ("RUNNING", "COMPLETING", "COMPLETED")
    (job,) = connection.jobs
    assert job.job_id == result.stdout.strip() == seen[0].job_id


def test_a_job_cancelled_from_outside_fails_with_its_state(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    connection = SlurmConnection(LocalConnection(login), SlurmOptions())
    cancelled = threading.Event()

    def on_line(line: str) -> None:
        if line == "started" and not cancelled.is_set():
            cancelled.set()
            slurm_cluster.run("scancel", f"--name={connection.job_names[0]}")

    script = "import time; print('started', flush=True); time.sleep(300)"
    with pytest.raises(SlurmJobEnded) as caught:
        connection.run([PY, "-c", script], timeout=120, on_stdout_line=on_line)
    message = str(caught.value)
    (job,) = connection.jobs
    assert f"Slurm job {job.job_id} ({job.name}) running {PY} on node" in message
    assert "ended CANCELLED" in message and "cancelled (scancel" in message
    assert caught.value.result.stdout == "started\n"
    assert job.state == "CANCELLED"


def test_every_commands_job_is_recorded(slurm_cluster: SlurmTestCluster, login: Host) -> None:
    connection = SlurmConnection(LocalConnection(login), SlurmOptions(nodes=2))
    script = "import os; print(os.environ['SLURM_JOB_ID'], os.environ['SLURM_JOB_NODELIST'])"
    ids = [connection.run([PY, "-c", script], timeout=60).stdout.split()[0] for _ in range(2)]
    jobs = connection.jobs
    assert [job.job_id for job in jobs] == ids
    assert [job.name for job in jobs] == connection.job_names
    assert jobs[0].nodes == "node[1-2]"
    assert [job["job_id"] for job in connection.scheduler_jobs(since=1)] == ids[1:]
    assert connection.login.scheduler_jobs() == []  # not through Slurm: nothing to record


def test_a_program_failing_by_itself_keeps_its_exit_code(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    connection = SlurmConnection(LocalConnection(login), SlurmOptions())
    failed = connection.run([PY, "-c", "import sys; sys.exit(5)"], timeout=60)
    assert failed.rc == 5  # not a Slurm verdict: no exception, the exit code as it was
    (job,) = connection.jobs
    assert job.job_id is not None and job.state == "FAILED"


def test_the_runners_first_word_records_its_job_at_once(
    slurm_cluster: SlurmTestCluster, login: Host
) -> None:
    """The runner names its job (SLURM_JOB_ID) before any cell: recorded as RUNNING then, not
    when the watcher's squeue next looks (a controller killed in between loses the job)."""
    seen: list[SchedulerJob] = []
    connection = SlurmConnection(LocalConnection(login), SlurmOptions(), on_job=seen.append)
    recorded: list[SchedulerJob] = []

    def on_line(line: str) -> None:
        event = json.loads(line)
        connection.job_running("orch-not-ours", "999999")  # another job's word changes nothing
        connection.job_running(event["name"], event["job_id"], event["nodes"])
        recorded.extend(connection.jobs)
        assert seen and seen[-1] == recorded[0]  # on_job heard it before job_running returned

    script = (
        "import sys, time; from orchestrator.runner.control import Control; "
        "from orchestrator.runner.cell_queue import announce_slurm_job; "
        "announce_slurm_job(Control(sys.stdout.buffer)); time.sleep(1)"
    )
    result = connection.run([PY, "-c", script], timeout=60, on_stdout_line=on_line)
    assert result.rc == 0, result.stderr
    (job,) = recorded
    event = json.loads(result.stdout)
    assert event["event"] == "slurm_job" and event["name"] == job.name
    assert (job.job_id, job.state) == (event["job_id"], "RUNNING")
    assert job.nodes == event["nodes"] and job.nodes and job.nodes.startswith("node")
