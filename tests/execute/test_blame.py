"""Who failed and why when a runner ended early: blame.py's rules, pure, without a connection.

tests/execute/test_host_queue_rules.py plays whole runner streams into the host queue; these
pin each rule on its own, including the corners a stream rarely reaches.
"""

from __future__ import annotations

from orchestrator.errors import ConnectionFailure, ExecutionError
from orchestrator.execute.apply.blame import (
    ARCHIVE_NEVER_CAME,
    RunnerExit,
    done_without_archive,
    invocation_broken,
    never_answered,
    unanswered,
)
from orchestrator.execute.apply.outcomes import STOPPED, CellOutcome
from orchestrator.execute.transport.base import JobEnded, RunResult, SchedulerJob

SILENCE = "the host went silent: nothing from its runner for 60 s"


def _ended() -> JobEnded:
    job = SchedulerJob(job_id="4242", name="orch-x", state="TIMEOUT", reason="TimeLimit")
    return JobEnded("Slurm job 4242 hit its time limit", job=job, result=RunResult(1, "", "", 0))


def _exit(**change: object) -> RunnerExit:
    fields: dict[str, object] = dict(
        stopping=False, silent=None, broken=None, rc=1, tail="MemoryError", python="python3"
    )
    fields.update(change)
    return RunnerExit(**fields)  # type: ignore[arg-type]


def _broken(exc: Exception, **change: object) -> tuple[object, ...]:
    args: dict[str, object] = dict(
        in_flight="b", last=None, silent=False, stopping=False, silence=SILENCE
    )
    args.update(change)
    got = invocation_broken("h1", exc, **args)  # type: ignore[arg-type]
    shown = None
    if got.in_flight is not None:
        shown = (got.in_flight.cell_id, got.in_flight.status, got.in_flight.failed_step)
    return shown, got.amended, got.reconnect


def test_a_cell_the_runner_said_was_done_blames_collection_not_the_cell() -> None:
    assert unanswered("h1", "a", "rc 1", said_done=True, seconds=3.0) == CellOutcome(
        "a", "h1", "failed", ARCHIVE_NEVER_CAME, "collect"
    )
    assert unanswered("h1", "a", "rc 1", said_done=False, seconds=3.0) == CellOutcome(
        "a", "h1", "failed", "rc 1", "runner", 3.0
    )


def test_done_without_an_archive_keeps_the_runners_word_or_says_it_gave_none() -> None:
    held = {"status": "interrupted", "reason": "another runner holds it", "step": "lock"}
    assert done_without_archive("h1", "a", held, 1.5) == CellOutcome(
        "a", "h1", "interrupted", "another runner holds it", "lock", 1.5
    )
    bare = done_without_archive("h1", "a", {"status": "passed"}, 1.5)
    assert (bare.status, bare.failed_step) == ("failed", "runner")
    assert bare.reason == "the runner finished the cell without an archive"


def test_a_lost_link_fails_the_cell_in_flight_at_connection_and_asks_for_a_reconnect() -> None:
    assert _broken(ConnectionFailure("reset by peer")) == (
        ("b", "failed", "connection"),
        None,
        True,
    )


def test_a_runner_error_fails_in_flight_at_runner_without_a_reconnect() -> None:
    assert _broken(ExecutionError("exec failed")) == (("b", "failed", "runner"), None, False)


def test_nothing_in_flight_fails_nothing_but_the_link_still_reconnects() -> None:
    assert _broken(ConnectionFailure("reset"), in_flight=None) == (None, None, True)


def test_a_silent_host_fails_in_flight_with_the_silence_and_never_reconnects() -> None:
    got = invocation_broken(
        "h1",
        ConnectionFailure("closed"),
        in_flight="b",
        last=None,
        silent=True,
        stopping=False,
        silence=SILENCE,
    )
    assert got.in_flight is not None and got.in_flight.reason == SILENCE
    assert not got.reconnect and got.amended is None


def test_while_stopping_the_cell_in_flight_is_interrupted_not_failed() -> None:
    for silent in (False, True):  # stopping wins over silence: the link was closed on purpose
        got = invocation_broken(
            "h1",
            ConnectionFailure("closed"),
            in_flight="b",
            last=None,
            silent=silent,
            stopping=True,
            silence=SILENCE,
        )
        assert got.in_flight is not None and got.in_flight.status == "interrupted"
        assert (got.in_flight.reason or "").startswith(STOPPED)
        assert not got.reconnect


def test_a_job_the_scheduler_ended_becomes_the_reason_of_the_cell_that_failed_in_it() -> None:
    last = CellOutcome("a", "h1", "failed", "server exited", "ready", 9.0)
    shown, amended, reconnect = _broken(_ended(), in_flight=None, last=last)
    assert shown is None and not reconnect
    assert isinstance(amended, CellOutcome)
    assert amended.reason == "Slurm job 4242 hit its time limit; the cell: server exited"
    assert (amended.failed_step, amended.seconds) == ("ready", 9.0)
    passed = CellOutcome("a", "h1", "passed")
    assert _broken(_ended(), in_flight=None, last=passed)[1] is None  # a pass stays a pass


def test_cells_never_answered_for_say_why_in_order_of_what_ended_the_runner() -> None:
    def said(end: RunnerExit, said_done: bool = False) -> tuple[str, str | None, str | None]:
        got = never_answered("h1", "c", end, said_done=said_done)
        return got.status, got.failed_step, got.reason

    assert said(_exit(stopping=True, silent=SILENCE)) == ("not-run", None, "interrupted")
    status, step, reason = said(_exit(silent=SILENCE, broken=ExecutionError("x")))
    assert (status, step) == ("failed", "connection") and SILENCE in (reason or "")
    assert said(_exit(broken=ExecutionError("no sshd"))) == ("failed", "runner", "not run: no sshd")
    assert said(_exit()) == (
        "failed",
        "runner",
        "runner ended without a result (rc 1): MemoryError",
    )
    assert said(_exit(), said_done=True) == ("failed", "collect", ARCHIVE_NEVER_CAME)


def test_rc_127_names_the_interpreter_to_set() -> None:
    reason = never_answered("h1", "c", _exit(rc=127, python="/opt/py"), said_done=False).reason
    assert "cannot run '/opt/py'" in (reason or "")
    assert "ansible_python_interpreter" in (reason or "")
