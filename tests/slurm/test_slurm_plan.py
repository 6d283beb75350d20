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


def _plan(tmp_path: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    inventory = {
        "all": {
            "hosts": {"login": {"ansible_connection": "local", "orch_executor": "slurm",
                                "slurm_extra": extra}},
        }
    }  # fmt: skip
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    playbook = {"name": "t", "bench": {"command": "echo hi"}}
    (tmp_path / "playbook.yml").write_text(yaml.safe_dump(playbook))
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "plan", "playbook.yml", "-i", "hosts.yml", "-v"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_secrets_assigned_inside_slurm_extra_are_hidden(tmp_path: Path) -> None:
    """Issue 23 item 10: `--export=ALL,WANDB_API_KEY=...` was printed as written, and reached
    every snapshot through `scontrol show job`: its values are secret values of the run."""
    extra = ["--export=ALL,WANDB_API_KEY=wandb-s3cret-1234", "--comment=HF_TOKEN=hf_abcd9876"]
    shown = _plan(tmp_path, extra)
    assert shown.returncode == 0, shown.stderr
    assert "wandb-s3cret-1234" not in shown.stdout and "hf_abcd9876" not in shown.stdout
    assert "WANDB_API_KEY=***REDACTED***" in shown.stdout
    from orchestrator.app.plan import load_plan

    plan = load_plan(tmp_path / "playbook.yml", [tmp_path / "hosts.yml"])
    assert {"wandb-s3cret-1234", "hf_abcd9876"} <= set(plan.secrets)  # sent to the runner too


def test_slurm_extra_may_not_name_the_job(tmp_path: Path) -> None:
    """Issue 23 item 18: `--job-name=x` silently broke orch's tracking of its jobs."""
    for extra in (["--job-name=mine"], ["-J", "mine"], ["-Jmine"]):
        shown = _plan(tmp_path, extra)
        assert shown.returncode == 2, shown.stdout + shown.stderr
        assert "hosts.yml:" in shown.stderr and "slurm_extra may not name the job" in shown.stderr
        assert "Traceback" not in shown.stderr
