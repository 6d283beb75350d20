"""`orch apply` end to end on the real test Slurm: a host whose inventory says
`orch_executor: slurm` runs its cells as Slurm jobs, unchanged playbook, results in the bundle."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_helpers import (
    apply,
    apply_argv,
    jobs_since,
    next_job_id,
    run_dir,
    server_job_id,
    write_inventory,
    write_playbook,
)
from slurmcluster import SlurmTestCluster

from orchestrator.config.host import SlurmOptions
from orchestrator.execute.replay import inventory_from_bundle
from orchestrator.results.read import open_run

pytestmark = [pytest.mark.slow]

SECRET = "hunter2-not-for-bundles"


def test_apply_runs_each_cell_as_a_slurm_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    # a secret that reaches the job's own record (its comment): the bundle never holds it
    inventory = write_inventory(
        tmp_path,
        slurm_gres="gpu:1",
        slurm_partition="debug",
        slurm_extra=[f"--comment=job for {SECRET}"],
        registry_token=SECRET,
    )
    first = next_job_id(slurm_cluster)
    shown = apply(slurm_cluster, tmp_path, playbook, inventory)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    run = run_dir(tmp_path)
    cells = json.loads((run / "run.json").read_text())["cells"]
    assert len(cells) == 2
    assert {entry["status"] for entry in cells.values()} == {"passed"}
    for cell_id in cells:
        result = json.loads((run / "cells" / cell_id / "bench" / "1" / "result.json").read_text())
        assert result["req_per_s"] > 0
        # the server ran inside a job, on a node of the cluster
        server = json.loads((records / f"{cell_id}.server.json").read_text())
        assert server["env"]["SLURM_JOB_PARTITION"] == "debug"
        assert server["env"]["SLURMD_NODENAME"] in ("node1", "node2")
    # nothing ran outside Slurm, none is left running, and the run was one job: the runner
    # shipped in the same command that runs the host's whole queue (facts and both cells)
    jobs = jobs_since(slurm_cluster, first)
    assert [job["state"] for job in jobs] == ["COMPLETED"], jobs
    assert all(job["name"].startswith("orch-") for job in jobs)
    assert {server_job_id(records, cell_id) for cell_id in cells} == {jobs[0]["id"]}
    # the bundle says which job each cell ran in, and every job of the host
    assert {entry["slurm_job"] for entry in cells.values()} == {jobs[0]["id"]}
    recorded = json.loads((run / "run.json").read_text())["slurm_jobs"]["login"]
    assert [j["job_id"] for j in recorded] == [job["id"] for job in jobs]
    # each cell's snapshots and the host's facts say which job, partition, nodes and GPUs
    job_id = jobs[0]["id"]
    facts = json.loads((run / "hosts" / "login" / "facts.json").read_text())["slurm"]
    for cell_id in cells:
        for which in ("pre", "post"):
            snap = json.loads((run / "cells" / cell_id / f"snapshot.{which}.json").read_text())
            slurm = snap["slurm"]
            assert slurm["job_id"] == job_id
            assert (slurm["partition"], slurm["nodes"]) == ("debug", jobs[0]["nodes"])
            assert slurm["node_id"] == "0"
            assert (slurm["gres"], slurm["gres_granted"]) == ("gpu:1", "gpu:1")
            assert slurm["gres_by_node"] == {jobs[0]["nodes"]: "gpu:1(IDX:0)"}
            assert slurm["gpus"]["CUDA_VISIBLE_DEVICES"] == "0"  # as Slurm set it
            assert slurm["gpus"]["SLURM_STEP_GPUS"] == "0"
            assert slurm["time_limit"] is not None  # from the cells' timeouts: no slurm_time
            assert slurm["scontrol"].startswith(f"JobId={job_id} JobName=orch-")
            assert slurm["env"]["SLURM_JOB_ID"] == job_id
    assert (facts["job_id"], facts["partition"]) == (job_id, "debug")
    assert SECRET not in (run / "hosts" / "login" / "facts.json").read_text()
    assert "job for ***REDACTED***" in facts["scontrol"]  # Slurm's own record, redacted
    # replay, audit --rerun and bisect reach the host as recorded: through Slurm again
    replayed = inventory_from_bundle(open_run(run)).hosts["login"]
    assert replayed.executor == "slurm"
    assert replayed.slurm == SlurmOptions(
        partition="debug", gres="gpu:1", extra=("--comment=job for ***REDACTED***",)
    )


def test_a_job_that_cannot_start_fails_its_cells_with_slurms_reason(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """Three nodes on a two-node cluster: PENDING until slurm_pending_timeout, then failed."""
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path, slurm_nodes=3, slurm_pending_timeout=2)
    shown = apply(slurm_cluster, tmp_path, playbook, inventory)
    assert shown.returncode != 0
    assert "Traceback" not in shown.stderr
    cells = json.loads((run_dir(tmp_path) / "run.json").read_text())["cells"]
    assert len(cells) == 2
    for entry in cells.values():
        assert entry["status"] == "failed"
        assert "stayed PENDING (Partition" in entry["reason"]
        assert "past slurm_pending_timeout (2 s)" in entry["reason"]
    assert not list(records.iterdir())  # no server ever started


def test_a_job_cancelled_mid_cell_fails_that_cell_with_its_state(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """scancel from outside (an admin, a preemption script): the cell says CANCELLED."""
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records, bench_sleep=60)
    inventory = write_inventory(tmp_path)
    argv = [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i", str(inventory),
            "--results", str(tmp_path / "results")]  # fmt: skip
    with subprocess.Popen(
        argv, cwd=tmp_path, env=slurm_cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as apply_run:  # fmt: skip
        deadline = time.monotonic() + 60
        while not list(records.glob("*.bench.json")) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first cell's bench is running (and sleeping)
        (bench,) = records.glob("*.bench.json")
        cell_id = bench.name.removesuffix(".bench.json")
        job_id = server_job_id(records, cell_id)
        slurm_cluster.run("scancel", job_id)
        _, stderr = apply_run.communicate(timeout=120)
    assert apply_run.returncode != 0
    assert "Traceback" not in stderr
    cells = json.loads((run_dir(tmp_path) / "run.json").read_text())["cells"]
    assert len(cells) == 2
    for entry in cells.values():  # the cell cut short, and the one the job never reached
        assert entry["status"] == "failed"
        assert f"Slurm job {job_id} (orch-" in entry["reason"]
        assert "ended CANCELLED" in entry["reason"]
    assert slurm_cluster.job(job_id)["JobState"] == "CANCELLED"


def test_orch_started_inside_an_allocation_still_submits_jobs_of_its_own(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """orch run from inside salloc or an sbatch script: its environment names that job and its
    size, which srun would take (a step of that job, 3 tasks). Each host's queue is still one
    job of its own, sized as the inventory says."""
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path)
    inside = {"SLURM_JOB_ID": "999999", "SLURM_JOBID": "999999", "SLURM_NNODES": "2",
              "SLURM_NTASKS": "3", "SLURM_JOB_NODELIST": "node[1-2]"}  # fmt: skip
    first = next_job_id(slurm_cluster)
    shown = subprocess.run(
        apply_argv(playbook, inventory, tmp_path / "results"),
        cwd=tmp_path, env={**slurm_cluster.env, **inside}, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stdout + shown.stderr
    jobs = jobs_since(slurm_cluster, first)
    assert [job["state"] for job in jobs] == ["COMPLETED"], jobs
    cells = json.loads((run_dir(tmp_path) / "run.json").read_text())["cells"]
    assert {entry["status"] for entry in cells.values()} == {"passed"}
    for cell_id in cells:
        env = json.loads((records / f"{cell_id}.server.json").read_text())["env"]
        assert env["SLURM_JOB_ID"] == jobs[0]["id"] and env["SLURM_NTASKS"] == "1"


def test_waiting_in_the_queue_past_the_silence_limit_is_not_silence(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """Issue 23 item 2: a job PENDING longer than --silent-host-timeout failed its cells as 'the
    host went silent'; only slurm_pending_timeout applies while no runner exists."""
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path, slurm_nodes=3, slurm_pending_timeout=6)
    argv = apply_argv(playbook, inventory, tmp_path / "results", "--silent-host-timeout", "2")
    shown = subprocess.run(
        argv, cwd=tmp_path, env=slurm_cluster.env, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode != 0
    cells = json.loads((run_dir(tmp_path) / "run.json").read_text())["cells"]
    for entry in cells.values():
        assert "went silent" not in entry["reason"], entry
        assert "past slurm_pending_timeout (6 s)" in entry["reason"], entry


def test_ctrl_c_while_the_job_is_pending_cancels_it_and_returns_at_once(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """Issue 23 item 1: Ctrl-C while the job was PENDING hung the controller for good (srun
    reads no stdin before its allocation; the runner is larger than the pipe) and left the job
    queued."""
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path, slurm_nodes=3, slurm_pending_timeout=600)
    first = next_job_id(slurm_cluster)
    argv = apply_argv(playbook, inventory, tmp_path / "results")
    with subprocess.Popen(
        argv, cwd=tmp_path, env=slurm_cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    ) as apply_run:  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if [j for j in jobs_since(slurm_cluster, first) if j["state"] == "PENDING"]:
                break
            time.sleep(0.2)
        (job,) = jobs_since(slurm_cluster, first)
        assert job["state"] == "PENDING", job
        time.sleep(1.0)  # the controller is feeding the runner to srun's stdin by now
        apply_run.send_signal(signal.SIGINT)
        try:
            _, stderr = apply_run.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            apply_run.kill()
            raise AssertionError("the controller hung after Ctrl-C, its job pending") from None
    assert apply_run.returncode == 130, stderr
    assert "--resume" in stderr
    assert slurm_cluster.job(job["id"])["JobState"] == "CANCELLED"
