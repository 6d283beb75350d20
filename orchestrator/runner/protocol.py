"""The runner protocol: payload checks, event and exit-code vocabulary, paths and JSON files.

What the controller and the runner agree on lives here (SCHEMA_VERSION, STEPS, the exit codes),
so the controller imports it instead of keeping a copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import sys
import time
from typing import IO, Any, Dict, List, Optional, Tuple

SCHEMA_VERSION = 1
STEPS = (
    "repo",
    "setup",
    "preflight",
    "snapshot_pre",
    "server_start",
    "ready",
    "capture_ready",
    "verify_env",
    "nodes",
    "bench",
    "profile",
    "stop",
    "snapshot_post",
)
# `run` exit status by the cell's final status; bad input (no cell directory) is 2.
EXIT_CODES = {"passed": 0, "failed": 1, "interrupted": 3}
EXIT_BAD_INPUT = 2
LOG_TAIL_LINES = 30
POLL = 0.1
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
# How long a runner waits, beyond the server's stop_grace, for another runner of the same run
# that is still stopping its server, taking the last snapshot and archiving (the cell lock, a
# live server record). ORCH_RUNNER_WAIT_MARGIN overrides it (tests shorten it).
WAIT_MARGIN = 120.0


class StepFailed(Exception):
    """A step failed: the cell is failed with `reason`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Interrupted(Exception):
    """The controller is gone (stdin EOF, parent exit or a signal): stop and finish cleanly."""


def now() -> float:
    """Wall-clock seconds (events and cell.json carry epoch times)."""
    return time.time()


def exit_code(status: str) -> int:
    """The `run` exit status for a cell's final status."""
    return EXIT_CODES.get(status, EXIT_CODES["interrupted"])


UNPACKED_SUFFIX = ".d"  # runner.pyz unpacked beside itself: `runner.pyz.d/` (execute/ship.py)


def _runner_path() -> str:
    """The file the runner runs from: runner.pyz when shipped (also when it runs from the folder
    the bootstrap unpacked beside it, `runner.pyz.d/`), else this package's directory."""
    here = os.path.abspath(__file__)
    top = os.path.dirname(os.path.dirname(os.path.dirname(here)))  # above orchestrator/runner/
    archive = top[: -len(UNPACKED_SUFFIX)]
    if top.endswith(".pyz" + UNPACKED_SUFFIX) and os.path.isfile(archive):
        return archive
    path = here
    while path and not os.path.exists(path):  # inside a zip: climb to the archive itself
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path if os.path.isfile(path) else os.path.dirname(here)


RUNNER_PATH = _runner_path()


def runner_version() -> str:
    """sha256 of the shipped runner.pyz, so a bundle says exactly which runner produced it."""
    try:
        with open(RUNNER_PATH, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:16]
    except OSError:
        return "unknown"


def home_dir() -> str:
    """$HOME as this process sees it (all relative paths of the protocol start there)."""
    return os.path.expanduser("~")


def resolve_path(path: str, base: Optional[str] = None) -> str:
    """`path` with ~ expanded, made absolute against `base` (default $HOME)."""
    path = os.path.expanduser(path)
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(base if base is not None else home_dir(), path))


def display_path(path: str) -> str:
    """`path` relative to $HOME when it lies under it, else absolute."""
    home = os.path.realpath(home_dir())
    real = os.path.realpath(path)
    if real == home or real.startswith(home.rstrip("/") + "/"):
        return os.path.relpath(real, home)
    return os.path.abspath(path)


def write_json(path: str, data: Any) -> None:
    """Write `data` as indented UTF-8 JSON via a temporary file and a rename."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, ensure_ascii=False, default=str)
        fh.write("\n")
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    """Parse a JSON file."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def unlink_quietly(path: str) -> None:
    """Remove a file that may already be gone."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def _log_end(path: str, max_bytes: int) -> List[str]:
    """The lines of a text file's last `max_bytes` ([] when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()


