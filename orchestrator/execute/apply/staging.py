"""Where a run's archives arrive and its cells are unpacked before they enter the bundle.

One folder per controller in the system temp folder, not in the run folder: on a nearly full
results disk the bundle then only ever holds installed cells. The controller holds an flock on
the folder's lock file for its life; the kernel drops it however the controller dies, so every
later run clears what a killed controller left (kill -9 mid-stream).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import IO

PREFIX = "orch-staging-"
LOCK = ".lock"
# a folder without its lock file may belong to a controller between mkdtemp and flock
_YOUNG_SECONDS = 60.0


def _prefix() -> str:
    return f"{PREFIX}{os.getuid()}-"


class Staging:
    """A live controller's staging folder; `close()` removes it."""

    def __init__(self, path: Path, lock: IO[bytes]) -> None:
        self.path = path
        self._lock = lock

    @classmethod
    def open(cls, parent: Path | None = None) -> Staging:
        """Clear what dead controllers left, then make and hold this controller's folder."""
        root = Path(parent or tempfile.gettempdir())
        sweep(root)
        path = Path(tempfile.mkdtemp(prefix=_prefix(), dir=root))  # mode 0700
        lock = (path / LOCK).open("wb")
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else has it
        return cls(path, lock)

    def close(self) -> None:
        """Remove the folder and let the lock go."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.close()


def _abandoned(folder: Path) -> bool:
    """Whether no live controller holds `folder` (its lock is free, or it never got one)."""
    try:
        handle = (folder / LOCK).open("rb")
    except FileNotFoundError:
        try:
            return time.time() - folder.stat().st_mtime > _YOUNG_SECONDS
        except OSError:
            return False
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: its controller is alive
        return True


def sweep(root: Path) -> list[Path]:
    """Remove this user's staging folders in `root` that no live controller holds."""
    removed: list[Path] = []
    for folder in sorted(root.glob(f"{_prefix()}*")):
        try:
            st = folder.lstat()
        except OSError:
            continue
        # only real folders of ours: never follow a link or touch another user's files
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        if _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
