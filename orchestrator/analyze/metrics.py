"""Aggregate per-repeat metrics into the documented `metrics.json` shape.

The controller parses each repeat with the bench adapter, then calls `metrics_document` (or
`write_metrics_json`) once per cell. Expectations are checked elsewhere and passed in.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.adapters import metric_unit
from orchestrator.analyze import stats

METRICS_SCHEMA_VERSION = 1
REPEAT_KEY = "n"  # the repeat number inside each entry of "repeats"

# What a person looks at first: tables show these by default and audit judges them.
HEADLINE_METRICS = (
    "output_throughput",
    "accept_length",
    "median_ttft_ms",
    "median_tpot_ms",
    "median_e2e_latency_ms",
)


def finite_number(value: Any) -> float | None:
    """A float for real, finite numbers; None for anything else (bools, NaN, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def metric_names(repeats: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every metric name in the repeats, in first-seen order (the repeat number excluded)."""
    names: dict[str, None] = {}
    for repeat in repeats:
        for name in repeat:
            if name != REPEAT_KEY:
                names.setdefault(name, None)
    return list(names)


def values_of(repeats: Sequence[Mapping[str, Any]], metric: str) -> list[float]:
    """The finite values of one metric across repeats, in repeat order."""
    out: list[float] = []
    for repeat in repeats:
        number = finite_number(repeat.get(metric))
        if number is not None:
            out.append(number)
    return out


def summarize_values(values: Sequence[float]) -> dict[str, float]:
    """median, min, max, mean, stdev and n of one metric's values (which must not be empty)."""
    return {
        "median": stats.median(values),
        "min": min(values),
        "max": max(values),
        "mean": stats.mean(values),
        "stdev": stats.stdev(values),
        "n": len(values),
    }


def summarize(repeats: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per metric: {median, min, max, mean, stdev, n} over the repeats that have a finite value.

    A metric with no finite value in any repeat is left out of the summary (it stays visible in
    the repeats themselves).
    """
    summary: dict[str, dict[str, float]] = {}
    for name in metric_names(repeats):
        values = values_of(repeats, name)
        if values:
            summary[name] = summarize_values(values)
    return summary


def metrics_document(
    repeats: Sequence[Mapping[str, Any]],
    *,
    sources: Mapping[str, Any] | None = None,
    expectations: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The `metrics.json` document of a cell.

    `repeats` are the parsed measured repeats in order; each gets its number `n` (1-based) unless
    it already has one. `sources` says where metrics came from (adapter, files); `expectations`
    are `{"metric", "ok", "bound", "value"}` entries checked by the expectations module.
    """
    numbered: list[dict[str, Any]] = []
    for index, repeat in enumerate(repeats, start=1):
        entry: dict[str, Any] = {REPEAT_KEY: repeat.get(REPEAT_KEY, index)}
        for key, value in repeat.items():
            if key != REPEAT_KEY:
                # NaN/inf are not JSON: kept visible as null rather than dropped
                bad = isinstance(value, float) and not math.isfinite(value)
                entry[key] = None if bad else value
        numbered.append(entry)
    return {
        "schema_version": METRICS_SCHEMA_VERSION,
        "repeats": numbered,
        "summary": summarize(numbered),
        "sources": dict(sources or {}),
        "expectations": [dict(e) for e in expectations or []],
    }


def metric_units(
    document: Mapping[str, Any], bench: str | None, server: str | None
) -> dict[str, str | None]:
    """{metric: unit} for every metric of a metrics.json document (repeats and the server
    block), from the adapters' catalogues; None where no catalogue says (a regex metric)."""
    names = metric_names(document.get("repeats") or [])
    names += [n for n in document.get("server") or {} if n not in names]
    return {name: metric_unit(name, bench, server) for name in names}


def cell_metric_unit(cell: Mapping[str, Any], metrics: Mapping[str, Any], name: str) -> str | None:
    """The unit of `name` in a recorded cell: metrics.json's `units`, else (a bundle from before
    units were recorded) the catalogue of the cell's adapters."""
    units = metrics.get("units")
    if isinstance(units, Mapping) and name in units:
        unit = units[name]
        return unit if isinstance(unit, str) else None
    bench, server = cell.get("bench"), cell.get("server")
    return metric_unit(
        name,
        bench.get("adapter") if isinstance(bench, Mapping) else None,
        server.get("adapter") if isinstance(server, Mapping) else None,
    )


def write_metrics_json(
    path: Path,
    repeats: Sequence[Mapping[str, Any]],
    *,
    sources: Mapping[str, Any] | None = None,
    expectations: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write `metrics_document(...)` to `path` (temporary file, then rename) and return it."""
    document = metrics_document(repeats, sources=sources, expectations=expectations)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return document


def format_number(value: float | None) -> str:
    """A metric value for people: no exponent for large values, 4 significant digits for small."""
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.4g}"


def as_float(value: Any) -> float | None:
    """A number from an int, float or numeric text; None for anything else (bools too)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None
