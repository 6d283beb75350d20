"""A controller killed mid-run leaves a Slurm job behind; `orch apply --resume` finds it by the id
run.json recorded and never has two jobs of the host at once: a job still RUNNING (its runner
is wrapping up the cell in flight) is waited for, one still PENDING is cancelled."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_helpers import (
    apply_argv,
    jobs_since,
    next_job_id,
    run_dir,
    server_job_id,
    write_inventory,
    write_playbook,
)
from slurmcluster import SlurmTestCluster

pytestmark = [pytest.mark.slow]


def run_json(tmp: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir(tmp) / "run.json").read_text())
    return data


def start(
    cluster: SlurmTestCluster, tmp: Path, argv: list[str], output: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """`orch apply` started in the background, against the test Slurm."""
    return subprocess.Popen(argv, cwd=tmp, env=cluster.env, text=True, stdout=output, stderr=output)


def kill_controller(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the controller alone: its srun, in a session of its own, sees stdin's EOF."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def test_resume_waits_for_the_job_a_killed_controller_left_running(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    linger = tmp_path / "linger"  # the first run's server takes its time to stop
    linger.touch()
    playbook = write_playbook(tmp_path, records, bench_sleep=3, linger=linger)
    inventory = write_inventory(tmp_path)
    argv = apply_argv(playbook, inventory, tmp_path / "results")
    first = next_job_id(slurm_cluster)
    with start(slurm_cluster, tmp_path, argv) as apply_run:
        deadline = time.monotonic() + 60
        while not list(records.glob("*.bench.json")) and time.monotonic() < deadline:
            time.sleep(0.1)
        (bench,) = records.glob("*.bench.json")
        kill_controller(apply_run)
    linger.unlink()  # servers of the resume stop at once
    in_flight = bench.name.removesuffix(".bench.json")
    old_id = server_job_id(records, in_flight)
    assert [job["job_id"] for job in run_json(tmp_path)["slurm_jobs"]["login"]] == [old_id]
    assert slurm_cluster.job(old_id)["JobState"] == "RUNNING"  # stopping its server still

    resumed = subprocess.run(
        [*argv, "--resume", str(run_dir(tmp_path))],
        cwd=tmp_path, env=slurm_cluster.env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"waiting for Slurm job {old_id} (orch-" in resumed.stderr
    assert "of the interrupted run, still RUNNING on node" in resumed.stderr
    run = run_json(tmp_path)
    assert {entry["status"] for entry in run["cells"].values()} == {"passed"}
    old = run["slurm_jobs"]["login"][0]
    assert old["job_id"] == old_id
    assert old["resume"] == "still RUNNING when the run was resumed: waited for it to end"
    assert old["state"] not in ("RUNNING", "COMPLETING")  # as it ended, not as last seen
    # every job of the resume (collect, then the cells) started once the old one had ended
    ended = slurm_cluster.job(old_id)["EndTime"]
    later = [job["id"] for job in jobs_since(slurm_cluster, first) if job["id"] != old_id]
    assert len(later) == 2, later
    assert all(slurm_cluster.job(job_id)["StartTime"] >= ended for job_id in later)
    assert server_job_id(records, in_flight) == later[-1]  # the cell cut short ran again


def test_resume_cancels_the_job_a_killed_controller_left_pending(
    slurm_cluster: SlurmTestCluster, tmp_path: Path, all_gpus_taken: str
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path, slurm_gres="gpu:1", slurm_pending_timeout=120)
    argv = apply_argv(playbook, inventory, tmp_path / "results")
    with start(slurm_cluster, tmp_path, argv) as apply_run:
        deadline = time.monotonic() + 60
        recorded: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            results = tmp_path / "results"
            # the run's folder is made before its run.json is first written
            if results.is_dir() and any((p / "run.json").is_file() for p in results.iterdir()):
                recorded = run_json(tmp_path).get("slurm_jobs", {}).get("login", [])
                if recorded and recorded[0]["state"] == "PENDING":
                    break
            time.sleep(0.1)
        kill_controller(apply_run)
    (old,) = recorded
    old_id = old["job_id"]
    assert slurm_cluster.job(old_id)["JobState"] == "PENDING"  # its srun waits on, orphaned

    resume = [*argv, "--resume", str(run_dir(tmp_path))]
    with start(slurm_cluster, tmp_path, resume, output=subprocess.PIPE) as resumed:
        assert resumed.stderr is not None
        said = []
        for line in resumed.stderr:
            said.append(line)
            if "cancelling it" in line:
                break
        assert f"Slurm job {old_id} (orch-" in said[-1], said
        assert "of the interrupted run is still PENDING (Resources)" in said[-1]
        slurm_cluster.wait_for_job(old_id, ["CANCELLED"])  # by the resume, not by Slurm
        slurm_cluster.run("scancel", all_gpus_taken)  # the resume's own jobs can start now
        _, rest = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, "".join(said) + rest
    run = run_json(tmp_path)
    assert {entry["status"] for entry in run["cells"].values()} == {"passed"}
    (settled, *_) = run["slurm_jobs"]["login"]
    assert settled["job_id"] == old_id
    assert settled["resume"] == "still PENDING when the run was resumed: cancelled"
    assert settled["state"] == "CANCELLED"
    # the cancelled job never ran a cell: every server ran in the resume's job
    assert old_id not in {server_job_id(records, cell_id) for cell_id in run["cells"]}
