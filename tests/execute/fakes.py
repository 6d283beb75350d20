"""A transport that plays a runner from a script, and a run that only keeps what it is told:
the apply engine's rules tested in milliseconds, without a process, a socket or a bundle.

`ScriptedConnection` implements the real `Connection` interface (nothing of Fabric or paramiko
is involved: no transport is mocked, this is a transport of its own); each `run()` call plays
the next script: runner output lines fed to `on_stdout_line` in order, then an exit status, an
error, or a hang until the connection is closed (a silent host).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.cell import BenchSpec, Cell
from orchestrator.config.host import Host
from orchestrator.errors import ConnectionFailure
from orchestrator.execute.apply.node_join import NodeJoin
from orchestrator.execute.apply.outcomes import ApplyOptions, CellOutcome
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.ship import runner_archive
from orchestrator.execute.transport.base import Connection, RunResult

Line = str | dict[str, Any] | Callable[[], None]


@dataclass
class Script:
    """One invocation of the runner: its lines, then how it ends."""

    lines: Sequence[Line] = ()
    rc: int = 0
    stderr: str = ""
    raises: BaseException | None = None  # raised after the lines (a lost link, a job ended)
    hang: bool = False  # after the lines, nothing more until the connection is closed


class ScriptedConnection(Connection):
    """A host whose runner says what the scripts say, one script per `run()`."""

    def __init__(self, host: Host, *scripts: Script, jobs: Sequence[str] = ()) -> None:
        self.host = host
        self.scripts = list(scripts)
        self.calls: list[tuple[list[str], bytes | None]] = []
        self.closed = threading.Event()
        self.jobs = list(jobs)
        self.running: list[tuple[str, str]] = []
        self.waiting = False  # as a scheduler's pending job: waiting_in_queue()

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
        """Play the next script into `on_stdout_line`."""
        self.calls.append((list(argv), stdin))
        script = self.scripts.pop(0)
        out = []
        for line in script.lines:
            if self.closed.is_set():
                raise ConnectionFailure(f"{self.host.name}: the connection was closed")
            if callable(line):
                line()
                continue
            text = line if isinstance(line, str) else json.dumps(line)
            out.append(text)
            if on_stdout_line is not None:
                on_stdout_line(text)
        if script.hang:
            self.closed.wait(30)
            raise ConnectionFailure(f"{self.host.name}: the connection was closed")
        if script.raises is not None:
            raise script.raises
        return RunResult(script.rc, "\n".join(out), script.stderr, 0.0)

    def payload(self, call: int = 0) -> dict[str, Any]:
        """The queue the `call`-th invocation sent its runner (stdin after runner.pyz)."""
        stdin = self.calls[call][1] or b""
        shipped = runner_archive()
        assert stdin.startswith(shipped)  # runner.pyz first, for a host that lacks it
        payload: dict[str, Any] = json.loads(stdin[len(shipped) :])
        return payload

    def put(self, local: Path, remote: str) -> None:
        raise AssertionError("the apply engine streams archives; it puts nothing")

    def get(self, remote: str, local: Path) -> None:
        raise AssertionError("the apply engine streams archives; it gets nothing")

    def close(self) -> None:
        self.closed.set()

    def scheduler_jobs(self, since: int = 0) -> list[dict[str, str | None]]:
        return [{"job_id": job} for job in self.jobs[since:]]

    def waiting_in_queue(self) -> bool:
        return self.waiting

    def job_running(self, name: str, job_id: str, nodes: object = None) -> None:
        self.running.append((name, job_id))


def host(name: str = "gpu01") -> Host:
    """A host as the inventory resolves it."""
    return Host(name=name, vars={}, groups=(), connection="local")


def cell(cid: str, host_name: str = "gpu01", **fields: Any) -> Cell:
    """A bench-only cell on `host_name`."""
    return Cell(
        id=cid,
        playbook="p",
        host=host_name,
        axes={},
        bench=BenchSpec(argv=("true",)),
        **fields,
    )


def event(cid: str, kind: str, **fields: Any) -> dict[str, Any]:
    """A runner event line about cell `cid`."""
    return {"event": kind, "cell": cid, **fields}


def archived(cid: str, data: bytes = b"cell archive", status: str = "passed") -> list[Line]:
    """A cell's `done` and its archive streamed as the runner sends them."""
    digest = hashlib.sha256(data).hexdigest()
    return [
        event(cid, "done", status=status, archive=f"{cid}.tar.gz"),
        event(cid, "archive", bytes=len(data)),
        event(cid, "archive_data", data=base64.b64encode(data).decode()),
        event(cid, "archive_end", sha256=digest),
    ]


@dataclass
class FakeRun:
    """A run as a host queue sees it (`RunPort`): outcomes kept in a dict, archives read back
    as bytes instead of being scored into a bundle."""

    cells: list[Cell]
    options: ApplyOptions = field(default_factory=ApplyOptions)
    run_id: str = "run-1"
    secrets: list[str] = field(default_factory=list)
    retrying: set[str] = field(default_factory=set)
    outcomes: dict[str, CellOutcome] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    imported: dict[str, bytes] = field(default_factory=dict)
    import_fails: str | None = None  # an import raises ValueError with this text
    shown: io.StringIO = field(default_factory=io.StringIO)
    staging: Path = field(default_factory=lambda: Path(tempfile.gettempdir()))
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nodes = NodeJoin(self.cells)
        hosts: dict[str, int] = {}
        for c in self.cells:
            hosts[c.host] = hosts.get(c.host, 0) + 1
        self.progress = Progress(hosts, stream=self.shown)

    def finished(self, cid: str) -> bool:
        return cid in self.outcomes or self.nodes.part_finished(cid)

    def note(self, cid: str, text: str) -> None:
        self.notes[cid] = text

    def record(self, outcome: CellOutcome) -> None:
        self.outcomes[outcome.cell_id] = outcome

    def import_archive(
        self, host_name: str, cell: Cell, local: Path, seconds: float
    ) -> CellOutcome:
        if self.import_fails is not None:
            raise ValueError(self.import_fails)
        self.imported[cell.id] = local.read_bytes()
        return CellOutcome(cell.id, host_name, "passed", seconds=seconds)

    def reasons(self, ids: Iterable[str] | None = None) -> dict[str, tuple[str, str | None]]:
        """cell id -> (status, failed step) of every outcome (or those of `ids`)."""
        wanted = self.outcomes if ids is None else {i: self.outcomes[i] for i in ids}
        return {i: (o.status, o.failed_step) for i, o in wanted.items()}
