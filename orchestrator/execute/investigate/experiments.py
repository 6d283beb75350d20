"""The cells an investigation runs: recorded cells measured again (enough fixed repeats, a
profile where the engine has one) and their variants, each an `Experiment` with its label."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.adapters import server_adapter
from orchestrator.analyze.investigate.factors import Factor
from orchestrator.cell import Cell, ServerSpec
from orchestrator.errors import InputError

# GOOD and BAD measured now: fixed, enough for the rank test (5 a side) and one to spare.
REFERENCE_REPEATS = 6
# An experiment's most repeats; it stops earlier once the test against BAD-now decides.
EXPERIMENT_REPEATS = 8
# An inconclusive experiment is looked at once more, with more repeats in a cell of its own:
# at least this many, at most FOLLOW_UP_MAX (the estimate from the spread seen decides).
FOLLOW_UP_MIN, FOLLOW_UP_MAX = 4, 16
# Each experiment is judged at most this many times; each look spends alpha / LOOKS.
LOOKS = 2


def holm_family(experiments: int) -> int:
    """The tests an investigation of `experiments` single-factor experiments may make, declared
    before anything runs: each one, and one of several factors together when there are two or
    more. Fixed up front, so a verdict printed at step 2 stands whatever step 2b finds."""
    return experiments + (1 if experiments >= 2 else 0)


def follow_up_repeats(needed: int | None, measured: int) -> int | None:
    """The repeats of an inconclusive experiment's second cell: what the spread says would
    decide (`needed` in all, `measured` so far), within FOLLOW_UP_MIN..FOLLOW_UP_MAX; None when
    more repeats of it alone cannot decide."""
    if needed is None:
        return None
    return min(max(needed - measured, FOLLOW_UP_MIN), FOLLOW_UP_MAX)


@dataclass
class Experiment:
    """One cell the investigation runs: its label and the factors it sets back to GOOD's."""

    label: str
    cell: Cell
    factors: tuple[Factor, ...] = ()


def with_repeats(cell: Mapping[str, Any], repeats: int) -> dict[str, Any]:
    """A recorded cell's data measuring at least `repeats` times, its own rule dropped."""
    bench = dict(cell.get("bench") or {})
    bench["repeats"] = max(int(bench.get("repeats") or 1), repeats)
    bench["settle"] = None
    return {**cell, "bench": bench}


def with_profile(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded cell's data with `profile:` on where its server adapter can profile and the
    cell did not ask already: GOOD and BAD now then say which phase of a step moved."""
    server = cell.get("server")
    if cell.get("profile") or not isinstance(server, Mapping):
        return dict(cell)
    try:
        spec = ServerSpec.model_validate(server)
        urls = server_adapter(spec.adapter).profile_urls(spec)
    except (InputError, ValueError):
        return dict(cell)
    if urls is None:
        return dict(cell)
    return {**cell, "profile": {"start_url": urls[0], "stop_url": urls[1]}}
