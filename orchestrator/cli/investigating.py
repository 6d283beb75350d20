"""`orch investigate`: from "the number moved" to a cause, by controlled experiments."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from orchestrator.cli.common import (
    _echo_from_bundle,
    _interrupted,
    inventory_option,
    limit_option,
    main,
    reports_errors,
    results_option,
)
from orchestrator.cli.reading import _tolerance
from orchestrator.errors import EXIT_OK, InputError, OrchError

if TYPE_CHECKING:
    from orchestrator.execute.investigate.run import Investigation


@main.command()
@click.argument("good")
@click.argument("bad")
@inventory_option
@limit_option
@results_option
@click.option("--metric", default=None, help="Default: the cells' deciding metric.")
@click.option(
    "--tolerance",
    default="3%",
    show_default=True,
    help="The smallest change that counts, for the regression and for each experiment.",
)
@click.option(
    "--budget",
    type=click.IntRange(min=2),
    default=None,
    help="Most cells it may run, a bisect's included (default: printed by --plan).",
)
@click.option(
    "--start-sd",
    default=None,
    help="The start-to-start sd of the metric (e.g. 2%), where known: each cell is then one "
    "server start with this spread added. Default: GOOD's and BAD's own records where they ran "
    "several starts, else measured (--starts).",
)
@click.option(
    "--starts",
    type=click.IntRange(min=1),
    default=None,
    help="Server starts each cell spreads its repeats over, the start the unit of replication "
    "(default 3 where no start-to-start sd is given or recorded, else 1; 1: repeats are the "
    "unit, the spread assumed small).",
)
@click.option("--plan", "plan_only", is_flag=True, help="Print the experiments, run nothing.")
@click.option("--no-bisect", is_flag=True, help="Stop at the experiments; do not bisect.")
@click.option("--resume", "resume_run", default=None, help="Continue the investigation in RUN.")
@click.option(
    "--yes",
    is_flag=True,
    help="Run cells from bundles made on another machine without asking (they are shown).",
)
@reports_errors
def investigate(
    good: str,
    bad: str,
    inventory: Sequence[Path],
    limit: str | None,
    results_dir: Path,
    metric: str | None,
    tolerance: str,
    budget: int | None,
    start_sd: str | None,
    starts: int | None,
    plan_only: bool,
    no_bisect: bool,
    resume_run: str | None,
    yes: bool,
) -> None:
    """Why did the number move from GOOD to BAD (two cells, RUN/CELL)?

    Measures both again now on BAD's host (is it real, is it still there?), then BAD with each
    declared difference (image, commit, env variable, server flag, bench setting) set back to
    GOOD's value (an image by GOOD's recorded digest), one at a time, and bisects the commit
    when it carries the change. Every experiment is a cell of one run folder; the report
    (investigation.md) says what explains the change and what was ruled out, with effects and
    intervals.
    """
    from orchestrator.execute.apply.resume import resume_command
    from orchestrator.execute.bisect.search import BisectError
    from orchestrator.execute.investigate.run import InvestigateRequest, Investigation
    from orchestrator.execute.investigate.sides import refuse_adapter_change

    request = InvestigateRequest(
        good=good,
        bad=bad,
        results_dir=results_dir,
        inventory=inventory,
        limit=limit,
        metric=metric,
        tolerance=_tolerance(tolerance),
        budget=budget,
        start_sd=_start_sd(start_sd),
        starts=starts,
        resume=resume_run,
        bisect=not no_bisect,
        argv=["orch", *sys.argv[1:]],
    )
    job = Investigation(request, out=lambda line: click.echo(line, err=True))
    for line in job.plan_lines():
        _echo_from_bundle(line)
    if plan_only:
        return
    refuse_adapter_change(job.good, job.bad)
    _confirm_foreign(job, yes)
    try:
        doc = job.execute()
    except BisectError as exc:
        raise OrchError(f"investigate: the bisect cannot decide: {exc}") from None
    except KeyboardInterrupt:
        again = None
        if job.run_id:
            again = resume_command(["orch", *sys.argv[1:]], str(results_dir / job.run_id))
        _interrupted(again)
    from orchestrator.analyze.investigate.report import render_markdown

    _echo_from_bundle("\n" + render_markdown(doc))
    if job.run_id:
        click.echo(f"bundle: {results_dir / job.run_id}")
    sys.exit(EXIT_OK)


def _start_sd(text: str | None) -> float | None:
    """`--start-sd 2%` -> 0.02 (relative; the log scale's sd for small spreads)."""
    if text is None:
        return None
    try:
        return _tolerance(text)
    except InputError as exc:
        raise InputError(f"--start-sd: {exc.message}", hint="write 2% or 0.02") from None


def _confirm_foreign(job: Investigation, yes: bool) -> None:
    """A bundle runs the commands it recorded: one made on another machine runs only after a
    yes, as `orch replay` asks (typed at a terminal, or --yes)."""
    from orchestrator.execute.replay import made_here, what_runs

    if all(made_here(side.run) for side in (job.good, job.bad)):
        return
    shown = "\n".join(what_runs([e.cell for e in job.reference_experiments()], job.inventory))
    if yes:
        _echo_from_bundle(f"investigating bundles made on another machine:\n{shown}")
    elif sys.stdin.isatty() and sys.stdout.isatty():
        _echo_from_bundle(f"GOOD or BAD was made on another machine; investigating runs:\n{shown}")
        if not click.confirm("Run these commands (and the experiments' variants)?", default=False):
            raise InputError("investigate declined", hint="nothing ran")
    else:
        raise InputError(
            "GOOD or BAD was made on another machine (or does not say where); read what it "
            f"would run, then pass --yes to run it:\n{shown}"
        )
