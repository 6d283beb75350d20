"""`orch apply`: every cell on its host, hosts in parallel, cells of one host in sequence.

The controller never drives a host command by command: it ships the runner once per host and
starts it once per host with the host's whole queue of cells (host_queue.py); each finished
cell comes back in the same stream and is written at once. Cells of one commit run together, and
within it the cells of one server session (plan/sessions.py), so each server starts once. A
cell's or a host's failure is recorded and the others go on; Ctrl-C closes every runner's stdin,
which makes each stop its server and send the cell in flight.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.analyze.verdict import record_verdict, score_cell
from orchestrator.cell import Cell
from orchestrator.config.host import Host, Inventory
from orchestrator.errors import ConnectionFailure, ExecutionError, OrchError
from orchestrator.execute.apply.events import read_event
from orchestrator.execute.apply.host_queue import HostQueue
from orchestrator.execute.apply.interrupts import (
    raise_on_sigterm,
    restore_sigterm,
    signals_deferred,
)
from orchestrator.execute.apply.node_join import NodeJoin, joined_verdict, with_head_address
from orchestrator.execute.apply.outcomes import (
    ApplyOptions,
    CellOutcome,
    RunOutcome,
    stopped_outcome,
)
from orchestrator.execute.apply.pool import HostPool
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.apply.run_record import RunRecord
from orchestrator.execute.apply.runlock import acquire_run_lock
from orchestrator.execute.apply.staging import Staging
from orchestrator.execute.apply.stream import ARCHIVE_EVENTS, ArchiveStream
from orchestrator.execute.ship import runner_invocation
from orchestrator.execute.transport.base import SchedulerJob
from orchestrator.execute.transport.connect import Connection, connect
from orchestrator.plan.sessions import session_key
from orchestrator.results.archive import extract_archive
from orchestrator.results.bundle import BundleWriter
from orchestrator.results.documents import read_json
from orchestrator.results.layout import CELL_JSON, FACTS_JSON, HOSTS_DIR
from orchestrator.secrets.redact import redact_text, redact_tree
from orchestrator.secrets.values import scrub


class Run:
    """One `orch apply` in progress."""

    def __init__(
        self,
        *,
        playbook_name: str,
        playbook_files: Sequence[Path],
        playbook_dir: Path,
        inventory: Inventory,
        cells: Sequence[Cell],
        options: ApplyOptions,
        secrets: Sequence[str],
        progress: Progress | None = None,
        opener: Callable[..., Connection] = connect,
    ) -> None:
        self.playbook_name = playbook_name
        self.opener = opener  # connect(host, attempts=N); tests give a scripted transport
        self.inventory = inventory
        self.cells = list(cells)
        self.options = options
        self.stop = threading.Event()
        # Connections are spaced (reconnects too), not the hosts' starts: see _connect.
        self.pool = HostPool(max(1, options.max_parallel), options.connect_spacing)
        self._interrupted = False
        self.secrets = list(secrets)
        # One controller per run: a resume locks before the writer touches the bundle.
        resumed = options.results_dir / (options.run_id or "")
        lock = None
        if options.resume and options.run_id and resumed.is_dir():
            lock = acquire_run_lock(resumed)
        try:
            self.writer = BundleWriter(
                options.results_dir,
                options.run_id or "",
                new=not options.resume,
                playbook=playbook_name,
            )
            self.run_lock = lock or acquire_run_lock(self.writer.path)
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        self.run_id = self.writer.run_id
        self.outcomes: dict[str, CellOutcome] = {}
        self._lock = threading.Lock()
        self.run_record = RunRecord(
            writer=self.writer,
            playbook_name=playbook_name,
            playbook_files=playbook_files,
            playbook_dir=playbook_dir,
            inventory=inventory,
            cells=self.cells,
            options=options,
            secrets=self.secrets,
            outcomes=self.outcomes,
            lock=self._lock,
        )
        by_host: dict[str, int] = {}
        for c in self.cells:
            for name in c.hosts:  # a node of a multi-node cell counts its part
                by_host[name] = by_host.get(name, 0) + 1
        self._notes: dict[str, str] = {}  # notes on cells whose outcome is not in yet
        self._staging: Staging | None = None  # opened by execute(): archives arrive there
        self.nodes = NodeJoin(self.cells)
        self.progress = progress or Progress(by_host)
        self._conns: set[Connection] = set()

    # --- recording as it happens (run.json: execute/apply/run_record.py) -----------------------

    def _slurm_job(self, host_name: str, job: SchedulerJob) -> None:
        """A host's Slurm job changed (queued, running): show why it waits; record it at once."""
        if job.state == "PENDING":
            self.progress.host_step(host_name, f"Slurm job {job.job_id} PENDING ({job.reason})")
        self.run_record.slurm_job(host_name, job)

    def _settle_slurm_jobs(self, conn: Connection, host_name: str) -> None:
        """Slurm only: the jobs the interrupted run left for this host end before the resume
        starts one (execute/transport/slurm/settle.py); run.json says how each ended."""
        recorded = self.run_record.earlier_slurm_jobs(host_name)
        settled = conn.settle_earlier_jobs(
            recorded, lambda text: self.progress.host_step(host_name, text)
        )
        if settled is not None:
            self.run_record.settled_slurm_jobs(host_name, settled)

    def _record(self, outcome: CellOutcome) -> None:
        if outcome.reason:  # git/ssh errors can quote a URL or argv holding a secret
            outcome.reason = redact_text(outcome.reason, self.secrets)
        if self.nodes.is_part(outcome.cell_id):  # a node's part: its head's cell answers
            self.nodes.part_ended(outcome.cell_id, outcome)
            self.progress.cell_done(outcome.host, outcome.cell_id, outcome.status, outcome.reason)
            return
        if outcome.cell_id in self.nodes.heads:
            self.nodes.end_head(outcome.cell_id)
        with self._lock:
            outcome.note = outcome.note or self._notes.pop(outcome.cell_id, None)
            self.outcomes[outcome.cell_id] = outcome
        self.progress.cell_done(outcome.host, outcome.cell_id, outcome.status, outcome.reason)
        self.run_record.write("running")

    # --- running ------------------------------------------------------------------------

    @property
    def staging(self) -> Path:
        """Where archives arrive and cells are unpacked (this controller's staging folder)."""
        return self._staging.path if self._staging else Path(tempfile.gettempdir())

    def execute(self) -> RunOutcome:
        """Run every cell not finished yet; always leaves a consistent bundle behind."""
        try:
            self._staging = Staging.open()
            self.nodes.staging = self._staging.path
            return self._execute()
        finally:
            if self._staging is not None:
                self._staging.close()
            self.run_lock.release()
            self.nodes.close()

    def finished(self, cid: str) -> bool:
        """Whether the cell (or node part) `cid` has its outcome."""
        return cid in self.outcomes or self.nodes.part_finished(cid)

    def _execute(self) -> RunOutcome:
        self.run_record.write_start()
        done = self.writer.complete_cells() if self.options.resume else set()
        # --retry-failed: failed attempts move to retried/; the cells run again, not collected
        self.retrying = set[str]()
        if self.options.retry_failed:
            self.retrying = self.writer.set_aside_failed(c.id for c in self.cells)
            done -= self.retrying
        self.run_record.trust_cell_files(done)
        todo: dict[str, list[Cell]] = {}
        for cell in self.cells:
            if cell.id in done:
                continue
            todo.setdefault(cell.host, []).append(cell)
        for cells in todo.values():
            # One commit's cells together, commits in order of first appearance (matrix order),
            # and in a commit the cells of one server session together: one start each.
            first: dict[tuple[str, str, str], int] = {}
            for c in cells:
                first.setdefault(_checkout_key(c), len(first))
            sessions: dict[str, int] = {}
            for c in cells:
                sessions.setdefault(session_key(c), len(sessions))
            cells.sort(key=lambda c: (first[_checkout_key(c)], sessions[session_key(c)]))
        if self.nodes:  # each node's parts, in its head's order: the nodes meet at each cell
            heads = [c.id for cells in list(todo.values()) for c in cells if c.nodes]
            for name, parts in self.nodes.part_cells(heads).items():
                todo.setdefault(name, []).extend(parts)
        self.progress.plan(
            {host: _server_starts(cells) for host, cells in todo.items()},
            self.options.max_parallel,
        )
        status = "failed"
        previous_term = raise_on_sigterm()
        try:
            with self.progress:
                outcomes = self.pool.map(
                    [self.inventory.hosts[h] for h in todo],
                    lambda host: self._run_host(host, todo[host.name], done),
                    spaced=False,
                    on_interrupt=self._interrupt,
                )
            for outcome in outcomes.values():
                if outcome.error is not None:
                    raise outcome.error
            status = "passed" if self.run_record.all_passed() else "failed"
        finally:
            restore_sigterm(previous_term)
            # Another Ctrl-C here would leave run.json, the last redaction or the manifest
            # half-done; it is taken once the bundle is whole.
            with signals_deferred():
                if self.stop.is_set():
                    status = "interrupted"
                self.run_record.write(status)
                # Last sweep: playbook copies, facts and logs alike never keep a secret value.
                redact_tree(self.writer.path, self.secrets)
                self.writer.finalize()
        if self._interrupted:
            raise KeyboardInterrupt
        return RunOutcome(self.run_id, self.writer.path, status, self.run_record.all_outcomes())

    def _interrupt(self) -> None:
        """First Ctrl-C: every runner's stdin is closed; each stops its server and archives its
        cell, which we still fetch. Again: drop the connections too (the runners clean up all
        the same) and stop waiting for archives."""
        if self._interrupted:
            self._close_all()
        self._interrupted = True
        self.stop.set()

    def _close_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()

    def _connect(self, host: Host) -> Connection:
        self.pool.spacing.wait()
        conn = self.opener(host, attempts=self.options.connect_attempts)
        name = host.name
        conn.watch_jobs(lambda job: self._slurm_job(name, job))
        with self._lock:
            self._conns.add(conn)
        return conn

    def _run_host(self, host: Host, cells: list[Cell], done: set[str]) -> None:
        if self.stop.is_set():  # waited for a pool slot until after Ctrl-C
            for cell in cells:
                self._record(CellOutcome(cell.id, host.name, "not-run", "interrupted"))
            return
        self.progress.host_step(host.name, "connecting")
        try:
            conn = self._connect(host)
        except ConnectionFailure as exc:
            for cell in cells:
                self._record(CellOutcome(cell.id, host.name, "failed", str(exc), "connect"))
            return
        try:
            facts_rel = f"{HOSTS_DIR}/{host.name}/{FACTS_JSON}"
            want_facts = not (self.options.resume and self.writer.exists(facts_rel))
            if self.options.resume:
                self._settle_slurm_jobs(conn, host.name)
                self._collect(conn, cells, done)
            pending = [c for c in cells if c.id not in done]
            while pending:
                if self.stop.is_set():
                    for cell in pending:
                        self._record(CellOutcome(cell.id, host.name, "not-run", "interrupted"))
                    break
                self.progress.host_step(host.name, "running")
                queue = HostQueue(self, conn, pending, facts=want_facts)
                lost = queue.run()
                if queue.facts is not None:
                    self.write_facts(host.name, queue.facts, conn)
                    want_facts = False
                pending = [c for c in pending if not self.finished(c.id)]
                if not lost or not pending or not queue.progressed:
                    queue.fail_rest(pending)
                    break
                # lost mid-queue (network, sshd restart): one fresh connection, the same runner
                conn.close()
                self.progress.host_step(host.name, "reconnecting")
                conn = self._connect(host)
            if want_facts:
                self.write_facts(host.name, {"absent": "the runner sent no facts"}, conn)
        except OrchError as exc:
            lost = isinstance(exc, ConnectionFailure)
            step = "connect" if lost else "host"
            for cell in cells:
                if cell.id not in self.outcomes and cell.id not in done:
                    if lost and self.stop.is_set():
                        self._record(stopped_outcome(cell.id, host.name, str(exc)))
                    else:
                        self._record(CellOutcome(cell.id, host.name, "failed", str(exc), step))
        finally:
            conn.close()

    def write_facts(self, host_name: str, facts: dict[str, Any], conn: Connection) -> None:
        """hosts/<host>/facts.json: the host snapshot the runner took beside the first cell."""
        facts["host_key_verified"] = conn.host_key_verified
        rel = f"{HOSTS_DIR}/{host_name}/{FACTS_JSON}"
        self.writer.write_json(rel, scrub(facts, self.secrets))

    def note(self, cid: str, text: str) -> None:
        """Something learnt about cell `cid` after it ended, kept in its run.json entry."""
        text = redact_text(text, self.secrets)
        with self._lock:
            if cid in self.outcomes:
                self.outcomes[cid].note = text
            else:
                self._notes[cid] = text
        self.run_record.write("running")

    def record(self, outcome: CellOutcome) -> None:
        """Record one cell's outcome (HostQueue reports through this)."""
        self._record(outcome)

    def _collect(self, conn: Connection, cells: list[Cell], done: set[str]) -> None:
        """Import cells a runner finished after the previous controller died (streamed)."""
        self.progress.host_step(conn.host.name, "collecting finished cells")
        argv, shipped = runner_invocation(
            conn.host, "collect", self.run_id, "--workdir", conn.host.workdir, "--stream"
        )
        wanted = {c.id: c for c in cells}
        items: dict[str, dict[str, Any]] = {}
        with tempfile.TemporaryDirectory(prefix="collect-", dir=self.staging) as tmp:
            stream = ArchiveStream(Path(tmp))

            def on_line(line: str) -> None:
                event, _problem = read_event(line)
                if event is None:
                    return  # noise: a collect has no cell to blame it on
                if event.get("event") not in ARCHIVE_EVENTS:
                    if "cell_id" in event:
                        items[str(event["cell_id"])] = event
                    return
                got = stream.feed(event)
                if got is None:
                    return
                cid, archive = got
                status = items.get(cid, {}).get("status")
                wanted_now = cid in wanted and cid not in done and status != "interrupted"
                wanted_now = wanted_now and cid not in self.retrying
                # A multi-node cell is whole only with every node's part: it runs again.
                wanted_now = wanted_now and not (cid in self.nodes.heads or self.nodes.is_part(cid))
                if wanted_now and isinstance(archive, Path):
                    self._record(self.import_archive(conn.host.name, wanted[cid], archive, 0))
                    done.add(cid)

            res = conn.run(argv, stdin=shipped, timeout=600, on_stdout_line=on_line)
            if res.rc != 0:
                raise ExecutionError(
                    f"{conn.host.name}: cannot collect finished cells (rc {res.rc}): "
                    f"{res.stderr.strip()[-300:]}",
                    hint="set python / ansible_python_interpreter for this host in the inventory"
                    if res.rc == 127
                    else None,
                )
            stream.close()

    def import_archive(
        self, host_name: str, cell: Cell, local: Path, seconds: float
    ) -> CellOutcome:
        """Score a cell's archive and install it in the bundle; the cell's outcome."""
        with tempfile.TemporaryDirectory(prefix="cell-", dir=self.staging) as tmp:
            staged = Path(tmp) / "cell"
            extract_archive(local, staged)
            _check_identity(staged, cell, host_name)
            # The host redacted its captures (server_info): compare what it reported with the
            # declared cell redacted the same way, as `orch report`/`audit` read them later.
            nodes = self.nodes.join(cell, staged) if cell.nodes else None
            hosts = self.inventory.hosts
            prices = {h: hosts[h].gpu_hour_usd for h in cell.hosts if h in hosts}
            verdict = score_cell(
                staged, with_head_address(self.run_record.recorded_cell(cell), staged), prices
            )
            if nodes is not None:
                verdict.status, verdict.reason, verdict.failed_step = joined_verdict(
                    verdict.status,
                    verdict.reason,
                    verdict.failed_step,
                    nodes,
                    self.nodes.aborted.get(cell.id),
                )
            cell_json = read_json(staged / CELL_JSON, required=True)
            record_verdict(staged, verdict)
            self.writer.add_cell_dir(cell.id, staged, self.secrets)
            shutil.rmtree(staged, ignore_errors=True)
        return CellOutcome(
            cell.id,
            host_name,
            verdict.status,
            verdict.reason,
            verdict.failed_step
            or (cell_json.get("failed_step") if isinstance(cell_json, dict) else None),
            round(seconds, 3),
        )


