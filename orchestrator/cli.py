"""The `orch` command line: arguments in, calls, output out.

This is the only place that turns an OrchError into a message and an exit code.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from tabulate import tabulate

from orchestrator import __version__
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError, OrchError

if TYPE_CHECKING:  # imported where used: `orch --help` stays quick
    from orchestrator.execute.bisection import MetricNotReported

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    # a message may quote a bundle's (anyone's) text: no terminal escapes reach the screen
    from orchestrator.results.terminal import printable

    click.echo(printable(f"error: {message}"), err=True)
    sys.exit(code)


def _echo_from_bundle(text: str, err: bool = False) -> None:
    """Print text read from a bundle, which anyone may have written: escapes stripped."""
    from orchestrator.results.terminal import printable

    click.echo(printable(text), err=err)


def reports_errors(fn: F) -> F:
    """Turn OrchError into `error: file:line:col: key: message` and its exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OrchError as exc:
            _fail(exc.render(), exc.exit_code)

    return wrapper  # type: ignore[return-value]


inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory",
    type=click.Path(path_type=Path),
    multiple=True,
    help="Inventory file or directory (Ansible YAML, INI or `ansible-inventory --list` JSON), "
    "or a host list `host1,host2,`; repeat to combine several. Default: $ANSIBLE_INVENTORY, "
    "else localhost.",
)
extra_vars_option = click.option(
    "-e",
    "--extra-vars",
    "extra_vars",
    multiple=True,
    help="k=v pairs, @file.yml, or a JSON/YAML mapping; highest precedence.",
)


LIMIT_FILE_BYTES = 1024 * 1024  # a retry file names hosts: far less than this


def _limit_value(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """`--limit @file`, as Ansible's retry files: one host or pattern per line."""
    if not value or not value.startswith("@"):
        return value
    from orchestrator.config.yamlpos import read_text

    path = Path(value[1:]).expanduser()
    try:
        lines = read_text(path, what="limit file", limit=LIMIT_FILE_BYTES).splitlines()
    except InputError as exc:  # "limit file not found: PATH" -> "cannot read PATH: limit file ..."
        reason = exc.message.removesuffix(f": {path}").removeprefix("cannot read limit file: ")
        raise click.BadParameter(f"cannot read {path}: {reason}") from None
    names = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not names:
        raise click.BadParameter(f"{path} names no host")
    return ",".join(names)


limit_option = click.option(
    "-l",
    "--limit",
    default=None,
    callback=_limit_value,
    help="Further limit hosts (a pattern, or @FILE with one per line).",
)


def count_option(flag: str, default: int, text: str, minimum: int = 1) -> Callable[[F], F]:
    """An integer option with a floor: 0 hosts or 0 repeats is refused before anything runs."""
    return click.option(
        flag, type=click.IntRange(min=minimum), default=default, show_default=True, help=text
    )


class Planned:
    """A loaded playbook, its inventory and the cells they give."""

    def __init__(
        self,
        playbook: Path,
        inventory: Sequence[Path],
        extra_vars: Sequence[str],
        limit: str | None,
    ) -> None:
        from orchestrator.config.inventory import load_inventory
        from orchestrator.config.playbook import load_playbook, parse_extra_vars
        from orchestrator.plan.build import build_cells

        self.inventory = load_inventory(inventory, playbook_dir=playbook.parent)
        self.extra = parse_extra_vars(list(extra_vars))
        self.playbook = load_playbook(playbook, self.extra)
        self.cells = build_cells(self.playbook, self.inventory, limit=limit)

    @property
    def variables(self) -> dict[str, Any]:
        """The playbook's vars with -e applied: where secret-named values are looked for."""
        return {**dict(self.playbook.data.get("vars") or {}), **self.extra}

    def warn(self) -> None:
        """Print what the plan is warned about (plan/lint.py) on stderr; nothing is refused."""
        from orchestrator.plan.lint import plan_warnings

        used = {c.host for c in self.cells}
        hosts = [h.vars for name, h in self.inventory.hosts.items() if name in used]
        for line in plan_warnings(self.playbook, self.cells, self.variables, *hosts):
            click.echo(line, err=True)

    def secret_values(self) -> list[str]:
        """Every secret value the cells could print, as `orch apply` redacts them."""
        from orchestrator.execute.secret_values import secret_values

        used = {c.host for c in self.cells}
        hosts = [h.vars for name, h in self.inventory.hosts.items() if name in used]
        return secret_values(self.cells, self.variables, *hosts)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="orch")
