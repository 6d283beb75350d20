"""The commands that read bundles: runs, show, report, diff, pack, audit."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import click
from tabulate import tabulate

from orchestrator.cli.common import (
    _echo_from_bundle,
    inventory_option,
    main,
    reports_errors,
    results_option,
    write_whole,
)
from orchestrator.errors import EXIT_FAILED, EXIT_OK, InputError


@main.command()
@click.argument("folder", type=click.Path(path_type=Path), required=False)
@results_option
@reports_errors
def runs(folder: Path | None, results_dir: Path) -> None:
    """List runs with time, playbook, hosts and cells passed/failed.

    The runs under FOLDER, the same as --results FOLDER (default: $ORCH_RESULTS, else results).
    """
    from orchestrator.results.runs import list_runs

    given = click.get_current_context().get_parameter_source("results_dir")
    if folder is not None:
        if given == click.core.ParameterSource.COMMANDLINE and folder != results_dir:
            raise InputError(
                f"two folders given: {folder} and --results {results_dir}", hint="give one"
            )
        results_dir, given = folder, click.core.ParameterSource.COMMANDLINE
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
    from orchestrator.analyze.metrics import cell_metric_unit
    from orchestrator.analyze.starts import run_starts
    from orchestrator.results.read import RunBundle, open_run_or_cell
    from orchestrator.results.show import describe_cell, describe_run

    opened = open_run_or_cell(ref, results_dir)
    if isinstance(opened, RunBundle):
        starts = run_starts(opened)
        text = starts.text() if starts.cells else None
        _echo_from_bundle(
            describe_run(
                opened, starts=text, host_starts=starts.host_texts(), unit_of=cell_metric_unit
            )
        )
    else:
        _echo_from_bundle(describe_cell(opened, unit_of=cell_metric_unit))


@main.command()
@click.argument("ref")
@results_option
@click.option("--by", "by", default=None, help="Pivot: this axis's values become columns.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "md", "csv", "json", "html"]),
    default="table",
    show_default=True,
)
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Write the report to this file instead of the terminal.",
)
@click.option(
    "--plot", "plot", type=click.Path(path_type=Path), default=None, help="A .png/.svg/.pdf file."
)
@click.option(
    "-m",
    "--metric",
    "metrics",
    multiple=True,
    help="Metrics to show (repeatable). Default: the headline ones; `all` for every metric.",
)
@click.option(
    "--baseline",
    default=None,
    help="A Δ% column against these cells (commit=good: each cell vs the same configuration at "
    "commit=good), or one cell id.",
)
@click.option(
    "--sweep",
    default=None,
    help="The concurrency or request-rate axis of the throughput-latency view "
    "(default: an axis named so, when there is one).",
)
@click.option(
    "--diff",
    "diff_cells",
    nargs=2,
    default=None,
    metavar="CELL_A CELL_B",
    help="Add the diff of two cells of the run (ids, id prefixes or directories).",
)
@reports_errors
def report(
    ref: str,
    results_dir: Path,
    by: str | None,
    fmt: str,
    out: Path | None,
    plot: Path | None,
    metrics: tuple[str, ...],
    baseline: str | None,
    sweep: str | None,
    diff_cells: tuple[str, str] | None,
) -> None:
    """Cells x metrics (median and spread over repeats, with units), optionally pivoted by an
    axis, with a Δ% against a baseline and, for sweeps, the throughput-latency Pareto view.

    CSV and JSON are tidy: one row per cell x repeat x metric. HTML is one self-contained file
    (tables, plots when matplotlib is installed, every cell's status and reason).
    """
    import json

    from orchestrator.analyze.pareto import (
        build_sweep,
        front_rows,
        gpu_user_front,
        render_gpu_user,
        render_sweep,
        sweep_axis,
    )
    from orchestrator.analyze.plot.charts import plot_report, plot_telemetry
    from orchestrator.analyze.report.slo import capacity_rows
    from orchestrator.analyze.report.tables import (
        chosen_metrics,
        load_report,
        render_report,
        tidy_rows,
    )
    from orchestrator.results.read import local_path

    if diff_cells and fmt in ("csv", "json"):
        raise InputError(
            f"--diff has no place in tidy {fmt}", hint="use --format html/table/md, or orch diff"
        )
    bundle = local_path(ref, results_dir)
    rep = load_report(bundle, by=by, baseline=baseline)
    if metrics or fmt in ("table", "md", "html"):  # CSV and JSON keep every metric unless asked
        rep.metrics = chosen_metrics(rep, metrics)
    along = sweep_axis(rep, sweep)
    view = build_sweep(rep, along) if along else None
    if sweep and view is None:
        raise InputError(
            "no throughput-latency view: the cells report no throughput or no TTFT/TPOT",
            key_path="--sweep",
        )
    # a sweep is drawn along its axis, so its configurations are the same series in every panel
    axis = by or along or next(iter(rep.axes), None)
    front = gpu_user_front(rep)  # throughput per GPU against per user, as InferenceX draws it
    diff_text = _report_diff(bundle, diff_cells, results_dir, fmt) if diff_cells else None
    if fmt == "html":
        from orchestrator.analyze.report.html import render_html, report_figures

        figures, note = report_figures(rep, axis, view)
        diff = (f"diff {diff_cells[0]} vs {diff_cells[1]}", diff_text or "") if diff_cells else None
        text = render_html(rep, sweep=view, figures=figures, plot_note=note, diff=diff, front=front)
    elif fmt == "json" and front is not None:  # the rows say which cells are on the front
        cells = [row.cell for row in rep.rows]
        rows = front_rows(tidy_rows(rep), front) + capacity_rows(cells, rep.run_id)
        text = json.dumps(rows, indent=2, default=str) + "\n"
    else:
        text = render_report(rep, fmt)  # type: ignore[arg-type]
        if view is not None and fmt in ("table", "md"):
            text += "\n" + render_sweep(view, rep, fmt)
        if front is not None and fmt in ("table", "md"):
            text += "\n" + render_gpu_user(front, rep, fmt)
        if diff_text:
            text += "\n" + diff_text
    if out is not None:
        try:
            write_whole(out, text)
        except OSError as exc:
            raise InputError(
                f"cannot write the report to {str(out)!r}: {exc.strerror or exc}", key_path="-o"
            ) from None
        click.echo(f"report: {out}", err=True)
    else:
        _echo_from_bundle(text)
    if plot is not None:
        if not axis:
            raise InputError("--plot needs an axis to draw against", hint="add --by AXIS")
        click.echo(f"plot: {plot_report(rep, axis, plot, view)}", err=True)
        if front is not None:
            from orchestrator.analyze.plot.front import plot_gpu_user

            click.echo(f"per-GPU vs per-user plot: {plot_gpu_user(front, rep, plot)}", err=True)
        strips = plot_telemetry(rep, plot)
        if strips is not None:
            click.echo(f"telemetry plot: {strips}", err=True)


def _report_diff(bundle: Path, cells: tuple[str, str], results_dir: Path, fmt: str) -> str:
    """The diff of two cells of the run, as `orch diff` prints it (whole, for HTML)."""
    from orchestrator.analyze.diff.cells import diff_paths
    from orchestrator.analyze.diff.render import render_diff
    from orchestrator.results.read import open_cell

    a, b = (
        Path(c) if Path(c).is_dir() else open_cell(f"{bundle}/{c}", results_dir).path for c in cells
    )
    result = diff_paths(a, b)
    spill = None if fmt == "html" else _spill_dir(f"orch-diff-{a.name}-vs-{b.name}")
    return render_diff(result, "text", spill_dir=spill)


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
    from orchestrator.analyze.diff.cells import diff_paths
    from orchestrator.analyze.diff.render import render_diff
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
    from orchestrator.execute.audit.run import AuditRequest
    from orchestrator.execute.audit.run import audit as run_audit

    if selector is not None and not rerun:  # it would pick nothing, silently
        raise InputError(
            "--cells picks the cells to run again: it needs --rerun", key_path="--cells"
        )
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


@main.command(name="metrics")
@click.argument("adapter")
@click.option("--json", "as_json", is_flag=True, help="The catalogue as JSON.")
@reports_errors
def metrics_catalogue(adapter: str, as_json: bool) -> None:
    """List the metrics ADAPTER reports: unit, which way is better, source, client versions.

    ADAPTER is a bench adapter (what `expect:` may name; telemetry metrics come on top) or a
    server adapter (metrics.json's `server` block).
    """
    import json

    from orchestrator.adapters import (
        BENCH_ADAPTERS,
        COST_CATALOGUE,
        ENGINE_CATALOGUE,
        SERVER_ADAPTERS,
        TELEMETRY_CATALOGUE,
        bench_adapter,
        server_adapter,
    )

    if adapter not in BENCH_ADAPTERS and adapter not in SERVER_ADAPTERS:
        import difflib

        known = sorted(set(BENCH_ADAPTERS) | set(SERVER_ADAPTERS))
        close = difflib.get_close_matches(adapter, known, n=1, cutoff=0.5)
        raise InputError(
            f"unknown adapter {adapter!r}",
            hint=f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known),
        )
    sections = []
    if adapter in BENCH_ADAPTERS:
        bench = bench_adapter(adapter)
        sections.append(("bench", bench.catalogue(), bench.open_ended))
        sections.append(("telemetry", TELEMETRY_CATALOGUE, False))
        sections.append(("derived", COST_CATALOGUE, False))
        sections.append(("engine", ENGINE_CATALOGUE, False))  # the server's /metrics
    if adapter in SERVER_ADAPTERS:
        sections.append(("server", server_adapter(adapter).catalogue(), False))
    if as_json:
        doc = {
            kind: {"open_ended": open_ended, "metrics": [i.to_json() for i in infos]}
            for kind, infos, open_ended in sections
        }
        click.echo(json.dumps({"adapter": adapter, **doc}, indent=2))
        return
    for kind, infos, open_ended in sections:
        if open_ended:
            click.echo(
                f"{kind}: open-ended: every number of the result file and each regex under "
                "bench.metrics, units unknown"
            )
            continue
        if not infos:
            click.echo(f"{kind}: none")
            continue
        rows = [[i.name, i.unit, i.better, i.source, ", ".join(i.versions) or "all"] for i in infos]
        click.echo(f"{kind}:")
        click.echo(tabulate(rows, headers=["metric", "unit", "better", "source", "versions"]))
        click.echo("")
