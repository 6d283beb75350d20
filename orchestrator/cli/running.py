"""The commands that run things: validate, plan, schema, apply, facts, replay, bisect."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
from tabulate import tabulate

from orchestrator.cli.common import (
    _echo_from_bundle,
    _interrupted,
    _print_summary,
    check_recorded,
    count_option,
    extra_vars_option,
    inventory_option,
    limit_option,
    main,
    reports_errors,
    results_option,
)
from orchestrator.cli.plan_output import echo_plan
from orchestrator.config.patterns import check_limit
from orchestrator.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REGRESSION,
    BundleError,
    InputError,
    OrchError,
)
from orchestrator.execute.bisect.search import BisectPolicy

if TYPE_CHECKING:
    from orchestrator.app.plan import Plan
    from orchestrator.execute.bisect.run import MetricNotReported


cells_option = click.option(
    "--cells",
    "cells_selector",
    default=None,
    help="Only the cells this picks: axis=value,axis!=value,host=NAME (globs in values), "
    "or a cell id prefix. Ansible's --tags/--start-at-task, for a matrix.",
)


def _plan(
    playbook: Path,
    inventory: Sequence[Path],
    extra_vars: Sequence[str],
    limit: str | None,
    selector: str | None = None,
) -> Plan:
    """The playbook planned (narrowed to the cells `--cells` picks), its warnings on stderr."""
    from orchestrator.app.plan import load_plan

    plan = load_plan(playbook, inventory, extra_vars, limit).select(selector)
    for line in plan.warnings():
        click.echo(line, err=True)
    return plan


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path))
@inventory_option
@extra_vars_option
@limit_option
@reports_errors
def validate(
    playbook: Path, inventory: Sequence[Path], extra_vars: tuple[str, ...], limit: str | None
) -> None:
    """Load, check and render PLAYBOOK without running anything."""
    plan = _plan(playbook, inventory, extra_vars, limit)
    hosts = sorted({c.host for c in plan.cells})
    click.echo(f"ok: {playbook}: {len(plan.cells)} cells on {len(hosts)} host(s)")


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path))
@inventory_option
@extra_vars_option
@limit_option
@cells_option
@click.option("--json", "as_json", is_flag=True, help="Every rendered cell as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show each cell's rendered commands and env.")
@reports_errors
def plan(
    playbook: Path,
    inventory: Sequence[Path],
    extra_vars: tuple[str, ...],
    limit: str | None,
    cells_selector: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Show the cells PLAYBOOK expands to: cells x axes x host. Secret values are hidden."""
    # Only the controller asks the origins: planning connects to no host.
    pinned, resolutions = _plan(playbook, inventory, extra_vars, limit, cells_selector).pinned(
        ask_hosts=False
    )
    echo_plan(pinned, resolutions, as_json=as_json, verbose=verbose)


