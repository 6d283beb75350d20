"""log_gen_throughput of a short repeat: only stats intervals under load at both ends count, so
the client's start-up and the last requests' drain are not averaged in (vLLM 0.32's CPU build
read 19-29 % low on 2 s loads before)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.adapters.vllm_log import Window, parse_log, window_metrics


def _line(second: int, gen: float, running: int, waiting: int = 0) -> str:
    return (
        f"(APIServer pid=7) INFO 03-02 08:00:{second:02d} [loggers.py:259] Engine 000: "
        f"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: {gen} tokens/s, "
        f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: 1.0%, "
        "Prefix cache hit rate: 0.0%"
    )


def _window(start: int, end: int) -> Window:
    base = datetime(2026, 3, 2, 8, 0, 0, tzinfo=UTC).timestamp()
    return Window(base + start, base + end, UTC)


def test_partly_idle_first_and_last_intervals_are_left_out() -> None:
    # one-second stats; the bench process starts at :00, its load runs :02.4-:06.5
    text = "\n".join(
        [
            _line(0, 0.0, 0),
            _line(1, 0.0, 0),
            _line(2, 0.0, 0),
            _line(3, 61.0, 8),  # loaded only from :02.4: partly idle
            _line(4, 100.0, 8),
            _line(5, 102.0, 8),
            _line(6, 98.0, 8),
            _line(7, 40.0, 0),  # the drain: requests finished at :06.5
        ]
    )
    intervals = parse_log(text).intervals
    assert [i.under_load for i in intervals] == [None, False, False, False, True, True, True, False]
    metrics, detail = window_metrics(intervals, _window(0, 8))
    assert metrics["log_gen_throughput"] == pytest.approx(100.0)
    assert detail["partly_idle"] == 2  # :03 and :07 generated but were not under load throughout


def test_waiting_requests_count_as_load() -> None:
    text = "\n".join([_line(0, 0.0, 0, waiting=4), _line(1, 80.0, 2, waiting=2)])
    (first, second) = parse_log(text).intervals
    assert first.busy == 4 and second.under_load is True


def test_lines_without_queue_counts_fall_back_to_any_generation() -> None:
    text = "\n".join(
        f"INFO 03-02 08:00:{s:02d} [metrics.py:1] Avg prompt throughput: 0.0 tokens/s, "
        f"Avg generation throughput: {gen} tokens/s"
        for s, gen in [(0, 0.0), (1, 50.0), (2, 70.0)]
    )
    intervals = parse_log(text).intervals
    assert all(i.under_load is None for i in intervals)
    metrics, _detail = window_metrics(intervals, _window(0, 3))
    assert metrics["log_gen_throughput"] == pytest.approx(60.0)
