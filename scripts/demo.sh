#!/usr/bin/env bash
# The main job on the built-in default: localhost, the simulator, no GPU, no hosts to configure.
# Sets up .venv, generates a simulated serving repo, runs playbooks/demo.yml and reports on it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
orch=.venv/bin/orch
repo=${ORCH_DEMO_REPO:-$PWD/results/demo-repo}
if [ ! -d "$repo/.git" ]; then
  "$orch" sim init-repo "$repo" --commits 32 --regress-at 21 >/dev/null
fi
# The simulated host's GPUs: orch's fake nvidia-smi on PATH, backed by a state file the simulated
# server registers in, so every cell samples GPU telemetry and reports energy per output token.
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
export PATH="$gpus/bin:$PATH" ORCH_SIM_STATE="$gpus/state.json"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
"$orch" apply playbooks/demo.yml -e "sim_repo=$repo" "$@" | tee "$out"
rc=${PIPESTATUS[0]}
set -e
# Report the run this apply made (its last line names the bundle), never an older one.
run=$(sed -n 's/^bundle: //p' "$out" | tail -n 1)
if [ -n "$run" ] && [ -f "$run/run.json" ]; then
  echo
  "$orch" report "$run" --by spec -m output_throughput -m accept_length \
    -m joules_per_output_token || true
  bash scripts/demo_next.sh "$run" "$repo" "$orch" "$@"
fi
exit "$rc"
