"""Simulator processes still alive, found by what their environment holds (the e2e and Slurm
tests' "nothing is left running" checks)."""

from __future__ import annotations

import os
from pathlib import Path


def sim_processes(env_holds: str) -> list[int]:
    """pids of `orchestrator.sim` processes (servers, workers) whose environment holds
    `env_holds` (a marker value, or a whole `NAME=value` entry)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"orchestrator.sim" in cmd and env_holds.encode() in env:
            found.append(int(pid))
    return found
