"""The real test Slurm (tests/slurmcluster.py), started once for the tests of this directory."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from slurm_helpers import (
    TIME_LIMIT_PARTITION,
    TimeLimitRun,
    apply_argv,
    write_inventory,
    write_playbook,
)
from slurmcluster import SlurmTestCluster, missing_reason


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmTestCluster]:
    """munged, slurmctld and two slurmd nodes (8 fake GPUs each), stopped after the session.

    Skipped where Slurm cannot run (not root, packages missing); under CI as root missing
    packages are a failure, because scripts/test.sh installs them there.
    """
    reason = missing_reason()
    if reason is not None:
        if os.environ.get("CI") and os.geteuid() == 0:
            pytest.fail(f"CI must run the Slurm tests: {reason}")
        pytest.skip(reason)
    with SlurmTestCluster(nodes=2, gpus=8, side_partition=TIME_LIMIT_PARTITION) as cluster:
        yield cluster


@pytest.fixture(scope="session", autouse=True)
def time_limit_run(
    slurm_cluster: SlurmTestCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TimeLimitRun]:
    """Slurm checks time limits about every 30 s and the least limit is a minute, so a job
    past its limit takes 60-90 s: it runs on the side partition's own node while the other tests
    of this directory run, and its test only reads the outcome. Its job is queued before any test
    notes the next job id, so no test counts it."""
    tmp = tmp_path_factory.mktemp("time-limit")
    records = tmp / "records"
    records.mkdir()
    playbook = write_playbook(tmp, records, bench_sleep=300, bench_timeout=240, cell_timeout=300)
    inventory = write_inventory(tmp, slurm_time="1", slurm_partition=TIME_LIMIT_PARTITION)
    with (tmp / "stdout").open("wb") as out, (tmp / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            apply_argv(playbook, inventory, tmp / "results"), cwd=tmp, env=slurm_cluster.env,
            stdout=out, stderr=err,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _running_in(slurm_cluster, TIME_LIMIT_PARTITION):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the time-limit job never started: {(tmp / 'stderr').read_text()}")
        time.sleep(0.2)
    run = TimeLimitRun(tmp, records, proc)
    yield run
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _running_in(cluster: SlurmTestCluster, partition: str) -> bool:
    shown = cluster.run("squeue", "-h", "-p", partition, "-t", "RUNNING", "-o", "%i").stdout
    return bool(shown.strip())


@pytest.fixture
def all_gpus_taken(slurm_cluster: SlurmTestCluster) -> Iterator[str]:
    """A job holding every GPU of both nodes, for as long as the test runs; its id."""
    output = str(slurm_cluster.base / "holder-%j.out")
    holder = slurm_cluster.run(
        "sbatch", "--parsable", f"--output={output}", "-N2", "--gres=gpu:8",
        "--wrap", "sleep 300",
    ).stdout.strip()  # fmt: skip
    slurm_cluster.wait_for_job(holder, ["RUNNING"])
    yield holder
    slurm_cluster.run("scancel", holder, check=False)
    slurm_cluster.wait_for_job(holder, ["CANCELLED", "COMPLETED"])
