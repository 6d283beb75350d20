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


def run() -> None:
    """Entry point that also maps a stray KeyboardInterrupt to 130 without a traceback."""
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["EXIT_BAD_INPUT", "main", "run"]
