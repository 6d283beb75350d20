"""`orch sim serve` over several nodes, as SGLang's `--nnodes N --node-rank R --dist-init-addr
HEAD:PORT`: the head (rank 0) listens on the dist-init port, every other node starts its own TP
workers and joins it over TCP with the environments they really have; the head serves only when
every node joined, and a node that goes away takes the server down (a rank whose NCCL peer is
gone cannot go on). The head closing ends every node.

The performance model charges the inter-node link per node's own worker environment
(`internode_factor`): a node whose workers lack both NCCL_IB_HCA and NCCL_SOCKET_IFNAME, or
lack the NCCL_ALGO the head's have, slows the whole server.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol


class NodeServer(Protocol):
    """What a node of a multi-node server needs of its SimServer: its workers and its stop."""

    @property
    def stopping(self) -> threading.Event: ...
    @property
    def workers(self) -> list[Any]: ...

    def start_workers(self) -> None: ...
    def stop_workers(self) -> None: ...


JOIN_TIMEOUT = 600.0  # seconds the head waits for the other nodes, and they for it
INTERNODE_BASE = 0.12  # step time added per extra node on a well-configured fabric
NO_FABRIC = 0.6  # a node with neither NCCL_IB_HCA nor NCCL_SOCKET_IFNAME: slow sockets
ALGO_MISMATCH = 0.25  # a node without the NCCL_ALGO the head runs with


def internode_factor(node_envs: Sequence[Sequence[Mapping[str, str]]]) -> float:
    """How much longer a step takes over these nodes (each a list of its workers' envs)."""
    if len(node_envs) <= 1:
        return 1.0
    factor = 1.0 + INTERNODE_BASE * (len(node_envs) - 1)
    head_algo = {e.get("NCCL_ALGO") for e in node_envs[0]} - {None}
    for envs in node_envs:
        if any(not (e.get("NCCL_IB_HCA") or e.get("NCCL_SOCKET_IFNAME")) for e in envs):
            factor += NO_FABRIC
        if head_algo and any(e.get("NCCL_ALGO") not in head_algo for e in envs):
            factor += ALGO_MISMATCH
    return factor


def split_addr(addr: str) -> tuple[str, int]:
    """`HOST:PORT` (IPv6 in brackets) -> (host, port)."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class HeadJoin:
    """The head's side: accept every other node, keep their links, notice one going away."""

    def __init__(self, addr: str, nnodes: int, log: Callable[[str], None]) -> None:
        _host, port = split_addr(addr)
        self.nnodes = nnodes
        self.log = log
        self.listener = socket.create_server(("0.0.0.0", port), reuse_port=False)
        self.links: dict[int, socket.socket] = {}
        self.envs: dict[int, list[dict[str, str]]] = {}
        self.closing = threading.Event()

    def wait_all(self, stopping: threading.Event, timeout: float) -> bool:
        """Accept until every node joined (True), or stop/timeout (False)."""
        deadline = time.monotonic() + timeout
        self.listener.settimeout(0.2)
        while len(self.links) < self.nnodes - 1:
            if stopping.is_set() or time.monotonic() > deadline:
                return False
            try:
                conn, peer = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            try:
                hello = json.loads(conn.makefile("r").readline())
            except (OSError, ValueError):
                conn.close()
                continue
            rank = int(hello.get("node_rank", -1))
            conn.settimeout(None)
            self.links[rank] = conn
            self.envs[rank] = list(hello.get("envs") or [])
            self.log(f"node rank {rank} joined from {peer[0]} ({len(self.envs[rank])} workers)")
        return True

    def watch(self, on_lost: Callable[[int], None]) -> None:
        """Call `on_lost(rank)` when a node's link closes while the head is not closing."""
        for rank, conn in self.links.items():

            def follow(rank: int = rank, conn: socket.socket = conn) -> None:
                with contextlib.suppress(OSError):
                    while conn.recv(1024):
                        pass
                if not self.closing.is_set():
                    on_lost(rank)

            threading.Thread(target=follow, daemon=True, name=f"node{rank}").start()

    def close(self) -> None:
        """End every node's link (each node then stops) and the listener."""
        self.closing.set()
        for conn in self.links.values():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.listener.close()


def join_head(
    addr: str,
    rank: int,
    envs: list[dict[str, Any]],
    stopping: threading.Event,
    timeout: float,
    log: Callable[[str], None],
) -> socket.socket | None:
    """A node's side: connect to the head (retrying while it starts) and say hello."""
    host, port = split_addr(addr)
    deadline = time.monotonic() + timeout
    last = ""
    while not stopping.is_set():
        try:
            conn = socket.create_connection((host, port), timeout=2)
        except OSError as exc:
            last = str(exc)
            if time.monotonic() > deadline:
                log(f"could not reach the head at {addr}: {last}")
                return None
            stopping.wait(0.2)
            continue
        conn.sendall((json.dumps({"node_rank": rank, "envs": envs}) + "\n").encode())
        conn.settimeout(None)
        log(f"node rank {rank} joined the head at {addr}")
        return conn
    return None


def stop_on_signals(stopping: threading.Event) -> None:
    """SIGTERM and SIGINT set `stopping`, from a thread.

    The handler only writes a byte, and a thread sets the event: Event.set() takes a lock, and a
    second SIGTERM (the runner signals the group, then each pid) arriving inside it deadlocked.
    """
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def on_signal(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, b"x")

    def relay_signals() -> None:
        os.read(wake_r, 1)
        stopping.set()

    threading.Thread(target=relay_signals, daemon=True, name="signals").start()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def serve_node(srv: NodeServer, args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """A node other than the head: its TP workers, joined to the head until the head closes."""
    rank = int(args.node_rank)
    stop_on_signals(srv.stopping)
    try:
        srv.start_workers()
        envs = [w.report.get("env", {}) for w in srv.workers]
        conn = join_head(str(args.dist_init_addr), rank, envs, srv.stopping, JOIN_TIMEOUT, log)
        if conn is None:
            return 0 if srv.stopping.is_set() else 1
        closed = threading.Event()

        def follow() -> None:
            with contextlib.suppress(OSError):
                while conn.recv(1024):
                    pass
            closed.set()
            srv.stopping.set()

        threading.Thread(target=follow, daemon=True, name="head").start()
        srv.stopping.wait()
        if closed.is_set():
            log("the head closed the connection: stopping this node")
        conn.close()
        return 0
    finally:
        srv.stop_workers()
        log("Node stopped.")