def tail_lines(path: str, n: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last `n` lines of a text file (reads at most `max_bytes` from its end)."""
    return "\n".join(_log_end(path, max_bytes)[-n:])


# Lines that say why a process died, as engines write them; exit noise that follows a death
# (leaked-semaphore and triton warnings, shutdown chatter) matches none of these.
_ERROR_LINE = re.compile(
    r"\b(?:ERROR|CRITICAL|FATAL|Fatal|Traceback|\w*Error\b|\w*Exception\b|exited "
    r"unexpectedly|died unexpectedly|Segmentation fault|Killed|out of memory)"
)
ERROR_LINES = 12


def error_lines(path: str, n: int = ERROR_LINES, max_bytes: int = 256 * 1024) -> List[str]:
    """The last `n` lines of a log's end (`max_bytes`) that name an error, in log order."""
    return [ln for ln in _log_end(path, max_bytes) if _ERROR_LINE.search(ln)][-n:]


def with_errors_and_tail(reason: str, path: str, what: str) -> str:
    """`with_tail`, led by the log's last error lines when the tail does not hold them all: a
    dead engine's cause (`EngineCore ... died unexpectedly`) often lies above a screenful of
    exit noise."""
    tail = tail_lines(path)
    errors = [ln for ln in error_lines(path) if ln not in tail]
    text = with_tail(reason, tail, what)
    if not errors:
        return text
    head, sep, rest = text.partition("\n--- last lines")
    return "%s\n--- last error lines of %s ---\n%s%s%s" % (
        head,
        what,
        "\n".join(errors),
        sep,
        rest,
    )


def with_tail(reason: str, tail: str, what: str) -> str:
    """`reason` followed by the last lines of a log (or a note that the log is empty)."""
    if not tail.strip():
        return reason + " (%s is empty)" % what
    return "%s\n--- last lines of %s ---\n%s" % (reason, what, tail)


def wait_margin() -> float:
    """WAIT_MARGIN, or ORCH_RUNNER_WAIT_MARGIN when that is set to a number."""
    try:
        return max(0.0, float(os.environ.get("ORCH_RUNNER_WAIT_MARGIN", WAIT_MARGIN)))
    except ValueError:
        return WAIT_MARGIN


def stop_all_command(run_id: str, workdir: str) -> str:
    """The command line, runnable as printed, that stops `run_id`'s leftover servers here."""
    argv = (sys.executable or "python3", RUNNER_PATH, "stop-all", run_id, "--workdir", workdir)
    return " ".join(shlex.quote(a) for a in argv)


# ---------------------------------------------------------------------------------------------
# stdin payload and stdout events


def read_first_line() -> bytes:
    """The first line of stdin, read unbuffered so the stdin watcher sees everything after it."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


def parse_payload(line: bytes) -> Tuple[Optional[Dict[str, Any]], str]:
    """The `run` payload from its stdin line, or (None, why it is bad input)."""
    try:
        payload = json.loads(line.decode("utf-8"))
    except ValueError as exc:
        return None, "bad input: the first stdin line is not JSON (%s)" % exc
    queue = payload.get("queue") if isinstance(payload, dict) else None
    if isinstance(payload, dict) and isinstance(queue, list) and queue:
        cells = [item.get("cell") if isinstance(item, dict) else None for item in queue]
    elif isinstance(payload, dict) and isinstance(payload.get("cell"), dict):
        cells = [payload["cell"]]
    else:
        return None, "bad input: expected {schema_version, run_id, workdir, cell | queue}"
    if not all(isinstance(c, dict) for c in cells):
        return None, "bad input: every queue item needs a cell"
    if int(payload.get("schema_version", SCHEMA_VERSION)) > SCHEMA_VERSION:
        return None, (
            "bad input: protocol schema_version %s is newer than this runner's %d"
            % (payload.get("schema_version"), SCHEMA_VERSION)
        )
    run_id = str(payload.get("run_id", ""))
    for cell in cells:
        cell_id = str(cell.get("id", ""))  # type: ignore[union-attr]
        if not _ID_RE.match(run_id) or not _ID_RE.match(cell_id):
            return None, "bad input: run_id %r / cell id %r are not plain names" % (run_id, cell_id)
    return payload, ""


def done_event(
    status: str, step: Optional[str], reason: str, archive: Optional[str]
) -> Dict[str, Any]:
    """The final `done` event of `run`."""
    return {"event": "done", "status": status, "step": step, "reason": reason, "archive": archive}


def bad_input(out: IO[bytes], reason: str) -> int:
    """Report input the runner cannot run (no cell directory is made); exit status 2."""
    event = done_event("failed", None, reason, None)
    try:
        out.write((json.dumps(event) + "\n").encode())
        out.flush()
    except (OSError, ValueError):
        pass
    return EXIT_BAD_INPUT


def silence_stdout() -> None:
    """Point fd 1 at /dev/null so later writes (and interpreter exit) cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
