"""What `orch diff` finds, as data: sections of entries and metric deltas, in likely-cause order.

`analyze/diff/cells.py` builds these (with `analyze/diff/host.py` for what a snapshot shows);
`analyze/diff/render.py` prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.adapters.base import HEADLINE_THROUGHPUT
from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.metrics import REPEAT_KEY, finite_number
from orchestrator.analyze.replication import compare_starts
from orchestrator.analyze.stats import (
    UNSTABLE_SPREAD,
    compare,
    holm,
    median,
    reach_text,
    stability,
)
from orchestrator.cell import canonical_json

SECTION_TITLES: dict[str, str] = {
    "image": "image (container digest, labels, packages inside)",
    "code": "code (repo ref, commit, tree state)",
    "packages": "packages (pip freeze)",
    "environment": "environment (as the server processes saw it)",
    "server_flags": "server flags",
    "bench": "bench settings (what was measured)",
    "system": "system (driver, CUDA, NCCL, torch, kernel, python, Slurm job)",
    "hardware": "hardware state (before the server started; 'after run' where marked)",
    "profile": "profile (milliseconds per decode step, from the engine's trace)",
    "outputs": "outputs (greedy answers to the bundled prompts, accuracy)",
    "metrics": "metrics",
}
# Sections only a diff of cells that have them shows (both without a profile: no section).
OPTIONAL_SECTIONS = ("image", "profile", "outputs")
# The sections every cell diff has, in order.
SECTION_ORDER: tuple[str, ...] = tuple(k for k in SECTION_TITLES if k not in OPTIONAL_SECTIONS)

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
class Outlier:
    """A repeat whose value sits far from the others (`stats.outliers`)."""

    repeat: int  # the repeat number in metrics.json
    value: float


@dataclass
class MetricDelta:
    """One metric on both sides: medians, relative change and whether it is significant.

    `p_value` is the exact rank test's own (`stats.rank_test`, every size from 2 a side) where
    each side ran one server start; where a side ran several, it is Welch's t on the start
    means (`replication.compare_starts`: the start is the unit of replication), `unit` says which;
    `p_adjusted` is it after Holm's correction over the metrics of its family (the deciding
    ones, or the others; in a run diff, over every paired cell), and `significant` rests on it
    and on `moved`. `smallest_p`: the least p these sizes could give.
    `decides`: a metric the playbook cares about (its `expect:`, else the headline throughput).
    """

    metric: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    delta_pct: float | None
    significant: bool | None
    method: str | None
    p_value: float | None
    p_adjusted: float | None = None
    family: int = 1  # how many metrics `p_adjusted` was corrected over
    moved: bool = False  # the change reached the ratio threshold
    smallest_p: float | None = None
    # '2 v 2: cannot reach 5%; smallest p 0.33' where these sizes in this family never can
    cannot_reach: str | None = None
    decides: bool = False
    outliers_a: list[Outlier] = field(default_factory=list)
    outliers_b: list[Outlier] = field(default_factory=list)
    spread_a: float | None = None  # robust relative spread of the repeats (`stats`)
    spread_b: float | None = None
    starts_a: int = 1  # server starts the values came from (metrics.json's `starts`)
    starts_b: int = 1
    # what the test counted: "3 v 3 starts" (start means) or "repeats of one start"
    unit: str | None = None

    @property
    def unstable(self) -> bool:
        """An outlying repeat or a high spread on either side."""
        spreads = (s for s in (self.spread_a, self.spread_b) if s is not None)
        return bool(self.outliers_a or self.outliers_b) or any(
            s >= UNSTABLE_SPREAD for s in spreads
        )


@dataclass
class HostLoad:
    """The host's 1-minute load average around each cell: before its server started and after
    it stopped (`snapshot.pre/post.json`); None where not recorded."""

    a_before: float | None
    a_after: float | None
    b_before: float | None
    b_after: float | None
    cpus_a: int | None = None
    cpus_b: int | None = None


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
    deciding: list[str] = field(default_factory=list)  # `deciding_metrics()`
    deciding_from: str = ""  # where they come from: expect, headline or all
    load: HostLoad | None = None
    stack: dict[str, list[str | None]] = field(default_factory=dict)  # `serving_stack()`

    @property
    def unstable(self) -> list[MetricDelta]:
        """Deciding metrics whose repeats are unstable: no likely cause can be read then."""
        metrics = next((s.metrics for s in self.sections if s.name == "metrics"), [])
        return [m for m in metrics if m.decides and m.unstable]

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
    # each SLO search both runs hold: its capacity in A and B (analyze/slo.py)
    capacity: list[dict[str, Any]] = field(default_factory=list)


# --- which metrics decide ----------------------------------------------------------------------


def expected_names(cell: CellEvidence) -> list[str]:
    """The metrics a cell sets expectations on: its `expect:` keys, then checked ones."""
    names = [str(k) for k in as_dict(cell.cell.get("expect"))]
    names += [str(e.get("metric")) for e in cell.expectations if e.get("metric") is not None]
    return list(dict.fromkeys(names))


def deciding_metrics(*cells: CellEvidence) -> tuple[list[str], str]:
    """The metrics a verdict on these cells rests on, and where they come from.

    The ones under `expect:` that were measured ("expect"); else the adapter's headline
    throughput ("headline", one metric); else every metric measured ("all").
    """
    measured = list(dict.fromkeys(m for cell in cells for m in cell.metric_names))
    expected = [m for cell in cells for m in expected_names(cell) if m in measured]
    if expected:
        return list(dict.fromkeys(expected)), "expect"
    headline = next((m for m in HEADLINE_THROUGHPUT if m in measured), None)
    if headline is not None:
        return [headline], "headline"
    return measured, "all"


# --- metric verdicts ----------------------------------------------------------------------------

# How every metric verdict treats repeats, said beside the verdicts (diff and audit alike).
REPEATS_NOTE = (
    "repeats of one start: each side ran one server start, so its repeats share its warm "
    "caches, placement and clocks and the test counts repeats; the start-to-start spread was "
    "not measured and the p-values hold only where it is small (on GPUs often 1-2 %); "
    "`bench.starts: N` measures it and makes the start the unit"
)
STARTS_NOTE = (
    "the server start is the unit of replication: where a side ran several starts, each "
    "start's mean (of logs) is one value and the sides are compared by Welch's t on them "
    "(Student's t where one side ran one start, its spread taken from the other)"
)
ONE_START = "repeats of one start"


def numbered_values(cell: CellEvidence, metric: str) -> list[tuple[int, float]]:
    """(repeat number, value) of a metric's finite values, as `CellEvidence.values` gives them
    (a summary median alone counts as repeat 1)."""
    out: list[tuple[int, float]] = []
    for index, repeat in enumerate(cell.repeats, start=1):
        value = finite_number(repeat.get(metric))
        number = repeat.get(REPEAT_KEY, index)
        if value is not None:
            out.append((number if isinstance(number, int) else index, value))
    return out or [(1, v) for v in cell.values(metric)]


def start_ids(cell: CellEvidence, numbered: list[tuple[int, float]]) -> list[int]:
    """The server start of each numbered value (metrics.json's `starts.of_repeat`; start 1
    where the cell ran one start or the repeat is not listed)."""
    starts = cell.metrics.get("starts") if isinstance(cell.metrics, Mapping) else None
    of_repeat = as_dict(as_dict(starts).get("of_repeat"))
    return [int(of_repeat.get(str(number), 1)) for number, _ in numbered]


def _outliers(numbered: list[tuple[int, float]]) -> tuple[list[Outlier], float | None]:
    steady = stability([v for _, v in numbered])
    return [Outlier(*numbered[i]) for i in steady.outliers], steady.spread


def metric_deltas(
    a: CellEvidence,
    b: CellEvidence,
    deciding: list[str],
    *,
    ratio_threshold: float,
    alpha: float,
) -> list[MetricDelta]:
    """Every metric of either cell compared, deciding metrics first.

    A change is significant when it reaches `ratio_threshold` and the exact rank test agrees
    (`stats.compare`); its p-values, at every sample size, are Holm-corrected within two
    families (`correct`): the deciding metrics, and the others. The few metrics a playbook
    cares about keep their power, and one of 18 secondary metrics crossing p < 0.05 by chance
    is not called a change.
    """
    names = [m for m in deciding if m in a.metric_names or m in b.metric_names]
    names += [m for m in a.metric_names + b.metric_names if m not in names]
    names = list(dict.fromkeys(names))
    out: list[MetricDelta] = []
    for name in names:
        va, vb = numbered_values(a, name), numbered_values(b, name)
        xs, ys = [v for _, v in va], [v for _, v in vb]
        outliers_a, spread_a = _outliers(va) if va else ([], None)
        outliers_b, spread_b = _outliers(vb) if vb else ([], None)
        delta = MetricDelta(
            name,
            len(xs),
            len(ys),
            median(xs) if xs else None,
            median(ys) if ys else None,
            None,
            None,
            None,
            None,
            decides=name in deciding,
            outliers_a=outliers_a,
            outliers_b=outliers_b,
            spread_a=spread_a,
            spread_b=spread_b,
        )
        if xs and ys:
            c = compare(xs, ys, ratio_threshold=ratio_threshold, alpha=alpha)
            delta.delta_pct, delta.method, delta.p_value = c.delta_pct, c.method, c.p_value
            delta.moved, delta.smallest_p = c.moved, c.smallest_p
            delta.significant = c.significant
            if c.method == "single" and c.delta != 0:
                # One run on a side shows no noise: a move past the threshold cannot be judged
                # either way (None counts as a difference to look at, marked "can't tell").
                delta.significant = None if c.moved else False
            elif c.p_value is not None:
                delta.significant = c.moved  # and the Holm-adjusted p below
            _by_starts(delta, (xs, start_ids(a, va)), (ys, start_ids(b, vb)), alpha)
        out.append(delta)
    correct(out, alpha)
    return out


def _by_starts(
    delta: MetricDelta,
    a: tuple[list[float], list[int]],
    b: tuple[list[float], list[int]],
    alpha: float,
) -> None:
    """Judge the delta on start means where either side ran more than one server start (its
    repeats are not independent: a start's offset is shared by all of them); with one start
    each the rank test on repeats stays, its unit said."""
    delta.starts_a, delta.starts_b = len(set(a[1])), len(set(b[1]))
    if delta.starts_a < 2 and delta.starts_b < 2:
        delta.unit = ONE_START if delta.p_value is not None else None
        return
    judged = compare_starts(a[0], a[1], b[0], b[1], alpha=alpha)
    if judged.p_value is None:
        return
    delta.method = f"{judged.method} on start means"
    delta.p_value = judged.p_value
    delta.smallest_p = 0.0  # a t-test can reach any p
    delta.unit = f"{delta.starts_a} v {delta.starts_b} starts"
    delta.significant = delta.moved  # and the Holm-adjusted p (`correct`)


def correct(deltas: list[MetricDelta], alpha: float) -> None:
    """Holm-correct the tested deltas in place, two families: the deciding metrics and the
    others; `significant` then needs the move and the adjusted p below `alpha`. A run diff
    calls it again over every paired cell's deltas, so a run's family counts all its cells."""
    for decides in (True, False):
        family = [m for m in deltas if m.decides is decides and m.p_value is not None]
        for m, adjusted in zip(family, holm([m.p_value or 0.0 for m in family]), strict=True):
            m.p_adjusted, m.family = adjusted, len(family)
            m.significant = m.moved and adjusted < alpha
            least = m.smallest_p if m.smallest_p is not None else 0.0
            m.cannot_reach = reach_text(m.n_a, m.n_b, least, alpha, len(family))


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
