"""Who failed and why, when a host's runner ended without answering for every cell: pure rules.

The host queue (`host_queue.py`) reads the stream and applies these; each is a function of what
the queue knows (the cell in flight, whether orch was stopping, the runner's exit) to outcomes,
so the rules are tested without a connection (tests/execute/test_blame.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.errors import ConnectionFailure, OrchError
from orchestrator.execute.apply.outcomes import CellOutcome, stopped_outcome
from orchestrator.execute.transport.base import JobEnded

ARCHIVE_NEVER_CAME = "the runner said the cell was done but its archive never arrived"


def unanswered(
    host: str, cid: str, reason: str, *, said_done: bool, seconds: float | None = None
) -> CellOutcome:
    """A cell its runner ended without answering for: `reason`, unless the runner said it was
    done and only its archive is missing (then collection failed, not the cell)."""
    if said_done:
        return CellOutcome(cid, host, "failed", ARCHIVE_NEVER_CAME, "collect")
    return CellOutcome(cid, host, "failed", reason, "runner", seconds)


def done_without_archive(
    host: str, cid: str, done: Mapping[str, Any], seconds: float
) -> CellOutcome:
    """A `done` event that names no archive: the runner said why (another runner holds the
    cell)."""
    return CellOutcome(
        cid,
        host,
        "interrupted" if done.get("status") == "interrupted" else "failed",
        str(done.get("reason") or "the runner finished the cell without an archive"),
        str(done.get("step") or "runner"),
        seconds,
    )


@dataclass(frozen=True)
class Break:
    """What an invocation that ended without its last word decides."""

    in_flight: CellOutcome | None  # the outcome of the cell that was running, if one was
    amended: CellOutcome | None  # an outcome already recorded, with the job's end as its reason
    reconnect: bool  # whether a fresh connection may send the cells still pending


def invocation_broken(
    host: str,
    exc: OrchError,
    *,
    in_flight: str | None,
    last: CellOutcome | None,
    silent: bool,
    stopping: bool,
    silence: str,
) -> Break:
    """The invocation ended early with `exc`. `in_flight` is the cell whose events came last if
    it has no outcome yet; `last` is that cell's outcome if it has one."""
    if silent and not stopping:  # no reconnect: a silent host would only hold the run longer
        failed = (
            CellOutcome(in_flight, host, "failed", silence, "connection") if in_flight else None
        )
        return Break(failed, None, False)
    amended = None
    if isinstance(exc, JobEnded) and last is not None and last.status == "failed":
        # Slurm ended the job (scancel, time limit, node failure, preemption) while this cell
        # ran: that is its reason, even when the runner still sent its archive.
        amended = replace(last, reason=f"{exc}; the cell: {last.reason}")
    if stopping:
        # A second Ctrl-C closes the connections on purpose: the runner still stops its server
        # on stdin EOF, and `--resume` reruns the cell. Not a failure.
        why = "connection closed; its runner stops its server"
        return Break(stopped_outcome(in_flight, host, why) if in_flight else None, amended, False)
    lost = isinstance(exc, ConnectionFailure)
    outcome = None
    if in_flight is not None:
        if lost:
            reason = f"lost the connection while the cell ran: {exc}"
            outcome = CellOutcome(in_flight, host, "failed", reason, "connection")
        else:
            outcome = CellOutcome(in_flight, host, "failed", f"lost the runner: {exc}", "runner")
    return Break(outcome, amended, lost)


@dataclass(frozen=True)
class RunnerExit:
    """How the invocation ended, as far as the cells it never answered for are concerned."""

    stopping: bool  # orch was told to stop (Ctrl-C, SIGTERM)
    silent: str | None  # why the host was given up as silent, if it was
    broken: OrchError | None  # why the invocation never got going or was cut, if it was
    rc: int | None  # the runner's exit status
    tail: str  # the end of its stderr, or of its stray output
    python: str  # the interpreter the host runs the runner with


def never_answered(host: str, cid: str, end: RunnerExit, *, said_done: bool) -> CellOutcome:
    """A cell the invocation never answered for: not run after Ctrl-C, else failed with why."""
    if end.stopping:
        return CellOutcome(cid, host, "not-run", "interrupted")
    if end.silent is not None:
        reason = f"not run: {end.silent}; `orch apply --resume` runs it"
        return CellOutcome(cid, host, "failed", reason, "connection")
    if end.broken is not None:
        return CellOutcome(cid, host, "failed", f"not run: {end.broken}", "runner")
    reason = f"runner ended without a result (rc {end.rc}): {end.tail}"
    if end.rc == 127:  # the shell found no interpreter
        reason += (
            f"; cannot run {end.python!r}: set python / "
            "ansible_python_interpreter for this host in the inventory"
        )
    return unanswered(host, cid, reason, said_done=said_done)
