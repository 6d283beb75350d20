"""`orch apply` end to end on the real test Slurm: a host whose inventory says
`orch_executor: slurm` runs its cells as Slurm jobs, unchanged playbook, results in the bundle."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurmcluster import SlurmTestCluster

from orchestrator.config.host import SlurmOptions
from orchestrator.execute.replay import inventory_from_bundle
from orchestrator.results.read import open_run

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "e2e" / "programs"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_playbook(tmp: Path, records: Path, bench_sleep: float = 0) -> Path:
    """The generic server measured by the generic bench: nothing in it knows of Slurm."""
    data = {
        "name": "slurm-e2e",
        "vars": {"server_py": str(PROGRAMS / "server.py"), "bench_py": str(PROGRAMS / "bench.py"),
                 "rec": str(records)},
        "matrix": {"label": ["a", "b"]},
        "server": {
            "command": "{{ orch_python }} {{ server_py }} --port {{ srv_port }} --record-dir "
            "{{ rec }} --label {{ matrix.label }}",
            "port": "{{ srv_port }}",
            "host": "127.0.0.1",
            "ready": {"path": "/health", "timeout": 20, "interval": 0.05},
            "stop_grace": 3,
        },
        "bench": {
            "command": "{{ orch_python }} {{ bench_py }} --url http://127.0.0.1:{{ srv_port }} "
            f"--record-dir {{{{ rec }}}} --sleep {bench_sleep}",
            "repeats": 1,
            "timeout": 30,
            "result_file": "result.json",
        },
        "snapshot": {"pip_freeze": False, "topo": False},
        "timeouts": {"cell": 90},
    }  # fmt: skip
    path = tmp / "playbook.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_inventory(tmp: Path, **slurm_vars: Any) -> Path:
    host = {
        "ansible_connection": "local",  # orch runs on the login node
        "ansible_python_interpreter": sys.executable,
        "orch_workdir": str(tmp / "orch-home"),  # a fresh runner cache and cell dirs
        "srv_port": free_port(),
        **slurm_vars,
    }
    path = tmp / "hosts.yml"
    data = {"cluster": {"vars": {"orch_executor": "slurm"}, "hosts": {"login": host}}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def apply(
    cluster: SlurmTestCluster, tmp: Path, playbook: Path, inventory: Path
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i", str(inventory),
            "--results", str(tmp / "results")]  # fmt: skip
    return subprocess.run(
        argv, cwd=tmp, env=cluster.env, capture_output=True, text=True, timeout=240
    )


def jobs_since(cluster: SlurmTestCluster, first: int) -> list[dict[str, str]]:
    """Every job with an id >= `first`: id, name, state, nodes (squeue keeps ended jobs)."""
    shown = cluster.run("squeue", "-h", "--states=all", "-o", "%i|%j|%T|%N").stdout
    fields = ("id", "name", "state", "nodes")
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in shown.splitlines()]
    return sorted((r for r in rows if int(r["id"]) >= first), key=lambda r: int(r["id"]))


def next_job_id(cluster: SlurmTestCluster) -> int:
    shown = cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split()
    return max((int(i) for i in shown), default=0) + 1


def run_dir(tmp: Path) -> Path:
    (run,) = [p for p in (tmp / "results").iterdir() if p.is_dir()]
    return run


def test_apply_runs_each_cell_as_a_slurm_job(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    playbook = write_playbook(tmp_path, records)
    inventory = write_inventory(tmp_path, slurm_gres="gpu:1", slurm_partition="debug")
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
    # replay, audit --rerun and bisect reach the host as recorded: through Slurm again
    replayed = inventory_from_bundle(open_run(run)).hosts["login"]
    assert replayed.executor == "slurm"
    assert replayed.slurm == SlurmOptions(partition="debug", gres="gpu:1")


def server_job_id(records: Path, cell_id: str) -> str:
    server = json.loads((records / f"{cell_id}.server.json").read_text())
    return str(server["env"]["SLURM_JOB_ID"])


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
