"""Steps 4 and 11, snapshot_pre and snapshot_post: the probe in a thread with a timeout, so a
hanging tool can never hold a cell (or its cleanup) for long."""

from __future__ import annotations

import os
import re
import shutil
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional

from orchestrator.runner.context import CellContext
from orchestrator.runner.probe import gather as probe
from orchestrator.runner.protocol import POLL, Interrupted, now, write_json

PROBE_TIMEOUT = 180.0


def take_snapshot(
    repo_dir: Optional[str],
    python: Optional[str],
    server_log: Optional[str],
    timeout: float = PROBE_TIMEOUT,
    cancelled: Optional[Callable[[], bool]] = None,
    options: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """probe.snapshot(...) in a thread with a timeout; never raises.

    `options` are the cell's snapshot options (pip_freeze, topo): the slow parts can be off.
    """
    box: Dict[str, Any] = {}

    def work() -> None:
        try:
            opts = options or {}
            box["result"] = probe.snapshot(
                repo_dir,
                python,
                server_log,
                pip_freeze=bool(opts.get("pip_freeze", True)),
                topo=bool(opts.get("topo", True)),
            )
        except BaseException as exc:
            box["error"] = "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc())

    thread = threading.Thread(target=work, name="probe", daemon=True)
    thread.start()
    deadline = now() + timeout
    while thread.is_alive() and now() < deadline:
        thread.join(POLL)
        if cancelled is not None and cancelled():
            return {"error": "snapshot abandoned: runner interrupted"}
    if thread.is_alive():
        return {"error": "probe timed out after %gs" % timeout}
    if "error" in box:
        return {"error": box["error"]}
    result = box.get("result")
    return result if isinstance(result, dict) else {"result": result}


# ---------------------------------------------------------------------------------------------
# the cell runner


_PYTHON_NAME = re.compile(r"^python[0-9.]*$")
# pip writes this pair of lines instead of `#!` when the interpreter's path is too long for it.
_PIP_EXEC = re.compile(r"^'''exec' (?:\"([^\"]+)\"|(\S+)) ", re.MULTILINE)


def _shebang_python(script: str, path: Optional[str]) -> Optional[str]:
    """The Python a script's first line (`#!/venv/bin/python`, `#!/usr/bin/env python3`, or
    pip's `'''exec' /venv/bin/python "$0" "$@"` form) runs it under, None when it names none."""
    try:
        with open(script, "rb") as fh:
            head = fh.read(1024).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.startswith("#!"):
        return None
    words = head[2:].splitlines()[0].split() if head[2:].strip() else []
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        found = shutil.which(words[0], path=path) if words else None
        words = [found] if found else []
    if words and _PYTHON_NAME.match(os.path.basename(words[0])):
        return words[0]
    match = _PIP_EXEC.search(head)
    if match:
        python = match.group(1) or match.group(2)
        if _PYTHON_NAME.match(os.path.basename(python)):
            return python
    return None


def python_of(argv: List[str], path: Optional[str] = None) -> Optional[str]:
    """The interpreter a server runs under: argv[0] when it is one, else the Python a console
    script launcher (`vllm`, a venv's `bin/sglang`) names on its first line; `path` is the
    PATH the server starts with."""
    if not argv:
        return None
    if _PYTHON_NAME.match(os.path.basename(argv[0])):
        return argv[0]
    script = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
    return _shebang_python(script, path) if script else None


class SnapshotStep(CellContext):
    """Writes snapshot.pre.json / snapshot.post.json into the cell directory."""

    # steps 4 and 11: snapshots
    def do_snapshot(self, name: str, server_log: Optional[str]) -> Dict[str, Any]:
        python = None
        options = dict(self.cell.get("snapshot") or {})
        if self.server and isinstance(self.server.get("container"), dict):
            # its Python and packages are inside the image (snapshot.image.json): the host's
            # of the same path would be recorded as if they ran
            options["pip_freeze"] = False
        elif self.server:
            argv = list(self.server["argv"])
            python = python_of(argv, self.server_env().get("PATH"))
        timeout = PROBE_TIMEOUT if not self.cleaning else min(PROBE_TIMEOUT, 60.0)
        data = take_snapshot(
            self.repo_dest,
            python,
            server_log,
            timeout,
            cancelled=None if self.cleaning else self.stop_event.is_set,
            options=options,
        )
        write_json(self.path(name), data)
        if self.stop_event.is_set() and not self.cleaning:
            raise Interrupted(self.stop_reason)
        return {"error": str(data["error"])[:200]} if "error" in data else {}
