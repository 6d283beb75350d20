"""`orch report --format html`: one self-contained file a team can attach to a ticket.

Inline CSS, plots as base64 PNG (when matplotlib is installed), every cell with its status and
whole reason, the tables with units, the sweep view, and a diff of two cells when asked. Nothing
is fetched: no URL in any src or href, and a Content-Security-Policy that forbids every fetch.
Everything read from a bundle is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import importlib
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.analyze.pareto import (
    GpuUserView,
    SweepView,
    front_note,
    gpu_user_cells,
    gpu_user_note,
    sweep_cells,
)
from orchestrator.analyze.report.slo import render_searches
from orchestrator.analyze.report.tables import Report, axis_text, footer_lines, table_cells

# Forbids every fetch: the page shows only what it carries (inline style, data: images).
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
NO_MATPLOTLIB = "matplotlib is not installed: tables only (pip install 'orch[plot]' for plots)"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # not allowed in HTML text

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; white-space: pre-line; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.passed { color: #17662b; font-weight: 600; }
.failed, .error, .timeout { color: #a4161a; font-weight: 600; }
pre { background: #f7f7f7; padding: 0.6em; overflow-x: auto; white-space: pre-wrap; margin: 0; }
.note { color: #555; }
img { max-width: 100%; border: 1px solid #eee; }
div.wide { overflow-x: auto; }
""".strip()


@dataclass(frozen=True)
class Figure:
    """A PNG to show inline, with a caption."""

    caption: str
    png: bytes


def page_start(title: str) -> list[str]:
    """A page's first lines: doctype, the CSP that allows no script or outside request, the
    style, and the title as the heading."""
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{text(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{text(title)}</h1>",
    ]


def text(value: object) -> str:
    """A value from a bundle as HTML text: escaped, control characters dropped."""
    return html.escape(_CONTROL.sub("", str(value)), quote=True)


def _table(headers: Sequence[str], body: Sequence[Sequence[str]], css_id: str) -> str:
    head = "".join(f"<th>{text(h)}</th>" for h in headers)
    rows = "".join(
        "<tr>" + "".join(f'<td class="num">{text(c)}</td>' for c in line) + "</tr>" for line in body
    )
    return (  # a wide table scrolls inside the page instead of widening it
        f'<div class="wide"><table id="{css_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def _cells_section(report: Report) -> str:
    rows = []
    for row in report.rows:
        cell = row.cell
        status = cell.status or "?"
        axes = ", ".join(f"{k}={axis_text(v)}" for k, v in cell.axes.items())
        step = f" (at {cell.failed_step})" if cell.failed_step and row.failed else ""
        reason = f"<pre>{text(cell.reason)}</pre>" if cell.reason else ""
        rows.append(
            f'<tr id="cell-{text(cell.id)}"><td><code>{text(cell.id)}</code></td>'
            f"<td>{text(cell.host or '')}</td><td>{text(axes)}</td>"
            f'<td class="{text(status)}">{text(status)}{text(step)}</td><td>{reason}</td></tr>'
        )
    for cid, entry in report.unread.items():
        status = str(entry.get("status") or "not run")
        reason = entry.get("reason") or "(no cell directory: never run, or interrupted)"
        rows.append(
            f'<tr id="cell-{text(cid)}"><td><code>{text(cid)}</code></td>'
            f"<td>{text(entry.get('host') or '')}</td><td></td>"
            f'<td class="{text(status)}">{text(status)}</td><td><pre>{text(reason)}</pre></td></tr>'
        )
    passed = sum(1 for r in report.rows if not r.failed)
    total = len(report.rows) + len(report.unread)
    return (
        f'<section id="cells"><h2>Cells: {passed} of {total} passed</h2>'
        "<table><thead><tr><th>cell</th><th>host</th><th>axes</th><th>status</th>"
        f"<th>reason</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>"
    )


def render_html(
    report: Report,
    *,
    sweep: SweepView | None = None,
    figures: Sequence[Figure] = (),
    plot_note: str | None = None,
    diff: tuple[str, str] | None = None,
    front: GpuUserView | None = None,
) -> str:
    """The whole page. `diff` is (title, the diff's text); `plot_note` says why there are no
    plots (e.g. no matplotlib); `front` the per-GPU vs per-user table."""
    title = f"orch report: {report.run_id or 'cells'}"
    parts = page_start(title)
    if report.started:
        parts.append(f'<p class="note">started {text(report.started)}</p>')
    headers, body = table_cells(report, two_lines=True)
    parts.append('<section id="metrics"><h2>Metrics</h2>')
    parts.append(_table(headers, body, "metrics-table"))
    parts.append("<ul>" + "".join(f"<li>{text(x)}</li>" for x in footer_lines(report)) + "</ul>")
    parts.append("</section>")
    if sweep is not None:
        headers, body = sweep_cells(sweep, report)
        parts.append(f'<section id="sweep"><h2>Throughput–latency over {text(sweep.axis)}</h2>')
        parts.append(_table(headers, body, "sweep-table"))
        parts.append(f'<p class="note">{text(front_note(sweep))}</p></section>')
    if front is not None:
        headers, body = gpu_user_cells(front, report)
        title = f"{front.per_gpu} vs interactivity"
        parts.append(f'<section id="gpu-user"><h2>{text(title)}</h2>')
        parts.append(_table(headers, body, "gpu-user-table"))
        parts.append(f'<p class="note">{text(gpu_user_note(front))}</p></section>')
    searched = render_searches([row.cell for row in report.rows], "table")
    if searched:  # each SLO search: its levels, chart and answer, as the terminal shows them
        parts.append(f'<section id="slo"><h2>SLO search</h2><pre>{text(searched)}</pre></section>')
    parts.append('<section id="plots"><h2>Plots</h2>')
    for figure in figures:
        data = base64.b64encode(figure.png).decode("ascii")
        parts.append(
            f'<figure><img alt="{text(figure.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{text(figure.caption)}</figcaption></figure>"
        )
    if plot_note:
        parts.append(f'<p class="note" id="plot-note">{text(plot_note)}</p>')
    parts.append("</section>")
    parts.append(_cells_section(report))
    if diff is not None:
        parts.append(f'<section id="diff"><h2>{text(diff[0])}</h2><pre>{text(diff[1])}</pre>')
        parts.append("</section>")
    parts.append('<p class="note">written by orch report</p></body></html>')
    return "\n".join(parts) + "\n"


def report_figures(
    report: Report, axis: str | None, sweep: SweepView | None
) -> tuple[list[Figure], str | None]:
    """The plots `--plot` would draw, as PNGs to inline, or why there are none."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return [], NO_MATPLOTLIB
    if axis is None or not report.metrics:
        return [], "no plots: the cells have no axis to plot against or no measured metric"
    from orchestrator.analyze.plot.charts import plot_report, plot_telemetry

    with tempfile.TemporaryDirectory(prefix="orch-report-") as tmp:
        path = plot_report(report, axis, Path(tmp) / "report.png", sweep)
        figures = [Figure(f"each metric against {axis}", path.read_bytes())]
        strips = plot_telemetry(report, path)
        if strips is not None:
            figures.append(Figure("GPU SM clock and power per cell", strips.read_bytes()))
    return figures, None
