"""`bench.starts: N`: a cell's measured repeats spread over N server starts, the server restarted
between groups (the server start is the unit of replication); each start gets its own warm-up."""

from __future__ import annotations

from typing import List, Tuple


def runs_over_starts(warmup: int, repeats: int, starts: int) -> List[Tuple[str, int, int]]:
    """(kind, n, start) of every bench run in order: per start its warm-ups (numbered on across
    starts, so each has its own folder), then its share of the repeats, the first starts taking
    one more where they do not divide evenly."""
    starts = max(1, min(starts, repeats))
    runs: List[Tuple[str, int, int]] = []
    measured = 0
    for start in range(1, starts + 1):
        runs += [("warmup", (start - 1) * warmup + i, start) for i in range(1, warmup + 1)]
        share = repeats // starts + (1 if start <= repeats % starts else 0)
        runs += [("measure", measured + i, start) for i in range(1, share + 1)]
        measured += share
    return runs
