"""Server starts of a run: how many, for how many cells, and the seconds they took, per host.

Cells on one host with the same server identity share one server start (a server session). A
cell's cell.json says whether it started the server (`session.started_server`: the first cell
of its session, or a restart after the server died) or reused a running one. Bundles written
before sessions lack `session`: there every cell whose `server_start` step succeeded started its
own. A start costs from its `server_start` step's start to its `ready` step's end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.analyze.metrics import finite_number
from orchestrator.results.read import RunBundle

SERVER_START_STEP = "server_start"
READY_STEP = "ready"


@dataclass(frozen=True)
class HostStarts:
    """One host's server starts: `starts` of them for `cells` cells, `seconds` start to ready.

    `untimed` starts lack a step time (a cell cut short), so `seconds` leaves them out.
    """

    host: str
    starts: int = 0
    cells: int = 0
    seconds: float = 0.0
    untimed: int = 0


@dataclass(frozen=True)
class ServerStarts:
    """A run's server starts, per host (in the order hosts first appear among the cells).

    `text()` reads `3 for 12 cells, 41.2 s start-up`.
    """

    hosts: tuple[HostStarts, ...] = field(default_factory=tuple)

    @property
    def starts(self) -> int:
        """Server starts on every host."""
        return sum(h.starts for h in self.hosts)

    @property
    def cells(self) -> int:
        """Cells that declare a server, on every host."""
        return sum(h.cells for h in self.hosts)

    @property
    def seconds(self) -> float:
        """Seconds from start to ready, summed over every timed start."""
        return sum(h.seconds for h in self.hosts)

    @property
    def untimed(self) -> int:
        """Starts whose seconds are unknown, on every host."""
        return sum(h.untimed for h in self.hosts)

    def text(self) -> str:
        """`3 for 12 cells, 41.2 s start-up` for people."""
        return _starts_text(self.starts, self.cells, self.seconds, self.untimed)

    def host_texts(self) -> dict[str, str]:
        """{host: `2 for 8 cells, 30.1 s start-up`}."""
        return {h.host: _starts_text(h.starts, h.cells, h.seconds, h.untimed) for h in self.hosts}


def _starts_text(starts: int, cells: int, seconds: float, untimed: int) -> str:
    noun = "cell" if cells == 1 else "cells"
    text = f"{starts} for {cells} {noun}, {seconds:.1f} s start-up"
    return f"{text} ({untimed} of them not timed)" if untimed else text


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def started_server(cell_json: Mapping[str, Any]) -> bool:
    """True when this cell started a server (rather than reusing one, or never reaching it)."""
    session = cell_json.get("session")
    if isinstance(session, dict):
        return session.get("started_server") is True
    return _dict(_dict(cell_json.get("steps")).get(SERVER_START_STEP)).get("status") == "ok"


def start_seconds(cell_json: Mapping[str, Any]) -> float | None:
    """Seconds from the server_start step's start to the ready step's end; None when unknown."""
    steps = _dict(cell_json.get("steps"))
    start = finite_number(_dict(steps.get(SERVER_START_STEP)).get("start"))
    end = finite_number(_dict(steps.get(READY_STEP)).get("end"))
    if start is None or end is None or end < start:
        return None
    return end - start


def count_starts(cell_jsons: Iterable[Mapping[str, Any]]) -> ServerStarts:
    """Server starts per host from cells' cell.json documents (a pure function of them).

    A cell counts towards `cells` when its recorded Cell declares a server; a start's seconds
    count only when both step times are recorded.
    """
    totals: dict[str, HostStarts] = {}
    for doc in cell_jsons:
        cell = _dict(doc.get("cell"))
        if not cell.get("server"):
            continue
        host = str(cell.get("host") or "?")
        was = totals.get(host, HostStarts(host))
        now = replace(was, cells=was.cells + 1)
        if started_server(doc):
            took = start_seconds(doc)
            now = replace(
                now,
                starts=now.starts + 1,
                seconds=now.seconds + (took or 0.0),
                untimed=now.untimed + (took is None),
            )
        totals[host] = now
    return ServerStarts(tuple(totals.values()))


def run_starts(run: RunBundle) -> ServerStarts:
    """Server starts of a recorded run, over its complete cells."""
    return count_starts(record.cell_json for record in run.cells.values())
