"""What the client tests share (tests/engine too): where each client's venv is, a word-level
tokenizer over the simulator's words, and `orch` run as a user runs it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def client_python(variable: str, module: str) -> str:
    """The interpreter named by `variable` that imports `module`, else a skip (CI: a failure)."""
    python = os.environ.get(variable, "")
    if not python or not Path(python).is_file():
        why = (
            f"{module} is not built: run scripts/test.sh (it runs scripts/clients.sh), or export "
            f"the {variable} line scripts/clients.sh prints"
        )
        if os.environ.get("CI"):
            pytest.fail(why + "; CI must run the client tests")
        pytest.skip(why)
    return python


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def orch(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator ARGS` with a scratch HOME and no HF_HUB_OFFLINE or
    TRANSFORMERS_OFFLINE: AIPerf 0.13 takes any value of either as offline, and offline it
    cannot load a local tokenizer folder (docs/FACTS.md); nothing here reaches for a hub."""
    home.mkdir(parents=True, exist_ok=True)
    dropped = ("ORCH_RESULTS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
