"""The readiness generate check: /health answering is not enough when the engine cannot run the
model; one 1-token completion must succeed, and a server that dies on it fails `ready` with its
cause first."""

from __future__ import annotations

from pathlib import Path

from runner_helpers import cell_dir, free_port, load, make_cell, run_cell


def _with_generate(cell: dict, port: int) -> dict:
    cell["server"]["ready"]["generate_url"] = f"http://127.0.0.1:{port}/v1/completions"
    cell["server"]["ready"]["generate_body"] = {"model": "m", "prompt": "Hello", "max_tokens": 1}
    return cell


def test_a_server_that_generates_is_ready(home: Path) -> None:
    port = free_port()
    runner = run_cell(home, _with_generate(make_cell(port, repeats=1), port))
    assert runner.done["status"] == "passed", runner.done
    ready = load(cell_dir(home) / "cell.json")["ready"]
    assert ready["generate"] == f"http://127.0.0.1:{port}/v1/completions"


def test_a_server_that_dies_on_its_first_request_fails_ready_with_its_cause(home: Path) -> None:
    port = free_port()
    cell = _with_generate(make_cell(port, server_args=("--generate", "die"), repeats=1), port)
    runner = run_cell(home, cell)
    done = runner.done
    assert done["status"] == "failed" and done["step"] == "ready", done
    reason = done["reason"]
    assert reason.startswith("server exited during startup (rc 1)")
    errors = reason.split("--- last error lines of server.log ---\n", 1)[1]
    assert errors.startswith("ERROR EngineCore died unexpectedly: head size 16 is not supported")
