"""The results history: `orch index` and `orch history`."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from tabulate import tabulate

from orchestrator.cli.common import _echo_from_bundle, main, reports_errors, results_option
from orchestrator.errors import EXIT_FAILED, EXIT_OK, InputError


@main.command(name="index")
@click.argument("refs", nargs=-1)
@results_option
@reports_errors
def index_command(refs: Sequence[str], results_dir: Path) -> None:
    """Add runs (RUN ids, folders or packed bundles; default every run under --results) to the
    results history (results/history.sqlite, or $ORCH_DB). Runs indexed already are skipped; a
    damaged bundle is refused with the reason. Exit 1 when one was refused."""
    from orchestrator.app.history import index_runs

    _check_results(results_dir)
    done = index_runs(results_dir, refs)
    for item in done:
        if item.refused:
            click.echo(f"{item.run_id}: refused: {item.refused}", err=True)
        elif item.skipped:
            click.echo(f"{item.run_id}: {item.skipped}")
        else:
            click.echo(f"{item.run_id}: indexed {item.cells} cells")
    sys.exit(EXIT_FAILED if any(i.refused for i in done) else EXIT_OK)


@main.command(name="history")
@click.argument("playbook", required=False)
@click.option("-m", "--metric", default="output_throughput", show_default=True)
@click.option("--since", default=None, help="Only runs this recent: 30d, 12h, 90m.")
@click.option(
    "--cells",
    "selector",
    default=None,
    help="Only the configurations this picks: axis=value,...,host=NAME (as apply's --cells).",
)
@click.option(
    "--by",
    type=click.Choice(["time", "commit"]),
    default="time",
    show_default=True,
    help="Order runs by start time, or by their commit's date.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json", "html"]), default="table",
    show_default=True,
)  # fmt: skip
@click.option("--min-change", default=0.03, show_default=True, help="Smallest step that counts.")
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="With --format html: the folder the dashboard (index.html) is written to.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Also draw the series into F.png (.svg, .pdf); needs orch[plot].",
)
@results_option
@reports_errors
def history_command(
    playbook: str | None,
    metric: str,
    since: str | None,
    selector: str | None,
    by: str,
    fmt: str,
    min_change: float,
    out_dir: Path | None,
    plot_path: Path | None,
    results_dir: Path,
) -> None:
    """METRIC over runs, one series per configuration (PLAYBOOK's name, or all), change points
    marked (E-Divisive means, a permutation test). Runs not yet in the history are indexed
    first."""
    from orchestrator.app.history import history, index_runs

    _check_results(results_dir)
    index_runs(results_dir, verify=False)
    found = history(results_dir, metric, playbook=playbook, since=since, by=by,
                    min_change=min_change, selector=selector)  # fmt: skip
    if plot_path is not None:
        from orchestrator.analyze.plot.history import plot_history

        click.echo(f"plot: {plot_history(found, plot_path)}", err=True)
    if fmt == "json":
        click.echo(json.dumps(_json(found, results_dir), indent=2))
        return
    if fmt == "html":
        from orchestrator.analyze.history_html import render_dashboard
        from orchestrator.cli.common import write_whole

        if out_dir is None:
            raise InputError("--format html writes a folder: give -o DIR", key_path="--out")
        out_dir.mkdir(parents=True, exist_ok=True)
        write_whole(out_dir / "index.html", render_dashboard(found, results_dir))
        click.echo(str(out_dir / "index.html"))
        return
    if not found.series:
        click.echo(f"no run in the history reports {metric}"
                   + (f" for playbook {playbook!r}" if playbook else ""))  # fmt: skip
        return
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["series", "run", "started", "commit", "requested", metric, "n", "unit",
                         "change_point"])  # fmt: skip
        for s in found.series:
            changes = {c.point.index: f"{c.point.change:+.4f}" for c in found.steps[s.series]}
            for i, p in enumerate(s.points):
                writer.writerow([s.label, p.run_id, p.started, p.commit_sha, p.requested,
                                 p.median, p.n, p.unit, changes.get(i, "")])  # fmt: skip
        click.echo(out.getvalue(), nl=False)
        return
    for s in found.series:
        marks = {st.point.index: st for st in found.steps[s.series]}
        rows = []
        for i, p in enumerate(s.points):
            mark = ""
            if i in marks:
                st = marks[i]
                mark = ("REGRESSION " if st.regression else "step ") + f"{st.point.change:+.1%}"
            rows.append([p.run_id, (p.commit_sha or "")[:12], p.requested or "",
                         f"{p.median:.4g}", p.n, mark])  # fmt: skip
        unit = next((p.unit for p in s.points if p.unit), "")
        _echo_from_bundle(f"\n{s.label}  ({metric}{' ' + unit if unit else ''})")
        _echo_from_bundle(tabulate(rows, headers=["run", "commit", "ref", "median", "n", ""]))
        for step in found.steps[s.series]:
            _echo_from_bundle(step.line(metric))
            _echo_from_bundle(f"  settle it with: {step.command(results_dir, found.runs)}")
    click.echo(f"\n{found.false_alarms()}")


def _check_results(results_dir: Path) -> None:
    """The history lives beside the results: no results folder, nothing to make one for."""
    if not results_dir.is_dir():
        raise InputError(
            f"{results_dir}: no such results folder",
            key_path="--results",
            hint="--results DIR (or ORCH_RESULTS) names the folder the runs are in",
        )


def _json(found: Any, results_dir: Path) -> dict[str, Any]:
    return {
        "metric": found.metric,
        "false_discovery_rate": found.fdr,
        "splits_tested": found.tests,
        "false_alarms": found.false_alarms(),
        "series": [
            {
                "series": s.series,
                "label": s.label,
                "points": [p.__dict__ for p in s.points],
                "change_points": [
                    {
                        "index": st.point.index,
                        "before": st.point.before,
                        "after": st.point.after,
                        "change": st.point.change,
                        "p_value": st.point.p_value,
                        "regression": st.regression,
                        "last_good": st.last_good.run_id,
                        "first_bad": st.first_bad.run_id,
                        "command": st.command(results_dir, found.runs),
                    }
                    for st in found.steps[s.series]
                ],
            }
            for s in found.series
        ],
    }
