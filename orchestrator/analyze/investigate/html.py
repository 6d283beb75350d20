"""`orch investigate`'s report as one self-contained HTML file (investigation.html): the same
content as the Markdown, the verdict first; inline style, nothing fetched, every value from a
bundle escaped, each experiment linked to its cell folder."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.analyze.investigate.report import verdict_sentence
from orchestrator.analyze.report.html import page_start, text


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{text(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="wide">{table}</div>'


def _value(value: Any) -> str:
    return text("(not set)" if value is None else value)


def render_html(doc: Mapping[str, Any]) -> str:
    """The whole report as one HTML page."""
    out = [
        *page_start(f"orch investigate: {doc.get('metric')}"),
        f"<p><strong>{text(verdict_sentence(doc))}</strong></p>",
        f'<p class="note">GOOD {text(doc.get("good"))}, BAD {text(doc.get("bad"))}, measured on '
        f"{text(doc.get('host'))}, tolerance {float(doc.get('tolerance') or 0):.0%}.</p>",
        "<h2>Is it real, and is it still there?</h2>",
        f"<p>{text((doc.get('reproduction') or {}).get('line', ''))}</p>",
    ]
    if doc.get("phase_grown"):
        out.append(f"<p>The phase that grew (GOOD now, BAD now): {text(doc['phase_grown'])}</p>")
    for heading, items in (
        ("What differs from the record", doc.get("changed") or []),
        ("Not testable by swapping (host facts, GOOD to BAD)", doc.get("host_facts") or []),
    ):
        if items:
            out.append(f"<h2>{heading}</h2><ul>")
            out += [f"<li>{text(i)}</li>" for i in items]
            out.append("</ul>")
    factors = doc.get("factors") or []
    out.append("<h2>Factors</h2>")
    if factors:
        rows = [
            [
                text(f.get("label")),
                _value(f.get("good")),
                _value(f.get("bad")),
                "yes" if f.get("testable") else text(f"no: {f.get('why_not')}"),
            ]
            for f in factors
        ]
        out.append(_table(["factor", "GOOD", "BAD", "testable"], rows))
    else:
        out.append("<p>GOOD and BAD declare the same cell: nothing to swap.</p>")
    experiments = doc.get("experiments") or []
    cells = doc.get("cells") or {}
    if experiments:
        out.append("<h2>Controlled experiments (BAD with factors set back to GOOD's)</h2>")
        rows = []
        for e in experiments:
            ref = cells.get(e["label"]) or {}
            link = f'<a href="{text(ref.get("path"))}">{text(ref.get("id"))}</a>' if ref else "-"
            rows.append(
                [
                    text(e["label"]),
                    text(str(e["verdict"]).replace("_", " ")),
                    text(e.get("measured") or "-"),
                    link,
                ]
            )
        out.append(_table(["experiment", "verdict", "effect on BAD", "bundle"], rows))
    if doc.get("not_tested"):
        out.append(f"<p>Not tested (over the budget): {text(', '.join(doc['not_tested']))}</p>")
    bisect = doc.get("bisect")
    if bisect:
        out += ["<h2>Bisect</h2>", f"<p>{text(bisect.get('message') or '')}</p>"]
        if bisect.get("story"):
            out.append(f"<pre>{text(str(bisect['story']).rstrip())}</pre>")
    out += [f'<p class="note">Note: {text(n)}</p>' for n in doc.get("notes") or []]
    out.append(
        f'<p class="note">Cells run: {text(doc.get("spent_cells", 0))} '
        f"(run {text(doc.get('run'))}).</p></body></html>"
    )
    return "\n".join(out) + "\n"
