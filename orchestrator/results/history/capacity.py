"""An SLO search's capacity in the history: metric `slo_capacity` of the search's lowest level's
cell (the cell every run of the search has, whatever its answer), its unit the search's axis.

The answer is walked as analyze/slo.py walks it, with the same rule (runner/slo_rule.py) over
each level's recorded repeats. A search whose lowest level does not hold has no capacity to
record: no row (its cells' own metrics are indexed as ever)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.results.documents import read_json
from orchestrator.results.layout import CELL_JSON, METRICS_JSON
from orchestrator.runner.slo_rule import capacity, judge_level

CAPACITY = "slo_capacity"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def capacity_rows(run_id: str, cell_dirs: Iterable[tuple[str, Path]]) -> list[tuple[Any, ...]]:
    """The history's metric rows (run, cell, metric, unit, median, n, stdev, min, max) of
    every SLO search among `cell_dirs` ((cell id, folder) pairs)."""
    groups: dict[str, list[tuple[float, str, dict[str, Any], list[Any], int]]] = {}
    for cell_id, path in cell_dirs:
        cell = _dict(_dict(read_json(path / CELL_JSON)).get("cell"))
        bench = _dict(cell.get("bench"))
        search, axes = _dict(bench.get("search")), _dict(cell.get("axes"))
        axis = search.get("axis")
        level = axes.get(axis) if isinstance(axis, str) else None
        if not search.get("slo") or isinstance(level, bool) or not isinstance(level, int | float):
            continue
        rest = sorted((a, repr(v)) for a, v in axes.items() if a != axis)
        key = repr((cell.get("host"), axis, rest, search.get("slo")))
        repeats = _dict(read_json(path / METRICS_JSON)).get("repeats")
        measured = [r for r in repeats if isinstance(r, dict)] if isinstance(repeats, list) else []
        most = bench["repeats"] if isinstance(bench.get("repeats"), int) else len(measured)
        groups.setdefault(key, []).append((float(level), cell_id, search, measured, most))
    rows: list[tuple[Any, ...]] = []
    for levels in groups.values():
        levels.sort(key=lambda lv: lv[0])
        verdicts = [
            judge_level(measured, search, most)[1] for _, _, search, measured, most in levels
        ]
        best, _ = capacity(verdicts)
        if best < 0:
            continue
        value, _, search, measured, _ = levels[best]
        rows.append(
            (run_id, levels[0][1], CAPACITY, str(search["axis"]), value, len(measured),
             None, None, None)
        )  # fmt: skip
    return rows
