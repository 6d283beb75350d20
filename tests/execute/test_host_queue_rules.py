"""Who failed, why, and which cells are lost: the host queue's rules, against a scripted runner.

Each test plays what a runner would print (tests/execute/fakes.py) into the real `HostQueue`
and checks the outcomes the run would record. The e2e tests over sshd, the test Slurm and real
processes prove that runners really print these lines; these prove what orch makes of them.
"""

from __future__ import annotations

import threading

from fakes import FakeRun, Script, ScriptedConnection, archived, cell, event, host

from orchestrator.errors import ConnectionFailure, ExecutionError
from orchestrator.execute.apply.host_queue import HostQueue
from orchestrator.execute.apply.outcomes import STOPPED, ApplyOptions, CellOutcome
from orchestrator.execute.transport.base import JobEnded, RunResult, SchedulerJob

A, B, C = "a-0000aaaa", "b-0000bbbb", "c-0000cccc"


def play(
    *scripts: Script, ids: tuple[str, ...] = (A, B, C), **run: object
) -> tuple[FakeRun, HostQueue, bool]:
    """One invocation of a host's queue: the run, the queue, and whether the link was lost."""
    cells = [cell(i) for i in ids]
    fake = FakeRun(cells, **run)  # type: ignore[arg-type]
    queue = HostQueue(fake, ScriptedConnection(host(), *scripts), cells, facts=False)
    lost = queue.run()
    pending = [c for c in cells if not fake.finished(c.id)]
    if not lost or not pending or not queue.progressed:
        queue.fail_rest(pending)
    return fake, queue, lost


def test_every_archive_that_arrives_is_imported_and_passes() -> None:
    fake, _, lost = play(Script([*archived(A, b"one"), *archived(B, b"two"), *archived(C)]))
    assert not lost
    assert fake.reasons() == {A: ("passed", None), B: ("passed", None), C: ("passed", None)}
    assert fake.imported[A] == b"one" and fake.imported[B] == b"two"


def test_the_payload_names_every_cell_in_order_with_its_session() -> None:
    cells = [cell(i) for i in (A, B)]
    conn = ScriptedConnection(host(), Script([*archived(A), *archived(B)]))
    HostQueue(FakeRun(cells, secrets=["s3cret-value"]), conn, cells, facts=False).run()
    payload = conn.payload()
    assert [item["cell"]["id"] for item in payload["queue"]] == [A, B]
    assert payload["secret_values"] == ["s3cret-value"] and payload["stream"] is True


def test_a_runner_that_exits_midway_fails_the_rest_with_its_exit_code_and_stderr() -> None:
    fake, _, _ = play(Script(archived(A), rc=1, stderr="Traceback ...\nMemoryError"))
    assert fake.reasons() == {
        A: ("passed", None),
        B: ("failed", "runner"),
        C: ("failed", "runner"),
    }
    assert (
        fake.outcomes[B].reason
        == "runner ended without a result (rc 1): Traceback ...\nMemoryError"
    )


def test_rc_127_says_which_interpreter_to_set() -> None:
    fake, _, _ = play(Script([], rc=127, stderr="python9: not found"))
    reason = fake.outcomes[A].reason or ""
    assert "rc 127" in reason and "cannot run 'python3'" in reason
    assert "ansible_python_interpreter" in reason


def test_without_stderr_the_runners_stray_output_is_the_evidence() -> None:
    fake, _, _ = play(Script(["Segmentation fault (core dumped)"], rc=139), ids=(A,))
    assert fake.outcomes[A].reason == (
        "runner ended without a result (rc 139): Segmentation fault (core dumped)"
    )


def test_done_without_its_archive_blames_collection_not_the_cell() -> None:
    done = event(A, "done", status="passed", archive="a.tar.gz")
    fake, _, _ = play(Script([done], rc=0), ids=(A, B))
    assert fake.reasons() == {A: ("failed", "collect"), B: ("failed", "runner")}
    assert fake.outcomes[A].reason == (
        "the runner said the cell was done but its archive never arrived"
    )


def test_done_naming_no_archive_keeps_the_runners_reason_and_step() -> None:
    held = event(A, "done", status="failed", reason="another runner holds it", step="lock")
    stopped = event(B, "done", status="interrupted", reason="stopped")
    fake, _, _ = play(Script([held, stopped]), ids=(A, B))
    assert fake.reasons() == {A: ("failed", "lock"), B: ("interrupted", "runner")}
    assert fake.outcomes[A].reason == "another runner holds it"


def test_a_damaged_archive_fails_its_cell_at_collect_and_the_queue_goes_on() -> None:
    bad = archived(A)
    bad[-1] = event(A, "archive_end", sha256="0" * 64)
    fake, _, _ = play(Script([*bad, *archived(B)]), ids=(A, B))
    assert fake.reasons() == {A: ("failed", "collect"), B: ("passed", None)}
    assert "damaged" in (fake.outcomes[A].reason or "")