@main.command()
def schema() -> None:
    """Print the playbook's JSON Schema (for editors)."""
    from orchestrator.config.playbook import playbook_json_schema

    click.echo(json.dumps(playbook_json_schema(), indent=2))


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path))
@inventory_option
@extra_vars_option
@limit_option
@cells_option
@click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results"),
    envvar="ORCH_RESULTS",
    show_default=True,
    help="Where run bundles are written; default $ORCH_RESULTS, else results.",
)
@click.option("--resume", "resume", default=None, help="Continue RUN (an id or a run directory).")
@click.option(
    "--retry-failed",
    is_flag=True,
    help="With --resume: run the run's failed cells again (their failed attempts are kept "
    "under retried/). Ansible's retry files' job.",
)
@count_option("--max-parallel", 16, "Hosts at once.")
@click.option(
    "--silent-host-timeout",
    type=click.FloatRange(min=1.0),
    default=60.0,
    show_default=True,
    help="Seconds without a word from a host's runner (it sends a heartbeat) before the host "
    "counts as lost: its cell in flight and the rest fail, the other hosts go on.",
)
@click.option(
    "--track",
    "track_metric",
    is_flag=False,
    flag_value="output_throughput",
    default=None,
    help="After the run, compare METRIC (default output_throughput) with each cell's history: "
    "a new regression prints its suspect range and the command that settles it, exit 4.",
)
@reports_errors
def apply(
    playbook: Path,
    inventory: Sequence[Path],
    extra_vars: tuple[str, ...],
    limit: str | None,
    cells_selector: str | None,
    results_dir: Path,
    resume: str | None,
    retry_failed: bool,
    max_parallel: int,
    silent_host_timeout: float,
    track_metric: str | None,
) -> None:
    """Run every cell of PLAYBOOK and write a result bundle (indexed in the results history)."""
    from orchestrator.app.apply import ApplyRequest, prepare_apply
    from orchestrator.execute.apply.resume import resume_command
    from orchestrator.secrets.redact import redact_text

    plan = _plan(playbook, inventory, extra_vars, limit, cells_selector)
    argv = ["orch", *sys.argv[1:]]
    request = ApplyRequest(
        results_dir=results_dir,
        resume=resume,
        retry_failed=retry_failed,
        max_parallel=max_parallel,
        silent_host_timeout=silent_host_timeout,
        argv=argv,
    )
    track = plan.playbook.model.track
    if track_metric is None and track is not None and track.enabled is True:
        track_metric = str(track.metric)  # the playbook's `track:`; --track wins
    run, resolutions = prepare_apply(plan, request)
    for res in resolutions:
        if res.sha is not None or res.note.startswith("not pinned"):
            click.echo(redact_text(f"repo.version {res.describe()}", run.secrets), err=True)
    click.echo(f"run {run.run_id}: {len(run.cells)} cells -> {run.writer.path}", err=True)
    try:
        outcome = run.execute()
    except KeyboardInterrupt:
        _interrupted(resume_command(argv, run.writer.path))
    _print_summary(outcome.cells)
    click.echo("")
    _echo_server_starts(outcome.path)
    regressions = _index_and_track(run.options.results_dir, outcome.path, track_metric)
    click.echo(f"bundle: {outcome.path}")  # last: scripts/demo.sh reads the run from it
    check_recorded(run.writer, [c.id for c in run.cells], resume_command(argv, run.writer.path))
    if not outcome.ok:
        sys.exit(EXIT_FAILED)
    sys.exit(EXIT_REGRESSION if regressions else EXIT_OK)


def _index_and_track(results_dir: Path, run_dir: Path, metric: str | None) -> int:
    """Index the run in the results history; with `--track`, print the regressions it
    starts and return how many. The run is recorded whatever happens here: a
    history that cannot be written is a warning."""
    from orchestrator.app.history import index_runs, track

    try:
        if metric is None:
            (done,) = index_runs(results_dir, [str(run_dir)])
            if done.refused:
                click.echo(f"history: not updated: {done.refused}", err=True)
            return 0
        found, runs, notes = track(results_dir, run_dir, metric)
    except (OrchError, OSError) as exc:  # the database's own errors arrive as BundleError
        click.echo(f"history: not updated: {exc}", err=True)
        return 0
    for note in notes:
        click.echo(f"track: {note}")
    if not found:
        click.echo(f"track: no new regression in {metric}")
    for step in found:
        click.echo(f"track: {step.line(metric)}")
        click.echo(f"  settle it with: {step.command(results_dir, runs)}")
    return len(found)


def _echo_server_starts(run_dir: Path) -> None:
    """`server starts: 3 for 12 cells, 41.2 s start-up`, counted from the bundle just written."""
    from orchestrator.analyze.starts import run_starts
    from orchestrator.results.read import open_run

    try:
        with open_run(run_dir) as run:
            starts = run_starts(run)
    except BundleError as exc:  # the run is done and recorded: a count is not worth failing it
        click.echo(f"server starts: not counted: {exc}", err=True)
        return
    if starts.cells:
        click.echo(f"server starts: {starts.text()}")


