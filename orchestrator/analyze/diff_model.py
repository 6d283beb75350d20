"""What `orch diff` finds, as data: sections of entries and metric deltas, in likely-cause order.

`analyze/diff.py` builds these (with `analyze/diff_host.py` for what a snapshot shows);
`analyze/diff_render.py` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.cell import canonical_json

SECTION_TITLES: dict[str, str] = {
    "code": "code (repo ref, commit, tree state)",
    "packages": "packages (pip freeze)",
    "environment": "environment (as the server processes saw it)",
    "server_flags": "server flags",
    "bench": "bench settings (what was measured)",
    "system": "system (driver, CUDA, NCCL, torch, kernel, python)",
    "hardware": "hardware state (before the server started; 'after run' where marked)",
    "metrics": "metrics",
}
SECTION_ORDER: tuple[str, ...] = tuple(SECTION_TITLES)

MISSING = "<missing>"
UNSET = "<unset>"


@dataclass
class Entry:
    """One value that differs: `a` and `b` are None when absent on that side."""

    key: str
    a: Any
    b: Any
    note: str | None = None
    within_tolerance: bool = False  # noise-level change (temperature, power draw): JSON only


@dataclass
class Block:
    """Whole text that belongs to a section, e.g. the commits between two SHAs."""

    title: str
    lines: list[str]


@dataclass
class MetricDelta:
    """One metric on both sides: medians, relative change and whether it is significant."""

    metric: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    delta_pct: float | None
    significant: bool | None
    method: str | None
    p_value: float | None


@dataclass
class Section:
    """One aspect of the two cells; `differs` says whether it has anything to show."""

    name: str
    title: str
    entries: list[Entry] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: list[MetricDelta] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        """True when a real (not noise-level) difference, a block or a metric change is present.

        A metric counts only when its change is significant or it was measured on one side
        only: repeats of the same cell always differ a little, and that is not a difference.
        """
        return (
            any(not e.within_tolerance for e in self.entries)
            or bool(self.blocks)
            or any(m.significant is not False for m in self.metrics)
        )


@dataclass
class CellRef:
    """Which cell a side of a diff is."""

    id: str
    host: str | None
    run_id: str | None
    status: str | None
    reason: str | None
    failed_step: str | None
    path: str
    axes: dict[str, Any]

    @classmethod
    def of(cls, cell: CellEvidence) -> CellRef:
        """The reference of a loaded cell."""
        return cls(
            id=cell.id,
            host=cell.host,
            run_id=cell.run_id,
            status=cell.status,
            reason=cell.reason,
            failed_step=cell.failed_step,
            path=str(cell.path),
            axes=cell.axes,
        )


@dataclass
class CellDiff:
    """Two cells compared section by section, sections in SECTION_ORDER."""

    a: CellRef
    b: CellRef
    paired_by: Literal["id", "axes", "given"]
    sections: list[Section]

    @property
    def differing(self) -> list[Section]:
        """Sections with something to show, most likely cause first."""
        return [s for s in self.sections if s.differs]

    @property
    def unchanged(self) -> list[str]:
        """Names of the sections with no difference."""
        return [s.name for s in self.sections if not s.differs]

    def section(self, name: str) -> Section:
        """The section called `name`."""
        return next(s for s in self.sections if s.name == name)


@dataclass
class RunDiff:
    """Two sets of cells paired by id (else by axes and host), plus the unpaired ones."""

    a_run: str | None
    b_run: str | None
    pairs: list[CellDiff]
    only_a: list[CellRef]
    only_b: list[CellRef]


# --- small helpers -----------------------------------------------------------------------------


def show_value(value: Any) -> str:
    """A value as one display string; None shows as <missing>."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(show_value(v) for v in value) if value else "(none)"
    if isinstance(value, dict):
        return canonical_json(value)
    return str(value)


def same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def dict_entries(
    a: Mapping[str, Any], b: Mapping[str, Any], *, key_format: str = "{}"
) -> list[Entry]:
    """Entries for keys whose values differ between two mappings (A's key order, then B's)."""
    entries: list[Entry] = []
    for key in list(a) + [k for k in b if k not in a]:
        va, vb = a.get(key), b.get(key)
        if not same(va, vb):
            note = "only in B" if key not in a else "only in A" if key not in b else None
            entries.append(Entry(key_format.format(key), va, vb, note))
    return entries


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
