"""Shared helpers for adapter tests: fixture paths and Cell construction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.cell import BenchSpec, Cell, ServerSpec

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def make_cell(
    *,
    bench: BenchSpec | None = None,
    server: ServerSpec | None = None,
    env: dict[str, str] | None = None,
    **extra: Any,
) -> Cell:
    """A minimal fully rendered Cell for parsers that read cell settings."""
    return Cell(
        id="test-cell-00000000",
        playbook="test",
        host="localhost",
        axes={},
        env=env or {},
        server=server,
        bench=bench or BenchSpec(argv=("true",)),
        **extra,
    )
