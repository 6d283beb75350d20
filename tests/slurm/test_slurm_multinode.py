"""A multi-node cell (`server.nodes: 2`) on the real test Slurm: one job of two nodes, one runner
per node (rank from SLURM_NODEID), one simulated SGLang server over both, joined over real TCP
between the nodes' network namespaces."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from simprocs import sim_processes
from slurm_helpers import apply, apply_argv, free_port, jobs_since, next_job_id, run_dir
from slurmcluster import SlurmTestCluster

from orchestrator.sim import model as m

pytestmark = [pytest.mark.slow]

SIM = ["{{ orch_python }}", "-m", "orchestrator.sim"]


def _playbook(tmp: Path, **replaced: Any) -> Path:
    """Every node reads its own simulated model, `model-<node_rank>.json` (`_models`);
    `replaced` replaces top-level keys."""
    data: dict[str, Any] = {
        "name": "slurm-two-node",
        "matrix": {"spec": ["off"]},
        "env": {"ORCH_SIM_TIME_SCALE": "0.02", "ORCH_SIM_SEED": "7", "NCCL_ALGO": "Ring",
                "SLURM_MN_TEST": tmp.name},
        "server": {
            "adapter": "sglang",
            "launcher": [*SIM, "serve"],
            "nodes": 2,
            "dist_port": free_port(),
            "args": {"model-path": "/models/Kimi-K2.5", "port": "{{ srv_port }}", "tp-size": 2,
                     "sim-model": str(tmp / "model-{{ node_rank }}.json")},
            "ready": {"timeout": 60},
            "stop_grace": 5,
        },
        "bench": {
            "adapter": "sglang.bench_serving",
            "launcher": [*SIM, "bench"],
            "args": {"dataset-name": "random-ids", "random-input-len": 64,
                     "random-output-len": 16, "random-range-ratio": 1, "num-prompts": 2,
                     "max-concurrency": 1},
            "repeats": 1,
            "timeout": 60,
        },
        "snapshot": {"pip_freeze": False, "topo": False},
        "telemetry": False,
        "timeouts": {"cell": 120},
    }  # fmt: skip
    data.update(replaced)
    path = tmp / "playbook.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _models(tmp: Path, node_1_bugs: dict[str, Any] | None = None) -> None:
    for rank, bugs in enumerate((None, node_1_bugs)):
        params = m.model_params()
        if bugs:
            params["bugs"] = bugs
        (tmp / f"model-{rank}.json").write_text(m.dump_params(params))


def _inventory(tmp: Path) -> Path:
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "orch_workdir": str(tmp / "orch-home"),
        "srv_port": free_port(),
    }
    data = {"cluster": {"vars": {"orch_executor": "slurm"}, "hosts": {"login": host}}}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_a_two_node_cell_runs_in_one_job_with_a_runner_per_node(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    _models(tmp_path)
    playbook, inventory = _playbook(tmp_path), _inventory(tmp_path)
    first = next_job_id(slurm_cluster)
    proc = apply(slurm_cluster, tmp_path, playbook, inventory)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    jobs = [j for j in jobs_since(slurm_cluster, first) if j["name"].startswith("orch")]
    assert [(j["state"], j["nodes"]) for j in jobs] == [("COMPLETED", "node[1-2]")], jobs
    run = run_dir(tmp_path)
    (cid,) = _load(run / "run.json")["cells"]
    cell = run / "cells" / cid
    assert _load(cell / "cell.json")["status"] == "passed"
    nodes = _load(cell / "nodes.json")
    assert [(n["host"], n["rank"], n["status"], n["via"]) for n in nodes] == [
        ("node2", 1, "passed", "login")
    ], nodes
    assert nodes[0]["hold"]["released"], nodes  # held until the head's cell ended
    head_job = _load(cell / "snapshot.pre.json")["slurm"]
    node_job = _load(cell / "nodes" / "node2" / "snapshot.pre.json")["slurm"]
    assert (head_job["node_id"], head_job["node_name"]) == ("0", "node1")
    assert (node_job["node_id"], node_job["node_name"]) == ("1", "node2")
    assert head_job["job_id"] == node_job["job_id"] == jobs[0]["id"]
    # node 1 joined the head at node1's address, which Slurm gave only once the job ran
    head_address = slurm_cluster.main_nodes[0].address
    argv = _load(cell / "nodes" / "node2" / "cell.json")["cell"]["server"]["argv"]
    assert argv[argv.index("--dist-init-addr") + 1].startswith(f"{head_address}:"), argv
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert "node rank 1 joined" in (cell / "server.log").read_text()
    assert "node rank 1 joined the head" in (cell / "nodes" / "node2" / "server.log").read_text()
    assert _load(cell / "metrics.json")["summary"]["output_throughput"]["median"] > 0


def _sim_processes(marker: str) -> list[int]:
    """Simulator processes (servers, workers) still alive that carry this test's marker."""
    return sim_processes(f"SLURM_MN_TEST={marker}\0")


