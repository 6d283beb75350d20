"""The real test Slurm (tests/slurmcluster.py), started once for the tests of this directory."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
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
    with SlurmTestCluster(nodes=2, gpus=8) as cluster:
        yield cluster


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
