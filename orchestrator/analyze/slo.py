"""An SLO search's answer: the highest level along its axis whose SLO holds, with confidence.

Each level (one cell of the search) is judged on its recorded repeats by runner/slo_rule.py,
the rule that stopped its repeats: every SLO metric's median over repeats against its bound,
"holds" or "fails" when the order-statistic interval lies on one side of it, else undecided.
The answer is the last of the levels that hold from the lowest up: the walk stops at the first
level that fails (the boundary, decided) or that its repeats could not decide (said so). Each
call is wrong at most 1 - confidence of the time, so the answer overstates the capacity at
most that often (bench/verdicts/slo.py measures it). Saturation: a level whose throughput rose
less than a quarter as fast as the load while the latency climbed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analyze.evidence import CellEvidence
from orchestrator.analyze.stats import median
from orchestrator.results.history.capacity import CAPACITY
from orchestrator.runner.slo_rule import capacity, judge_level

GOODPUT = "request_goodput"
THROUGHPUTS = ("request_throughput", "output_throughput", "total_throughput")
SLOW_GAIN = 0.25  # throughput gained less than this share of the load's gain: saturated
LATENCY_CLIMB = 0.1  # ... while the latency rose more than this


@dataclass
class Level:
    """One level of a search: its cell, each SLO metric judged, its verdict and throughput."""

    value: float
    cell_id: str
    repeats: int
    judged: dict[str, dict[str, Any]]
    verdict: str | None  # holds | fails | None (undecided)
    throughput: float | None
    latency: float | None  # the saturation check's latency (median over repeats)
    note: str = ""
    goodput: float | None = None  # the client's requests within its SLO per s (vLLM --goodput)

    def as_dict(self) -> dict[str, Any]:
        """The level as JSON-ready data."""
        return {
            "value": self.value,
            "cell_id": self.cell_id,
            "repeats": self.repeats,
            "verdict": self.verdict or "undecided",
            "metrics": self.judged,
            "throughput": self.throughput,
            "goodput": self.goodput,
            "note": self.note or None,
        }


@dataclass
class Search:
    """One configuration's search along `axis`: its levels ascending and what they answer."""

    axis: str
    host: str | None
    series: dict[str, Any]  # the other axes' values
    slo: dict[str, dict[str, float]]
    confidence: float
    levels: list[Level] = field(default_factory=list)
    throughput_metric: str | None = None
    latency_metric: str | None = None

    @property
    def answer(self) -> Level | None:
        """The highest of the levels that hold from the lowest up (None: the lowest does not)."""
        best, _ = capacity([lv.verdict for lv in self.levels])
        return self.levels[best] if best >= 0 else None

    @property
    def boundary(self) -> Level | None:
        """The first level that does not hold (fails, or undecided), if any."""
        _, edge = capacity([lv.verdict for lv in self.levels])
        return self.levels[edge] if edge is not None else None

    @property
    def decided(self) -> bool:
        """Whether the boundary is decided: the first level not holding fails (or all hold)."""
        edge = self.boundary
        return edge is None or edge.verdict == "fails"

    @property
    def saturation(self) -> tuple[Level, float, float, float] | None:
        """The first level whose throughput rose less than `SLOW_GAIN` of the load's rise while
        its latency climbed: (level, throughput gain, latency gain, load gain)."""
        for low, high in zip(self.levels, self.levels[1:], strict=False):
            if None in (low.throughput, high.throughput, low.latency, high.latency):
                continue
            if not low.throughput or not low.latency or low.value <= 0:
                continue
            load = high.value / low.value - 1.0
            gain = high.throughput / low.throughput - 1.0  # type: ignore[operator]
            climb = high.latency / low.latency - 1.0  # type: ignore[operator]
            if gain < SLOW_GAIN * load and climb > LATENCY_CLIMB:
                return high, gain, climb, load
        return None

    def sentence(self) -> str:
        """The answer in words, with its confidence and the boundary."""
        conf = f"{self.confidence:.0%}"
        best, edge = self.answer, self.boundary
        if best is None:
            head = f"no {self.axis} meets the SLO"
        else:
            head = (
                f"highest {self.axis} meeting the SLO: {_num(best.value)} "
                f"({_evidence(best)}; holds with {conf} confidence over {best.repeats} repeats)"
            )
        if edge is None:
            tail = f"every level holds: the capacity is at least {_num(self.levels[-1].value)}"
        elif edge.verdict == "fails":
            tail = f"{_num(edge.value)} fails ({_evidence(edge)}, {conf} confidence)"
        else:
            why = edge.note or f"{edge.repeats} repeats leave it undecided"
            tail = f"the boundary could not be decided at {_num(edge.value)} ({why})"
        above = [
            lv for lv in self.levels if edge and lv.value > edge.value and lv.verdict == "holds"
        ]
        if above:
            tail += f"; {_num(above[0].value)} holds above it (not monotone)"
        return f"{head}; {tail}"

    def saturation_sentence(self) -> str | None:
        """Where throughput stopped rising while latency climbed, or None."""
        found = self.saturation
        if found is None:
            return None
        level, gain, climb, load = found
        return (
            f"saturated at {self.axis}={_num(level.value)}: {self.throughput_metric} "
            f"{gain:+.0%} for {self.axis} {load:+.0%}, while {self.latency_metric} {climb:+.0%}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The search as JSON-ready data: the answer, its confidence, every level."""
        best, sat = self.answer, self.saturation
        return {
            "axis": self.axis,
            "host": self.host,
            "series": self.series,
            "slo": self.slo,
            "confidence": self.confidence,
            "answer": best.value if best else None,
            "answer_cell": best.cell_id if best else None,
            "decided": self.decided,
            "boundary": self.boundary.value if self.boundary else None,
            "saturated_at": sat[0].value if sat else None,
            "sentence": self.sentence(),
            "saturation": self.saturation_sentence(),
            "levels": [lv.as_dict() for lv in self.levels],
        }


def _num(value: float) -> str:
    return f"{value:g}"


def _evidence(level: Level) -> str:
    """`p99_ttft_ms 420 ≤ 500` for each judged metric with a median."""
    parts = []
    for metric, judged in level.judged.items():
        if judged.get("median") is None:
            continue
        bound = judged["bound"]
        side, limit = ("max", bound["max"]) if "max" in bound else ("min", bound["min"])
        ok = judged["median"] <= limit if side == "max" else judged["median"] >= limit
        mark = ("≤" if ok else ">") if side == "max" else ("≥" if ok else "<")
        parts.append(f"{metric} {judged['median']:.4g} {mark} {limit:g}")
    return ", ".join(parts) or "no values"


def level_of(cell: CellEvidence, search: Mapping[str, Any], most: int) -> Level:
    """One cell of a search judged on its recorded repeats, as its runner judged them."""
    judged, verdict = judge_level(cell.repeats, search, most)
    notes = [f"no {m} recorded" for m, j in judged.items() if not j["n"]]
    if cell.status not in (None, "passed") and not cell.repeats:
        verdict = None
        notes.append(f"the cell {cell.status}: {cell.reason or 'no reason recorded'}")
    tput = next((m for m in THROUGHPUTS if cell.values(m)), None)
    return Level(
        value=float(cell.axes[search["axis"]]),
        cell_id=cell.id,
        repeats=len(cell.repeats),
        judged=judged,
        verdict=verdict,
        throughput=median(cell.values(tput)) if tput else None,
        latency=None,
        note="; ".join(notes),
        goodput=median(cell.values(GOODPUT)) if cell.values(GOODPUT) else None,
    )


def _latency_metric(slo: Mapping[str, Any]) -> str:
    """The latency the saturation check follows: the SLO's first latency, else median TTFT."""
    return next((m for m in slo if m.endswith("_ms")), "median_ttft_ms")


def searches(cells: Sequence[CellEvidence]) -> list[Search]:
    """Every SLO search among `cells` (cells whose bench carries `search`), one per host and
    configuration (the other axes' values), levels ascending."""
    groups: dict[str, tuple[Search, list[CellEvidence]]] = {}
    for cell in cells:
        bench = cell.cell.get("bench") if isinstance(cell.cell, dict) else None
        spec = bench.get("search") if isinstance(bench, dict) else None
        if not isinstance(spec, dict) or spec.get("axis") not in cell.axes:
            continue
        axis = str(spec["axis"])
        series = {a: v for a, v in cell.axes.items() if a != axis}
        key = repr((cell.host, axis, sorted(series.items(), key=str), spec.get("slo")))
        if key not in groups:
            confidence = float(spec.get("confidence", 0.95))
            slo = {str(m): dict(b) for m, b in dict(spec["slo"]).items()}
            groups[key] = (Search(axis, cell.host, series, slo, confidence), [])
        groups[key][1].append(cell)
    out = []
    for search, members in groups.values():
        latency = _latency_metric(search.slo)
        for cell in members:
            bench = cell.cell["bench"]
            level = level_of(cell, bench["search"], int(bench.get("repeats", 1)))
            values = cell.values(latency)
            level.latency = median(values) if values else None
            search.levels.append(level)
        search.levels.sort(key=lambda lv: lv.value)
        search.latency_metric = latency
        search.throughput_metric = next(
            (m for m in THROUGHPUTS if any(c.values(m) for c in members)), None
        )
        out.append(search)
    return out


def _search_key(search: Search) -> str:
    return repr((search.host, search.axis, sorted(search.series.items(), key=str), search.slo))


def capacity_changes(
    a_cells: Sequence[CellEvidence], b_cells: Sequence[CellEvidence]
) -> list[dict[str, Any]]:
    """`orch diff` of two runs: each search both ran (same host, axis, configuration and SLO),
    its capacity in A and in B as a metric (`slo_capacity`), with each side's sentence."""
    theirs = {_search_key(s): s for s in searches(b_cells)}
    out = []
    for mine in searches(a_cells):
        other = theirs.get(_search_key(mine))
        if other is None:
            continue
        a, b = mine.answer, other.answer
        a_value, b_value = (a.value if a else None), (b.value if b else None)
        if a_value == b_value:
            change = "same"
        elif a_value is None or (b_value is not None and b_value > a_value):
            change = "higher"
        else:
            change = "lower"
        out.append(
            {
                "metric": CAPACITY,
                "axis": mine.axis,
                "host": mine.host,
                "series": mine.series,
                "a": a_value,
                "b": b_value,
                "a_decided": mine.decided,
                "b_decided": other.decided,
                "change": change,
                "a_sentence": mine.sentence(),
                "b_sentence": other.sentence(),
            }
        )
    return out


def capacity_line(change: Mapping[str, Any]) -> str:
    """One `capacity_changes` entry in words: `slo_capacity (rate): 8 -> 4 (lower)`."""
    where = ", ".join(f"{a}={v}" for a, v in change["series"].items())
    shown = [("none" if v is None else f"{v:g}") for v in (change["a"], change["b"])]
    undecided = [side for side in ("a", "b") if not change[f"{side}_decided"]]
    note = (
        f"; boundary undecided in {' and '.join(s.upper() for s in undecided)}" if undecided else ""
    )
    return (
        f"slo_capacity ({change['axis']}{', ' + where if where else ''} on {change['host']}): "
        f"{shown[0]} -> {shown[1]} ({change['change']}{note})"
    )
