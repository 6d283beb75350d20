"""A simulated TP worker process: reports the environment it really has, logs NCCL init, waits.

The server starts one per TP rank (as SGLang starts its scheduler processes). The worker writes
one JSON line `{"rank", "pid", "ppid", "env"}` on stdout, prints NCCL INFO lines on stderr when
NCCL_DEBUG asks for them (naming only variables real NCCL knows), then blocks on stdin: EOF (the
server closed it or died) ends it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping

from orchestrator.sim.nccl_names import NCCL_ENV_NAMES

# NCCL's string parameters log without the trailing period that integer ones get.
_STRING_PARAMS = {"NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL"}
_SET_TO_PARAMS = {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_TOPO_FILE", "NCCL_NET"}
_NOT_PARAMS = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}


def nccl_log_lines(
    env: Mapping[str, str], rank: int, nranks: int, pid: int, nccl_version: str, host: str
) -> list[str]:
    """The NCCL INFO lines a rank would print during init, given its environment."""
    level = env.get("NCCL_DEBUG", "").upper()
    prefix = f"{host}:{pid}:{pid} [{rank}] NCCL INFO "
    if level == "VERSION":
        return [f"NCCL version {nccl_version}"]
    if level not in {"INFO", "TRACE"}:
        return []
    subsys = {
        s.strip().upper() for s in env.get("NCCL_DEBUG_SUBSYS", "INIT,BOOTSTRAP,ENV").split(",")
    }
    show = "ALL" in subsys
    lines = []
    if show or "BOOTSTRAP" in subsys:
        lines.append(prefix + "Bootstrap: Using lo:127.0.0.1<0>")
    if show or "INIT" in subsys:
        lines.append(prefix + f"NCCL version {nccl_version}")
    if show or "ENV" in subsys:
        for name in sorted(env):
            # Real NCCL reads only the names it knows: a misspelled one is silently ignored.
            if name not in NCCL_ENV_NAMES or name in _NOT_PARAMS:
                continue
            value = env[name]
            if name in _SET_TO_PARAMS:
                lines.append(prefix + f"{name} set to {value}")
            elif name in _STRING_PARAMS or not value.strip().lstrip("-").isdigit():
                lines.append(prefix + f"{name} set by environment to {value}")
            else:
                lines.append(prefix + f"{name} set by environment to {value}.")
    if show or "INIT" in subsys:
        comm = 0x5600_0000 + 0x1000 * rank
        lines.append(
            prefix + f"comm {comm:#x} rank {rank} nRanks {nranks} nNodes 1 localRanks {nranks} "
            f"localRank {rank} MNNVL 0"
        )
        channels = env.get("NCCL_MIN_NCHANNELS", "16")
        lines.append(
            prefix + f"{channels} coll channels, {channels} collnet channels, 0 nvls channels, "
            f"{channels} p2p channels, {channels} p2p channels per peer"
        )
        lines.append(
            prefix
            + f"comm {comm:#x} rank {rank} nranks {nranks} cudaDev {rank} "
            "nvmlDev {rank} busId 0 commId 0x1 - Init COMPLETE".replace("{rank}", str(rank))
        )
    return lines


def main(argv: list[str]) -> int:
    """`python -m orchestrator.sim worker --rank R --tp T --nccl-version V`."""
    args = dict(zip(argv[0::2], argv[1::2], strict=False))
    rank = int(args.get("--rank", "0"))
    nranks = int(args.get("--tp", "1"))
    version = args.get("--nccl-version", "2.27.5+cuda12.9")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    env = dict(os.environ)
    sys.stdout.write(
        json.dumps({"rank": rank, "pid": os.getpid(), "ppid": os.getppid(), "env": env})
    )
    sys.stdout.write("\n")
    sys.stdout.flush()
    for line in nccl_log_lines(env, rank, nranks, os.getpid(), version, socket.gethostname()):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    # A thread keeps the main thread free for signals; stdin EOF means the server is gone.
    done = threading.Event()

    def watch() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            done.set()

    threading.Thread(target=watch, daemon=True).start()
    done.wait()
    return 0
