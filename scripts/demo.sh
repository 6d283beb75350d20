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
  "$orch" report "$run" --by spec -m output_throughput -m accept_length || true
  bash scripts/demo_next.sh "$run" "$repo" "$orch" "$@"
fi
exit "$rc"