def test_an_archive_the_controller_cannot_import_fails_at_collect() -> None:
    fake, _, _ = play(Script(archived(A)), ids=(A,), import_fails="not a gzip file")
    assert fake.reasons() == {A: ("failed", "collect")}
    assert fake.outcomes[A].reason == "cannot import the cell's results: not a gzip file"


def test_a_lost_link_fails_the_cell_in_flight_and_asks_for_a_reconnect() -> None:
    lines = [*archived(A), event(B, "step", step="bench", status="start")]
    fake, queue, lost = play(Script(lines, raises=ConnectionFailure("gpu01: connection reset")))
    assert lost and queue.progressed
    assert fake.reasons() == {A: ("passed", None), B: ("failed", "connection")}
    assert (
        fake.outcomes[B].reason == "lost the connection while the cell ran: gpu01: connection reset"
    )
    assert C not in fake.outcomes  # the caller sends it again over a fresh connection


def test_a_link_lost_before_any_outcome_gives_up_instead_of_looping() -> None:
    fake, queue, lost = play(Script([], raises=ConnectionFailure("gpu01: reset")), ids=(A, B))
    assert lost and not queue.progressed
    assert fake.reasons() == {A: ("failed", "runner"), B: ("failed", "runner")}
    assert fake.outcomes[A].reason == "not run: gpu01: reset"


def test_a_runner_that_cannot_start_says_why_in_every_cell() -> None:
    # before: "runner ended without a result (rc None): " with nothing after the colon
    cannot = ExecutionError("cannot start python3 -c ... on gpu01: [Errno 2] No such file")
    fake, _, _ = play(Script([], raises=cannot), ids=(A, B))
    assert fake.outcomes[B].reason == f"not run: {cannot}"


def test_a_runner_error_that_is_not_the_link_fails_in_flight_and_does_not_reconnect() -> None:
    lines = [event(A, "step", step="server_start", status="start")]
    fake, _, lost = play(Script(lines, raises=ExecutionError("gpu01: disk full")), ids=(A, B))
    assert not lost
    assert fake.reasons() == {A: ("failed", "runner"), B: ("failed", "runner")}
    assert fake.outcomes[A].reason == "lost the runner: gpu01: disk full"


def test_after_ctrl_c_the_cell_in_flight_is_interrupted_and_the_rest_not_run() -> None:
    stop = threading.Event()
    lines = [*archived(A), event(B, "step", step="bench", status="start"), stop.set]
    fake, _, lost = play(Script(lines, raises=ConnectionFailure("closed")), stop=stop)
    assert not lost
    assert fake.reasons() == {
        A: ("passed", None),
        B: ("interrupted", "interrupted"),
        C: ("not-run", None),
    }
    assert (fake.outcomes[B].reason or "").startswith(STOPPED)


def test_an_interrupted_cell_archived_after_ctrl_c_says_its_server_was_stopped() -> None:
    stop = threading.Event()
    cells = [cell(A)]
    run = FakeRun(cells, stop=stop)

    def interrupted(host_name: str, c: object, local: object, seconds: float) -> CellOutcome:
        return CellOutcome(A, host_name, "interrupted", "signal", "bench", seconds)

    run.import_archive = interrupted  # type: ignore[method-assign,assignment]
    conn = ScriptedConnection(host(), Script([stop.set, *archived(A, status="interrupted")]))
    HostQueue(run, conn, cells, facts=False).run()
    assert run.outcomes[A].reason == f"{STOPPED}; the server was stopped"


def test_a_scheduler_ending_the_job_names_itself_in_the_failed_cells_reason() -> None:
    job = SchedulerJob("orch-x", "4242", "TIMEOUT", "TimeLimit")
    ended = JobEnded("Slurm job 4242 hit its time limit", job=job, result=RunResult(1, "", "", 0))
    failed = event(A, "done", status="failed", reason="bench: killed", step="bench")
    fake, _, lost = play(Script([failed], raises=ended), ids=(A, B))
    assert not lost
    assert fake.outcomes[A].reason == "Slurm job 4242 hit its time limit; the cell: bench: killed"
    assert fake.reasons([B]) == {B: ("failed", "runner")}
    assert fake.outcomes[B].reason == "not run: Slurm job 4242 hit its time limit"


def test_each_outcome_names_the_scheduler_job_it_ran_in() -> None:
    cells = [cell(A)]
    fake = FakeRun(cells)
    conn = ScriptedConnection(host(), Script(archived(A)), jobs=["17", "18"])
    HostQueue(fake, conn, cells, facts=False).run()
    assert fake.outcomes[A].slurm_job == "18"


def test_the_runners_own_word_on_its_job_reaches_the_connection() -> None:
    cells = [cell(A)]
    named = {"event": "slurm_job", "job_id": "99", "name": "orch-abc", "nodes": "node1"}
    conn = ScriptedConnection(host(), Script([named, *archived(A)]))
    HostQueue(FakeRun(cells), conn, cells, facts=False).run()
    assert conn.running == [("orch-abc", "99")]


