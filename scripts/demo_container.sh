#!/usr/bin/env bash
# A study over two container images, end to end on this machine (as root, with Podman): builds
# the simulator's images v1 and v2 (cached in ~/.cache/orch/images; v2 decodes slower because of
# the performance model inside it, and holds another version of a package), starts a registry
# on loopback, pushes them, runs the study (each cell pinned to its image's digest, the server
# under podman, its env verified inside the container) and prints `orch diff` of the v1 and the
# v2 cell, which names the image first. Extra arguments go to `orch apply`.
# Knobs: ORCH_DEMO_REPEATS (5), ORCH_DEMO_RESULTS (results), ORCH_IMAGE_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "demo_container.sh runs Podman as root (docs/FACTS.md, Containers): run it with sudo" >&2
  exit 1
fi
need=()
for tool in podman runc skopeo catatonit docker-registry; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ "${#need[@]}" -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi
bash scripts/bootstrap.sh
orch=$PWD/.venv/bin/orch
cache=${ORCH_IMAGE_CACHE:-$HOME/.cache/orch/images}
results=${ORCH_DEMO_RESULTS:-results}
mkdir -p "$cache" "$results"
# cgroups v1 and no CAP_SYS_RESOURCE here: crun refuses and runc needs lower limits
# (docs/FACTS.md, "Containers"); a containers.conf of the caller's own wins.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF=$cache/containers.conf
  printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]\n[engine]\nruntime = "runc"\n' \
    >"$CONTAINERS_CONF"
fi
work=$(mktemp -d)
registry_pid=
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; wait "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s/registry\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$work" "$port" >"$work/registry.yml"
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
registry_pid=$!
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
echo "registry on 127.0.0.1:$port; building (cached in $cache) and pushing the images"
"$orch" sim images --registry "127.0.0.1:$port" --cache "$cache" --playbook "$work/images.yml" \
  --conf "$CONTAINERS_CONF" --port "$(free_port)" --repeats "${ORCH_DEMO_REPEATS:-5}"
out=$work/apply.out
set +e
"$orch" apply "$work/images.yml" --results "$results" "$@" | tee "$out"
rc=${PIPESTATUS[0]}
set -e
run=$(sed -n 's/^bundle: //p' "$out" | tail -n 1)
if [ -z "$run" ] || [ ! -f "$run/run.json" ]; then
  echo "no bundle from the study (orch apply exited $rc)" >&2
  [ "$rc" != 0 ] || rc=1
  exit "$rc"
fi
# The v1 and the v2 cell, by the image each ran (server.json's container record).
mapfile -t pair < <(.venv/bin/python - "$run" <<'PY'
import json
import sys
from pathlib import Path

found = {}
for cell in sorted(Path(sys.argv[1]).glob("cells/*")):
    server = cell / "server.json"
    record = json.loads(server.read_text()).get("container") or {} if server.exists() else {}
    found[str(record.get("image", "")).rsplit(":", 1)[-1]] = str(cell)
print(found.get("v1", ""))
print(found.get("v2", ""))
PY
)
if [ -z "${pair[0]:-}" ] || [ -z "${pair[1]:-}" ]; then
  echo "the study has no v1 and v2 cell that started a server to compare (see $run)" >&2
  [ "$rc" != 0 ] || rc=1
  exit "$rc"
fi
echo
echo "orch diff of the v1 and the v2 cell:"
"$orch" diff "${pair[0]}" "${pair[1]}"
exit "$rc"
