"""The server start as an investigation's unit of replication (Kalibera & Jones 2013).

Repeats inside one server start cannot show the start-to-start spread (memory placement, clocks,
CUDA-graph capture, autotuning); every comparison an investigation makes crosses starts. Where
the spread comes from, in order: `--start-sd X%`; GOOD's and BAD's own records where they ran
over more than one start (metrics.json's `starts`, analyze/replication.py); else the
investigation measures it, every cell it runs spreading its repeats over `--starts K` server
starts (3 by default), and each start's mean is then one observation. `--starts 1` with nothing
known keeps repeats as the unit, and says that the verdicts assume the spread small.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analyze.replication import recorded_spread, values_and_starts

# Server starts each cell runs when no between-start sd is given or recorded: 3 starts a side
# hold the 5 % with a 2 % start-to-start sd (bench/verdicts/investigate.py).
DEFAULT_STARTS = 3
# A recorded between-start sd is taken as known (with its degrees of freedom) only from this
# many: below, its estimate is too often near 0 (4 null factors, 2 % start sd: 3 starts a side
# blamed one in 10-13 % of investigations, 5 a side 7.7 %, 10 a side 5.0 %); the
# investigation measures instead.
RECORDED_MIN_DOF = 16


@dataclass(frozen=True)
class StartUnit:
    """How an investigation counts server starts: `starts` per cell it runs, and the
    between-start sd (log scale) where given or recorded, with where it came from."""

    starts: int
    sd: float | None
    source: str  # "--start-sd", "recorded by GOOD and BAD (6 starts)", "" (none known)
    dof: float = math.inf  # behind `sd`: a record's starts less one a side (inf: given)

    @property
    def measures(self) -> bool:
        """True when every cell runs several starts: starts are the unit, the spread measured."""
        return self.starts > 1

    @property
    def judged_sd(self) -> float:
        """The sd added to a side measured on one start (0: none known)."""
        return self.sd or 0.0

    def judged_starts(self, ids: Mapping[str, Sequence[str]]) -> Mapping[str, Sequence[str]] | None:
        """The start ids `judge` counts as units: all of them where every cell ran several
        starts; none with one start a cell (repeats the unit, `judged_sd` added)."""
        return ids if self.measures else None

    def plan_line(self, cells: int) -> str:
        """The plan's line on the unit of replication and what it costs."""
        if self.measures:
            known = (
                f"; the between-start sd {self.judged_sd:.1%} {self.source} rests on too few "
                f"starts to take as known ({RECORDED_MIN_DOF} starts beyond one a side needed)"
                if self.sd is not None
                else ""
            )
            return (
                f"unit: the server start: every cell spreads its repeats over {self.starts} "
                f"server starts (a restart and a warm-up per start: up to "
                f"{(self.starts - 1) * cells} extra starts over {cells} cells), and each "
                f"start's mean is one observation; the between-start spread is measured{known} "
                "(--starts 1 to skip)"
            )
        if self.sd is not None:
            estimated = f", {self.dof:.0f} degrees of freedom" if math.isfinite(self.dof) else ""
            return (
                f"unit: each cell is one server start; a between-start sd of {self.sd:.1%} "
                f"({self.source}{estimated}) is added to each side"
            )
        return (
            "unit: each cell is one server start; between-start spread not measured; verdicts "
            "assume it small (a 2 % start-to-start sd blames a do-nothing factor in a fifth "
            "to a half of investigations: --starts 3 or --start-sd X% account for it)"
        )

    def as_dict(self) -> dict[str, Any]:
        """investigation.json's `start_unit`."""
        dof = self.dof if math.isfinite(self.dof) else None
        return {"starts": self.starts, "start_sd": self.sd, "source": self.source or None,
                "dof": dof}  # fmt: skip


def start_unit(
    metric: str,
    recorded: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    given: float | None = None,
    starts: int | None = None,
) -> StartUnit:
    """The unit for `metric`: `given` (--start-sd) first, else the records' own between-start
    spread (`recorded`: (name, metrics.json) of GOOD and BAD; pooled over their starts), else
    measured with `starts` (DEFAULT_STARTS when None) starts a cell."""
    if given is not None:
        return StartUnit(starts if starts is not None else 1, given, "--start-sd")
    weighted, dof, names, count = 0.0, 0, [], 0
    for name, metrics in recorded:
        spread = recorded_spread(metrics, metric)
        if spread is None or spread.between_sd is None or spread.starts < 2:
            continue
        weighted += spread.between_sd**2 * (spread.starts - 1)
        dof += spread.starts - 1
        names.append(name)
        count += spread.starts
    if not dof:
        return StartUnit(starts if starts is not None else DEFAULT_STARTS, None, "")
    source = f"recorded by {' and '.join(names)} ({count} starts)"
    sd = math.sqrt(weighted / dof)
    if dof < RECORDED_MIN_DOF:  # too few starts to lean on: measured, the record said
        return StartUnit(starts if starts is not None else DEFAULT_STARTS, sd, source, dof)
    return StartUnit(starts if starts is not None else 1, sd, source, float(dof))


def start_ids(metrics: Mapping[str, Any], metric: str, cell_id: str) -> list[str] | None:
    """The server start of each positive value of `metric` in a cell's metrics.json, named
    `cell/start` so that two cells never share one; None where the repeats do not say."""
    values, ids = values_and_starts(metrics, metric)
    kept = [f"{cell_id}/{s}" for v, s in zip(values, ids, strict=True) if v > 0]
    return kept or None


def with_starts(cell: Mapping[str, Any], starts: int) -> dict[str, Any]:
    """A recorded cell's data with its repeats spread over `starts` server starts."""
    bench = dict(cell.get("bench") or {})
    if starts > 1:
        bench["starts"] = starts
    else:
        bench.pop("starts", None)
    return {**cell, "bench": bench}