def main() -> None:
    """orch: declared, repeatable, checked GPU serving benchmarks.

    Exit codes: 0 all good; 1 a cell failed or an expectation was missed; 2 bad input (nothing
    ran).
    """


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
    planned = Planned(playbook, inventory, extra_vars, limit)
    planned.warn()
    hosts = sorted({c.host for c in planned.cells})
    click.echo(f"ok: {playbook}: {len(planned.cells)} cells on {len(hosts)} host(s)")


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path))
@inventory_option
@extra_vars_option
@limit_option
@click.option("--json", "as_json", is_flag=True, help="Every rendered cell as JSON.")
@click.option("-v", "--verbose", is_flag=True, help="Show each cell's rendered commands and env.")
@reports_errors
def plan(
    playbook: Path,
    inventory: Sequence[Path],
    extra_vars: tuple[str, ...],
    limit: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Show the cells PLAYBOOK expands to: cells x axes x host. Secret values are hidden."""
    from orchestrator.plan.lint import unchecked_ready_note
    from orchestrator.results.redact import redact_text

    planned = Planned(playbook, inventory, extra_vars, limit)
    planned.warn()
    cells = planned.cells
    secrets = planned.secret_values()

    def echo(text: str) -> None:
        # Plan output ends up in CI logs and chat: secrets are hidden as in a bundle.
        click.echo(redact_text(text, secrets))

    if as_json:
        echo(json.dumps([c.model_dump(mode="json") for c in cells], indent=2))
        return
    axes: list[str] = []
    for c in cells:
        axes.extend(a for a in c.axes if a not in axes)
    rows = [
        [c.id, c.host, *(_short(c.axes.get(a, "")) for a in axes), c.repo.version if c.repo else ""]
        for c in cells
    ]
    echo(tabulate(rows, headers=["cell", "host", *axes, "repo version"]))
    hosts = sorted({c.host for c in cells})
    echo(f"\n{len(cells)} cells on {len(hosts)} host(s): {', '.join(hosts)}")
    note = unchecked_ready_note(planned.playbook, cells)
    if note is not None:
        echo(note)
    if verbose:
        for c in cells:
            echo(f"\n== {c.id} on {c.host}")
            # Redacted before quoting: a quote inside a secret would split it for the sweep.
            for k, v in c.env.items():
                shown = "***REDACTED***" if k in c.secrets else redact_text(v, secrets)
                echo(f"  env {k}={shlex.quote(shown)}")
            if c.server is not None:
                echo(f"  server: {shlex.join(redact_text(a, secrets) for a in c.server.argv)}")
            echo(f"  bench:  {shlex.join(redact_text(a, secrets) for a in c.bench.argv)}")
            echo(f"  repeats: {c.bench.warmup} warmup + {c.bench.repeats}")


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


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
@click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results"),
    show_default=True,
    help="Where run bundles are written.",
)
@click.option("--resume", "resume", default=None, help="Continue RUN (an id or a run directory).")
@count_option("--max-parallel", 16, "Hosts at once.")
@reports_errors
def apply(
    playbook: Path,
    inventory: Sequence[Path],
    extra_vars: tuple[str, ...],
    limit: str | None,
    results_dir: Path,
    resume: str | None,
    max_parallel: int,
) -> None:
    """Run every cell of PLAYBOOK and write a result bundle."""
    from orchestrator.execute.controller import Run
    from orchestrator.execute.outcomes import ApplyOptions
    from orchestrator.execute.resume import check_resume_plan, resume_command, resume_target

    planned = Planned(playbook, inventory, extra_vars, limit)
    planned.warn()
    run_id = None
    if resume is not None:
        results_dir, run_id = resume_target(resume, results_dir)
        check_resume_plan(results_dir / run_id, [c.id for c in planned.cells])
    argv = ["orch", *sys.argv[1:]]
    options = ApplyOptions(
        results_dir=results_dir,
        run_id=run_id,
        resume=resume is not None,
        max_parallel=max_parallel,
        argv=argv,
    )

    secret_vars = planned.variables
    run = Run(
        playbook_name=planned.playbook.name,
        playbook_files=planned.playbook.files,
        playbook_dir=planned.playbook.path.parent,
        inventory=planned.inventory,
        cells=planned.cells,
        options=options,
        secret_vars=secret_vars,
    )
    click.echo(f"run {run.run_id}: {len(planned.cells)} cells -> {run.writer.path}", err=True)
    try:
        outcome = run.execute()
    except KeyboardInterrupt:
        _interrupted(resume_command(argv, run.writer.path))
    _print_summary(outcome.cells)
    click.echo(f"\nbundle: {outcome.path}")
    sys.exit(EXIT_OK if outcome.ok else EXIT_FAILED)


def _print_summary(cells: dict[str, Any]) -> None:
    rows = []
    for cid, o in sorted(cells.items(), key=lambda item: item[1].host):  # stable: run order
        reason = (o.reason or "").splitlines()[0] if o.reason else ""
        if o.earlier:  # a resume lists the whole run, saying which cells it did not run
            reason = f"(earlier) {reason}".strip()
        seconds = o.seconds if o.seconds is not None else ""
        rows.append([o.host, cid, o.status, o.failed_step or "", seconds, reason])
    headers = ["host", "cell", "status", "failed at", "seconds", "reason"]
    click.echo(tabulate(rows, headers=headers))


results_option = click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("results"),
    show_default=True,
    help="Where run bundles live (run ids are looked up here).",
)


@main.command()
@inventory_option
@limit_option
@click.option("--json", "as_json", is_flag=True, help="The full snapshots as JSON.")
@reports_errors
def facts(inventory: Sequence[Path], limit: str | None, as_json: bool) -> None:
    """Snapshot hosts now (the same probe as a run), without running anything."""
    from orchestrator.config.inventory import load_inventory
    from orchestrator.config.patterns import select_hosts_checked
    from orchestrator.execute.facts import SUMMARY_HEADERS, probe_hosts, summary_row

    inv = load_inventory(inventory)
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
@click.argument("results_dir", type=click.Path(path_type=Path), default=Path("results"))
@reports_errors
def runs(results_dir: Path) -> None:
    """List runs with time, playbook, hosts and cells passed/failed."""
    from orchestrator.results.runs import list_runs

    given = click.get_current_context().get_parameter_source("results_dir")
    default = given == click.core.ParameterSource.DEFAULT or results_dir == Path("results")
    if not results_dir.exists() and default:
        click.echo(f"no runs under {results_dir}")  # nothing has run here yet
        return
    if not results_dir.is_dir():
        what = "is not a directory" if results_dir.exists() else "does not exist"
        raise InputError(
            f"{results_dir} {what}",
            hint="give the folder that holds the run bundles, where `orch apply --results` wrote",
        )
    found = list_runs(results_dir)
    for r in found:
        if r.error:  # one damaged run must not hide the others
            _echo_from_bundle(f"skipped {r.path}: {r.error}", err=True)
    rows = [
        [
            r.run_id,
            r.started or "",
            r.playbook or "",
            r.status or "",
            ",".join(r.hosts),
            f"{r.passed}/{r.cells}",
            r.failed or "",
            r.not_run or "",
        ]
        for r in found
        if not r.error
    ]
    if not rows:
        click.echo(f"no runs under {results_dir}")
        return
    _echo_from_bundle(
        tabulate(
            rows,
            headers=[
                "run",
                "started",
                "playbook",
                "status",
                "hosts",
                "passed",
                "failed",
                "not run",
            ],
        )
    )


@main.command()
@click.argument("ref")
@results_option
@reports_errors
def show(ref: str, results_dir: Path) -> None:
    """What ran, where, its status and failure reason, metrics, and paths to the full logs.

    REF is a run (directory, .tar.gz or id) or a cell (its directory or RUN/CELL-ID-PREFIX).
    """
    from orchestrator.results.read import RunBundle, open_run_or_cell
    from orchestrator.results.show import describe_cell, describe_run

    opened = open_run_or_cell(ref, results_dir)
    if isinstance(opened, RunBundle):
        _echo_from_bundle(describe_run(opened))
    else:
        _echo_from_bundle(describe_cell(opened))


@main.command()
@click.argument("ref")
@results_option
@click.option("--by", "by", default=None, help="Pivot: this axis's values become columns.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "md", "csv", "json"]),
    default="table",
    show_default=True,
)
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None, help="PNG file.")
@click.option(
    "-m",
    "--metric",
    "metrics",
    multiple=True,
    help="Metrics to show (repeatable). Default: the headline ones; `all` for every metric.",
)
@reports_errors
def report(
    ref: str,
    results_dir: Path,
    by: str | None,
    fmt: str,
    plot: Path | None,
    metrics: tuple[str, ...],
) -> None:
    """Cells x metrics (median and spread over repeats), optionally pivoted by an axis.

    CSV and JSON are tidy: one row per cell x repeat x metric.
    """
    from orchestrator.analyze.evidence import load_cells
    from orchestrator.analyze.report import build_report, chosen_metrics, plot_report, render_report
    from orchestrator.results.read import local_path

    bundle = local_path(ref, results_dir)
    rep = build_report(load_cells(bundle), by=by)
    if metrics or fmt in ("table", "md"):  # CSV and JSON keep every metric unless asked
        rep.metrics = chosen_metrics(rep, metrics)
    _echo_from_bundle(render_report(rep, fmt))  # type: ignore[arg-type]
    if plot is not None:
        axis = by or next(iter(rep.axes), None)
        if not axis:
            raise InputError("--plot needs an axis to draw against", hint="add --by AXIS")
        click.echo(f"plot: {plot_report(rep, axis, plot)}", err=True)


@main.command()
@click.argument("a")
@click.argument("b")
@results_option
@click.option("--json", "as_json", is_flag=True, help="The complete diff as JSON.")
@click.option(
    "--repo",
    "repo",
    type=click.Path(path_type=Path),
    default=None,
    help="A clone of the serving repo, for the commits between A and B.",
)
@click.option(
    "--out",
    "spill_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where long sections are written whole (default: a folder named after A and B).",
)
@reports_errors
def diff(
    a: str, b: str, results_dir: Path, as_json: bool, repo: Path | None, spill_dir: Path | None
) -> None:
    """What changed between A and B (two runs, or two cells), most likely causes first."""
    from orchestrator.analyze.diff import diff_paths
    from orchestrator.analyze.diff_render import render_diff
    from orchestrator.results.read import local_path

    pa, pb = local_path(a, results_dir), local_path(b, results_dir)
    result = diff_paths(pa, pb, repo_path=repo)
    if as_json:
        _echo_from_bundle(render_diff(result, "json"))
        return
    spill = spill_dir or _spill_dir(f"orch-diff-{pa.name}-vs-{pb.name}")
    _echo_from_bundle(render_diff(result, "text", spill_dir=spill))


def _spill_dir(name: str) -> Path:
    """Where long diff sections go whole; created only when a section needs it."""
    import os
    import tempfile

    return Path(tempfile.gettempdir()) / f"{name[:80]}-{os.getpid()}"


@main.command()
@click.argument("ref")
@results_option
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None)
@reports_errors
def pack(ref: str, results_dir: Path, out: Path | None) -> None:
    """Write RUN as one .tar.gz to share; every reader accepts it."""
    from orchestrator.results.archive import pack as pack_run
    from orchestrator.results.read import resolve_run

    click.echo(str(pack_run(resolve_run(ref, results_dir), out)))


def _tolerance(text: str) -> float:
    """`5%` or `0.05` -> 0.05 (the playbook's one tolerance parser), below 100%."""
    from orchestrator.config.fields import FieldProblem, parse_tolerance

    try:
        value = parse_tolerance(text, numeric_text=True)
    except FieldProblem:
        raise InputError(f"bad tolerance {text!r}", hint="write 5% or 0.05") from None
    if not 0 <= value < 1:
        hint = f"did you mean {text}%?" if value >= 1 and not text.endswith("%") else None
        raise InputError(f"tolerance {text!r} must be between 0% and 100%", hint=hint)
    return value


@main.command()
@click.argument("ref")
@results_option
@inventory_option
@click.option("--no-drift", is_flag=True, help="Skip re-snapshotting the hosts.")
@click.option("--rerun", is_flag=True, help="Run the cells again and check they reproduce.")
@click.option("--cells", "selector", default=None, help="Which cells to rerun (axis=v,... or id).")
@click.option("--tolerance", default="5%", show_default=True, help="Allowed relative change.")
@reports_errors
def audit(
    ref: str,
    results_dir: Path,
    inventory: Sequence[Path],
    no_drift: bool,
    rerun: bool,
    selector: str | None,
    tolerance: str,
) -> None:
    """Is RUN intact (manifest), are its hosts as recorded (drift), does it reproduce (--rerun)?

    Exit 0 only when every check asked for passes.
    """
    from orchestrator.execute.auditing import AuditRequest
    from orchestrator.execute.auditing import audit as run_audit

    request = AuditRequest(
        ref=ref,
        results_dir=results_dir,
        inventory=inventory,
        drift=not no_drift,
        rerun=rerun,
        selector=selector,
        tolerance=_tolerance(tolerance),
        argv=["orch", *sys.argv[1:]],
    )
    ok = run_audit(
        request, out=_echo_from_bundle, err=lambda line: _echo_from_bundle(line, err=True)
    )
    sys.exit(EXIT_OK if ok else EXIT_FAILED)


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
    from orchestrator.config.inventory import load_inventory
    from orchestrator.execute.replay import (
        inventory_from_bundle,
        made_here,
        retarget,
        run_recorded,
        what_runs,
    )
    from orchestrator.results.read import open_cell

    record = open_cell(ref, results_dir)
    if record.run is None:
        raise InputError(f"{ref}: not inside a run bundle", hint="pass RUN/CELL")
    inv = load_inventory(inventory) if inventory else inventory_from_bundle(record.run)
    cells = retarget([record.cell], inv, limit)
    if not made_here(record.run):
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
        record.run,
        cells,
        inv,
        results_dir=results_dir,
        argv=["orch", *sys.argv[1:]],
        provenance={"replay_of": f"{record.run.run_id}/{record.id}"},
    )
    _print_summary(outcome.cells)
    click.echo(f"\nbundle: {outcome.path}  (replay of {record.run.run_id}/{record.id})")
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
    "--metric", default=None, help="Default: the first expected metric, else output_throughput."
)
@count_option("--repeats", 3, "Repeats per run at inner commits.")
# two at least: the ends' spread is the noise every inner point is judged against
@count_option("--end-repeats", 5, "Repeats at good and bad.", minimum=2)
@count_option("--max-runs", 4, "Cap on runs per commit.")
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
    metric: str | None,
    repeats: int,
    end_repeats: int,
    max_runs: int,
    all_parents: bool,
    show_run: str | None,
    resume_run: str | None,
) -> None:
    """Find the first bad commit for one cell of PLAYBOOK, noise-aware."""
    from orchestrator.analyze.bisect import BisectError, BisectPolicy
    from orchestrator.execute.bisection import (
        Bisection,
        BisectSetup,
        MetricNotReported,
        pick_bisect_cell,
        render_bisect,
        show_bisect,
    )
    from orchestrator.execute.resume import resume_command
    from orchestrator.results.read import open_run

    if show_run:
        click.echo(show_bisect(show_run, results_dir))
        return
    if playbook is None or not selector or not good or not bad:
        raise InputError("bisect needs PLAYBOOK, --cell, --good and --bad")
    planned = Planned(playbook, inventory, extra_vars, limit)
    base, commit_axes = pick_bisect_cell(planned.cells, selector)
    if metric is None:
        metric = next(iter(base.expect), "output_throughput")
    run_id = None
    if resume_run:
        run_id = open_run(resume_run, results_dir).path.name
    setup = BisectSetup(
        base=base,
        host=planned.inventory.hosts[base.host],
        inventory=planned.inventory,
        good=good,
        bad=bad,
        metric=metric,
        results_dir=results_dir,
        playbook_name=planned.playbook.name,
        playbook_files=planned.playbook.files,
        playbook_dir=planned.playbook.path.parent,
        argv=["orch", *sys.argv[1:]],
        first_parent=not all_parents,
        commit_axes=commit_axes,
        secret_vars=planned.variables,
        policy=BisectPolicy(end_repeats=end_repeats, repeats=repeats, max_runs_per_point=max_runs),
    )
    job = Bisection(setup, run_id=run_id)
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


