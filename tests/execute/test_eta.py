"""The ETA: cells left costed from measured ones, a server start costed apart (pure rules), and
what apply's plain log says every few cells (a real Progress on a scripted clock)."""

from __future__ import annotations

import io

import pytest
from fakes import cell

from orchestrator.cell import ServerSpec
from orchestrator.execute.apply.eta import (
    CellTimes,
    host_seconds_left,
    run_seconds_left,
    span,
)
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.apply.run import _server_starts


def test_a_cell_is_costed_by_its_own_kind_else_the_other_else_unknown() -> None:
    times = CellTimes()
    assert times.estimate(True) is None and not times
    times.add(False, 10.0)
    assert times.estimate(True) == 10.0  # no start measured yet: the reuse figure, for now
    times.add(True, 100.0)
    times.add(True, 140.0)
    times.add(True, 400.0)  # one slow start: the median holds
    assert times.estimate(True) == 140.0
    assert times.estimate(False) == 10.0


def test_a_host_sums_its_cells_left_and_what_the_running_one_still_needs() -> None:
    own = CellTimes(starting=[100.0], reusing=[10.0])
    # running: a reusing cell 4 s in; left: one more of the session, then a new session's two
    left = host_seconds_left([False, True, False], [(False, 4.0)], own, CellTimes())
    assert left == 6.0 + 10.0 + 100.0 + 10.0
    # a cell running past its estimate costs nothing more, never less than nothing
    assert host_seconds_left([], [(True, 500.0)], own, CellTimes()) == 0.0


def test_a_host_with_nothing_measured_borrows_every_hosts_times() -> None:
    pooled = CellTimes(starting=[50.0])
    assert host_seconds_left([True, True], [], CellTimes(), pooled) == 100.0
    assert host_seconds_left([True], [], CellTimes(), CellTimes()) is None
    assert host_seconds_left([], [], CellTimes(), CellTimes()) == 0.0  # nothing left to cost


@pytest.mark.parametrize(
    ("hosts", "parallel", "expected"),
    [
        ([30.0, 40.0], 2, 40.0),  # side by side: the slowest host
        ([30.0, 40.0], 1, 70.0),  # one at a time: one after the other
        ([0.0, 40.0, 20.0], 1, 60.0),
        ([30.0, None], 2, None),  # one host unknown: the run is too
        ([], 4, 0.0),
    ],
)
def test_the_run_ends_with_its_slowest_host_or_its_slots(
    hosts: list[float | None], parallel: int, expected: float | None
) -> None:
    assert run_seconds_left(hosts, parallel) == expected


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.4, "0s"), (45, "45s"), (750, "12m30s"), (7500, "2h05m")]
)
def test_spans_read_as_people_say_them(seconds: float, text: str) -> None:
    assert span(seconds) == text


def test_a_cell_that_starts_a_server_is_the_first_of_its_session() -> None:
    server = ServerSpec(argv=("serve",))
    other = ServerSpec(argv=("serve", "--tp", "2"))
    cells = [
        cell("a", server=server),
        cell("b", server=server),
        cell("c", server=other),
        cell("d", server=server),  # the first session again, after another: a start again
        cell("e", server=server.model_copy(update={"restart": "per_cell"})),
        cell("f", server=server.model_copy(update={"restart": "per_cell"})),
        cell("g"),  # no server: nothing to start
    ]
    assert _server_starts(cells) == [
        ("a", True),
        ("b", False),
        ("c", True),
        ("d", True),
        ("e", True),
        ("f", True),
        ("g", False),
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_plain_log_says_the_eta_every_few_cells() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress({"gpu01": 5}, stream=out, clock=clock, eta_every=2)
    progress.plan(
        {"gpu01": [("a", True), ("b", False), ("c", False), ("d", True), ("e", False)]}, 1
    )

    def one(cid: str, seconds: float, status: str = "passed") -> None:
        progress.cell_event("gpu01", cid, {"event": "step", "step": "bench", "status": "start"})
        clock.now += seconds
        progress.cell_done("gpu01", cid, status, None if status == "passed" else "rc 1")

    one("a", 100.0)
    assert "[run]" not in out.getvalue()
    one("b", 10.0, status="failed")
    # left: c (reuses the server, 10 s), d (starts one, 100 s), e (10 s)
    assert "[run] 2/5 cells done, 1 failed; ETA 2m00s (at " in out.getvalue()
    one("c", 20.0)  # reusing cells: median of 10 and 20
    one("d", 100.0)
    assert "[run] 4/5 cells done, 1 failed; ETA 15s (at " in out.getvalue()
    one("e", 15.0)
    assert "5/5" not in out.getvalue()  # the run's end says itself


def test_a_resumed_run_counts_the_cells_an_earlier_run_finished() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress({"gpu01": 4, "gpu02": 2}, stream=out, clock=clock, eta_every=1)
    progress.plan({"gpu01": [("c", True), ("d", False)]}, 2)  # a, b and all of gpu02 were done
    progress.cell_event("gpu01", "c", {"event": "step", "step": "bench", "status": "start"})
    clock.now += 30.0
    progress.cell_done("gpu01", "c", "passed", None)
    assert "[run] 5/6 cells done; ETA 30s (at " in out.getvalue()
