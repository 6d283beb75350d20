"""The runner as one task of a multi-node Slurm job: every node of a job runs the same runner
from one `srun --nodes N --ntasks-per-node 1 --label`, each taking its own rank's cells.

The controller sets `ORCH_SLURM_TASKS=N` in the task's environment
(execute/transport/slurm/tasks.py).
Then:

- every stdout line ends in RECORD_END before its newline: srun cuts a task's long lines into
  pieces and labels each one, so the controller can only tell a line's real end by this mark;
- the task keeps its rank's cells (`SLURM_NODEID`): rank 0 the heads (and any one-node cell),
  rank r the part cells of rank r, in a workdir of its own (`node_workdir`); only rank 0 takes
  the host's facts;
- HEAD_PLACEHOLDER, which planning wrote where `head_host` goes (the node Slurm makes the head
  is known only once the job runs), becomes the head's address: the first node of
  `scontrol show hostnames "$SLURM_JOB_NODELIST"`, as `scontrol show node` gives its NodeAddr.

Host-side code (Python 3.8, standard library only).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

TASKS_VARIABLE = "ORCH_SLURM_TASKS"
RECORD_END = "\x1e"  # JSON never holds it raw (json.dumps escapes control characters)
HEAD_PLACEHOLDER = "orch-slurm-head-node"  # a valid host name, so a rendered URL stays valid
# what may replace the placeholder inside a shell command line: a host name or an IPv4 address
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SCONTROL_TIMEOUT = 15.0


def task_count(environ: Mapping[str, str]) -> int:
    """How many tasks of one srun share this runner's stdout (1: the runner is alone)."""
    try:
        return max(1, int(environ.get(TASKS_VARIABLE, "1")))
    except ValueError:
        return 1


class _FramedOut(io.RawIOBase):
    """stdout with RECORD_END before every newline, flushed at once."""

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self.raw = raw

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.raw.write(chunk.replace(b"\n", RECORD_END.encode() + b"\n"))
        self.raw.flush()
        return len(chunk)


def frame_stdout() -> None:
    """Mark the end of every line this process writes to stdout from now on."""
    raw = sys.stdout.buffer
    buffered = io.BufferedWriter(_FramedOut(raw))
    sys.stdout = io.TextIOWrapper(buffered, encoding="utf-8", line_buffering=True)


def _scontrol(argv: List[str]) -> str:
    done = subprocess.run(
        ["scontrol", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, LC_ALL="C"),
        timeout=SCONTROL_TIMEOUT,
    )
    if done.returncode != 0:
        raise OSError((done.stderr or done.stdout).decode("utf-8", "replace").strip()[-300:])
    return done.stdout.decode("utf-8", "replace")


def head_address(environ: Mapping[str, str]) -> Tuple[str, str]:
    """(the head's NodeName, the address the other nodes reach it at) for this job.

    Raises OSError (with scontrol's words) or ValueError when it cannot be told."""
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise ValueError("SLURM_JOB_NODELIST is not set: not inside a Slurm job")
    names = _scontrol(["show", "hostnames", nodelist]).split()
    if not names:
        raise ValueError("scontrol show hostnames %s named no node" % nodelist)
    head = names[0]
    address = head
    try:
        for word in _scontrol(["show", "node", "-o", head]).split():
            key, _, value = word.partition("=")
            if key == "NodeAddr" and value:
                address = value
    except (OSError, subprocess.SubprocessError):
        pass  # its NodeName then, which resolves on most clusters
    if not _ADDRESS.match(address):
        raise ValueError("the head node %s has an address orch cannot use: %r" % (head, address))
    return head, address


def node_workdir(workdir: str, rank: int) -> str:
    """Where the runner of node `rank` keeps its cells, servers and locks: the host's workdir
    for the head, a folder of its own for each other rank (nodes that share $HOME must not
    see each other's servers as their own)."""
    return workdir if rank == 0 else "%s/nodes/%d" % (workdir.rstrip("/"), rank)


def _keeps(cell: Mapping[str, Any], rank: int) -> bool:
    role = cell.get("node")
    if isinstance(role, dict):
        return int(role.get("rank", -1)) == rank
    return rank == 0


def node_payload(
    payload: Dict[str, Any], environ: Mapping[str, str]
) -> Tuple[Dict[str, Any], Optional[str]]:
    """This node's payload: its rank's cells, the head's address filled in; facts on rank 0
    only. The second value says why none can run (the head could not be found), else None."""
    try:
        rank = int(environ.get("SLURM_NODEID", ""))
    except ValueError:
        return payload, "SLURM_NODEID is not set: cannot tell this node's rank"
    items = payload.get("queue") or []
    kept = [item for item in items if _keeps(item.get("cell") or {}, rank)]
    mine = dict(payload, queue=kept)
    if rank != 0:
        mine.pop("facts", None)
        mine["workdir"] = node_workdir(str(payload.get("workdir") or ".orch"), rank)
    if not any(HEAD_PLACEHOLDER in json.dumps(item) for item in kept):
        return mine, None
    try:
        _name, address = head_address(environ)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return mine, "cannot find the job's head node: %s" % exc
    mine["queue"] = [
        json.loads(json.dumps(item).replace(HEAD_PLACEHOLDER, address)) for item in kept
    ]
    return mine, None
