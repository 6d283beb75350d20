"""`orch plan` says how each host runs its cells: direct, or as Slurm jobs of which size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml


def test_plan_shows_each_hosts_executor_and_a_slurm_hosts_allocation(tmp_path: Path) -> None:
    inventory = {
        "cluster": {
            "vars": {"orch_executor": "slurm", "slurm_partition": "gpu", "slurm_gres": "gpu:8",
                     "slurm_nodes": 2, "slurm_account": "lab",
                     "slurm_extra": ["--comment=for hunter2-not-for-logs"],
                     "registry_token": "hunter2-not-for-logs"},
            "hosts": {"login": {"ansible_host": "login.example.org", "ansible_user": "me"}},
        },
        "lab": {"hosts": {"gpu01": {"ansible_host": "10.0.0.5", "ansible_port": 2222},
                          "here": {"ansible_connection": "local", "orch_executor": "slurm"}}},
    }  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    playbook = {"name": "t", "matrix": {"x": [1]}, "bench": {"command": "echo {{ matrix.x }}"}}
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "playbook.yml", "-i", "hosts.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = {line.split(":", 1)[0].strip(): line for line in shown.stdout.splitlines()}
    assert lines["gpu01"].endswith("gpu01: direct, ssh 10.0.0.5:2222")
    assert lines["login"].endswith(
        "login: Slurm, srun on login host ssh me@login.example.org: partition gpu, "
        "gres gpu:8 per node, 2 nodes, time from the cells' timeouts, account lab, "
        "'--comment=for ***REDACTED***'"
    )
    assert lines["here"].endswith(
        "here: Slurm, srun on this machine: partition (the default), gres (none) per node, "
        "1 node, time from the cells' timeouts"
    )
    assert "hunter2" not in shown.stdout
