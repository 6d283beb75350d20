"""A dead server's reason leads with the log's last error lines when its tail is exit noise."""

from __future__ import annotations

from pathlib import Path

from orchestrator.runner.protocol import error_lines, with_errors_and_tail

NOISE = "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: leaked semaphore"


def test_the_cause_above_the_noise_comes_first(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    lines = ["INFO 12-03 10:00:00 [api_server.py:1] Starting vLLM API server"]
    lines += ["ERROR 12-03 10:00:05 [core_client.py:564] Engine core proc EngineCore_DP0 died "
              "unexpectedly, shutting down client."]  # fmt: skip
    lines += ["RuntimeError: Engine core initialization failed. See root cause above."]
    lines += [NOISE] * 40
    log.write_text("\n".join(lines) + "\n")
    reason = with_errors_and_tail("server exited during startup (rc 1)", str(log), "server.log")
    head, errors_and_tail = reason.split("\n--- last error lines of server.log ---\n")
    assert head == "server exited during startup (rc 1)"
    errors, tail = errors_and_tail.split("\n--- last lines of server.log ---\n")
    assert errors.splitlines() == lines[1:3]
    assert tail.splitlines()[-1] == NOISE


def test_no_error_section_when_the_tail_holds_them(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("starting\nTraceback (most recent call last):\nValueError: bad flag\n")
    reason = with_errors_and_tail("server exited during startup (rc 1)", str(log), "server.log")
    assert "last error lines" not in reason and reason.endswith("ValueError: bad flag")
    assert error_lines(str(log)) == ["Traceback (most recent call last):", "ValueError: bad flag"]
    assert error_lines(str(tmp_path / "missing.log")) == []
