"""The one readiness back-off every wait loop of the runner uses (server, node part, session)."""

from __future__ import annotations

import itertools

from orchestrator.runner.server import FIRST_POLL, next_poll


def test_a_poll_waits_longer_each_time_up_to_the_declared_interval() -> None:
    waits, waited = [FIRST_POLL], 0.0
    for _ in range(100):
        waited += waits[-1]
        waits.append(next_poll(waits[-1], 0.5, waited))
    assert all(b >= a for a, b in itertools.pairwise(waits))
    assert max(waits) == 0.5 and waits[-1] == 0.5


def test_a_poll_never_waits_more_than_a_tenth_of_the_time_waited() -> None:
    assert next_poll(0.4, 5.0, 1.0) == 0.1  # ready after 1 s is seen by 1.1 s, not 1.6 s
    assert next_poll(0.02, 5.0, 0.0) == FIRST_POLL  # but never under the first poll
    assert next_poll(2.0, 5.0, 100.0) == 3.0  # long waits: 1.5x the last
