"""Steps 4 and 11, snapshot_pre and snapshot_post: the probe in a thread with a timeout, so a
hanging tool can never hold a cell (or its cleanup) for long."""

from __future__ import annotations

import os
import re
import threading
import traceback
from typing import Any, Callable, Dict, List, Optional

from orchestrator.runner import probe
from orchestrator.runner.context import CellContext
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


def _python_of(argv: List[str]) -> Optional[str]:
    """The interpreter a server runs under, when its argv starts with one."""
    if argv and re.match(r"^python[0-9.]*$", os.path.basename(argv[0])):
        return argv[0]
    return None


class SnapshotStep(CellContext):
    """Writes snapshot.pre.json / snapshot.post.json into the cell directory."""

    # steps 4 and 11: snapshots
    def do_snapshot(self, name: str, server_log: Optional[str]) -> Dict[str, Any]:
        python = _python_of(list(self.server["argv"])) if self.server else None
        timeout = PROBE_TIMEOUT if not self.cleaning else min(PROBE_TIMEOUT, 60.0)
        data = take_snapshot(
            self.repo_dest,
            python,
            server_log,
            timeout,
            cancelled=None if self.cleaning else self.stop_event.is_set,
            options=self.cell.get("snapshot") or {},
        )
        write_json(self.path(name), data)
        if self.stop_event.is_set() and not self.cleaning:
            raise Interrupted(self.stop_reason)
        return {"error": str(data["error"])[:200]} if "error" in data else {}
