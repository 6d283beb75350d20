"""`sim serve` over two nodes (sim/nodes.py): real processes joined over loopback TCP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.sim.nodes import ALGO_MISMATCH, INTERNODE_BASE, NO_FABRIC, internode_factor

from .simhelpers import TIME_SCALE, free_port, get

FABRIC = {"NCCL_IB_HCA": "mlx5", "NCCL_ALGO": "Ring"}


def _start(
    cwd: Path, port: int, dist: int, rank: int, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "orchestrator.sim", "serve", "--port", str(port)]
    argv += ["--tp-size", "2", "--time-scale", str(TIME_SCALE), "--nnodes", "2"]
    argv += ["--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist}"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    with open(cwd / f"node{rank}.log", "ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env={**clean, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _ready(port: int) -> bool:
    try:
        return get(f"http://127.0.0.1:{port}/health_generate", timeout=2)[0] == 200
    except OSError:
        return False


def _wait(what: str, test: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if test():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {seconds} s")


def test_the_head_serves_only_when_every_node_joined_and_dies_with_one(tmp_path: Path) -> None:
    port, dist = free_port(), free_port()
    head = _start(tmp_path, port, dist, 0, FABRIC)
    node = None
    try:
        time.sleep(1.0)
        assert head.poll() is None and not _ready(port)  # alone, the head does not serve
        node = _start(tmp_path, port, dist, 1, FABRIC)
        _wait("ready", lambda: _ready(port))
        info = json.loads(get(f"http://127.0.0.1:{port}/server_info", timeout=5)[1])
        assert info["tp_size"] == 2
        os.killpg(node.pid, signal.SIGKILL)  # node 1 dies: the server goes down with it
        _wait("gone", lambda: head.poll() is not None, 15)
        assert head.returncode == 1
        log = (tmp_path / "node0.log").read_text()
        assert "node rank 1 joined" in log and "node rank 1 went away" in log
    finally:
        for proc in (head, node):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_a_node_ends_when_the_head_stops(tmp_path: Path) -> None:
    port, dist = free_port(), free_port()
    head = _start(tmp_path, port, dist, 0, FABRIC)
    node = _start(tmp_path, port, dist, 1, FABRIC)
    try:
        _wait("ready", lambda: _ready(port))
        head.send_signal(signal.SIGTERM)
        assert head.wait(15) == 0
        assert node.wait(15) == 0
        assert "the head closed the connection" in (tmp_path / "node1.log").read_text()
    finally:
        for proc in (head, node):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_the_link_costs_more_when_a_node_lacks_the_fabric_or_the_algorithm() -> None:
    good = [[FABRIC, FABRIC], [FABRIC, FABRIC]]
    assert internode_factor([[FABRIC]]) == 1.0
    assert internode_factor(good) == 1.0 + INTERNODE_BASE
    no_fabric = [[FABRIC], [{"NCCL_ALGO": "Ring"}]]
    assert internode_factor(no_fabric) == 1.0 + INTERNODE_BASE + NO_FABRIC
    no_algo = [[FABRIC], [{"NCCL_IB_HCA": "mlx5"}]]
    assert internode_factor(no_algo) == 1.0 + INTERNODE_BASE + ALGO_MISMATCH
    socket_only = [[FABRIC], [{"NCCL_SOCKET_IFNAME": "eth0", "NCCL_ALGO": "Ring"}]]
    assert internode_factor(socket_only) == internode_factor(good)


def test_a_node_without_the_fabric_slows_the_whole_server(tmp_path: Path) -> None:
    factors = {}
    for name, node_env in (("fabric", FABRIC), ("sockets", {"NCCL_ALGO": "Ring"})):
        port, dist = free_port(), free_port()
        (tmp_path / name).mkdir()
        head = _start(tmp_path / name, port, dist, 0, FABRIC)
        node = _start(tmp_path / name, port, dist, 1, node_env)
        try:
            _wait("ready", lambda port=port: _ready(port))
            info = json.loads(get(f"http://127.0.0.1:{port}/server_info", timeout=5)[1])
            assert (info["nnodes"], info["node_rank"]) == (2, 0)
            factors[name] = (info["sim"]["internode_factor"], info["sim"]["step_ms"])
        finally:
            for proc in (head, node):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert factors["fabric"][0] == 1.0 + INTERNODE_BASE
    assert factors["sockets"][0] == 1.0 + INTERNODE_BASE + NO_FABRIC
    assert factors["sockets"][1] > factors["fabric"][1]
