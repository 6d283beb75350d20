#!/usr/bin/env bash
# Set up everything the tests need, then lint, type-check and test. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The SSH tests start real OpenSSH sshd test hosts: install the server when it is missing.
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client iproute2 git >/dev/null
  else
    echo "openssh-server is missing; install it (e.g. sudo apt-get install openssh-server)" >&2
    exit 1
  fi
fi

bash scripts/bootstrap.sh

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