def test_a_dead_task_of_a_multi_node_job_fails_its_ranks_cells_at_once() -> None:
    task_end = {"event": "task_end", "rank": 0, "node": "node1", "rc": 137}
    fake, _, _ = play(Script([*archived(A), event(B, "step", step="bench"), task_end]))
    reason = "the runner on node node1 (rank 0) ended without a result (rc 137)"
    assert fake.outcomes[B].reason == reason and fake.outcomes[C].reason == reason
    assert fake.reasons() == {A: ("passed", None), B: ("failed", "runner"), C: ("failed", "runner")}


def test_a_task_that_ended_cleanly_or_on_request_fails_nothing() -> None:
    clean = {"event": "task_end", "rank": 0, "node": "node1", "rc": 0}
    fake, _, _ = play(Script([clean, *archived(A)]), ids=(A,))
    assert fake.reasons() == {A: ("passed", None)}


def test_lines_about_cells_not_in_the_queue_and_noise_change_nothing() -> None:
    stranger = event("z-0000zzzz", "done", status="failed", reason="not ours")
    fake, queue, _ = play(Script([stranger, "", "{not json", "[1, 2]", *archived(A)]), ids=(A,))
    assert fake.reasons() == {A: ("passed", None)}
    assert queue.noise == ["", "{not json", "[1, 2]"]


def test_facts_the_runner_sends_are_kept_for_the_host() -> None:
    facts = {"event": "facts", "data": {"gpu": {"count": 8}}}
    cells = [cell(A)]
    queue = HostQueue(
        FakeRun(cells), ScriptedConnection(host(), Script([facts])), cells, facts=True
    )
    queue.run()
    assert queue.facts == {"gpu": {"count": 8}}
    broken = {"event": "facts", "data": "oops"}
    queue = HostQueue(
        FakeRun(cells), ScriptedConnection(host(), Script([broken])), cells, facts=True
    )
    queue.run()
    assert queue.facts == {"absent": "facts not an object"}


def test_a_silent_host_is_given_up_without_a_reconnect() -> None:
    # the runner starts the cell, then nothing (no heartbeat): a cut link or a frozen host
    lines = [event(A, "step", step="bench", status="start")]
    options = ApplyOptions(silent_host_timeout=1.0)
    fake, queue, lost = play(Script(lines, hang=True), ids=(A, B), options=options)
    assert queue.silent and not lost
    assert fake.reasons() == {A: ("failed", "connection"), B: ("failed", "connection")}
    assert (fake.outcomes[A].reason or "").startswith("the host went silent: nothing from its")
    assert (fake.outcomes[B].reason or "").startswith("not run: the host went silent")


def test_secret_values_never_reach_progress() -> None:
    leak = event(A, "step", step="server_start", status="failed", detail={"tok": "hf_s3cr3t"})
    fake, _, _ = play(Script([leak, *archived(A)]), ids=(A,), secrets=["hf_s3cr3t"])
    assert "hf_s3cr3t" not in fake.shown.getvalue()


def test_a_malformed_event_is_noise_and_the_queue_goes_on() -> None:
    """Issue 23 item 8: `"seconds": "abc"` killed the reader (local) or aborted the run (SSH)."""
    bad = [
        {"event": "repeat", "cell": A, "seconds": "abc", "kind": "measure", "n": 1},
        event(A, "step", step=["not", "a", "name"], status="ok"),
        {"event": "done", "cell": 7, "status": "passed"},
        event(A, "archive", bytes="many"),
        {"event": "task_end", "rank": 0, "rc": "137"},
    ]
    fake, queue, _ = play(Script([*bad, *archived(A)]), ids=(A,))
    assert fake.reasons() == {A: ("passed", None)}
    assert len(queue.noise) == len(bad)
    assert "`seconds` is not int or float: 'abc'" in queue.noise[0]
    assert all("(ignored: " in line for line in queue.noise)


def test_waiting_in_the_schedulers_queue_is_not_silence() -> None:
    """Issue 23 item 2: a job PENDING longer than --silent-host-timeout failed its cells as
    'the host went silent'; no runner exists while the job waits."""
    cells = [cell(A)]
    fake = FakeRun(cells, options=ApplyOptions(silent_host_timeout=1.0))
    conn = ScriptedConnection(host(), Script([], hang=True))
    conn.waiting = True
    queue = HostQueue(fake, conn, cells, facts=False)
    runner = threading.Thread(target=queue.run)
    runner.start()
    runner.join(2.5)  # past the silence limit, still pending
    assert runner.is_alive() and not queue.silent
    conn.waiting = False  # the job started, and its runner says nothing: now it is silence
    runner.join(5)
    assert not runner.is_alive() and queue.silent
