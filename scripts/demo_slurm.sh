#!/usr/bin/env bash
# The demo through a real Slurm (root only): the test cluster of tests/slurmcluster.py, one compute
# node in a network namespace, playbooks/demo.yml unchanged; every command orch runs is a Slurm job.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "demo_slurm: run as root (Slurm's daemons and a network namespace)" >&2
  exit 2
fi
need=()
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need+=(munge)
command -v srun >/dev/null 2>&1 || need+=(slurm-client)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need+=(iproute2)
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
bash scripts/bootstrap.sh
repo=${ORCH_DEMO_REPO:-$PWD/results/demo-repo}
if [ ! -d "$repo/.git" ]; then
  .venv/bin/orch sim init-repo "$repo" --commits 32 --regress-at 21 >/dev/null
fi
gpus=$PWD/results/demo-gpus
if [ ! -x "$gpus/bin/nvidia-smi" ]; then
  .venv/bin/python - "$gpus" "$PWD/.venv/bin/python" <<'PY'
import sys
from pathlib import Path

from orchestrator.sim.smi import install_fake_nvidia_smi
from orchestrator.sim.state import write_host_state

where = Path(sys.argv[1])
install_fake_nvidia_smi(where / "bin", sys.argv[2], state=write_host_state(where / "state.json"))
PY
fi
exec .venv/bin/python scripts/demo_slurm.py "$repo" "$gpus" "$@"
