"""Shipping the runner and probe to a host once, cached there by content hash."""

from __future__ import annotations

import hashlib
import tempfile
from functools import cache
from pathlib import Path

from orchestrator.config.host import Host
from orchestrator.errors import ExecutionError
from orchestrator.execute.connection import Connection

REMOTE_DIR = Path(__file__).parent / "remote"
SHIPPED = ("runner.py", "probe.py")


@cache
def runner_hash() -> str:
    """sha256 over the shipped files: a changed runner lands in a new directory on the host."""
    digest = hashlib.sha256()
    for name in SHIPPED:
        digest.update(name.encode() + b"\0" + (REMOTE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def runner_path(host: Host) -> str:
    """Where the runner lives on `host`, relative to its $HOME unless workdir is absolute."""
    return f"{host.workdir.rstrip('/')}/lib/{runner_hash()}/runner.py"


_EXISTS = "import os,sys; sys.exit(0 if all(os.path.isfile(p) for p in sys.argv[1:]) else 3)"


def ensure_runner(conn: Connection) -> str:
    """Put the runner and probe on the host unless this exact version is already there."""
    host = conn.host
    path = runner_path(host)
    base = path.rsplit("/", 1)[0]
    remote = [f"{base}/{name}" for name in SHIPPED]
    check = conn.run([host.python, "-c", _EXISTS, *remote], timeout=60)
    if check.rc == 0:
        return path
    if check.rc != 3:
        raise ExecutionError(
            f"{host.name}: cannot run {host.python!r} (rc {check.rc}): "
            f"{check.stderr.strip()[-300:]}",
            hint="set python / ansible_python_interpreter for this host in the inventory",
        )
    with tempfile.TemporaryDirectory() as tmp:
        for name, dest in zip(SHIPPED, remote, strict=True):
            local = Path(tmp) / name
            local.write_bytes((REMOTE_DIR / name).read_bytes())
            conn.put(local, dest)
    return path
