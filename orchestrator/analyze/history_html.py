"""`orch history --format html -o DIR`: a static dashboard, one self-contained page.

One chart per configuration (an inline SVG: nothing fetched, no script), the runs' medians in
order, each point a link to its cell's folder in its bundle, change points drawn where they
are with their size; above them, the table of open regressions (a series whose last change
point is a regression) with the command that settles each. Every value from the index is
escaped; the Content-Security-Policy is the report's.
"""

from __future__ import annotations

import math
from pathlib import Path

from orchestrator.analyze.history import History, Step
from orchestrator.analyze.report.html import page_start, text

WIDTH, HEIGHT, PAD = 820, 220, 36


def _chart(view: History, series_id: str) -> str:
    series = next(s for s in view.series if s.series == series_id)
    points = series.points
    values = [p.median if math.isfinite(p.median) else 0.0 for p in points]
    # drawn as fractions of the largest: a median near ±1e308 would overflow high - low
    scale = max(abs(v) for v in values) or 1.0
    low, high = min(values) / scale, max(values) / scale
    span = (high - low) or max(abs(high), 1.0) * 0.05
    low, high = low - 0.1 * span, high + 0.1 * span
    n = len(points)

    def x(i: int) -> float:
        return PAD + (WIDTH - 2 * PAD) * (i / (n - 1) if n > 1 else 0.5)

    def y(v: float) -> float:
        v = v / scale if math.isfinite(v) else 0.0
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v - low) / (high - low)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{text(series.label)}">',
        f'<text x="4" y="{PAD - 12}" font-size="11">{max(values):.4g}</text>',
        f'<text x="4" y="{HEIGHT - PAD + 14}" font-size="11">{min(values):.4g}</text>',
        '<polyline fill="none" stroke="#3465a4" stroke-width="1.5" points="'
        + " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        + '"/>',
    ]
    for step in view.steps.get(series_id, []):
        cx = (x(step.point.index - 1) + x(step.point.index)) / 2
        color = "#a4161a" if step.regression else "#555"
        parts.append(
            f'<line class="change-point" x1="{cx:.1f}" x2="{cx:.1f}" y1="{PAD - 6}" '
            f'y2="{HEIGHT - PAD}" stroke="{color}" stroke-dasharray="4 3"/>'
            f'<text x="{cx + 4:.1f}" y="{PAD - 8}" font-size="11" fill="{color}">'
            f"{step.point.change:+.1%}</text>"
        )
    for i, p in enumerate(points):
        where = Path(view.runs.get(p.run_id, p.run_id)) / p.path
        title = f"{p.run_id} {(p.commit_sha or '')[:12]} {p.median:.4g} (n={p.n})"
        parts.append(
            f'<a href="{text(where.as_uri() if where.is_absolute() else where)}">'
            f'<circle cx="{x(i):.1f}" cy="{y(p.median):.1f}" r="3.5" fill="#3465a4">'
            f"<title>{text(title)}</title></circle></a>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _open_regressions(view: History) -> list[Step]:
    """The regressions still open: the last change point of their series."""
    return [steps[-1] for steps in view.steps.values() if steps and steps[-1].regression]


def render_dashboard(view: History, results_dir: Path) -> str:
    """The whole dashboard as one HTML page."""
    out = [
        *page_start(f"orch history: {view.metric}"),
        f'<p class="note">{len(view.series)} configuration(s), '
        f"{sum(len(s.points) for s in view.series)} runs; change points by E-Divisive means "
        "with a t test at each split.</p>",
        f'<p class="note">{text(view.false_alarms())}.</p>',
        "<h2>Open regressions</h2>",
    ]
    regressions = _open_regressions(view)
    if regressions:
        out.append("<ul>")
        for step in regressions:
            out.append(
                f'<li class="regression">{text(step.line(view.metric))}<br>'
                f"<code>{text(step.command(results_dir, view.runs))}</code></li>"
            )
        out.append("</ul>")
    else:
        out.append("<p>None.</p>")
    for s in view.series:
        unit = next((p.unit for p in s.points if p.unit), "")
        out.append(f"<h2>{text(s.label)}</h2>")
        out.append(f'<p class="note">{text(view.metric)} {text(unit)}, {len(s.points)} runs</p>')
        out.append(f'<div class="wide">{_chart(view, s.series)}</div>')
    out.append('<p class="note">written by orch history</p></body></html>')
    return "\n".join(out) + "\n"