def _check_identity(staged: Path, cell: Cell, host_name: str) -> None:
    """The controller owns a cell's identity: an archive whose cell.json names another cell or
    host (a broken or hostile runner) is refused, never filed under what it claims."""
    doc = read_json(staged / CELL_JSON, required=True)
    said = doc.get("cell") if isinstance(doc, dict) else None
    said = said if isinstance(said, dict) else {}
    claimed = (said.get("id"), said.get("host"))
    if claimed != (cell.id, cell.host):
        raise ExecutionError(
            f"the archive says it holds cell {claimed[0]!r} of host {claimed[1]!r}, not "
            f"{cell.id!r} of {cell.host!r}: refused"
        )


def _server_starts(cells: Sequence[Cell]) -> list[tuple[str, bool]]:
    """Each cell of a host's queue, in order, with whether it starts a server (the first of
    its session): what the ETA costs apart."""
    out, previous = [], None
    for cell in cells:
        key = session_key(cell) if cell.server is not None else None
        out.append((cell.id, key is not None and key != previous))
        previous = key
    return out


def _checkout_key(cell: Cell) -> tuple[str, str, str]:
    """Cells of one repo and commit run together: fewer checkouts and setups on a host."""
    if cell.repo is None:
        return ("", "", "")
    return (cell.repo.url, cell.repo.dest, cell.repo.version)