def _attach_sim() -> None:
    from orchestrator.sim.cli import sim

    main.add_command(sim)


_attach_sim()


def _metric_not_reported(exc: MetricNotReported, run_dir: Path | None) -> None:
    """The error, then the whole command that resumes with a reported metric (its own line,
    so it copies clean); what was measured is read back, not measured again."""
    from orchestrator.execute.resume import resume_command, without_option

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


def _interrupted(resume: str | None) -> None:
    """Ctrl-C: servers were stopped by their runners; say how to go on (`resume`, from
    `resume_command`), exit 130."""
    tail = f"; continue with: {resume}" if resume else ""
    click.echo(f"interrupted: servers stopped{tail}", err=True)
    sys.exit(130)


# click >= 8.2 raises this (a UsageError) for a group called without a command; 8.1 prints the
# help itself. Catching the empty tuple matches nothing.
_NO_ARGS_IS_HELP: tuple[type[click.ClickException], ...] = tuple(
    t for t in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if t is not None
)


def run() -> None:
    """Entry point: Ctrl-C anywhere exits 130 without a traceback (click's own says 1).

    A bug of orch's own is one line plus the file holding its traceback (ORCH_DEBUG=1 shows it
    raw): a person running experiments should not have to read a stack to know what happened.
    """
    import os

    try:
        code = main.main(standalone_mode=False, prog_name="orch")
    except (KeyboardInterrupt, click.exceptions.Abort):
        _interrupted(None)
    except _NO_ARGS_IS_HELP as exc:  # `orch` alone: the help, as before
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        # One line, like every other orch error; click's own is 3-4 (usage, try, blank, error).
        where = exc.ctx.command_path if exc.ctx is not None else "orch"
        click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("ORCH_DEBUG"):
            raise
        _internal_error(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _internal_error(exc: Exception) -> None:
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile(
        "w", prefix="orch-traceback-", suffix=".txt", delete=False
    ) as fh:
        traceback.print_exception(exc, file=fh)
    click.echo(
        f"error: internal error: {type(exc).__name__}: {exc} (a bug in orch; the traceback is in "
        f"{fh.name}; ORCH_DEBUG=1 shows it here)",
        err=True,
    )
    sys.exit(EXIT_FAILED)


__all__ = ["EXIT_BAD_INPUT", "main", "run"]
