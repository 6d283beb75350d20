"""The `orch` command line: arguments in, calls, output out.

This is the only place that turns an OrchError into a message and an exit code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click
from tabulate import tabulate

from orchestrator import __version__
from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, InputError, OrchError

F = TypeVar("F", bound=Callable[..., Any])


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


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
    default=None,
    help="Inventory file (Ansible YAML or `ansible-inventory --list` JSON). Default: localhost.",
)
extra_vars_option = click.option(
    "-e",
    "--extra-vars",
    "extra_vars",
    multiple=True,
    help="k=v pairs, @file.yml, or a JSON/YAML mapping; highest precedence.",
)
limit_option = click.option("-l", "--limit", default=None, help="Further limit hosts (a pattern).")


class Planned:
    """A loaded playbook, its inventory and the cells they give."""

    def __init__(
        self,
        playbook: Path,
        inventory: Path | None,
        extra_vars: Sequence[str],
        limit: str | None,
    ) -> None:
        from orchestrator.config.inventory import load_inventory
        from orchestrator.config.playbook import load_playbook, parse_extra_vars
        from orchestrator.plan.build import build_cells

        self.inventory = load_inventory(inventory)
        self.extra = parse_extra_vars(list(extra_vars))
        self.playbook = load_playbook(playbook, self.extra)
        self.cells = build_cells(self.playbook, self.inventory, limit=limit)


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
    playbook: Path, inventory: Path | None, extra_vars: tuple[str, ...], limit: str | None
) -> None:
    """Load, check and render PLAYBOOK without running anything."""
    planned = Planned(playbook, inventory, extra_vars, limit)
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
    inventory: Path | None,
    extra_vars: tuple[str, ...],
    limit: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Show the cells PLAYBOOK expands to: cells x axes x host."""
    import shlex

    planned = Planned(playbook, inventory, extra_vars, limit)
    cells = planned.cells
    if as_json:
        click.echo(json.dumps([c.model_dump(mode="json") for c in cells], indent=2))
        return
    axes: list[str] = []
    for c in cells:
        axes.extend(a for a in c.axes if a not in axes)
    rows = [
        [c.id, c.host, *(_short(c.axes.get(a, "")) for a in axes), c.repo.version if c.repo else ""]
        for c in cells
    ]
    click.echo(tabulate(rows, headers=["cell", "host", *axes, "repo version"]))
    hosts = sorted({c.host for c in cells})
    click.echo(f"\n{len(cells)} cells on {len(hosts)} host(s): {', '.join(hosts)}")
    if verbose:
        for c in cells:
            click.echo(f"\n== {c.id} on {c.host}")
            for k, v in c.env.items():
                shown = "***REDACTED***" if k in c.secrets else v
                click.echo(f"  env {k}={shlex.quote(shown)}")
            if c.server is not None:
                click.echo(f"  server: {shlex.join(c.server.argv)}")
            click.echo(f"  bench:  {shlex.join(c.bench.argv)}")
            click.echo(f"  repeats: {c.bench.warmup} warmup + {c.bench.repeats}")


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
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Where run bundles are written.",
)
@click.option("--resume", "resume", default=None, help="Continue RUN (an id or a run directory).")
@click.option("--max-parallel", default=16, show_default=True, help="Hosts at once.")
@reports_errors
def apply(
    playbook: Path,
    inventory: Path | None,
    extra_vars: tuple[str, ...],
    limit: str | None,
    results_dir: Path,
    resume: str | None,
    max_parallel: int,
) -> None:
    """Run every cell of PLAYBOOK and write a result bundle."""
    from orchestrator.execute.controller import ApplyOptions
    from orchestrator.execute.controller import apply as run_apply

    planned = Planned(playbook, inventory, extra_vars, limit)
    run_id = None
    if resume is not None:
        rpath = Path(resume)
        if rpath.is_dir():
            results_dir, run_id = rpath.parent, rpath.name
        else:
            run_id = resume
        if not (results_dir / run_id / "run.json").is_file():
            raise InputError(
                f"no run {run_id!r} under {results_dir}", hint="`orch runs` lists the runs"
            )
    options = ApplyOptions(
        results_dir=results_dir,
        run_id=run_id,
        resume=resume is not None,
        max_parallel=max_parallel,
        argv=["orch", *sys.argv[1:]],
    )

    def started(run_id: str, path: Path) -> None:
        click.echo(f"run {run_id}: {len(planned.cells)} cells -> {path}", err=True)

    secret_vars = {**dict(planned.playbook.data.get("vars") or {}), **planned.extra}
    try:
        outcome = run_apply(
            playbook_name=planned.playbook.name,
            playbook_files=planned.playbook.files,
            playbook_dir=planned.playbook.path.parent,
            inventory=planned.inventory,
            cells=planned.cells,
            options=options,
            secret_vars=secret_vars,
            on_start=started,
        )
    except KeyboardInterrupt:
        click.echo("interrupted: servers stopped; continue with --resume", err=True)
        sys.exit(130)
    _print_summary(outcome.cells)
    click.echo(f"\nbundle: {outcome.path}")
    sys.exit(EXIT_OK if outcome.ok else EXIT_FAILED)


