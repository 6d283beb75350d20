"""Step 10, stop: TERM the server's whole tree, group and session, KILL what outlives
stop_grace, and wait until its port is free again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional

from orchestrator.runner.context import CellContext
from orchestrator.runner.procs import (
    kill_group,
    kill_pid,
    port_in_use,
    port_owner,
    proc_alive,
    proc_cmdline,
    proc_table,
    tree_members,
)
from orchestrator.runner.protocol import POLL, StepFailed, now


class StopStep(CellContext):
    """Stops the server this cell started, and says how (graceful, killed, leftovers)."""

    # step 10: stop
    def server_members(self) -> Dict[int, int]:
        """Live processes of the server (tree, group, session): pid -> start time."""
        if self.proc is None:
            return {}
        table = proc_table()
        pids = tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid)
        return {p: table[p].start for p in pids}

    def _wait_gone(self, watched: Dict[int, int], timeout: float) -> List[int]:
        """Wait until every watched process is gone; the ones still alive at the end."""
        deadline = now() + timeout
        while True:
            if self.proc is not None:
                self.proc.poll()  # reap the leader
            for pid, start in self.server_members().items():
                watched.setdefault(pid, start)
            alive = [p for p, s in sorted(watched.items()) if proc_alive(p, s)]
            if not alive or now() >= deadline:
                return alive
            time.sleep(POLL)

    def do_stop(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        grace = float(server.get("stop_grace", 15.0))
        start = now()
        rc_before = self.proc.poll()
        watched = self.server_members()
        kill_group(self.server_pgid, signal.SIGTERM)
        for pid in watched:
            kill_pid(pid, signal.SIGTERM)  # descendants that left the group get it too
        alive = self._wait_gone(watched, grace)
        killed: List[int] = []
        if alive:
            killed = list(alive)
            kill_group(self.server_pgid, signal.SIGKILL)
            for pid in alive:
                kill_pid(pid, signal.SIGKILL)
            alive = self._wait_gone(watched, 5.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(1.0)
        if self.server_log_fh is not None:
            self.server_log_fh.close()
            self.server_log_fh = None
        port = server.get("port")
        port_busy: Optional[str] = None
        if port:
            port_deadline = now() + 5.0
            while True:
                port_busy = port_in_use(int(port))
                if not port_busy or now() >= port_deadline:
                    break
                time.sleep(0.2)
        self.stop_info = {
            "rc_before_stop": rc_before,
            "rc": self.proc.returncode,
            "processes": sorted(watched),
            "graceful": not killed,
            "killed": killed,
            "leftover": alive,
            "port_free": None if not port else not port_busy,
            "seconds": round(now() - start, 3),
        }
        if alive:
            raise StepFailed(
                "server processes still alive after SIGKILL: %s"
                % ", ".join("%d (%s)" % (p, proc_cmdline(p)[:120]) for p in alive)
            )
        if self.server_record:
            with contextlib.suppress(OSError):
                os.unlink(self.server_record)
        if port_busy:
            owner = port_owner(int(str(port)))
            raise StepFailed(
                "port %s still in use after the server stopped: %s%s"
                % (port, port_busy, "; held by " + owner if owner else "")
            )
        return {"graceful": not killed, "seconds": self.stop_info["seconds"]}
