"""What apply prints for a step that passed with a warning (verify_env: warn with mismatches,
processes it could not read) and for a refused cache reset: never a bare "ok"."""

from __future__ import annotations

import io

from orchestrator.execute.apply.progress import Progress

CELL = "x-1-0000abcd"


def test_a_step_that_passed_with_a_warning_says_so() -> None:
    out = io.StringIO()
    progress = Progress({"gpu01": 1}, stream=out)
    warning = "environment mismatch in 2 of 4 server processes (verify_env: warn; env_check.json)"
    detail = {"ok": False, "processes": 4, "mismatches": 2, "warning": warning}
    progress.cell_event("gpu01", CELL, {"event": "step", "step": "verify_env", "status": "ok"})
    progress.cell_event(
        "gpu01", CELL, {"event": "step", "step": "verify_env", "status": "ok", "detail": detail}
    )
    lines = out.getvalue().splitlines()
    assert lines[0] == f"[gpu01] {CELL}: verify_env ok"
    assert lines[1] == f"[gpu01] {CELL}: verify_env WARNING: {warning}"


def test_a_refused_reset_is_said_at_once() -> None:
    out = io.StringIO()
    progress = Progress({"gpu01": 1}, stream=out)
    url = "http://127.0.0.1:8000/reset_prefix_cache"
    event = {"event": "warning", "what": "reset", "detail": {"status": 404, "url": url}}
    progress.cell_event("gpu01", CELL, event)
    assert out.getvalue().strip() == (
        f"[gpu01] {CELL}: WARNING: cache reset refused (HTTP 404 from {url}): this cell runs on "
        "the previous cell's warm cache"
    )


def test_a_hosts_escape_sequences_never_reach_the_terminal() -> None:
    """Issue 23 item 20: a reason or step from a host was printed raw (retitle the window,
    hide lines, fake output)."""
    out = io.StringIO()
    progress = Progress({"gpu01": 1}, stream=out)
    evil = "\x1b]0;owned\x07\x1b[2Jok\x9b31m"
    progress.cell_event("gpu01", CELL, {"event": "step", "step": evil, "status": "ok"})
    progress.cell_event("gpu01", CELL, {"event": "warning", "what": evil, "detail": evil})
    progress.cell_done("gpu01", CELL, "failed", f"bench: {evil}")
    text = out.getvalue()
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert f"[gpu01] {CELL}: ok ok" in text and f"{CELL}: FAILED: bench: ok" in text
