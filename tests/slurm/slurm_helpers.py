"""What the tests of an `orch apply` on the real test Slurm share: a playbook that knows nothing
of Slurm, an inventory whose host is a Slurm login host (this machine), and readers of the jobs
and bundles a run left."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from slurmcluster import SlurmTestCluster

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "e2e" / "programs"
LINGER_SECONDS = 15


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_playbook(
    tmp: Path,
    records: Path,
    bench_sleep: float = 0,
    *,
    linger: Path | None = None,
    bench_timeout: float = 30,
    cell_timeout: float = 90,
) -> Path:
    """The generic server measured by the generic bench: nothing in it knows of Slurm.

    With `linger`, a server started while that file exists takes LINGER_SECONDS to stop after
    SIGTERM (a shell around it ignores TERM and waits): its cell's runner, and so its Slurm
    job, outlive the controller that long.
    """
    server = (
        "{{ orch_python }} {{ server_py }} --port {{ srv_port }} --record-dir {{ rec }} "
        "--label {{ matrix.label }}"
    )
    if linger is not None:
        server = (
            f'sh -c \'L=0; [ -e {linger} ] && L={LINGER_SECONDS}; trap "" TERM; '
            f"{server}; sleep $L'"
        )
    data = {
        "name": "slurm-e2e",
        "vars": {"server_py": str(PROGRAMS / "server.py"), "bench_py": str(PROGRAMS / "bench.py"),
                 "rec": str(records)},
        "matrix": {"label": ["a", "b"]},
        "server": {
            "command": server,
            "port": "{{ srv_port }}",
            "host": "127.0.0.1",
            "ready": {"path": "/health", "timeout": 20, "interval": 0.05},
            "stop_grace": 3 if linger is None else 2 * LINGER_SECONDS,
        },
        "bench": {
            "command": "{{ orch_python }} {{ bench_py }} --url http://127.0.0.1:{{ srv_port }} "
            f"--record-dir {{{{ rec }}}} --sleep {bench_sleep}",
            "repeats": 1,
            "timeout": bench_timeout,
            "result_file": "result.json",
        },
        "snapshot": {"pip_freeze": False, "topo": False},
        "timeouts": {"cell": cell_timeout},
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


def server_job_id(records: Path, cell_id: str) -> str:
    server = json.loads((records / f"{cell_id}.server.json").read_text())
    return str(server["env"]["SLURM_JOB_ID"])


def apply_argv(playbook: Path, inventory: Path, results: Path, *more: str) -> list[str]:
    """`orch apply` of that playbook and inventory into `results`."""
    return [sys.executable, "-m", "orchestrator", "apply", str(playbook), "-i", str(inventory),
            "--results", str(results), *more]  # fmt: skip


TIME_LIMIT_PARTITION = "timelimit"


@dataclass
class TimeLimitRun:
    """An `orch apply` whose Slurm job runs past its 1-minute limit, started with the session."""

    tmp: Path
    records: Path
    proc: subprocess.Popen[bytes]  # its stderr goes to tmp/stderr (a pipe nobody reads could fill)

    def result(self) -> tuple[int, str]:
        """Wait for the apply to end: its exit status and stderr."""
        returncode = self.proc.wait(timeout=300)
        return returncode, (self.tmp / "stderr").read_text()
