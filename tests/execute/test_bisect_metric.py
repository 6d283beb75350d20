"""Which error a bisect gives when a step's bench does not report `--metric`."""

from __future__ import annotations

from typing import Any

import pytest
from test_bisect_ids import _setup

from orchestrator.cell import Cell
from orchestrator.errors import ExecutionError
from orchestrator.execute.bisect.run import Bisection, MetricNotReported


class CannedBisection(Bisection):
    """A bisect whose steps return the given metrics instead of running a cell."""

    def __init__(self, reports: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__(_setup("hf_token_value_123"))
        self.reports = reports

    def _run(self, cell: Cell) -> dict[str, Any]:
        repeats = self.reports[str(cell.repo.version if cell.repo else "")]
        return {"cell": {"status": "passed"}, "metrics": {"repeats": repeats}}


GOOD, INNER = "a" * 40, "b" * 40


def test_a_misspelt_metric_suggests_a_reported_one_and_not_the_repeat_number() -> None:
    job = CannedBisection({GOOD: [{"n": 1, "output_throughput": 90.0, "ttft": 3.0}]})
    job.setup.metric = "output_througput"
    with pytest.raises(MetricNotReported) as caught:
        job.measure(GOOD, 3)
    assert caught.value.suggestion == "output_throughput"
    assert "the bench reported: output_throughput, ttft" in str(caught.value)
    assert caught.value.exit_code == 1  # a cell ran: not "bad input, nothing ran"


def test_no_close_name_gives_no_suggestion() -> None:
    job = CannedBisection({GOOD: [{"n": 1, "ttft": 3.0}]})
    job.setup.metric = "goodput"
    with pytest.raises(MetricNotReported) as caught:
        job.measure(GOOD, 3)
    assert caught.value.suggestion is None


def test_a_commit_that_stops_reporting_the_metric_is_not_called_a_misspelling() -> None:
    job = CannedBisection(
        {
            GOOD: [{"n": 1, "x": 90.0}],
            INNER: [{"n": 1, "x_renamed": 91.0}],
        }
    )
    assert job.measure(GOOD, 3) == [90.0]
    with pytest.raises(ExecutionError, match="stopped reporting 'x'") as caught:
        job.measure(INNER, 3)
    assert not isinstance(caught.value, MetricNotReported)