def test_a_node_whose_part_fails_fails_the_cell_and_nothing_keeps_running(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    _models(tmp_path, {"drop_env": ["NCCL_ALGO"]})  # node 1's workers start without it
    playbook, inventory = _playbook(tmp_path), _inventory(tmp_path)
    first = next_job_id(slurm_cluster)
    proc = apply(slurm_cluster, tmp_path, playbook, inventory)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (entry,) = _load(run_dir(tmp_path) / "run.json")["cells"].values()
    assert entry["status"] == "failed" and entry["failed_step"] == "verify_env", entry
    assert entry["reason"].startswith("node node2 (rank 1): verify_env:"), entry
    assert "NCCL_ALGO" in entry["reason"] or "env_check.json" in entry["reason"], entry
    jobs = [j for j in jobs_since(slurm_cluster, first) if j["name"].startswith("orch")]
    # the job ended with the run (FAILED: the runners' exit status says a cell failed)
    assert [(j["state"], j["nodes"]) for j in jobs] == [("FAILED", "node[1-2]")], jobs
    assert _sim_processes(tmp_path.name) == []


def test_a_head_runner_killed_mid_cell_fails_the_cell_and_releases_the_other_node(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """srun runs on while any task does: the head's runner, killed, is heard from its task's
    last line, and node 2's part is released then, not at the cell timeout (600 s here, past
    `apply`'s own 240 s limit); the next cell, whose head will never run, starts nothing."""
    _models(tmp_path)
    kill_runner = {"command": "sh -c 'kill -9 $PPID; sleep 60'", "repeats": 1, "timeout": 60}
    playbook = _playbook(
        tmp_path, bench=kill_runner, timeouts={"cell": 600}, matrix={"spec": ["a", "b"]}
    )
    proc = apply(slurm_cluster, tmp_path, playbook, _inventory(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    entries = _load(run_dir(tmp_path) / "run.json")["cells"]
    for entry in entries.values():  # the cell in flight, and the one the head never reached
        assert (entry["status"], entry["failed_step"]) == ("failed", "runner"), entry
        assert entry["reason"].startswith(
            "the runner on node node1 (rank 0) ended without a result (rc 137)"
        ), entry
    assert _sim_processes(tmp_path.name) == []
    # node 2 reached the second cell released already: it started no part of a server there
    parts = sorted((tmp_path / "orch-home" / "nodes" / "1" / "runs").glob("*/*.n1"))
    assert [(p / "server.json").exists() for p in parts] == [True, False], parts
    second = _load(parts[1] / "cell.json")
    assert second["failed_step"] == "server_start", second
    assert second["reason"].startswith("the head's cell ended before this node's part started")


def test_ctrl_c_stops_both_nodes_and_resume_runs_the_cell_again(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    """SIGINT mid-bench: every task reads srun's stdin, so both nodes' runners stop their cell
    and their part of the server; the job ends and `--resume` runs the two-node cell again."""
    _models(tmp_path)
    mark = tmp_path / "bench-started"
    # the first bench waits to be interrupted; the resume's bench finds the mark and passes
    bench = {"command": f"sh -c 'test -e {mark} && exit 0; touch {mark}; sleep 60'",
             "repeats": 1, "timeout": 90}  # fmt: skip
    playbook = _playbook(tmp_path, bench=bench, timeouts={"cell": 120})
    argv = apply_argv(playbook, _inventory(tmp_path), tmp_path / "results")
    first = next_job_id(slurm_cluster)
    log = tmp_path / "apply.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=tmp_path, env=slurm_cluster.env, stdout=out, stderr=out)
        deadline = time.monotonic() + 60
        while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mark.exists(), log.read_text()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, log.read_text()
    run = run_dir(tmp_path)
    doc = _load(run / "run.json")
    (entry,) = doc["cells"].values()
    assert (doc["status"], entry["status"]) == ("interrupted", "interrupted"), entry
    (job,) = [j for j in jobs_since(slurm_cluster, first) if j["name"].startswith("orch")]
    assert job["nodes"] == "node[1-2]"
    slurm_cluster.wait_for_job(job["id"], ["COMPLETED", "FAILED"])  # ended by its runners
    assert _sim_processes(tmp_path.name) == []

    resumed = subprocess.run(
        [*argv, "--resume", str(run)], cwd=tmp_path, env=slurm_cluster.env,
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (entry,) = _load(run / "run.json")["cells"].values()
    assert entry["status"] == "passed", entry
    (cid,) = _load(run / "run.json")["cells"]
    nodes = _load(run / "cells" / cid / "nodes.json")
    assert [(n["host"], n["status"]) for n in nodes] == [("node2", "passed")], nodes
    assert _sim_processes(tmp_path.name) == []
