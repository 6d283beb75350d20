#!/usr/bin/env bash
# Build, once per machine, the benchmark clients GuideLLM and AIPerf, each in a venv of its own
# (what they import is no dependency of orch), in a cache outside the clone:
# "${ORCH_CLIENTS_CACHE:-$HOME/.cache/orch/clients}". Idempotent: a finished venv (stamp written
# last) is reused; an interrupted one, or one of other pins, is redone.
#
# stdout: exactly two KEY=VALUE lines, nothing else (progress and errors go to stderr):
#   ORCH_GUIDELLM_PYTHON=<guidellm's venv python>
#   ORCH_AIPERF_PYTHON=<aiperf's venv python>
#
# Every package is pinned (scripts/clients/<client>.txt, a `pip freeze` of the venv the tests
# were proven with). GuideLLM 0.8 requires torch (its default data loader is torch's): the pin is
# torch==2.13.0+cpu, a wheel on this kind of machine's disk (ORCH_ENGINE_FIND_LINKS, default
# /opt/wheels, as scripts/engine.sh), never a CUDA build from PyPI. AIPerf needs no torch.
# First build: about 10 minutes for both on 2 cores, 1.5 GB (guidellm) + 1.2 GB (aiperf).
set -euo pipefail

say() { echo "clients.sh: $*" >&2; }
die() {
  say "ERROR: $*"
  exit 1
}

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base_py=${ORCH_ENGINE_BASE_PYTHON:-python3.11}
command -v "$base_py" >/dev/null 2>&1 || die "$base_py not found: the clients need Python 3.11"
find_links=()
links=${ORCH_ENGINE_FIND_LINKS:-/opt/wheels}
[ -d "$links" ] && find_links=(--find-links "$links")
cache=${ORCH_CLIENTS_CACHE:-${HOME:?HOME is unset; set ORCH_CLIENTS_CACHE}/.cache/orch/clients}
mkdir -p "$cache" || die "cannot create the clients cache $cache"
cache=$(cd "$cache" && pwd)

# One build at a time per cache: a second caller waits, then finds the stamps.
exec 9>"$cache/.lock"
flock 9

# build NAME: the venv "$cache/NAME-<hash of its pins>", its python printed
build() {
  local name=$1 pins="$here/clients/$1.txt"
  [ -f "$pins" ] || die "missing $pins"
  local key venv
  key=$( (cat "$pins" && "$base_py" --version) | sha256sum | cut -c1-12)
  venv="$cache/$name-$key"
  if [ ! -f "$venv/.orch-client-stamp" ]; then
    say "building $name in $venv (minutes)"
    rm -rf "$venv"
    "$base_py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off \
      ${find_links[@]+"${find_links[@]}"} -r "$pins" >&2 || die "pip install -r $pins failed"
    "$venv/bin/python" -c "import $name" >&2 || die "$name does not import in $venv"
    echo "$key" >"$venv/.orch-client-stamp"
  fi
  echo "$venv/bin/python"
}

guidellm=$(build guidellm)
aiperf=$(build aiperf)
echo "ORCH_GUIDELLM_PYTHON=$guidellm"
echo "ORCH_AIPERF_PYTHON=$aiperf"
