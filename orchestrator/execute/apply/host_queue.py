"""One remote invocation per host: the host's queue of cells sent to one runner, its events and
finished archives read back from the same stream, each cell written as it arrives.

A lost link loses at most the cell in flight (failed, step `connection`); the caller reconnects
and sends the cells still pending. Ctrl-C closes the runner's stdin: it stops the cell in flight,
archives and sends it, and starts no other.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator.adapters import server_adapter
from orchestrator.cell import Cell
from orchestrator.errors import OrchError
from orchestrator.execute.apply.blame import (
    RunnerExit,
    done_without_archive,
    invocation_broken,
    never_answered,
    unanswered,
)
from orchestrator.execute.apply.events import read_event
from orchestrator.execute.apply.node_join import NodeJoin
from orchestrator.execute.apply.outcomes import STOPPED, ApplyOptions, CellOutcome
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.apply.stream import ARCHIVE_EVENTS, ArchiveStream
from orchestrator.execute.ship import runner_invocation
from orchestrator.execute.transport.connect import Connection
from orchestrator.plan.sessions import session_key
from orchestrator.runner.protocol import SCHEMA_VERSION
from orchestrator.secrets.values import scrub


class RunPort(Protocol):
    """What a host's queue needs of its run (execute/apply/run.py's Run): the options, the
    multi-node join, the secrets to scrub, the outcomes so far, and where outcomes go."""

    @property
    def options(self) -> ApplyOptions: ...
    @property
    def nodes(self) -> NodeJoin: ...
    @property
    def run_id(self) -> str: ...
    @property
    def secrets(self) -> Sequence[str]: ...
    @property
    def retrying(self) -> set[str]: ...
    @property
    def outcomes(self) -> dict[str, CellOutcome]: ...
    @property
    def progress(self) -> Progress: ...
    @property
    def stop(self) -> threading.Event: ...
    @property
    def staging(self) -> Path:
        """Where archives arrive (the controller's staging folder)."""

    def note(self, cid: str, text: str) -> None:
        """Something learnt about cell `cid` after it ended (kept in its run.json entry)."""

    def finished(self, cid: str) -> bool:
        """Whether the cell (or node part) `cid` has its outcome."""

    def record(self, outcome: CellOutcome) -> None:
        """Record a cell's outcome in the run (bundle, progress, run.json)."""

    def import_archive(
        self, host_name: str, cell: Cell, local: Path, seconds: float
    ) -> CellOutcome:
        """Score a cell's archive and install it in the bundle; the cell's outcome."""


class HostQueue:
    """The cells still to run on one host, sent to one runner invocation."""

    def __init__(self, run: RunPort, conn: Connection, cells: list[Cell], *, facts: bool) -> None:
        self.run_ = run
        self.conn = conn
        self.cells = {c.id: c for c in cells}
        self.order = [c.id for c in cells]
        self.want_facts = facts
        self.facts: dict[str, Any] | None = None
        self.progressed = False  # at least one cell got an outcome from this invocation
        self.current: str | None = None  # the cell whose events came last
        self.done: dict[str, dict[str, Any]] = {}
        self.started: dict[str, float] = {}
        self.noise: list[str] = []
        self.silence_limit = max(1.0, float(run.options.silent_host_timeout))
        # Heartbeats well inside the limit: one lost or late line never counts as silence.
        self.heartbeat = max(0.5, min(10.0, self.silence_limit / 4))
        self.last_seen = time.monotonic()
        self.busy = False  # reading a line (importing an archive can take a while)
        self.silent = False
        self.ended = threading.Event()  # run() has returned: later lines are ignored
        self.invocation = (
            run.nodes.invocation()
        )  # end requests name it (execute/apply/node_join.py)

    def payload(self) -> dict[str, Any]:
        """The runner's stdin line: every cell with its session key and the reset between."""
        queue = []
        for cid in self.order:
            cell = self.cells[cid]
            item: dict[str, Any] = {
                "cell": cell.model_dump(mode="json"),
                "session": session_key(cell),
            }
            if cell.server is not None:
                url = server_adapter(cell.server.adapter).reset_url(cell.server)
                if url:
                    item["reset"] = {"url": url}
            queue.append(item)
        payload: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_.run_id,
            "workdir": self.conn.host.workdir,
            "queue": queue,
            "stream": True,
            "heartbeat": self.heartbeat,
            "invocation": self.invocation,
            # Values secret by name or listing, not only env: the runner scrubs them on the host.
            "secret_values": self.run_.secrets,
        }
        if self.want_facts:  # as much as the host's cells record (the playbook's `snapshot:`)
            cells = self.cells.values()
            payload["facts"] = {
                "pip_freeze": any(c.snapshot.pip_freeze for c in cells),
                "topo": any(c.snapshot.topo for c in cells),
            }
        if self.run_.retrying:  # the runner reruns these instead of reusing its failed copy
            payload["rerun_failed"] = sorted(self.run_.retrying)
        # The nodes of a server meet at each cell: none may reuse a copy another did not keep.
        together = [
            c for c in self.order if c in self.run_.nodes.heads or self.run_.nodes.is_part(c)
        ]
        if together:
            payload["rerun"] = together
        return payload

    def _outcome(self, outcome: CellOutcome) -> None:
        if self.run_.finished(outcome.cell_id):
            return
        self.progressed = True
        jobs = self.conn.scheduler_jobs()
        if jobs:  # the queue's own job: the last one the connection started
            outcome.slurm_job = jobs[-1]["job_id"]
        self.run_.record(outcome)

    def _seconds(self, cid: str) -> float:
        return round(time.monotonic() - self.started.get(cid, time.monotonic()), 3)

    def on_line(self, line: str, stream: ArchiveStream) -> None:
        """One stdout line of the runner: an event, a piece of an archive, or noise."""
        if self.ended.is_set():
            return  # a line after the invocation was given up (a thawed runner) changes nothing
        self.busy = True
        try:
            self._on_line(line, stream)
        finally:
            self.last_seen = time.monotonic()
            self.busy = False

    def _on_line(self, line: str, stream: ArchiveStream) -> None:
        event, problem = read_event(line)
        if event is None:
            self.noise.append(line if problem is None else f"{line[:300]} (ignored: {problem})")
            return
        kind = event.get("event")
        host = self.conn.host.name
        if kind == "heartbeat":
            return
        if kind == "facts":
            data = event.get("data")
            self.facts = data if isinstance(data, dict) else {"absent": "facts not an object"}
            return
        if kind == "task_end":  # a runner of a multi-node Slurm job ended (slurm/tasks.py)
            self._task_ended(event)
            return
        if kind == "slurm_job":  # the runner's job, named before its first cell starts
            self.conn.job_running(
                str(event.get("name") or ""), str(event.get("job_id") or ""), event.get("nodes")
            )
            return
        cid = str(event.get("cell") or "")
        if cid not in self.cells:
            return
        if kind == "note":  # about a cell that already ended: never its outcome
            self.run_.note(cid, str(event.get("note") or ""))
            return
        if kind in ARCHIVE_EVENTS:
            got = stream.feed(event)
            if got is not None:
                self._archived(*got)
            return
        self.current = cid
        self.started.setdefault(cid, time.monotonic())
        if self.run_.nodes:
            self.run_.nodes.on_event(cid, event)
        if kind == "done":
            self.done[cid] = event
            if not event.get("archive"):
                self._outcome(done_without_archive(host, cid, event, self._seconds(cid)))
        self.run_.progress.cell_event(host, cid, scrub(event, self.run_.secrets))

    def _task_ended(self, event: dict[str, Any]) -> None:
        """A runner of a multi-node job ended badly: the cells of its rank it never answered for
        fail now, so the other nodes are released (or their head aborted) at once; srun runs on
        until every task has ended, and a part would otherwise hold until its cell timeout."""
        rc, rank = event.get("rc"), event.get("rank")
        if rc == 0 or self.run_.stop.is_set():
            return  # it answered for its cells, or stopped as asked: fail_rest says the rest
        node = event.get("node") or "?"
        reason = f"the runner on node {node} (rank {rank}) ended without a result (rc {rc})"
        for cid in self.order:
            cell = self.cells[cid]
            if (cell.node.rank if cell.node else 0) != rank or self.run_.finished(cid):
                continue
            host = self.conn.host.name
            seconds = self._seconds(cid)
            self._outcome(
                unanswered(host, cid, reason, said_done=cid in self.done, seconds=seconds)
            )

    def _archived(self, cid: str, archive: Path | str) -> None:
        cell = self.cells[cid]
        host = self.conn.host.name
        if isinstance(archive, str):
            self._outcome(CellOutcome(cid, host, "failed", archive, "collect", self._seconds(cid)))
            return
        if self.run_.nodes.is_part(cid):  # joined into its head's cell folder there
            self.progressed = True
            self.run_.nodes.part_archived(cid, archive)
            self.run_.progress.cell_done(host, cid, str(self.done.get(cid, {}).get("status")), None)
            return
        try:
            outcome = self.run_.import_archive(host, cell, archive, self._seconds(cid))
        except (OrchError, OSError, ValueError) as exc:
            reason = f"cannot import the cell's results: {exc}"
            outcome = CellOutcome(cid, host, "failed", reason, "collect", self._seconds(cid))
        finally:
            archive.unlink(missing_ok=True)
        if outcome.status == "interrupted" and self.run_.stop.is_set():
            outcome.reason = f"{STOPPED}; the server was stopped"
        self._outcome(outcome)

    def run(self) -> bool:
        """Send the queue and read it back; True when the connection was lost midway."""
        host = self.conn.host
        timeout = sum(c.cell_timeout for c in self.cells.values()) + 600
        ended = self.ended
        threading.Thread(target=self._watch, args=(ended,), daemon=True).start()
        argv, shipped = runner_invocation(host, "run")
        self.run_.nodes.attach(self.conn, self.invocation, self.run_.run_id)
        with tempfile.TemporaryDirectory(prefix="stream-", dir=self.run_.staging) as tmp:
            stream = ArchiveStream(Path(tmp))
            run = self.conn.runner_run(self.cells.values())
            try:
                res = run(
                    argv,
                    stdin=shipped + (json.dumps(self.payload()) + "\n").encode(),
                    keep_stdin_open=True,
                    timeout=timeout,
                    on_stdout_line=lambda line: self.on_line(line, stream),
                    stop=self.run_.stop,
                )
            except OrchError as exc:
                stream.close()
                return self._broken(exc)
            finally:
                ended.set()
            stream.close()
        self.rc, self.stderr = res.rc, res.stderr
        return False

    def _watch(self, ended: threading.Event) -> None:
        """Close the connection when the runner has been silent past the limit."""
        while not ended.wait(min(1.0, self.heartbeat)):
            if self.conn.waiting_in_queue():  # no runner yet: waiting is not silence
                self.last_seen = time.monotonic()
                continue
            if not self.busy and time.monotonic() - self.last_seen > self.silence_limit:
                self.silent = True
                self.conn.close()  # the blocked run() raises ConnectionFailure at once
                return

    def silence(self) -> str:
        """Why a silent host was given up."""
        return (
            f"the host went silent: nothing from its runner for {self.silence_limit:g} s "
            f"(it sends a heartbeat every {self.heartbeat:g} s); the link or the host is down "
            "(--silent-host-timeout sets the limit)"
        )

    def _broken(self, exc: OrchError) -> bool:
        """The invocation ended without its last word: fail the cell in flight (blame.py)."""
        stopping = self.run_.stop.is_set()
        if not (self.silent and not stopping):
            self.broken = exc
        decided = invocation_broken(
            self.conn.host.name,
            exc,
            in_flight=self.current if self.current not in self.run_.outcomes else None,
            last=self.run_.outcomes.get(self.current or ""),
            silent=self.silent,
            stopping=stopping,
            silence=self.silence(),
        )
        if decided.amended is not None:
            self.run_.record(decided.amended)
        if decided.in_flight is not None:
            self._outcome(decided.in_flight)
        return decided.reconnect

    rc: int | None = None
    stderr = ""
    broken: OrchError | None = None  # why the invocation ended early, if it did

    def fail_rest(self, pending: list[Cell]) -> None:
        """Cells the invocation never answered for: not run after Ctrl-C, else failed."""
        host = self.conn.host.name
        end = RunnerExit(
            stopping=self.run_.stop.is_set(),
            silent=self.silence() if self.silent else None,
            broken=self.broken,
            rc=self.rc,
            tail=(self.stderr.strip() or "\n".join(self.noise))[-1500:],
            python=self.conn.host.python,
        )
        for cell in pending:
            if not self.run_.finished(cell.id):
                said_done = cell.id in self.done
                self.run_.record(never_answered(host, cell.id, end, said_done=said_done))
