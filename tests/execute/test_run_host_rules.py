"""A host's part of a run: connecting, reconnecting after a lost link, giving up, Ctrl-C; each
rule against scripted runners, with the real `Run` writing a real bundle (no process, no socket).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes import Script, ScriptedConnection, archived, cell, event, host

from orchestrator.config.host import Group, Host, Inventory
from orchestrator.errors import ConnectionFailure
from orchestrator.execute.apply.outcomes import ApplyOptions
from orchestrator.execute.apply.progress import Progress
from orchestrator.execute.apply.run import Run
from orchestrator.execute.transport.base import Connection

A, B, C = "a-0000aaaa", "b-0000bbbb", "c-0000cccc"


def failed(cid: str, reason: str) -> dict[str, Any]:
    """A cell the runner ended without an archive (as when another runner holds it)."""
    return event(cid, "done", status="failed", reason=reason, step="bench")


def opener(*conns: Connection | Exception) -> tuple[Callable[..., Connection], list[Host]]:
    """An opener handing out `conns` in turn (an exception is a failed connect)."""
    queue = list(conns)
    opened: list[Host] = []

    def open_(h: Host, *, attempts: int) -> Connection:
        opened.append(h)
        got = queue.pop(0)
        if isinstance(got, Exception):
            raise got
        return got

    return open_, opened


def apply(
    tmp_path: Path, open_: Callable[..., Connection], ids: tuple[str, ...] = (A, B, C)
) -> Run:
    gpu = host()
    inventory = Inventory(hosts={gpu.name: gpu}, groups={"all": Group("all", hosts=(gpu.name,))})
    playbook = tmp_path / "pb.yml"
    playbook.write_text("name: p\n")
    return Run(
        playbook_name="p",
        playbook_files=[playbook],
        playbook_dir=tmp_path,
        inventory=inventory,
        cells=[cell(i) for i in ids],
        options=ApplyOptions(results_dir=tmp_path / "results", connect_spacing=0),
        progress=Progress({gpu.name: len(ids)}, stream=io.StringIO()),
        secrets=[],
        opener=open_,
    )


def statuses(run: Run) -> dict[str, tuple[str, str | None]]:
    recorded = json.loads((run.writer.path / "run.json").read_text())["cells"]
    return {cid: (c["status"], c["failed_step"]) for cid, c in recorded.items()}


def test_a_link_lost_midway_reconnects_once_and_the_same_queue_goes_on(tmp_path: Path) -> None:
    lost = ConnectionFailure("gpu01: connection reset by peer")
    first = ScriptedConnection(host(), Script([failed(A, "x"), event(B, "step")], raises=lost))
    second = ScriptedConnection(host(), Script([failed(C, "y")]))
    open_, opened = opener(first, second)
    run = apply(tmp_path, open_)
    outcome = run.execute()
    assert len(opened) == 2 and first.closed.is_set() and second.closed.is_set()
    assert statuses(run) == {
        A: ("failed", "bench"),
        B: ("failed", "connection"),
        C: ("failed", "bench"),
    }
    assert outcome.status == "failed"
    # the second invocation carries only what was still pending
    assert [q["cell"]["id"] for q in second.payload()["queue"]] == [C]


def test_a_host_that_cannot_be_reached_fails_each_cell_at_connect(tmp_path: Path) -> None:
    open_, _ = opener(ConnectionFailure("gpu01: no route to host"))
    run = apply(tmp_path, open_)
    run.execute()
    assert statuses(run) == {c: ("failed", "connect") for c in (A, B, C)}
    reasons = {o.reason for o in run.outcomes.values()}
    assert reasons == {"gpu01: no route to host"}


def test_a_reconnect_that_fails_fails_what_was_left_at_connect(tmp_path: Path) -> None:
    lost = ConnectionFailure("gpu01: reset")
    first = ScriptedConnection(host(), Script([failed(A, "x"), event(B, "step")], raises=lost))
    open_, _ = opener(first, ConnectionFailure("gpu01: host is down"))
    run = apply(tmp_path, open_)
    run.execute()
    assert statuses(run) == {
        A: ("failed", "bench"),
        B: ("failed", "connection"),
        C: ("failed", "connect"),
    }


def test_a_link_lost_before_any_outcome_is_not_retried(tmp_path: Path) -> None:
    # nothing came back: a reconnect would only lose the same way, over and over
    lost = ConnectionFailure("gpu01: reset")
    open_, opened = opener(ScriptedConnection(host(), Script([], raises=lost)))
    run = apply(tmp_path, open_)
    run.execute()
    assert len(opened) == 1
    assert statuses(run) == {c: ("failed", "runner") for c in (A, B, C)}


def test_facts_are_written_for_the_host_even_when_the_runner_sent_none(tmp_path: Path) -> None:
    open_, _ = opener(ScriptedConnection(host(), Script([failed(A, "x")])))
    run = apply(tmp_path, open_, ids=(A,))
    run.execute()
    facts = json.loads((run.writer.path / "hosts" / "gpu01" / "facts.json").read_text())
    assert facts["absent"] == "the runner sent no facts"
    assert facts["host_key_verified"] is True


def _cell_archive(tmp_path: Path, cid: str, host_name: str) -> bytes:
    """A cell's archive as a runner packs it, whose cell.json names `cid` on `host_name`."""
    import tarfile

    folder = tmp_path / "packed" / cid
    folder.mkdir(parents=True)
    doc = {"schema_version": 1, "cell": {"id": cid, "host": host_name}, "status": "passed"}
    (folder / "cell.json").write_text(json.dumps(doc))
    out = tmp_path / "packed" / "a.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname=cid)
    return out.read_bytes()


