"""Fixtures for the runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A scratch $HOME for the runner."""
    path = tmp_path / "home"
    path.mkdir()
    return path
