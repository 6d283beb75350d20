"""A node's part of a multi-node server in its `ready` step (issue 35): it waits for the
controller's word that the head is ready (`.<cell>.head_ready`), never for the head's HTTP port,
and fails at once, with its own reason, when its own part dies meanwhile."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from runner_helpers import RUN_ID, RunnerProcess, cell_dir, free_port, load, make_cell, payload

from orchestrator.runner.context import END_SUFFIX, HEAD_READY_SUFFIX

PART = "x-1-0000abcd.n1"
INVOCATION = "inv-7"


def _part(ready_timeout: float, server_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """A node's part as the controller sends it: no port of its own, the head's URL unset."""
    cell = make_cell(
        free_port(), cell_id=PART, server_args=server_args, ready_timeout=ready_timeout
    )
    cell["server"]["port"] = None
    cell["node"] = {"of": "x-1-0000abcd", "rank": 1, "head": "gpu1", "head_url": None}
    return cell


def _start(home: Path, cell: dict[str, Any]) -> RunnerProcess:
    return RunnerProcess(home, {**payload(cell), "invocation": INVOCATION})


def _say(home: Path, suffix: str, doc: dict[str, Any]) -> None:
    """Write the controller's file for the part, as node_join's one short command does."""
    folder = home / ".orch" / "runs" / RUN_ID
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f".{PART}{suffix}").write_text(json.dumps({**doc, "invocation": INVOCATION}))


def _step(step: str, status: str) -> Any:
    return lambda e: (e.get("event"), e.get("step"), e.get("status")) == ("step", step, status)


def test_the_part_is_ready_when_the_controller_says_the_head_is(home: Path) -> None:
    runner = _start(home, _part(ready_timeout=30))
    runner.wait_event(_step("ready", "start"))
    time.sleep(0.5)  # it waits: nothing said yet
    assert not any(e.get("step") == "verify_env" for e in runner.events)
    _say(home, HEAD_READY_SUFFIX, {"kind": "head_ready", "reason": ""})
    ready = runner.wait_event(_step("ready", "ok"), timeout=5)
    assert ready["detail"]["head"] == "gpu1" and ready["detail"]["url"] is None
    runner.wait_event(_step("bench", "start"))  # env-checked, now holding
    _say(home, END_SUFFIX, {"kind": "release", "reason": "the head's cell ended"})
    runner.finish()
    assert runner.done["status"] == "passed", runner.done
    assert load(cell_dir(home, PART) / "cell.json")["steps"]["verify_env"]["status"] == "ok"


def test_a_part_that_dies_while_waiting_fails_at_once_with_its_own_reason(home: Path) -> None:
    started = time.monotonic()
    runner = _start(home, _part(ready_timeout=60, server_args=("--mode", "exit", "--exit-rc", "3")))
    runner.finish()
    done = runner.done
    assert (done["status"], done["step"]) == ("failed", "ready"), done
    assert done["reason"].startswith("server exited before the head was ready (rc 3)"), done
    assert time.monotonic() - started < 15  # not the ready timeout


def test_no_word_from_the_controller_fails_at_the_ready_timeout_naming_the_head(
    home: Path,
) -> None:
    runner = _start(home, _part(ready_timeout=1.0))
    runner.finish()
    done = runner.done
    assert (done["status"], done["step"]) == ("failed", "ready"), done
    assert done["reason"].startswith("the head gpu1 did not report ready within 1"), done
