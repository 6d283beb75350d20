"""A server with no `ready:` check must stay up for the settle time before it counts as ready."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from runner_helpers import cell_dir, load, make_cell, run_cell


def _unchecked_server_cell(server_argv: list[str]) -> dict[str, Any]:
    cell = make_cell(None, bench_argv=(sys.executable, "-c", "pass"), repeats=1)
    cell["server"] = {"argv": server_argv, "stop_grace": 3.0}
    return cell


def test_server_without_ready_that_exits_at_once_fails_the_cell(home: Path) -> None:
    runner = run_cell(
        home, _unchecked_server_cell(["sh", "-c", "echo refusing; sleep 0.3; exit 3"])
    )
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "ready", done
    assert done["reason"].startswith("server exited during startup (rc 3)"), done["reason"]
    assert "refusing" in done["reason"]
    assert load(cell_dir(home) / "cell.json")["steps"]["bench"]["status"] == "not_run"


def test_server_without_ready_that_lives_passes(home: Path) -> None:
    runner = run_cell(home, _unchecked_server_cell(["sleep", "60"]))
    done = runner.done
    assert done["status"] == "passed", done
    ready = load(cell_dir(home) / "cell.json")["steps"]["ready"]
    assert ready["status"] == "ok"
    assert ready["detail"]["check"] == "none"
    assert ready["detail"]["seconds"] >= ready["detail"]["settle_seconds"]
