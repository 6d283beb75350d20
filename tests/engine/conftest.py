"""The real-engine tier: vLLM's CPU build and a tiny model, built once per machine by
scripts/engine.sh (scripts/test.sh runs it and exports ORCH_ENGINE_PYTHON and ORCH_ENGINE_MODEL).

Skipped, saying how to run them, where the engine is not built; under CI (CI=true) that is a
failure, since CI must run them. `pytest -m 'not engine'` (or ORCH_ENGINE=0 for scripts/test.sh)
leaves them out on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .engine_helpers import engine_processes


@dataclass(frozen=True)
class Engine:
    """The engine venv's interpreter and the tiny model's folder."""

    python: str
    model: str


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The built engine, or a skip (a failure under CI) saying how to build it."""
    python, model = os.environ.get("ORCH_ENGINE_PYTHON"), os.environ.get("ORCH_ENGINE_MODEL")
    if not python or not model or not Path(python).is_file() or not Path(model).is_dir():
        why = (
            "the real engine is not built: run scripts/test.sh (it runs scripts/engine.sh), or "
            "export the ORCH_ENGINE_PYTHON and ORCH_ENGINE_MODEL lines scripts/engine.sh prints"
        )
        if os.environ.get("CI"):
            pytest.fail(why + "; CI must run the engine tier")
        pytest.skip(why)
    return Engine(python, model)


@pytest.fixture(autouse=True)
def _no_engine_left(engine: Engine) -> Iterator[None]:
    """Whatever a test's failure left of the engine is ended after it (the checks of what is
    left running are the tests' own, before this)."""
    before = set(engine_processes(engine.python))
    yield
    for pid in set(engine_processes(engine.python)) - before:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