def _print_summary(cells: dict[str, Any]) -> None:
    rows = []
    for cid, o in cells.items():
        reason = (o.reason or "").splitlines()[0] if o.reason else ""
        rows.append([cid, o.host, o.status, o.seconds if o.seconds is not None else "", reason])
    click.echo(tabulate(rows, headers=["cell", "host", "status", "seconds", "reason"]))


results_option = click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Where run bundles live (run ids are looked up here).",
)


@main.command()
@inventory_option
@limit_option
@click.option("--json", "as_json", is_flag=True, help="The full snapshots as JSON.")
@reports_errors
def facts(inventory: Path | None, limit: str | None, as_json: bool) -> None:
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
    from orchestrator.results.bundle import list_runs

    rows = [
        [
            r.run_id,
            r.started or "",
            r.playbook or "",
            r.status or "",
            ",".join(r.hosts),
            f"{r.passed}/{r.cells}",
            r.failed or "",
        ]
        for r in list_runs(results_dir)
    ]
    if not rows:
        click.echo(f"no runs under {results_dir}")
        return
    click.echo(
        tabulate(
            rows, headers=["run", "started", "playbook", "status", "hosts", "passed", "failed"]
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
    from orchestrator.results.bundle import open_cell, open_run
    from orchestrator.results.show import describe_cell, describe_run

    path = Path(ref)
    is_run = (path / "run.json").is_file() or ref.endswith((".tar.gz", ".tgz"))
    if not is_run and "/" not in ref.rstrip("/") and not (path / "cell.json").is_file():
        is_run = True
    if is_run:
        click.echo(describe_run(open_run(ref, results_dir)))
    else:
        click.echo(describe_cell(open_cell(ref, results_dir)))


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
@reports_errors
def report(ref: str, results_dir: Path, by: str | None, fmt: str, plot: Path | None) -> None:
    """Cells x metrics (median and spread over repeats), optionally pivoted by an axis.

    CSV and JSON are tidy: one row per cell x repeat x metric.
    """
    from orchestrator.analyze.evidence import load_cells
    from orchestrator.analyze.report import build_report, plot_report, render_report

    bundle = _open_run_or_cell(ref, results_dir)
    rep = build_report(load_cells(bundle), by=by)
    click.echo(render_report(rep, fmt))  # type: ignore[arg-type]
    if plot is not None:
        axis = by or next(iter(rep.axes), None)
        if not axis:
            raise InputError("--plot needs an axis to draw against", hint="add --by AXIS")
        click.echo(f"plot: {plot_report(rep, axis, plot)}", err=True)


def _open_run_or_cell(ref: str, results_dir: Path) -> Path:
    """A local directory for a run or cell reference (a packed run is extracted)."""
    from orchestrator.results.bundle import open_cell, open_run

    path = Path(ref)
    if path.is_dir():
        return path
    if "/" in ref.rstrip("/") and not ref.endswith((".tar.gz", ".tgz")):
        return open_cell(ref, results_dir).path
    return open_run(ref, results_dir).path


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
    from orchestrator.analyze.diff import diff_cells, diff_runs, render_diff
    from orchestrator.analyze.evidence import load_cells

    pa, pb = _open_run_or_cell(a, results_dir), _open_run_or_cell(b, results_dir)
    ca, cb = load_cells(pa), load_cells(pb)
    both_cells = (pa / "cell.json").is_file() and (pb / "cell.json").is_file()
    result: Any = (
        diff_cells(ca[0], cb[0], repo_path=repo)
        if both_cells
        else diff_runs(ca, cb, repo_path=repo)
    )
    if as_json:
        click.echo(render_diff(result, "json"))
        return
    spill = spill_dir or Path(tempfile_dir(f"orch-diff-{pa.name}-vs-{pb.name}"))
    click.echo(render_diff(result, "text", spill_dir=spill))


def tempfile_dir(name: str) -> str:
    """A fresh folder for spilled diff sections, under the system temp dir."""
    import tempfile

    return tempfile.mkdtemp(prefix=f"{name[:80]}-")


@main.command()
@click.argument("ref")
@results_option
@click.option("-o", "--out", type=click.Path(path_type=Path), default=None)
@reports_errors
def pack(ref: str, results_dir: Path, out: Path | None) -> None:
    """Write RUN as one .tar.gz to share; every reader accepts it."""
    from orchestrator.results.bundle import pack as pack_run
    from orchestrator.results.bundle import resolve_run

    click.echo(str(pack_run(resolve_run(ref, results_dir), out)))


def _attach_sim() -> None:
    from orchestrator.sim.cli import sim

    main.add_command(sim)


_attach_sim()


def run() -> None:
    """Entry point that also maps a stray KeyboardInterrupt to 130 without a traceback."""
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["EXIT_BAD_INPUT", "main", "run"]
