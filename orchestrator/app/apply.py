"""`orch apply` as a service: the run a plan makes, resume checked and refs pinned, ready to go."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.app.plan import Plan
from orchestrator.errors import InputError
from orchestrator.execute.apply.outcomes import ApplyOptions
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.apply.resume import check_resume_plan, resume_target
from orchestrator.execute.apply.run import Run
from orchestrator.execute.images import recorded_images
from orchestrator.execute.refs import Resolution, recorded_resolutions
from orchestrator.results.bundle import check_writable


@dataclass(frozen=True)
class ApplyRequest:
    """How to run a plan: where results go, what to resume, how wide, and the command line that
    asked (recorded in run.json; a resume is printed from it)."""

    results_dir: Path = Path("results")
    resume: str | None = None  # a run id or a run directory
    retry_failed: bool = False
    max_parallel: int = 16
    silent_host_timeout: float = 60.0
    argv: Sequence[str] = ()


def prepare_apply(
    plan: Plan, request: ApplyRequest, progress: Progress | None = None
) -> tuple[Run, list[Resolution]]:
    """The run `plan` makes (its bundle created and locked), and how each ref was pinned.

    A resume must plan the cells the run holds and keeps its first pins: one run never mixes
    two experiments or two commits of one ref.
    """
    if request.retry_failed and request.resume is None:
        raise InputError(
            "--retry-failed needs --resume RUN", hint="the run whose failed cells to run again"
        )
    results_dir, run_id, earlier, images = request.results_dir, None, None, None
    if request.resume is not None:
        results_dir, run_id = resume_target(request.resume, results_dir)
        check_resume_plan(results_dir / run_id, [c.id for c in plan.cells])
        earlier = recorded_resolutions(results_dir / run_id)
        images = recorded_images(results_dir / run_id)
        check_writable(results_dir / run_id)  # before the run lock is taken there
    pinned, resolutions = plan.pinned(earlier, images=images)
    options = ApplyOptions(
        results_dir=results_dir,
        run_id=run_id,
        resume=request.resume is not None,
        retry_failed=request.retry_failed,
        max_parallel=request.max_parallel,
        argv=list(request.argv),
        silent_host_timeout=request.silent_host_timeout,
    )
    run = Run(
        playbook_name=pinned.playbook.name,
        playbook_files=pinned.playbook.files,
        playbook_dir=pinned.playbook.path.parent,
        inventory=pinned.inventory,
        cells=pinned.cells,
        options=options,
        secrets=pinned.secrets,
        progress=progress,
    )
    return run, resolutions