def test_an_archive_naming_another_cell_or_host_is_refused(tmp_path: Path) -> None:
    """Issue 23 item 7: a host could file results under another cell (a second row in report)."""
    forged = _cell_archive(tmp_path, "z-0000zzzz", "gpu99")
    conn = ScriptedConnection(host(), Script(archived(A, forged)))
    open_, _ = opener(conn)
    run = apply(tmp_path, open_, ids=(A,))
    run.execute()
    assert statuses(run) == {A: ("failed", "collect")}
    assert "refused" in (run.outcomes[A].reason or "")
    assert not (run.writer.path / "cells" / A).exists()
    assert not (run.writer.path / "cells" / "z-0000zzzz").exists()


def test_archives_are_staged_per_controller_and_a_later_run_clears_what_a_killed_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 item 21: kill -9 of the controller mid-stream left partial archives in the
    system temp folder for good; each controller now stages in a folder of its own that it
    holds with an flock, and the next run removes the folders nobody holds."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    killed = temp / f"orch-staging-{os.getuid()}-killed"
    (killed / "stream-x").mkdir(parents=True)
    (killed / "stream-x" / "archive.part").write_bytes(b"x" * 1000)
    (killed / ".lock").touch()  # its controller died: nobody holds the lock
    seen: list[list[str]] = []
    run: Run | None = None

    def look() -> None:
        assert run is not None
        assert run.staging.parent == temp
        seen.append(sorted(p.name.split("-")[0] for p in temp.iterdir()))
        seen.append(sorted(p.name.split("-")[0] for p in run.staging.iterdir()))

    conn = ScriptedConnection(host(), Script([look, failed(A, "x")]))
    open_, _ = opener(conn)
    run = apply(tmp_path, open_, ids=(A,))
    run.execute()
    assert seen == [["orch"], [".lock", "stream"]]  # the killed one's gone, this one's there
    assert list(temp.iterdir()) == []  # and nothing is left once the run is whole


def test_a_note_about_a_cell_that_ended_lands_in_its_run_json_entry(tmp_path: Path) -> None:
    """Issue 23 item 24: the runner says a cell's session server died right after it; run.json
    keeps that beside the cell's outcome."""
    note = "its session's server exited (rc 1) after it, before cell b-0000bbbb started"
    script = [
        *archived(A, _cell_archive(tmp_path, A, "gpu01")),
        event(A, "note", note=note),
        failed(B, "server exited between cells of its session, after cell " + A),
    ]
    conn = ScriptedConnection(host(), Script(script))
    open_, _ = opener(conn)
    run = apply(tmp_path, open_, ids=(A, B))
    run.execute()
    recorded = json.loads((run.writer.path / "run.json").read_text())["cells"]
    assert recorded[A]["note"] == note  # beside its outcome (scored from its archive as ever)
    assert "note" not in recorded[B]
