"""One controller per run: an flock on a lock file in the run folder, held for the controller's
life, with a small JSON (pid, host, since when) that names the holder to whoever is refused.

The kernel drops an flock when its holder dies, however it dies: a lock left by a dead controller
is taken over without a word. The file keeps a `.tmp` name so the manifest and `orch pack` skip it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from orchestrator.errors import InputError
from orchestrator.results.layout import RUN_LOCK

_held: dict[Path, RunLock] = {}  # this process's locks: a bisect's steps share their run's
_held_guard = threading.Lock()


class RunLock:
    """The run folder's lock, held by this process; `release()` (or exit) lets it go."""

    def __init__(self, run_dir: Path, handle: IO[str]) -> None:
        self.run_dir = run_dir
        self._handle = handle
        self._users = 1

    def release(self) -> None:
        """Let go of one use; the lock itself goes with the last one."""
        with _held_guard:
            self._users -= 1
            if self._users > 0:
                return
            _held.pop(self.run_dir, None)
            self._handle.close()  # closing the file drops the flock


def _holder(handle: IO[str]) -> dict[str, Any]:
    try:
        handle.seek(0)
        data = json.loads(handle.read(4096) or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def acquire_run_lock(run_dir: Path) -> RunLock:
    """Take the run's lock, or InputError naming the live controller that holds it."""
    key = Path(run_dir).resolve()
    with _held_guard:
        if (mine := _held.get(key)) is not None:
            mine._users += 1
            return mine
        handle = (key / RUN_LOCK).open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            who = (
                f"pid {holder.get('pid', '?')} on {holder.get('hostname', '?')} "
                f"since {holder.get('started', '?')}"
                if holder
                else "a controller that is still starting"
            )
            raise InputError(
                f"run {key.name} is in use by another orch controller ({who})",
                hint="wait for it to finish (or stop it), then resume the run",
            ) from None
        record = {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        lock = _held[key] = RunLock(key, handle)
        return lock