@main.command()
@inventory_option
@limit_option
@click.option("--json", "as_json", is_flag=True, help="The full snapshots as JSON.")
@reports_errors
def facts(inventory: Sequence[Path], limit: str | None, as_json: bool) -> None:
    """Snapshot hosts now (the same probe as a run), without running anything."""
    from orchestrator.config.inventory.load import load_inventory
    from orchestrator.config.patterns import select_hosts_checked
    from orchestrator.execute.facts import SUMMARY_HEADERS, probe_hosts, summary_row

    inv = load_inventory(inventory)
    check_limit(limit, inv)
    names = select_hosts_checked(inv, limit or "all", key_path="--limit")
    found = probe_hosts([inv.hosts[n] for n in names])
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
    else:
        rows = [summary_row(n, f) for n, f in found.items()]
        click.echo(tabulate(rows, headers=SUMMARY_HEADERS))
    if any("absent" in f and len(f) <= 2 for f in found.values()):
        sys.exit(EXIT_FAILED)


@main.command()
@click.argument("ref")
@results_option
@inventory_option
@limit_option
@click.option(
    "--yes",
    is_flag=True,
    help="Run a bundle made on another machine without asking (its commands are still shown).",
)
@reports_errors
def replay(
    ref: str, results_dir: Path, inventory: Sequence[Path], limit: str | None, yes: bool
) -> None:
    """Run RUN/CELL again from its bundle alone, on its host or on the hosts --limit picks.

    A bundle runs the commands it recorded. One made on another machine (or one that does not
    say where it was made) is shown first, host and commands, and runs only after a yes: typed
    at the prompt on a terminal, or --yes. Without a terminal and without --yes it exits 2.
    """
    from orchestrator.config.inventory.load import load_inventory
    from orchestrator.execute.replay import (
        inventory_from_bundle,
        made_here,
        retarget,
        run_recorded,
        what_runs,
    )
    from orchestrator.results.read import open_cell, run_of

    record = open_cell(ref, results_dir)
    run = run_of(record)
    if run is None:
        raise InputError(f"{ref}: not inside a run bundle", hint="pass RUN/CELL")
    inv = load_inventory(inventory) if inventory else inventory_from_bundle(run)
    check_limit(limit, inv)
    cells = retarget([record.cell], inv, limit)
    if not made_here(run):
        plan = "\n".join(what_runs(cells, inv))
        if yes:
            _echo_from_bundle(f"replaying a bundle made on another machine:\n{plan}")
        elif sys.stdin.isatty() and sys.stdout.isatty():
            _echo_from_bundle(
                f"this bundle was made on another machine; replaying it runs:\n{plan}"
            )
            if not click.confirm("Run these commands?", default=False):
                raise InputError(f"{ref}: replay declined", hint="nothing ran")
        else:
            raise InputError(
                f"{ref} was made on another machine (or does not say where); read what it "
                f"would run, then pass --yes to run it:\n{plan}"
            )
    outcome = run_recorded(
        run,
        cells,
        inv,
        results_dir=results_dir,
        argv=["orch", *sys.argv[1:]],
        provenance={"replay_of": f"{run.run_id}/{record.id}"},
    )
    _print_summary(outcome.cells)
    click.echo(f"\nbundle: {outcome.path}  (replay of {run.run_id}/{record.id})")
    sys.exit(EXIT_OK if outcome.ok else EXIT_FAILED)


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path), required=False)
@inventory_option
@extra_vars_option
@limit_option
@results_option
@click.option("--cell", "selector", default=None, help="The cell to bisect (axis=v,... or id).")
@click.option("--good", default=None, help="A good revision.")
@click.option("--bad", default=None, help="A bad revision (a descendant of --good).")
@click.option(
    "--images",
    default=None,
    help="REF1,REF2,...: bisect over these images (tags or digests), oldest (good) first, "
    "instead of commits; each is pinned to its digest once.",
)
@click.option(
    "--metric", default=None, help="Default: the first expected metric, else output_throughput."
)
@count_option(
    "--repeats",
    BisectPolicy.repeats,
    "Most repeats of one run at an inner commit (it stops as soon as the sequential test decides).",
)
# two at least: the ends' spread is the noise every inner point is judged against
@count_option("--end-repeats", BisectPolicy.end_repeats, "Repeats at good and bad.", minimum=2)
@count_option("--max-runs", BisectPolicy.max_runs_per_point, "Cap on runs per commit.")
@click.option("--all-parents", is_flag=True, help="Walk every commit, not first-parent only.")
@click.option("--show", "show_run", default=None, help="Re-print a finished bisect from RUN.")
@click.option("--resume", "resume_run", default=None, help="Continue the bisect in RUN.")
@reports_errors
def bisect(
    playbook: Path | None,
    inventory: Sequence[Path],
    extra_vars: tuple[str, ...],
    limit: str | None,
    results_dir: Path,
    selector: str | None,
    good: str | None,
    bad: str | None,
    images: str | None,
    metric: str | None,
    repeats: int,
    end_repeats: int,
    max_runs: int,
    all_parents: bool,
    show_run: str | None,
    resume_run: str | None,
) -> None:
    """Find the first bad commit for one cell of PLAYBOOK, noise-aware (or, with --images,
    the first bad image of an ordered list)."""
    from orchestrator.app.bisect import BisectRequest, prepare_bisect
    from orchestrator.app.plan import load_plan
    from orchestrator.execute.apply.resume import resume_command
    from orchestrator.execute.bisect.render import render_bisect, show_bisect
    from orchestrator.execute.bisect.run import MetricNotReported
    from orchestrator.execute.bisect.search import BisectError

    if show_run:
        click.echo(show_bisect(show_run, results_dir))
        return
    image_list = [i.strip() for i in (images or "").split(",") if i.strip()]
    if image_list:
        if good or bad:
            raise InputError("--images replaces --good and --bad: give one or the other")
        good, bad = image_list[0], image_list[-1]
    if playbook is None or not selector or not good or not bad:
        raise InputError("bisect needs PLAYBOOK, --cell, and --good and --bad (or --images)")
    plan = load_plan(playbook, inventory, extra_vars, limit)
    policy = BisectPolicy(end_repeats=end_repeats, repeats=repeats, max_runs_per_point=max_runs)
    request = BisectRequest(
        selector=selector,
        good=good,
        bad=bad,
        metric=metric,
        results_dir=results_dir,
        resume=resume_run,
        all_parents=all_parents,
        policy=policy,
        argv=["orch", *sys.argv[1:]],
        images=image_list,
    )
    job = prepare_bisect(plan, request)
    job.log = lambda msg: click.echo(f"bisect: {msg}", err=True)
    try:
        job.execute()
    except BisectError as exc:
        raise OrchError(f"bisect cannot decide: {exc}") from None
    except MetricNotReported as exc:
        _metric_not_reported(exc, results_dir / str(job.run_id) if job.run_id else None)
    except KeyboardInterrupt:
        again = None
        if job.run_id:  # the whole command, with the run's path: runnable as printed
            run_path = str(results_dir / str(job.run_id))
            again = resume_command(["orch", *sys.argv[1:]], run_path)
        _interrupted(again)
    click.echo(render_bisect(job.doc))
    click.echo(f"\nbundle: {results_dir / str(job.run_id)}")


def _metric_not_reported(exc: MetricNotReported, run_dir: Path | None) -> None:
    """The error, then the whole command that resumes with a reported metric (its own line,
    so it copies clean); what was measured is read back, not measured again."""
    from orchestrator.execute.apply.resume import resume_command, without_option

    pick = exc.suggestion
    if pick:
        exc.hint = f"did you mean {pick!r}?"
    click.echo(f"error: {exc.render()}", err=True)
    if run_dir is not None:
        fixed = [
            *without_option(["orch", *sys.argv[1:]], "--metric"),
            "--metric",
            pick or "METRIC",
        ]
        name = "" if pick else " (METRIC: one of those)"
        again = resume_command(fixed, run_dir)
        click.echo(f"what was measured is kept; continue with: {again}{name}", err=True)
    sys.exit(exc.exit_code)
