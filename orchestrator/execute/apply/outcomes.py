"""What a run reports: each cell's outcome, the whole run's, and the options it ran with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STOPPED = "interrupted (Ctrl-C or SIGTERM to orch)"


@dataclass
class CellOutcome:
    """The controller's record of one cell in run.json."""

    cell_id: str
    host: str
    status: str  # passed | failed | interrupted | not-run
    reason: str | None = None
    failed_step: str | None = None
    seconds: float | None = None
    earlier: bool = False  # recorded by an earlier invocation of this run (before --resume)
    slurm_job: str | None = None  # the Slurm job the cell ran in (the Slurm executor only)
    note: str | None = None  # learnt after it ended (its session's server died right after it)

    def to_json(self) -> dict[str, Any]:
        """The run.json entry."""
        entry: dict[str, Any] = {
            "host": self.host,
            "status": self.status,
            "reason": self.reason,
            "failed_step": self.failed_step,
            "seconds": self.seconds,
        }
        if self.slurm_job is not None:
            entry["slurm_job"] = self.slurm_job
        if self.note:
            entry["note"] = self.note
        return entry


@dataclass
class ApplyOptions:
    """How to run: where results go, resume, parallelism and provenance."""

    results_dir: Path = Path("results")
    run_id: str | None = None  # set when resuming
    resume: bool = False
    retry_failed: bool = False  # with resume: the run's failed cells run again
    max_parallel: int = 16
    argv: Sequence[str] = ()
    extra_run_fields: dict[str, Any] = field(default_factory=dict)  # e.g. replay_of
    connect_attempts: int = 4
    connect_spacing: float = 0.05  # seconds between connection starts (pool.StartSpacing)
    # A host whose runner sends nothing (not even its heartbeat) this long is lost: a cut link
    # or a frozen host must not hold the run for the kernel's TCP retries (minutes).
    silent_host_timeout: float = 60.0


@dataclass
class RunOutcome:
    """The whole run: its directory and every cell's outcome."""

    run_id: str
    path: Path
    status: str
    cells: dict[str, CellOutcome]  # every cell of the bundle, earlier invocations' too

    @property
    def ok(self) -> bool:
        """True when every cell of the run passed, a resumed run's earlier cells included."""
        return self.status == "passed"


def stopped_outcome(
    cell_id: str, host: str, detail: str, seconds: float | None = None
) -> CellOutcome:
    """A cell cut short because orch was told to stop: interrupted (a resume redoes or
    collects it), never failed."""
    took = round(seconds, 3) if seconds is not None else None
    return CellOutcome(cell_id, host, "interrupted", f"{STOPPED}: {detail}", "interrupted", took)
