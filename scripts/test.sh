#!/usr/bin/env bash
# Set up everything the tests need, then lint, type-check and test. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The SSH tests start real OpenSSH sshd test hosts (in network namespaces when root, which needs
# iproute2) and the runner pins git repos: install what is missing.
need=()
{ command -v sshd || [ -x /usr/sbin/sshd ]; } >/dev/null 2>&1 || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v git >/dev/null 2>&1 || need+=(git)
if [ "$(id -u)" = 0 ]; then
  { command -v ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; } >/dev/null 2>&1 || need+=(iproute2)
  # tests/slurm start a real Slurm (munged, slurmctld, one slurmd per namespace): root only
  { command -v slurmctld || [ -x /usr/sbin/slurmctld ]; } >/dev/null 2>&1 || need+=(slurmctld)
  { command -v slurmd || [ -x /usr/sbin/slurmd ]; } >/dev/null 2>&1 || need+=(slurmd)
  { command -v munged || [ -x /usr/sbin/munged ]; } >/dev/null 2>&1 || need+=(munge)
  command -v srun >/dev/null 2>&1 || need+=(slurm-client)
  # tests/analyze/test_report_html.py renders the HTML report in a real headless browser
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  # tests/results/test_history_postgres.py starts a real PostgreSQL (tests/pgserver.py)
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
  # tests/container run real images under Podman (runc: crun refuses v1 cgroups) from a real
  # registry on loopback, resolved to digests with skopeo
  for tool in podman runc skopeo catatonit docker-registry; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
  done
fi
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]}; install them (e.g. sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

bash scripts/bootstrap.sh

# SGLang's own benchmark client (tests/sim/test_sim_real_client.py) runs in a venv of its own:
# what it imports is no dependency of orch. Versions pinned to the ones the test was proven with.
client=.venv-sglang-client
client_stamp=$client/.installed-1
if [ ! -f "$client_stamp" ]; then
  rm -rf "$client"
  python3 -m venv "$client"
  "$client/bin/python" -m pip install -q aiohttp==3.14.5 numpy==2.4.6 requests==2.34.2 \
    tqdm==4.70.1 tokenizers==0.23.3 transformers==5.24.0
  touch "$client_stamp"
fi
export ORCH_TEST_SGLANG_PYTHON="$PWD/$client/bin/python"

# GuideLLM and AIPerf (tests/clients), each in a venv of its own, built once per machine into a
# cache outside the clone (scripts/clients.sh: about 10 minutes the first time, then instant).
# ORCH_CLIENTS=0 leaves them out on a developer's machine (their tests then skip); CI runs them.
if [ "${ORCH_CLIENTS:-1}" != 0 ]; then
  clients=$(bash scripts/clients.sh) # two ORCH_*_PYTHON=VALUE lines
  while IFS= read -r line; do
    export "${line?}"
  done <<<"$clients"
fi

# The real-engine tier (tests/engine): vLLM's CPU build and a tiny model, built once per machine
# into a cache outside the clone (scripts/engine.sh: 2-4 minutes the first time, then instant).
# ORCH_ENGINE=0 leaves the tier out on a developer's machine (its tests then skip); CI runs it.
if [ "${ORCH_ENGINE:-1}" != 0 ]; then
  engine=$(bash scripts/engine.sh) # three ORCH_ENGINE_*=VALUE lines
  while IFS= read -r line; do
    export "${line?}"
  done <<<"$engine"
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
set +e
.venv/bin/pytest -q "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test: that is a failure of the suite, say so.
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
