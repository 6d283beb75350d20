"""Slurm's job states as orch reads them from squeue, and the row squeue gives for a job."""

from __future__ import annotations

# states in which a job still holds (or waits for) its nodes
ALIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING"}
)
WAITING_STATES = frozenset({"PENDING", "CONFIGURING"})
# a job as squeue shows it: id, state, reason, nodes, name
SqueueRow = tuple[str, str, str | None, str | None, str]
