"""Each cell's snapshots record the Slurm job it ran in, and `orch diff` names a different
partition, node or GPU grant between two runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import apply, run_dir, write_inventory, write_playbook
from slurmcluster import SlurmTestCluster

from orchestrator.runner.probe.slurm import parse_scontrol_job, slurm_facts, slurm_item

# `scontrol show job -o -d` of a two-node job whose nodes gave different GPUs (Slurm 22.05)
TWO_NODES = (
    "JobId=7 JobName=orch-1a2b UserId=me(1000) Account=lab QOS=normal JobState=RUNNING "
    "Reason=None TimeLimit=00:30:00 Partition=gpu NodeList=gpu[01-02] NumNodes=2 "
    "JOB_GRES=gpu:4 Nodes=gpu01 CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:0-1) "
    "Nodes=gpu02 CPU_IDs=0-3 Mem=0 GRES=gpu:2(IDX:6-7) Comment=see https://me:pw@example.org/x "
    "Command=python3 TresPerNode=gres:gpu:2\n"
)


def test_scontrols_line_gives_each_nodes_grant() -> None:
    fields, by_node = parse_scontrol_job(TWO_NODES)
    assert (fields["NodeList"], fields["TimeLimit"], fields["JOB_GRES"]) == (
        "gpu[01-02]",
        "00:30:00",
        "gpu:4",
    )
    assert by_node == {"gpu01": "gpu:2(IDX:0-1)", "gpu02": "gpu:2(IDX:6-7)"}


def test_the_job_facts_come_from_slurms_variables_and_scontrol() -> None:
    environ = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_NODEID": "1",
        "SLURM_STEP_GPUS": "6,7",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SLURM_API_TOKEN": "not-for-bundles",
        "HOME": "/home/me",
    }
    facts = slurm_facts(environ, TWO_NODES)
    assert (facts["job_id"], facts["partition"], facts["nodes"]) == ("7", "gpu", "gpu[01-02]")
    assert (facts["account"], facts["qos"], facts["node_count"]) == ("lab", "normal", 2)
    assert (facts["node_id"], facts["time_limit"], facts["gres"]) == ("1", "00:30:00", "gpu:2")
    assert facts["gpus"] == {"SLURM_STEP_GPUS": "6,7", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert facts["env"]["SLURM_API_TOKEN"] == "***REDACTED***"
    assert "HOME" not in facts["env"]
    assert "me:pw@" not in facts["scontrol"] and facts["scontrol"].startswith("JobId=7 ")
    # scontrol missing on the node: the variables still tell most of it
    facts = slurm_facts(environ, {"absent": "scontrol not found on PATH"})
    assert (facts["partition"], facts["time_limit"]) == ("gpu", None)
    assert facts["scontrol"] == {"absent": "scontrol not found on PATH"}
    assert slurm_item({"HOME": "/home/me"}) == {"absent": "not in a Slurm job (no SLURM_JOB_ID)"}


@pytest.mark.slow
def test_diff_names_another_node_and_gpu_grant(
    slurm_cluster: SlurmTestCluster, tmp_path: Path
) -> None:
    runs = []
    for side, node, gres in (("a", "node1", "gpu:1"), ("b", "node2", "gpu:2")):
        tmp = tmp_path / side
        (tmp / "records").mkdir(parents=True)
        playbook = write_playbook(tmp, tmp / "records")
        inventory = write_inventory(tmp, slurm_gres=gres, slurm_extra=[f"--nodelist={node}"])
        shown = apply(slurm_cluster, tmp, playbook, inventory)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        runs.append(run_dir(tmp))
    argv = [sys.executable, "-m", "orchestrator", "diff", str(runs[0]), str(runs[1]),
            "--out", str(tmp_path / "diff")]  # fmt: skip
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()

    def line(key: str) -> str:  # the first pair's (both cells ran in one job)
        found = [text for text in lines if text.strip().startswith(key)]
        assert len(found) == 2, shown.stdout
        return found[0]

    assert "node1" in line("Slurm nodes") and "node2" in line("Slurm nodes")
    assert "gpu:1" in line("Slurm gres granted") and "gpu:2" in line("Slurm gres granted")
    assert "gpu:2(IDX:0-1)" in line("Slurm GPUs by node")
    assert not [text for text in lines if "Slurm partition" in text]  # the same on both
