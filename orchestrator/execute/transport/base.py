"""The transport interface: what every way of reaching a host must do, and the pieces they share.

A transport (an executor's way to reach a host) is one module with one `Connection` subclass
that keeps the contract written on `Connection.run`, `put`, `get` and `close` below, plus one
opener that `orchestrator.execute.transport.connect.connect` picks by the host's `connection` kind.
Everything above (pool, controller, shipping, probing) sees only this interface.

Transports: `local.py` (subprocess), `ssh.py` (Fabric + paramiko, host keys in `hostkeys.py`)
and `slurm/` (srun from a login host).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Host
from orchestrator.errors import ExecutionError

POLL_SECONDS = 0.1  # how often a waiting run() checks `stop` and its deadline
EOF_GRACE_SECONDS = 1.0  # after exit status: how long to wait for a backgrounded child's output


@dataclass(frozen=True)
class RunResult:
    """What a finished command gave: exit code, whole stdout and stderr, wall seconds.

    `rc` is negative when a signal ended the program: -N locally (subprocess's convention),
    -1 over SSH (sshd reports `exit-signal`, which paramiko does not parse).
    """

    rc: int
    stdout: str
    stderr: str
    seconds: float


class CommandTimeout(ExecutionError):
    """A command ran past its timeout and was stopped; `result` holds its output so far."""

    def __init__(self, message: str, *, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


# A streamed command's RunResult.stdout keeps only its tail: its lines were handed over as they
# came, and a run's stdout carries every cell's archive (the whole of it would be kept twice).
STREAMED_TAIL_BYTES = 1 << 20
# The longest line handed over: the runner's lines are at most an archive chunk or a snapshot;
# a longer one (a broken or hostile host) is dropped and said, memory stays bounded.
MAX_LINE_BYTES = 16 << 20


class LineSplitter:
    """Collects a byte stream; hands each complete line (no newline) to a callback. Linear in
    the bytes fed, whatever the line lengths; memory bounded when a callback takes the lines."""

    def __init__(
        self, on_line: Callable[[str], None] | None, max_line: int = MAX_LINE_BYTES
    ) -> None:
        self.on_line = on_line
        self.max_line = max_line
        self.chunks: deque[bytes] = deque()
        self._kept = 0
        self._partial: list[bytes] = []
        self._partial_bytes = 0
        self._dropping = False
        self.dropped = 0  # lines past max_line, not handed over

    def feed(self, data: bytes) -> None:
        """Add bytes as they arrive; every line they complete goes to the callback now."""
        self._keep(data)
        if self.on_line is None:
            return
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                self._add(data[start:])
                return
            self._add(data[start:end])
            self._hand_over()
            start = end + 1

    def _keep(self, data: bytes) -> None:
        self.chunks.append(data)
        self._kept += len(data)
        if self.on_line is None:
            return  # not streamed: the caller wants the whole output
        while len(self.chunks) > 1 and self._kept - len(self.chunks[0]) >= STREAMED_TAIL_BYTES:
            self._kept -= len(self.chunks.popleft())

    def _add(self, piece: bytes) -> None:
        if not piece or self._dropping:
            return
        if self._partial_bytes + len(piece) > self.max_line:
            self._dropping = True
            self._partial, self._partial_bytes = [], 0
            return
        self._partial.append(piece)
        self._partial_bytes += len(piece)

    def _hand_over(self) -> None:
        assert self.on_line is not None
        if self._dropping:
            self._dropping = False
            self.dropped += 1
            self.on_line(f"orch: dropped a line longer than {self.max_line} bytes")
            return
        line = b"".join(self._partial)
        self._partial, self._partial_bytes = [], 0
        self.on_line(line.decode("utf-8", "replace"))

    def finish(self) -> str:
        """Hand over a last line without newline; return the output kept as text."""
        if self.on_line is not None and (self._partial or self._dropping):
            self._hand_over()
        return b"".join(self.chunks).decode("utf-8", "replace")


def relative_to_home(remote: str) -> str:
    """`~/x` and `x` both mean `x` under $HOME; absolute paths stay absolute."""
    if remote == "~":
        return "."
    if remote.startswith("~/"):
        return remote[2:]
    return remote


@dataclass
class SchedulerJob:
    """One command's scheduler job as last seen: name (ours), id, state, reason, node list."""

    name: str
    job_id: str | None = None
    state: str | None = None  # Slurm's squeue %T: PENDING, RUNNING, COMPLETED, ...
    reason: str | None = None  # why it waits or ended (Slurm's %r: Resources, ...)
    nodes: str | None = None  # the node list, e.g. node[1-2]

    @property
    def seen(self) -> tuple[str | None, str | None, str | None, str | None]:
        """(id, state, reason, nodes): what a watcher or the job's program told of it."""
        return self.job_id, self.state, self.reason, self.nodes

    def as_json(self) -> dict[str, str | None]:
        """For the bundle: run.json's host entry or a cell's outcome."""
        return {
            "job_id": self.job_id,
            "job_name": self.name,
            "state": self.state,
            "reason": self.reason,
            "nodes": self.nodes,
        }


class JobEnded(ExecutionError):
    """The scheduler ended the command's job (cancelled, time limit, node failure, preempted,
    out of memory, or never started in time); `result` holds its output."""

    def __init__(self, message: str, *, job: SchedulerJob, result: RunResult) -> None:
        super().__init__(message)
        self.job = job
        self.result = result


class Connection(ABC):
    """A way to run programs and move files on one host. Safe to use from several threads.

    One object serves a whole run: the controller runs many commands over it, several at once
    from different threads (a cell's runner while a probe or a transfer goes on), so `run`,
    `put` and `get` must not share per-call state unguarded. Errors are the orch family only:
    `ConnectionFailure` when the link to the host is gone (the caller may reconnect and resume),
    `ExecutionError` for everything that went wrong on the host side, `CommandTimeout` below.
    """

    host: Host
    host_key_verified: bool = True  # False only when host key checking was turned off

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
    ) -> RunResult:
        """Run `argv` (no shell; cwd $HOME) and wait for it to exit.

        `argv[0]` is found on the host's PATH; arguments reach the program byte for byte
        (a transport that goes through a shell quotes them). The program's stderr is kept
        apart from stdout.

        `stdin` is sent first; stdin is then closed, unless `keep_stdin_open`: then the program
        reads EOF only when `stop` is set, the connection is closed, or this process dies (the
        runner reads that EOF as "controller gone" and stops its cell).
        Setting `stop` closes stdin and keeps waiting for the exit, up to `timeout`.
        stdout lines go to `on_stdout_line` as they arrive (without their newline; a last line
        without newline is passed at exit), on the transport's reader thread, while the command
        runs; the result's `stdout` then holds the output's last MiB (without a callback, the
        whole of it). A line longer than 16 MiB is dropped, and a line saying so handed over.

        Returns when the program exited, whatever its exit code (`rc`, negative for a signal).

        Raises `CommandTimeout` (with the partial output) when `timeout` seconds pass: the
        command and every process it started are ended, TERM then KILL (locally its process
        group; over SSH every remote process carrying the command's token), before it raises.
        Raises `ConnectionFailure` when the connection is lost or closed while it runs, or was
        closed before; `ExecutionError` when the program cannot be started (through a remote
        shell that is rc 127 instead).
        """

    @abstractmethod
    def put(self, local: Path, remote: str) -> None:
        """Copy a local file to `remote` (relative to $HOME unless absolute), creating parent
        directories; atomic: written to a temporary name, then renamed. Keeps the file mode.

        Raises `ConnectionFailure` when the link is lost, `ExecutionError` for a remote
        failure (a local file that cannot be read surfaces as its own OSError)."""

    @abstractmethod
    def get(self, remote: str, local: Path) -> None:
        """Copy the file `remote` (relative to $HOME unless absolute) to `local`, creating
        parent directories; atomic on the local side.

        Raises `ConnectionFailure` when the link is lost, `ExecutionError` when the file is
        missing or unreadable (a local side that cannot be written raises its own OSError)."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection; commands still running see EOF on stdin, and `run` calls
        still waiting raise `ConnectionFailure` (at least those that get no exit status back).
        Idempotent; nothing is killed here: the runner ends its own cell on EOF."""

    # Hooks for a transport that runs commands through a scheduler (Slurm): the apply engine
    # calls these on every connection and never asks which transport it has; the defaults are
    # what a host reached directly needs, which is nothing.

    def watch_jobs(self, on_job: Callable[[Any], None]) -> None:
        """Tell `on_job` of every scheduler job this connection starts, as it changes."""
        return None  # no scheduler: no job to tell of

    def job_running(self, name: str, job_id: str, nodes: object = None) -> None:
        """The runner named the scheduler job it runs in (its `slurm_job` event)."""
        return None  # no scheduler: nothing to record

    def settle_earlier_jobs(
        self, recorded: Sequence[Mapping[str, Any]], say: Callable[[str], None]
    ) -> list[dict[str, Any]] | None:
        """End the jobs a dead controller left (recorded in run.json) before a resume starts
        its own; how each ended, or None when this transport has none to settle."""
        return None

    def runner_run(self, cells: Iterable[Cell]) -> Callable[..., RunResult]:
        """`run` for a host's runner whose queue holds `cells`."""
        return self.run

    def scheduler_jobs(self, since: int = 0) -> list[dict[str, str | None]]:
        """The scheduler jobs this connection's commands ran as (from the `since`-th on), ready
        for the bundle; [] without a scheduler."""
        return []

    def waiting_in_queue(self) -> bool:
        """True while a command waits for the scheduler to start it: no runner exists yet, so
        its silence is no sign of a lost host (the scheduler's own pending timeout applies)."""
        return False

    def node_workdir(self, workdir: str, rank: int) -> str:
        """Where the runner of node `rank` keeps its files when the nodes share this host."""
        return workdir

    def run_on_job_nodes(self, argv: Sequence[str], timeout: float) -> RunResult | None:
        """`argv` beside the runners of a job of several nodes, None when none runs here."""
        return None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
