"""Fixtures for the results tests: a fake nvidia-smi on PATH."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from results_helpers import FAKE_SMI


@pytest.fixture
def smi_bin(tmp_path: Path) -> Path:
    """A directory holding `nvidia-smi` (the fake) and the `python3` its shebang needs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(FAKE_SMI)
    (bindir / "python3").symlink_to(sys.executable)
    return bindir
