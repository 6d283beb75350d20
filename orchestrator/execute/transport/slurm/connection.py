"""The Slurm transport: every command is its own Slurm job, launched by `srun` on a login host.

`SlurmConnection`, the `Connection` connect.py opens for it; its contract: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import secrets
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.cell import Cell
from orchestrator.config.host import Host, SlurmOptions
from orchestrator.errors import ExecutionError, OrchError
from orchestrator.execute.transport.base import (
    CommandTimeout,
    Connection,
    JobEnded,
    RunResult,
    SchedulerJob,
)
from orchestrator.execute.transport.local import LocalConnection
from orchestrator.execute.transport.slurm.settle import settle_earlier_jobs
from orchestrator.execute.transport.slurm.states import ALIVE_STATES, WAITING_STATES, SqueueRow
from orchestrator.execute.transport.slurm.tasks import (
    TaskLines,
    queue_nodes,
    run_in_job,
    task_argv,
    task_options,
)
from orchestrator.runner.slurm_tasks import node_workdir

__all__ = [
    "ALIVE_STATES",
    "WAITING_STATES",
    "SchedulerJob",
    "SlurmConnection",
    "SlurmJobEnded",
    "SlurmOptions",
    "SqueueRow",
    "srun_options",
]

# srun's own first words when Slurm will not run the job at all (it never started)
_REFUSED = ("srun: error: Unable to allocate resources", "srun: error: Invalid ")
# after a timeout's scancel: how long srun may take to see its job end (Slurm's KillWait, 30 s
# by default, lies between the TERM and the KILL)
_CANCEL_GRACE_SECONDS = 60.0
_POLL_SECONDS = 0.5  # squeue while a cancelled job completes; the watcher's first pause
_STOP_CHECK_SECONDS = 0.25  # how soon a waiting job's watcher sees a stop
_WATCH_MAX_SECONDS = 5.0  # the watcher's longest pause between two squeue while a job waits
# job states in which Slurm, not the program, ended the job: the reason a cell gets
_ENDED_BY_SLURM = {
    "CANCELLED": "cancelled (scancel, an admin, or Slurm itself)",
    "TIMEOUT": "hit its Slurm time limit (slurm_time)",
    "NODE_FAIL": "a node of the job failed",
    "PREEMPTED": "preempted by a higher-priority job",
    "OUT_OF_MEMORY": "ran out of memory",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "missed its deadline",
}


def srun_options(
    options: SlurmOptions, job_name: str, timeout: float | None, *, tasks: int = 1
) -> list[str]:
    """srun's options for one command's job (its name, its allocation, one task a node);
    `tasks` > 1: a runner on each of that many nodes, its output labelled (slurm_nodes.py)."""
    if tasks > 1:
        srun = [f"--job-name={job_name}", *task_options(tasks)]
    else:
        srun = [f"--job-name={job_name}", f"--nodes={options.nodes}", "--ntasks-per-node=1"]
    for flag, value in (
        ("partition", options.partition),
        ("account", options.account),
        ("qos", options.qos),
        ("gres", options.gres),
    ):
        if value:
            srun.append(f"--{flag}={value}")
    if options.time:
        srun.append(f"--time={options.time}")
    elif timeout is not None:  # Slurm's limit backs ours up, should orch die mid-command
        srun.append(f"--time={math.ceil(timeout / 60) + 1}")
    if options.pending_timeout:  # Slurm itself gives up a job still PENDING by then
        srun.append(f"--immediate={max(1, math.ceil(options.pending_timeout))}")
    if options.nodes > 1 and tasks <= 1:
        srun.append("--kill-on-bad-exit=1")  # one node failing ends the others
    # (not for one runner a node: a node whose part failed still sends its results, and the
    # head still archives its cell; the controller aborts the head instead)
    return [*srun, *options.extra]


class SlurmJobEnded(JobEnded):
    """Slurm ended the command's job (or it never started within `slurm_pending_timeout`)."""


