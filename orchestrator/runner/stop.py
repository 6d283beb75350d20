"""Step 10, stop: TERM the server's whole tree, group and session, and every process that
carries the cell's marker (a daemon that double-forked away), KILL what outlives stop_grace,
and wait until its port is free again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any, Dict, List, Optional

from orchestrator.runner.container_steps import ContainerSteps
from orchestrator.runner.procs import (
    kill_group,
    kill_pid,
    marked_processes,
    port_in_use,
    port_owner,
    proc_alive,
    proc_cmdline,
    proc_table,
    tree_members,
)
from orchestrator.runner.protocol import POLL, StepFailed, now


class StopStep(ContainerSteps):
    """Stops the server this cell started, and says how (graceful, killed, leftovers)."""

    # step 10: stop
    def marked_members(self) -> List[int]:
        """Live processes that inherited this cell's marker, wherever they went."""
        return sorted(p for p, m in marked_processes().items() if m == self.marker)

    def server_members(self) -> Dict[int, int]:
        """Live processes of the server (tree, group, session) and every process carrying the
        cell's marker: pid -> start time."""
        table = proc_table()
        pids = set(self.marked_members())
        if self.proc is not None:
            pids.update(tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid))
        return {
            p: table[p].start for p in sorted(pids) if p in table and table[p].state not in "ZX"
        }

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
        server = self.server or {}
        grace = float(server.get("stop_grace", 15.0))
        start = now()
        rc_before = self.proc.poll() if self.proc is not None else None
        watched = self.server_members()
        tree = set()
        if self.proc is not None:
            table = proc_table()
            tree = set(tree_members(table, self.proc.pid, self.server_pgid, self.server_pgid))
            for root in self.container_roots():  # in its container: not escaped
                tree.update(tree_members(table, root, -1, -1))
        # Found by the marker alone: they left the server's tree, group and session.
        escaped = [{"pid": p, "cmdline": proc_cmdline(p)[:200]} for p in watched if p not in tree]
        container_error = self.container_stop(grace)  # by name: its client may be gone
        if self.proc is not None:
            kill_group(self.server_pgid, signal.SIGTERM)
        for pid in watched:
            kill_pid(pid, signal.SIGTERM)  # descendants that left the group get it too
        alive = self._wait_gone(watched, grace)
        killed: List[int] = []
        if alive:
            killed = list(alive)
            if self.proc is not None:
                kill_group(self.server_pgid, signal.SIGKILL)
            for pid in alive:
                kill_pid(pid, signal.SIGKILL)
            alive = self._wait_gone(watched, 5.0)
        if self.proc is not None:
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
            "rc": self.proc.returncode if self.proc is not None else None,
            "processes": sorted(watched),
            "escaped": escaped,
            "graceful": not killed,
            "killed": killed,
            "leftover": alive,
            "port_free": None if not port else not port_busy,
            "seconds": round(now() - start, 3),
        }
        if container_error:
            self.stop_info["container_error"] = container_error
        if alive:
            raise StepFailed(
                "server processes still alive after SIGKILL: %s"
                % ", ".join("%d (%s)" % (p, proc_cmdline(p)[:120]) for p in alive)
            )
        if self.proc is not None:
            self.release_session(self.server_pgid)
        if self.server_record:
            with contextlib.suppress(OSError):
                os.unlink(self.server_record)
        if port_busy:
            owner = port_owner(int(str(port)))
            raise StepFailed(
                "port %s still in use after the server stopped: %s%s"
                % (port, port_busy, "; held by " + owner if owner else "")
            )
        detail: Dict[str, Any] = {"graceful": not killed, "seconds": self.stop_info["seconds"]}
        detail["processes"] = sorted(watched)
        if escaped:
            detail["escaped"] = escaped
        return detail
