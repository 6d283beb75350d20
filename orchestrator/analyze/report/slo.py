"""`orch report`'s SLO searches: a table and text chart of each search's levels with its answer
(table, md), and one tidy row per search holding the answer and its confidence (json, csv)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.slo import Search, searches
from orchestrator.results.history.capacity import CAPACITY

BAR = 20  # characters of the chart's bar at the SLO bound


def _bar(median: float | None, bound: dict[str, float]) -> str:
    """`#####|` the median against the bound (the `|`), up to twice the bound."""
    limit = bound.get("max", bound.get("min"))
    if median is None or not limit:
        return ""
    filled = max(0, min(2 * BAR, round(BAR * median / limit)))
    bar = ("#" * filled).ljust(2 * BAR)
    return bar[:BAR] + "|" + bar[BAR:].rstrip()


def _interval(judged: dict[str, Any]) -> str:
    if judged.get("median") is None:
        return "-"
    return f"{judged['median']:.4g} [{judged['low']:.4g}, {judged['high']:.4g}]"


def render_search(search: Search, fmt: str) -> str:
    """One search: a row per level (each SLO metric's median and interval, throughput, verdict)
    and a chart of the first SLO metric against its bound, then the answer in words."""
    first = next(iter(search.slo))
    goodput = any(level.goodput is not None for level in search.levels)
    headers = [search.axis, "repeats", *search.slo, search.throughput_metric or "throughput"]
    headers += ["request_goodput"] * goodput + ["verdict", f"{first} vs bound"]
    body = []
    for level in search.levels:
        row: list[Any] = [f"{level.value:g}", level.repeats]
        row += [_interval(level.judged[m]) for m in search.slo]
        row.append(f"{level.throughput:.4g}" if level.throughput is not None else "-")
        if goodput:
            row.append(f"{level.goodput:.4g}" if level.goodput is not None else "-")
        row.append(level.verdict or "undecided")
        row.append(_bar(level.judged[first].get("median"), search.slo[first]))
        body.append(row)
    bounds = ", ".join(
        f"{m} {'≤' if 'max' in b else '≥'} {b.get('max', b.get('min')):g}"
        for m, b in search.slo.items()
    )
    where = ", ".join(f"{a}={v}" for a, v in search.series.items())
    title = f"SLO search along {search.axis}" + (f" ({where})" if where else "")
    title += f" on {search.host}: {bounds}; each call {search.confidence:.0%} one-sided"
    table = tabulate(body, headers=headers, tablefmt="github" if fmt == "md" else "simple")
    lines = [title, "", table, "", search.sentence()]
    saturation = search.saturation_sentence()
    if saturation:
        lines.append(saturation)
    return "\n".join(lines) + "\n"


def render_searches(cells: Sequence[CellEvidence], fmt: str) -> str:
    """Every search of `cells` rendered after a blank line (empty when there is none)."""
    found = searches(cells)
    return "\n" + "\n".join(render_search(s, fmt) for s in found) if found else ""


def capacity_rows(cells: Sequence[CellEvidence], run_id: str | None) -> list[dict[str, Any]]:
    """One tidy row per search: metric `slo_capacity`, its value the answer (None when no level
    holds), the search whole under `slo_search` (confidence, boundary, every level)."""
    rows = []
    for search in searches(cells):
        best = search.answer
        rows.append(
            {
                "run_id": run_id,
                "cell_id": best.cell_id if best else None,
                "host": search.host,
                **search.series,
                "repeat": None,
                "metric": CAPACITY,
                "value": best.value if best else None,
                "unit": search.axis,
                "confidence": search.confidence,
                "slo_search": search.as_dict(),
            }
        )
    return rows