class SlurmConnection(Connection):
    """Runs each command as a Slurm job through `srun` on a login connection it owns.

    `jobs` lists every command's job in start order; a watcher fills in its id, state, reason
    and nodes while it waits and starts (`on_job` hears every change, e.g. for a progress view
    or to record the job id before the command ends).
    """

    def __init__(
        self,
        login: Connection,
        options: SlurmOptions,
        *,
        host: Host | None = None,
        job_prefix: str = "orch",
        on_job: Callable[[SchedulerJob], None] | None = None,
    ) -> None:
        self.login = login
        self.options = options
        self.host = host or login.host
        self.host_key_verified = login.host_key_verified
        self.job_prefix = job_prefix
        self.on_job = on_job
        self.job_names: list[str] = []  # one per command, in start order
        self._jobs: list[SchedulerJob] = []
        self._spanning: dict[str, int] = {}  # job name -> nodes, while a runner a node runs
        self._lock = threading.Lock()

    @property
    def jobs(self) -> list[SchedulerJob]:
        """Copies of every command's job as last seen, in start order."""
        with self._lock:
            return [replace(job) for job in self._jobs]

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        keep_stdin_open: bool = False,
        timeout: float | None = None,
        on_stdout_line: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        tasks: int = 1,
    ) -> RunResult:
        """See `Connection.run`: the command runs as one Slurm job, started by `srun`.

        The time spent waiting for the allocation counts against `timeout`. Raises
        `ExecutionError` when Slurm refuses the job, `SlurmJobEnded` when Slurm ended it (or
        it stayed PENDING past `slurm_pending_timeout`). `tasks` > 1: the runner `argv` runs
        on that many nodes of the job, each task's lines handed on whole (slurm_nodes.py).
        """
        job = SchedulerJob(f"{self.job_prefix}-{secrets.token_hex(6)}")
        with self._lock:
            self.job_names.append(job.name)
            self._jobs.append(job)
        lines = TaskLines(on_stdout_line) if tasks > 1 else None
        command = list(argv)
        if lines is not None:
            command = task_argv(argv, tasks)
            on_stdout_line = lines.feed
            with self._lock:
                self._spanning[job.name] = tasks
        srun = [*self.srun_command(), *srun_options(self.options, job.name, timeout, tasks=tasks)]
        srun += ["--", *command]
        try:
            result = self._run_job(job, argv, srun, stdin, keep_stdin_open, timeout,
                                   on_stdout_line, stop)  # fmt: skip
        finally:
            if lines is not None:
                lines.close()
                with self._lock:
                    self._spanning.pop(job.name, None)
        if lines is None:
            return result
        if lines.error is not None:
            raise lines.error
        return replace(result, stdout=lines.stdout())

    def _run_job(
        self,
        job: SchedulerJob,
        argv: Sequence[str],
        srun: list[str],
        stdin: bytes | None,
        keep_stdin_open: bool,
        timeout: float | None,
        on_stdout_line: Callable[[str], None] | None,
        stop: threading.Event | None,
    ) -> RunResult:
        cancelled = threading.Event()
        finished = threading.Event()

        def cancel_at_deadline() -> None:
            cancelled.set()
            self.cancel(job.name)

        timer = None if timeout is None else threading.Timer(timeout, cancel_at_deadline)
        if timer is not None:
            timer.daemon = True
            timer.start()
        watcher = threading.Thread(target=self._watch, args=(job, finished, stop), daemon=True)
        watcher.start()
        try:
            result = self.login.run(
                srun,
                stdin=stdin,
                keep_stdin_open=keep_stdin_open,
                # srun ends when its job is cancelled; the login side's limit is the fallback
                timeout=None if timeout is None else timeout + _CANCEL_GRACE_SECONDS,
                on_stdout_line=on_stdout_line,
                stop=stop,
            )
        except CommandTimeout as exc:
            self.cancel(job.name)
            self.wait_ended(job.name)
            raise self._timed_out(argv, job, timeout, exc.result) from exc
        finally:
            finished.set()
            if timer is not None:
                timer.cancel()
        watcher.join(timeout=_POLL_SECONDS * 4)
        if cancelled.is_set():
            error = self._timed_out(argv, replace(job), timeout, result)  # as seen before it
            self.wait_ended(job.name)
            self._refresh(job)
            raise error
        if result.rc == 0:
            self._refresh(job)  # its id when it ran too briefly for the watcher, and its end
            return result
        self.wait_ended(job.name)
        self._refresh(job)
        self._raise_if_slurm_ended(argv, job, result)
        return result

    def _raise_if_slurm_ended(
        self, argv: Sequence[str], job: SchedulerJob, result: RunResult
    ) -> None:
        """The program did not fail by itself: Slurm refused, gave up or ended its job."""
        refused = [line for line in result.stderr.splitlines() if line.startswith(_REFUSED)]
        queued = "queued and waiting for resources" in result.stderr
        what = f"Slurm job {job.job_id or '?'} ({job.name})"
        if refused and queued and self.options.pending_timeout and job.state != "RUNNING":
            raise SlurmJobEnded(
                f"{what} for {argv[0]} on {self.host.name} stayed PENDING "
                f"({job.reason or 'no reason given'}) past slurm_pending_timeout "
                f"({self.options.pending_timeout:g} s) and was cancelled: {refused[0]}",
                job=job,
                result=result,
            )
        if refused:
            raise ExecutionError(
                f"Slurm refused to run {argv[0]} on {self.host.name}: {refused[0]}",
                hint="check the slurm_* settings of this host against `sinfo` and `scontrol show "
                "partition`",
            )
        if job.state in _ENDED_BY_SLURM:
            where = f" on {job.nodes}" if job.nodes else ""
            because = f", reason {job.reason}" if job.reason not in (None, "None") else ""
            raise SlurmJobEnded(
                f"{what} running {argv[0]}{where} ended {job.state}{because} "
                f"(rc {result.rc}): {_ENDED_BY_SLURM[job.state]}",
                job=job,
                result=result,
            )

    def _watch(
        self, job: SchedulerJob, finished: threading.Event, stop: threading.Event | None = None
    ) -> None:
        """Follow the job through squeue until it runs (or the command ends): its id, its
        PENDING reason, its nodes. Polls less often as it waits in the queue; until squeue first
        shows it, every _POLL_SECONDS: a job that starts at once must be seen (and recorded by
        `on_job`) before a controller killed mid-cell leaves it for `--resume` to find by id.
        A stop (Ctrl-C) while the job waits cancels it: srun reads no stdin before the job
        starts, so closing stdin alone would leave it queued and the controller waiting."""
        pause, waited = _POLL_SECONDS, 0.0
        while not finished.wait(_STOP_CHECK_SECONDS):
            waited += _STOP_CHECK_SECONDS
            stopping = stop is not None and stop.is_set()
            if waited < pause and not stopping:
                continue
            waited = 0.0
            self._refresh(job)
            if job.state is not None and job.state not in WAITING_STATES:
                return
            if stopping and job.state in WAITING_STATES:
                self.cancel(job.name)
                return
            if job.job_id is not None:
                pause = min(pause * 2, _WATCH_MAX_SECONDS)

    def squeue(self, selector: str) -> SqueueRow | None:
        """(id, state, reason, nodes, name) of the job `--name=N` or `--jobs=ID` selects, as
        squeue shows it; None when squeue does not (any more) or cannot answer."""
        try:
            shown = self.login.run(
                ["squeue", "-h", "--states=all", selector, "-o", "%i|%T|%r|%N|%j"], timeout=30
            )
        except OrchError:
            return None
        rows = [line.split("|", 4) for line in shown.stdout.splitlines() if line.count("|") >= 4]
        if not rows:
            return None
        job_id, state, reason, nodes, name = rows[-1]
        return job_id, state, reason or None, nodes or None, name

    def _refresh(self, job: SchedulerJob) -> None:
        """Read the job's id, state, reason and nodes from squeue (best effort)."""
        found = self.squeue(f"--name={job.name}")
        if found is None:
            return
        with self._lock:
            before = job.seen
            job.job_id, job.state, job.reason, job.nodes = found[:4]
            copy = replace(job)
        if copy.seen != before:
            self._tell(copy)

    def _tell(self, job: SchedulerJob) -> None:
        """`on_job` hears a changed job (a copy)."""
        if self.on_job is not None:
            with contextlib.suppress(Exception):  # a listener's bug must not end the command
                self.on_job(job)

    def job_running(self, name: str, job_id: str, nodes: object = None) -> None:
        """The program inside job `name` says it runs as `job_id` (on `nodes`): record that now,
        without waiting for the watcher's next squeue."""
        if not job_id:
            return
        with self._lock:
            job = next((j for j in self._jobs if j.name == name), None)
            if job is None:
                return
            before = job.seen
            job.job_id = job_id
            if job.state is None or job.state in WAITING_STATES:
                job.state, job.reason = "RUNNING", None
            if job.nodes is None and isinstance(nodes, str) and nodes:
                job.nodes = nodes
            copy = replace(job)
        if copy.seen != before:
            self._tell(copy)

    def _timed_out(
        self, argv: Sequence[str], job: SchedulerJob, timeout: float | None, result: RunResult
    ) -> CommandTimeout:
        # a job that never left the queue says so: the time went to waiting, not to the program
        waiting = f", never started: PENDING ({job.reason})" if job.state in WAITING_STATES else ""
        return CommandTimeout(
            f"{shlex.join(argv)} on {self.host.name} (Slurm job {job.job_id or '?'}, "
            f"{job.name}) timed out after {timeout:g} s (job cancelled{waiting})",
            result=result,
        )

    def cancel(self, job_name: str) -> None:
        """scancel the job of that name (best effort: it may have ended already)."""
        with contextlib.suppress(OrchError):
            self.login.run(["scancel", f"--name={job_name}"], timeout=30)

    def wait_ended(
        self, job_name: str, timeout: float = _CANCEL_GRACE_SECONDS, *, by: str = "name"
    ) -> bool:
        """Wait until no process of the job (`by` name or id) is left: squeue lists it neither
        running nor completing. False when it still was after `timeout` (best effort: True
        when squeue cannot answer)."""
        deadline = time.monotonic() + timeout
        pause = _POLL_SECONDS
        while time.monotonic() < deadline:
            try:
                shown = self.login.run(
                    ["squeue", "-h", "--states=all", f"--{by}={job_name}", "-o", "%T"], timeout=30
                )
            except OrchError:
                return True
            if not ALIVE_STATES.intersection(shown.stdout.split()):
                return True
            time.sleep(pause)
            pause = min(pause * 2, _WATCH_MAX_SECONDS)
        return False

    def watch_jobs(self, on_job: Callable[[Any], None]) -> None:
        """`on_job` hears every job this connection starts, as squeue and the runner see it."""
        self.on_job = on_job

    def settle_earlier_jobs(
        self, recorded: Sequence[Mapping[str, Any]], say: Callable[[str], None]
    ) -> list[dict[str, Any]] | None:
        """The jobs a dead controller left end first (settle.py); None when none was recorded."""
        if not recorded:
            return None

        return settle_earlier_jobs(self, recorded, say)

    def runner_run(self, cells: Iterable[Cell]) -> Callable[..., RunResult]:
        """A queue holding cells of several nodes is one job with a runner a node."""
        nodes = queue_nodes(cells)
        return functools.partial(self.run, tasks=nodes) if nodes > 1 else self.run

    def waiting_in_queue(self) -> bool:
        """A job of this connection is PENDING (or CONFIGURING), as squeue last showed it."""
        with self._lock:
            return any(job.state in WAITING_STATES for job in self._jobs)

    def scheduler_jobs(self, since: int = 0) -> list[dict[str, str | None]]:
        """The Slurm jobs this connection's commands ran as (from the `since`-th on)."""
        return [job.as_json() for job in self.jobs[since:]]

    def node_workdir(self, workdir: str, rank: int) -> str:
        """The nodes of one job share the login host's name: each rank has a folder of its own."""
        return node_workdir(workdir, rank)

    def run_on_job_nodes(self, argv: Sequence[str], timeout: float) -> RunResult | None:
        """`argv` on every node of the job that runs a runner a node now (a step beside it),
        or None when no such job runs: then there is no runner to reach."""
        with self._lock:
            running = [(j.job_id, self._spanning[j.name]) for j in self._jobs
                       if j.name in self._spanning and j.job_id]  # fmt: skip
        if not running:
            return None
        job_id, nodes = running[-1]
        return run_in_job(self.login, self.srun_command(), str(job_id), nodes, argv, timeout)

    def srun_command(self) -> list[str]:
        """`srun`, with the controller's own SLURM_* variables unset when the login is this
        machine: orch started inside an allocation (salloc, an sbatch script) would otherwise
        make every srun a step of that job, sized by its SLURM_NNODES/SLURM_NTASKS, instead of
        a job of its own with the declared allocation. SLURM_CONF (which cluster) is kept."""
        if not isinstance(self.login, LocalConnection):
            return ["srun"]  # a login shell over SSH starts outside any job
        inherited = sorted(k for k in os.environ if k.startswith("SLURM_") and k != "SLURM_CONF")
        if not inherited:
            return ["srun"]
        return ["env", *(f"--unset={name}" for name in inherited), "srun"]

    def cancel_job(self, job_id: str) -> None:
        """scancel the job of that id (best effort: it may have ended already)."""
        with contextlib.suppress(OrchError):
            self.login.run(["scancel", job_id], timeout=30)

    def put(self, local: Path, remote: str) -> None:
        """See `Connection.put`: onto the login host, whose $HOME the nodes share."""
        self.login.put(local, remote)

    def get(self, remote: str, local: Path) -> None:
        """See `Connection.get`: from the login host, whose $HOME the nodes share."""
        self.login.get(remote, local)

    def close(self) -> None:
        """Close the login connection: each running srun's task sees EOF on stdin."""
        self.login.close()
