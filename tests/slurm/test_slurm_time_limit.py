"""A Slurm job past its time limit (`slurm_time`), on the real test Slurm.

Last in the session on purpose (`session_last`): its run starts with this directory's session
fixture (conftest.py `time_limit_run`) and takes 60-90 s; by the time this test reads it, every
other test has run and the job has long ended.
"""

from __future__ import annotations

import json

import pytest
from slurm_helpers import TIME_LIMIT_PARTITION, TimeLimitRun, run_dir
from slurmcluster import SlurmTestCluster

pytestmark = [pytest.mark.slow, pytest.mark.session_last]


def test_a_job_past_its_time_limit_fails_the_cell_in_flight_with_timeout(
    slurm_cluster: SlurmTestCluster, time_limit_run: TimeLimitRun
) -> None:
    """slurm_time 1 (minute, Slurm's least): Slurm ends the job at its next time-limit check
    (slurmctld checks every 30 s, fixed at build time: 60 to 90 s, so the run started with the
    session, on a node of its own, see conftest.py), mid-bench; the cell says TIMEOUT, the one
    never reached says not run."""
    tmp_path, records = time_limit_run.tmp, time_limit_run.records
    returncode, stderr = time_limit_run.result()
    assert returncode != 0
    assert "Traceback" not in stderr
    run = json.loads((run_dir(tmp_path) / "run.json").read_text())
    (job,) = run["slurm_jobs"]["login"]
    assert slurm_cluster.job(job["job_id"])["JobState"] == "TIMEOUT"
    assert slurm_cluster.job(job["job_id"])["Partition"] == TIME_LIMIT_PARTITION
    cells = run["cells"]
    (in_flight,) = [cid for cid in cells if (records / f"{cid}.bench.json").exists()]
    (never,) = [cid for cid in cells if cid != in_flight]
    assert cells[in_flight]["status"] == "failed"
    assert cells[in_flight]["reason"].startswith(f"Slurm job {job['job_id']} (orch-")
    assert "ended TIMEOUT" in cells[in_flight]["reason"]
    assert "hit its Slurm time limit (slurm_time)" in cells[in_flight]["reason"]
    assert cells[never]["status"] == "failed"
    assert cells[never]["reason"].startswith(f"not run: Slurm job {job['job_id']} (orch-")
    assert "ended TIMEOUT" in cells[never]["reason"]
