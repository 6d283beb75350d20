"""Fixtures for the runner tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from runner_helpers import RunnerProcess


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A scratch $HOME for the runner; a failed test's runners and servers are killed after."""
    path = tmp_path / "home"
    path.mkdir()
    yield path
    RunnerProcess.kill_all()
    # A runner that died or hung leaves its server's record: end that process group too.
    for record in (path / ".orch" / "servers").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            os.killpg(int(json.loads(record.read_text())["pgid"]), signal.SIGKILL)
