"""When a run will end: cells left per host, costed from the cells already measured.

A cell that starts a server (the first of its session, or any cell of a `per_cell` server)
costs a server start more than one that reuses its session's server, so the two kinds are
measured and costed apart. Pure: the live view (`progress.py`) feeds it times and asks.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class CellTimes:
    """Measured cell durations (seconds), kept apart by whether the cell started a server."""

    starting: list[float] = field(default_factory=list)
    reusing: list[float] = field(default_factory=list)

    def add(self, starts_server: bool, seconds: float) -> None:
        """One finished cell's duration."""
        (self.starting if starts_server else self.reusing).append(seconds)

    def estimate(self, starts_server: bool) -> float | None:
        """A cell's expected duration: the median of its own kind, else of the other kind (a
        start's cost is then unknown: an underestimate, corrected as soon as one is measured),
        else None."""
        own, other = (
            (self.starting, self.reusing) if starts_server else (self.reusing, self.starting)
        )
        if own:
            return statistics.median(own)
        return statistics.median(other) if other else None

    def __bool__(self) -> bool:
        return bool(self.starting or self.reusing)


def host_seconds_left(
    left: Sequence[bool],
    running: Sequence[tuple[bool, float]],
    own: CellTimes,
    pooled: CellTimes,
) -> float | None:
    """Seconds until a host's queue is through, or None while nothing is measured.

    `left`: whether each cell not yet begun starts a server; `running`: the cells begun and not
    yet in (whether each started a server, seconds since it began). The host's own times are
    used when it has any (hosts differ), else every host's (`pooled`).
    """
    times = own if own else pooled
    total = 0.0
    for starts, elapsed in running:
        expected = times.estimate(starts)
        if expected is None:
            return None
        total += max(0.0, expected - elapsed)
    for starts in left:
        expected = times.estimate(starts)
        if expected is None:
            return None
        total += expected
    return total


def run_seconds_left(hosts: Sequence[float | None], max_parallel: int) -> float | None:
    """Seconds until the run ends: the slowest host, or the hosts' total spread over the
    `max_parallel` that run at once when fewer slots than hosts are left; None if any host's
    time is unknown."""
    if any(h is None for h in hosts):
        return None
    known = [h for h in hosts if h is not None]
    if not known:
        return 0.0
    busy = [h for h in known if h > 0]
    return max(max(known), sum(busy) / max(1, min(max_parallel, len(busy) or 1)))


def span(seconds: float) -> str:
    """A duration as people read it: 45s, 12m30s, 2h05m."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def eta_text(seconds: float | None, now_wall: float | None = None) -> str:
    """`12m30s (at 14:52)`, or `unknown` before a cell is measured."""
    if seconds is None:
        return "unknown"
    at = time.strftime("%H:%M", time.localtime((now_wall or time.time()) + seconds))
    return f"{span(seconds)} (at {at})"
