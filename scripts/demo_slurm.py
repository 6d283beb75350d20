"""The demo on a real Slurm: the test cluster of tests/slurmcluster.py (munged, slurmctld, slurmd
in a network namespace, fake GPUs), playbooks/demo.yml unchanged, its host a Slurm login node.

Root only (Slurm's daemons and the namespace); `scripts/demo_slurm.sh` sets it up and runs it.
Every command orch runs becomes a Slurm job: the run is one job, whose runner pins the repo,
starts the simulated server and benches it on the compute node, and streams the cells back.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from slurmcluster import SlurmTestCluster, missing_reason  # noqa: E402


def main(argv: list[str]) -> int:
    """Start the test Slurm, apply the demo through it, report, stop the cluster."""
    reason = missing_reason()
    if reason is not None:
        print(f"demo_slurm: cannot start the test Slurm: {reason}", file=sys.stderr)
        return 2
    repo, gpus = Path(argv[0]), Path(argv[1])
    results = ROOT / "results"
    with SlurmTestCluster(nodes=1, gpus=8) as cluster:
        inventory = results / "demo-slurm-hosts.yml"
        host = {
            "ansible_connection": "local",  # orch runs on the login node
            "ansible_python_interpreter": sys.executable,
            "orch_workdir": ".orch/demo-slurm",
            "slurm_partition": "debug",
            "slurm_gres": "gpu:8",
        }
        data = {"cluster": {"vars": {"orch_executor": "slurm"}, "hosts": {"login": host}}}
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        env = {
            **cluster.env,
            "PATH": f"{gpus / 'bin'}:{os.environ['PATH']}",
            "ORCH_SIM_STATE": str(gpus / "state.json"),
        }
        orch = [sys.executable, "-m", "orchestrator"]
        apply = subprocess.run(
            [*orch, "apply", "playbooks/demo.yml", "-i", str(inventory), "-e", f"sim_repo={repo}",
             *argv[2:]],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False,
        )  # fmt: skip
        print(apply.stdout, end="")
        runs = [
            ln.split(": ", 1)[1] for ln in apply.stdout.splitlines() if ln.startswith("bundle: ")
        ]
        if runs:
            subprocess.run(
                [*orch, "report", runs[-1], "--by", "spec", "-m", "output_throughput"],
                cwd=ROOT, env=env, check=False,
            )  # fmt: skip
            print(f"\nthe run was one Slurm job: see 'slurm_jobs' in {runs[-1]}/run.json")
        return apply.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
