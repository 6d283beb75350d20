"""The results history: `orch index` and `orch history`."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from tabulate import tabulate

from orchestrator.cli.common import _echo_from_bundle, main, reports_errors, results_option
from orchestrator.errors import EXIT_FAILED, EXIT_OK, BundleError, InputError


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
            click.echo(_one_line(f"{item.run_id}: refused: {item.refused}"), err=True)
        elif item.skipped:
            click.echo(_one_line(f"{item.run_id}: {item.skipped}"))
        else:
            click.echo(_one_line(f"{item.run_id}: indexed {item.cells} cells"))
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
    try:
        for item in index_runs(results_dir):
            if item.refused:
                click.echo(_one_line(f"history: {item.run_id}: not indexed: {item.refused}"),
                           err=True)  # fmt: skip
    except BundleError as exc:  # a read-only or busy history still answers from what it holds
        click.echo(_one_line(f"history: new runs not indexed: {exc.message}"), err=True)
    found = history(results_dir, metric, playbook=playbook, since=since, by=by,
                    min_change=min_change, selector=selector)  # fmt: skip
    for note in found.notes:
        click.echo(_one_line(f"history: {note}"), err=True)
    if plot_path is not None:
        from orchestrator.analyze.plot.history import plot_history

        click.echo(f"plot: {plot_history(found, plot_path)}", err=True)
    if fmt == "json":
        click.echo(json.dumps(_finite(_json(found, results_dir)), indent=2, allow_nan=False))
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
        writer.writerow(["series", "run", "started", "commit", "requested", _csv_text(metric),
                         "n", "unit", "change_point"])  # fmt: skip
        for s in found.series:
            changes = {c.point.index: f"{c.point.change:+.4f}" for c in found.steps[s.series]}
            for i, p in enumerate(s.points):
                writer.writerow([_csv_text(s.label), _csv_text(p.run_id), p.started,
                                 _csv_text(p.commit_sha), _csv_text(p.requested), p.median, p.n,
                                 _csv_text(p.unit), changes.get(i, "")])  # fmt: skip
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
            rows.append([_one_line(p.run_id), _one_line((p.commit_sha or "")[:12]),
                         _one_line(p.requested or ""), f"{p.median:.4g}", p.n, mark])  # fmt: skip
        unit = next((p.unit for p in s.points if p.unit), "")
        click.echo(_one_line(f"\n{s.label}  ({metric}{' ' + unit if unit else ''})"))
        _echo_from_bundle(tabulate(rows, headers=["run", "commit", "ref", "median", "n", ""]))
        for step in found.steps[s.series]:
            click.echo(_one_line(step.line(metric)))
            _echo_from_bundle(f"  settle it with: {step.command(results_dir, found.runs)}")
    click.echo(f"\n{found.false_alarms()}")


def _one_line(text: str) -> str:
    """Text from a bundle on one terminal line: escapes and control characters gone, newlines
    and tabs as spaces (a run id or an axis value may hold any of them)."""
    from orchestrator.results.terminal import printable

    return " ".join(printable(text).replace("\t", " ").split("\n")).strip(" ")


_FORMULA_START = ("=", "+", "-", "@")


def _csv_text(value: object) -> str:
    """A text cell of the CSV from a bundle: one line, no control characters, and never read
    as a formula by a spreadsheet (a leading = + - @ is quoted with ')."""
    text = _one_line("" if value is None else str(value))
    return "'" + text if text.startswith(_FORMULA_START) else text


def _finite(value: Any) -> Any:
    """`value` with every infinite or NaN float as null: JSON as strict parsers read it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


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
