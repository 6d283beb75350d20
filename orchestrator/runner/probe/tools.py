"""Running one probe tool: no shell, the C locale, a session of its own so a timeout kills
everything it started; `Absent` (the reason an item could not be collected) when it cannot answer.

Host-side code (Python 3.8, standard library only).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from typing import Dict, Optional, Sequence, Tuple


class Absent(Exception):
    """An item could not be collected; the message is the reason recorded in the snapshot."""


def _cmd_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # stable, parseable tool output
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run_command(
    argv: Sequence[str], timeout: float, cwd: Optional[str] = None
) -> Tuple[int, str, str]:
    """Run argv without a shell; (rc, stdout, stderr). Absent when missing or timed out.

    The child gets its own session so a timeout kills everything it started.
    """
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=_cmd_env(),
            start_new_session=True,
        )
    except FileNotFoundError:
        raise Absent("%s: not found" % argv[0]) from None
    except OSError as exc:
        raise Absent("%s: cannot run: %s" % (argv[0], exc)) from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise Absent("%s: timed out after %ss" % (" ".join(argv[:3]), timeout)) from None
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def which(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise Absent("%s not found on PATH" % tool)
    return path
