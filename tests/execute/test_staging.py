"""Which staging folders a run clears: only this user's, only real folders, never a live one's."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.execute.apply.staging import Staging, sweep


def test_a_live_controllers_folder_is_kept_and_a_dead_ones_removed(tmp_path: Path) -> None:
    live = Staging.open(tmp_path)
    dead = tmp_path / f"orch-staging-{os.getuid()}-dead"
    dead.mkdir()
    (dead / ".lock").touch()
    assert sweep(tmp_path) == [dead]
    assert live.path.is_dir()  # its flock is held (another open file cannot take it)
    live.close()
    assert not live.path.exists()


def test_a_folder_still_getting_its_lock_is_left_alone_until_it_is_old(tmp_path: Path) -> None:
    starting = tmp_path / f"orch-staging-{os.getuid()}-starting"
    starting.mkdir()
    assert sweep(tmp_path) == []
    old = time.time() - 3600
    os.utime(starting, (old, old))
    assert sweep(tmp_path) == [starting]


def test_links_and_other_names_are_never_followed_or_touched(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".lock").touch()
    (tmp_path / f"orch-staging-{os.getuid()}-link").symlink_to(elsewhere)
    other = tmp_path / "orch-staging-not-mine"
    other.mkdir()
    assert sweep(tmp_path) == []
    assert (elsewhere / ".lock").exists() and other.is_dir()
