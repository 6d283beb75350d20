"""The test Slurm itself: two nodes, fake GPUs, cancelled and pending jobs, as a real cluster."""

from __future__ import annotations

import time

import pytest
from slurmcluster import SlurmTestCluster

pytestmark = [pytest.mark.slow]


def submit(cluster: SlurmTestCluster, *args: str) -> str:
    """sbatch a job (output under the cluster's directory); return its job id."""
    output = str(cluster.base / "job-%j.out")
    return cluster.run("sbatch", "--parsable", f"--output={output}", *args).stdout.strip()


def test_srun_spreads_one_task_over_each_node(slurm_cluster: SlurmTestCluster) -> None:
    shown = slurm_cluster.run(
        "srun", "-N2", "--gres=gpu:8", "--ntasks-per-node=1",
        "sh", "-c", 'echo "$SLURM_NODEID $SLURMD_NODENAME $(hostname -I)"',
    )  # fmt: skip
    lines = sorted(shown.stdout.splitlines())
    assert [line.split()[:2] for line in lines] == [["0", "node1"], ["1", "node2"]]
    # each task ran in its node's namespace, at that node's address
    addresses = {node.name: node.address for node in slurm_cluster.main_nodes}
    assert [line.split()[2] for line in lines] == [addresses["node1"], addresses["node2"]]


def test_scancel_ends_a_running_job_cancelled(slurm_cluster: SlurmTestCluster) -> None:
    job = submit(slurm_cluster, "--time=1", "--wrap", "sleep 300")
    slurm_cluster.wait_for_job(job, ["RUNNING"])
    slurm_cluster.run("scancel", job)
    assert slurm_cluster.wait_for_job(job, ["CANCELLED", "COMPLETED", "FAILED"]) == "CANCELLED"
    assert slurm_cluster.job(job)["TimeLimit"] == "00:01:00"


def test_more_gres_than_exist_is_refused_at_submission(slurm_cluster: SlurmTestCluster) -> None:
    refused = slurm_cluster.run(
        "sbatch", "--gres=gpu:9", "--wrap", "true", check=False
    )  # fmt: skip
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr


def test_gres_taken_leaves_a_job_pending_with_its_reason(slurm_cluster: SlurmTestCluster) -> None:
    holder = submit(slurm_cluster, "-N2", "--gres=gpu:8", "--wrap", "sleep 300")
    try:
        slurm_cluster.wait_for_job(holder, ["RUNNING"])
        waiting = submit(slurm_cluster, "--gres=gpu:1", "--wrap", "true")
        reason = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and reason in ("", "None"):
            shown = slurm_cluster.run("squeue", "-h", "-j", waiting, "-o", "%T %r").stdout
            state, reason = shown.split()
            assert state == "PENDING"
            time.sleep(0.2)
        assert reason == "Resources"
        assert slurm_cluster.job(waiting)["Reason"] == "Resources"
    finally:
        slurm_cluster.run("scancel", holder, check=False)
