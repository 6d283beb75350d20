"""Helpers for the simulator tests: free ports, a running `sim serve`, HTTP calls."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.sim import model as m

# Every simulated millisecond costs TIME_SCALE real milliseconds in these tests.
TIME_SCALE = float(os.environ.get("ORCH_SIM_TEST_TIME_SCALE", "0.05"))

SPEC_FLAGS = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/models/draft",
    "--speculative-num-steps",
    "2",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "3",
]
TUNED = {"NCCL_MIN_NCHANNELS": "32", "NCCL_CROSS_NIC": "1", "NCCL_ALGO": "Ring"}


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """(status, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, data: Mapping[str, Any], timeout: float = 30.0) -> tuple[int, bytes]:
    """(status, body) of a JSON POST."""
    req = urllib.request.Request(
        url, data=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Running:
    """A started `sim serve`."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        """Base URL."""
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        """The server log so far."""
        return self.log.read_text(errors="replace")

    def info(self) -> dict[str, Any]:
        """/server_info as JSON."""
        status, body = get(self.url + "/server_info")
        assert status == 200
        data = json.loads(body)
        assert isinstance(data, dict)
        return data

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until /health_generate answers 200 (fails if the server exits)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited rc={self.proc.returncode}:\n{self.text()}")
            try:
                if get(self.url + "/health_generate", timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not ready in {timeout}s:\n{self.text()}")


def write_model(repo: Path, **overrides: Any) -> Path:
    """An orch_sim_model.json in `repo` with (nested) overrides."""
    repo.mkdir(parents=True, exist_ok=True)
    path = repo / m.MODEL_FILE
    path.write_text(m.dump_params(m.model_params(overrides)))
    return path


@contextmanager
def sim_server(
    cwd: Path,
    args: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
    time_scale: float = TIME_SCALE,
) -> Iterator[Running]:
    """Run `python -m orchestrator.sim serve` in `cwd`; SIGTERM and reap it afterwards."""
    cwd.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = cwd / f"server-{port}.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    full_env.update(env or {})
    argv = [sys.executable, "-m", "orchestrator.sim", "serve", "--port", str(port)]
    # Seeded: draft acceptance is random even at --noise 0 (a test's --seed or
    # ORCH_SIM_SEED wins).
    seed = [] if "ORCH_SIM_SEED" in full_env else ["--seed", "1"]
    argv += ["--time-scale", str(time_scale), *seed, *(args or [])]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=fh, stderr=subprocess.STDOUT)
    running = Running(proc, port, log)
    try:
        if wait:
            running.wait_ready()
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command name) of every process."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue


def children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc."""
    return sorted(child for child, fields in process_stats() if int(fields[1]) == pid)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group `pgid`, from /proc."""
    return [p for p, fields in process_stats() if int(fields[2]) == pgid and fields[0] not in "ZX"]


def environ(pid: int) -> dict[str, str]:
    """A process's environment as the kernel has it."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(): v.decode(errors="replace") for k, v in pairs}


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_bench(
    cwd: Path, url: str, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m orchestrator.sim bench` against `url` with the output in cwd/result.jsonl."""
    argv = [
        sys.executable,
        "-m",
        "orchestrator.sim",
        "bench",
        "--base-url",
        url,
        "--dataset-name",
        "random-ids",
        "--random-range-ratio",
        "1",
        "--output-file",
        "result.jsonl",
        *extra,
    ]
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
