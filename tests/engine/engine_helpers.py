"""Running playbooks/vllm_cpu.yml through the real `orch` against the real engine, and finding
the engine's processes by what /proc says of them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "vllm_cpu.yml"


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def orch_env(home: Path) -> dict[str, str]:
    """The test's environment with a scratch HOME (orch's workdir, vLLM's ~/.cache/vllm)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "ORCH_RESULTS"}
    env["HOME"] = str(home)
    return env


def apply_argv(python: str, model: str, results: Path, *extra: str) -> list[str]:
    """`orch apply playbooks/vllm_cpu.yml` as a user runs it, on a free port."""
    return [
        sys.executable, "-m", "orchestrator", "apply", str(PLAYBOOK),
        "-e", f"engine_python={python}", "-e", f"model={model}",
        "-e", f"port={free_port()}", "--results", str(results), *extra,
    ]  # fmt: skip


def orch(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Any other `orch` command."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=orch_env(home),
        check=False,
    )


def only_run(results: Path) -> Path:
    """The one run folder under `results`."""
    (run,) = [p for p in results.iterdir() if (p / "run.json").is_file()]
    return run


def load(path: Path) -> Any:
    """A JSON file."""
    return json.loads(path.read_text())


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """The process exists and is no zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def engine_processes(python: str) -> list[int]:
    """Live processes of the engine: its interpreter's, and the titles it gives its workers."""
    venv = str(Path(python).parent.parent)
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        cmd = _cmdline(int(name))
        if (cmd.startswith("VLLM::") or venv in cmd) and alive(int(name)):
            found.append(int(name))
    return found


def session_of(sid: int) -> list[int]:
    """Live processes in session `sid`."""
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat(int(name))
        if fields is not None and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_for(what: str, predicate: Any, timeout: float, poll: float = 0.25) -> Any:
    """predicate()'s first truthy answer within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)
    raise AssertionError(f"no {what} within {timeout:g}s")


def server_record(home: Path) -> dict[str, Any] | None:
    """The runner's record of the server it started (`~/.orch/servers/<pid>.json`)."""
    for path in (home / ".orch" / "servers").glob("*.json"):
        try:
            return dict(load(path))
        except (OSError, ValueError):
            return None
    return None


def bench_process(python: str) -> int | None:
    """A running `vllm bench serve` of the engine, once its client is sending requests."""
    for pid in engine_processes(python):
        cmd = _cmdline(pid)
        if " bench serve " in cmd:
            return pid
    return None


def completions_served(home: Path) -> int:
    """How many /v1/completions requests the running server's log shows (readiness's one
    included), from the session log the runner writes under `~/.orch/runs/<run>/`."""
    count = 0
    for log in (home / ".orch" / "runs").glob("*/.*.server.log"):
        try:
            count = max(count, log.read_bytes().count(b"POST /v1/completions"))
        except OSError:
            continue
    return count
