"""Network namespaces for test hosts (sshd, slurmd): free subnets, and what crashed runs left."""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence


def run(
    argv: Sequence[str], *, check: bool = True, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A short command, its output captured as text, bounded to 30 s."""
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=check, timeout=30, env=env
    )


def pid_alive(pid: int) -> bool:
    """True while `pid` exists (another user's process counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_namespace_processes(namespace: str) -> None:
    """SIGKILL every process in the namespace."""
    for pid in run(["ip", "netns", "pids", namespace], check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def kill_namespace(namespace: str) -> None:
    """SIGKILL every process in the namespace, then delete it."""
    kill_namespace_processes(namespace)
    run(["ip", "netns", "del", namespace], check=False)


def collect_stale_namespaces(prefix: str) -> list[str]:
    """Delete namespaces named `<prefix>-<creator pid>-...` whose creator is gone (a crash)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    removed = []
    for line in run(["ip", "netns", "list"], check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(rf"{re.escape(prefix)}-(\d+)-[\w-]+", name)
        if match and not pid_alive(int(match.group(1))):
            kill_namespace(name)
            removed.append(name)
    return removed


def pick_subnet(prefix: str, what: str) -> str:
    """A `<prefix>.X.` /24 no interface of this machine uses yet, X chosen at random."""
    in_use = run(["ip", "-4", "-o", "addr", "show"], check=False).stdout
    choices = list(range(256))
    random.shuffle(choices)
    for third in choices:
        candidate = f"{prefix}.{third}."
        if candidate not in in_use:
            return candidate
    raise RuntimeError(f"no free {prefix}.X.0/24 subnet for {what}")
