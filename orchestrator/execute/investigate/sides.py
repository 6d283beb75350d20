"""GOOD and BAD as recorded: each cell's record, its evidence, and the metric they are judged by."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.analyze.diff.model import deciding_metrics
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.errors import InputError
from orchestrator.results.read import RunBundle, open_cell, run_of
from orchestrator.results.records import CellRecord


@dataclass
class Side:
    """GOOD or BAD as recorded: the record, its evidence and its samples of the metric."""

    record: CellRecord
    evidence: CellEvidence
    run: RunBundle
    values: list[float] = field(default_factory=list)


def open_side(ref: str, results_dir: Path, what: str) -> Side:
    """GOOD or BAD (`what`) from RUN/CELL or a cell folder inside a run."""
    record = open_cell(ref, results_dir)
    run = run_of(record)
    if run is None or not record.cell:
        raise InputError(f"{what} {ref}: not a cell inside a run bundle", hint="pass RUN/CELL")
    return Side(record, CellEvidence.load(record.path), run)


def deciding_metric(good: CellEvidence, bad: CellEvidence) -> str:
    """The metric an investigation judges by: the cells' first deciding metric."""
    deciding, _ = deciding_metrics(good, bad)
    if not deciding:
        raise InputError("GOOD and BAD report no metric in common", hint="pass --metric")
    return deciding[0]
