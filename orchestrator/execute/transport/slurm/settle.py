"""A resume meets the Slurm jobs its dead controller left, before it starts one of its own.

A PENDING job is cancelled: its srun lost its controller, so once started its runner would find
stdin closed and run nothing. A RUNNING one is waited for: its runner saw stdin's EOF and is
stopping the cell in flight and its server, and archives the cell for the resume to collect. So
the resume never has two jobs of one host at once, and no cell runs in two jobs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from orchestrator.execute.transport.slurm.states import ALIVE_STATES, WAITING_STATES, SqueueRow

__all__ = ["LEFT_RUNNING_GRACE_SECONDS", "settle_earlier_jobs"]


class JobControl(Protocol):
    """What settling needs of a Slurm connection: look a job up, cancel it, wait for its end."""

    def squeue(self, selector: str) -> SqueueRow | None: ...
    def cancel_job(self, job_id: str) -> None: ...
    def wait_ended(self, job_name: str, timeout: float = ..., *, by: str = "name") -> bool: ...


# how long a resume waits for a job its dead controller left running (its runner, at stdin's
# EOF, stops the cell in flight and its server, then archives it) before cancelling it
LEFT_RUNNING_GRACE_SECONDS = 300.0


def settle_earlier_jobs(
    conn: JobControl,
    recorded: Sequence[Mapping[str, Any]],
    say: Callable[[str], None],
    *,
    grace: float = LEFT_RUNNING_GRACE_SECONDS,
) -> list[dict[str, Any]]:
    """A resume's first step on a Slurm host: every job the interrupted run recorded that
    Slurm still holds ends before this run starts one, so no cell runs in two jobs at once.

    A PENDING job is cancelled: its srun lost its controller, so once started its runner
    would find stdin closed and run nothing. A RUNNING one is waited for: its runner saw
    stdin's EOF and is stopping the cell in flight and its server, and archives the cell
    for the resume to collect; still running after `grace`, it is cancelled. `say` hears
    each step. Returns the recorded entries with the state each ended in and, where the
    resume met it alive, what it did (`resume`).
    """
    settled = []
    for entry in recorded:
        job = dict(entry)
        job_id, name = job.get("job_id"), job.get("job_name")
        # by id and name alike: Slurm reuses ids once they wrap, never our random names
        seen = conn.squeue(f"--jobs={job_id}") if job_id else None
        if seen is not None and name and seen[4] != name:
            seen = None
        if seen is not None and seen[1] in ALIVE_STATES:
            job["resume"] = _settle(conn, str(job_id), name, seen, say, grace)
            seen = conn.squeue(f"--jobs={job_id}") or seen
        if seen is not None:
            job["state"], job["reason"], job["nodes"] = seen[1:4]
        settled.append(job)
    return settled


def _settle(
    conn: JobControl,
    job_id: str,
    job_name: Any,
    seen: SqueueRow,
    say: Callable[[str], None],
    grace: float,
) -> str:
    """End one job the interrupted run left alive; what was done, for the bundle."""
    _, state, reason, nodes, _ = seen
    what = f"Slurm job {job_id} ({job_name or '?'}) of the interrupted run"
    if state in WAITING_STATES:
        say(f"{what} is still {state} ({reason or 'no reason given'}): cancelling it")
        conn.cancel_job(job_id)
        conn.wait_ended(job_id, by="jobs")
        return f"still {state} when the run was resumed: cancelled"
    say(
        f"waiting for {what}, still {state} on {nodes or '?'}, to end: its runner is "
        "stopping the cell in flight"
    )
    if conn.wait_ended(job_id, grace, by="jobs"):
        return f"still {state} when the run was resumed: waited for it to end"
    say(f"{what} is still {state} after {grace:g} s: cancelling it")
    conn.cancel_job(job_id)
    conn.wait_ended(job_id, by="jobs")
    return f"still {state} {grace:g} s after the run was resumed: cancelled"
