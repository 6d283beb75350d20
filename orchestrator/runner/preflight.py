"""Step 3 of a cell, preflight: before its server starts, nothing of an earlier run may be left
on this host (servers, orphaned processes), the cell's GPUs are not busy with foreign processes,
and its ports are free: the server's HTTP port and, on a multi-node cell's head, the dist port
where the other nodes join."""

from __future__ import annotations

import os
import shutil
import signal
import time
from typing import Any, Dict, List, Optional

from orchestrator.runner.container_steps import ContainerSteps
from orchestrator.runner.context import SESSION_DIR_SUFFIX
from orchestrator.runner.probe.gpu import gpu_occupancy
from orchestrator.runner.probe.tools import Absent
from orchestrator.runner.procs import (
    live_server_records,
    marked_processes,
    marker_runner,
    marker_workdir,
    port_in_use,
    port_owner,
    proc_alive,
    proc_cmdline,
    proc_info,
    reap_server,
    record_runner_state,
    signal_server,
    sweep,
    workdir_tag,
)
from orchestrator.runner.protocol import StepFailed, now, stop_all_command

# A GPU with more memory in use than this and no process listed on it is busy all the same (a
# process of another container, which nvidia-smi cannot name): an idle GPU shows a few MiB.
BUSY_MEMORY_MIB = 1024


def check_port_free(port: int, what: str, why_this_port: str = "") -> None:
    """Fail preflight when `port` is taken, naming it and, when it can be told, its owner."""
    why = port_in_use(port)
    if why:
        owner = port_owner(port)
        raise StepFailed(
            "%s %s%s is already in use: %s%s"
            % (what, port, why_this_port, why, "; held by " + owner if owner else "")
        )


class PreflightSteps(ContainerSteps):
    """Step 3 of a cell: preflight (mixed into CellRunner through ServerSteps)."""

    def leftover_reason(self, rec: Dict[str, Any], pids: List[int], why: str = "") -> str:
        """Why a live server record blocks this cell, with the command that stops it."""
        run_id = str(rec.get("run_id"))
        return (
            "an orch server from run %s cell %s is still running (pid %s)%s; stop it with: %s"
            % (
                run_id,
                rec.get("cell_id"),
                pids[0],
                why,
                stop_all_command(run_id, self.workdir),
            )
        )

    def live_run_reason(self, rec: Dict[str, Any], pids: List[int]) -> str:
        """Why a server of another run that is still going blocks this cell (no stop-all hint:
        stopping it would break that run)."""
        started = rec.get("started")
        since = (
            " since %s" % time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(started)))
            if isinstance(started, (int, float))
            else ""
        )
        return (
            "a server of run %s cell %s is running here (pid %s) and that run is live: its "
            "runner (pid %s) is alive%s; wait for that run to finish, or run this one elsewhere"
            % (rec.get("run_id"), rec.get("cell_id"), pids[0], rec.get("runner_pid"), since)
        )

    def do_preflight(self) -> Dict[str, Any]:
        detail: Dict[str, Any] = {}
        self.clear_servers(detail)
        self.clear_orphans(detail)
        self.clear_container_orphans(detail)
        self.check_gpus(detail)
        port = self.server.get("port") if self.server else None
        if port:
            check_port_free(int(port), "port")
            detail["port"] = int(port)
        dist = self.dist_port()
        if dist is not None:
            check_port_free(dist, "dist port", " (server.dist_port: where the other nodes join)")
            detail["dist_port"] = dist
        return detail

    def dist_port(self) -> Optional[int]:
        """The port a multi-node cell's head listens on for its other nodes (None elsewhere:
        a node's part has no `nodes`, and it only connects to the head)."""
        for node in self.cell.get("nodes") or ():
            if isinstance(node, dict) and isinstance(node.get("head_port"), int):
                return int(node["head_port"])
        return None

    def cell_gpus(self) -> Optional[List[int]]:
        """The GPU indices the cell's CUDA_VISIBLE_DEVICES names (None: all, or not indices)."""
        raw = (self.cell.get("env") or {}).get("CUDA_VISIBLE_DEVICES")
        if raw is None:
            return None
        parts = [p.strip() for p in str(raw).split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            return None  # UUIDs or MIG names: check every GPU
        return [int(p) for p in parts]

    def check_gpus(self, detail: Dict[str, Any]) -> None:
        """Foreign processes or memory in use on the cell's GPUs refuse the cell, or only warn
        with `preflight: {gpus_busy: warn}`; recorded in the detail either way. Run only before
        a server of this cell's own starts: a session's kept server is not foreign."""
        policy = str((self.cell.get("preflight") or {}).get("gpus_busy", "refuse"))
        smi = shutil.which("nvidia-smi")
        if smi is None:
            detail["gpus"] = {"checked": False, "note": "nvidia-smi not found on PATH"}
            return
        try:
            seen = gpu_occupancy(smi)
        except Absent as exc:
            detail["gpus"] = {"checked": False, "note": str(exc)}
            return
        wanted = self.cell_gpus()
        gpus = [g for g in seen["gpus"] if wanted is None or g.get("index") in wanted]
        indices = set(g.get("index") for g in gpus)
        apps = [a for a in seen["apps"] if wanted is None or a.get("gpu") in indices]
        held = set(a.get("gpu") for a in apps)
        hidden = [
            g
            for g in gpus
            if g.get("index") not in held
            and isinstance(g.get("memory_used_mib"), (int, float))
            and g["memory_used_mib"] > BUSY_MEMORY_MIB
        ]
        info: Dict[str, Any] = {"checked": True, "policy": policy, "gpus": gpus, "apps": apps}
        if not apps and not hidden:
            info["busy"] = False
            detail["gpus"] = info
            return
        parts = [
            "pid %s (%s) holds %s MiB on GPU %s"
            % (a.get("pid"), a.get("process_name"), a.get("used_memory_mib"), a.get("gpu"))
            for a in apps
        ]
        parts += [
            "GPU %s has %s MiB in use by no listed process" % (g.get("index"), g["memory_used_mib"])
            for g in hidden
        ]
        reason = "GPUs are busy before the server starts: %s" % "; ".join(parts)
        info.update(busy=True, reason=reason)
        detail["gpus"] = info
        if policy != "warn":
            raise StepFailed(
                reason + "; stop those processes, or set `preflight: {gpus_busy: warn}` to go on"
            )
        self.emit({"event": "warning", "what": "gpus_busy", "detail": reason})

    def clear_servers(self, detail: Dict[str, Any]) -> None:
        """No live server may be left on this host before ours starts.

        A server whose runner is dead is an orphan (of this run or another, this user's: the
        records live in this workdir) and is stopped here, noted in the preflight detail. One
        of another run whose runner is alive is a live run and fails the cell (no stop-all
        hint); one whose runner cannot be told fails it with the stop-all hint. One of this run
        whose runner is still alive (stopping it after the controller went away) is waited for.
        """
        deadline = now() + self.wait_limit
        announced = set()
        stopped: List[Dict[str, Any]] = []
        while True:
            live = live_server_records(self.servers_dir)
            if not live:
                break
            states = [(rec, pids, record_runner_state(rec)) for rec, pids in live]
            for rec, pids, state in states:
                if state == "unknown":
                    raise StepFailed(self.leftover_reason(rec, pids))
                if str(rec.get("run_id")) != self.run_id and state == "alive":
                    raise StepFailed(self.live_run_reason(rec, pids))
            waiting = [(rec, pids) for rec, pids, state in states if state == "alive"]
            for rec, pids, state in states:
                if state != "dead":
                    continue
                signal_server(rec, pids, signal.SIGTERM)
                killed, leftover = reap_server(self.servers_dir, rec, pids)
                if leftover:
                    raise StepFailed(
                        self.leftover_reason(
                            rec, leftover, ", left by a runner that died, and survives SIGKILL"
                        )
                    )
                stopped.append(
                    {
                        "run_id": rec.get("run_id"),
                        "cell_id": rec.get("cell_id"),
                        "pid": rec.get("pid"),
                        "processes": pids,
                        "killed": bool(killed),
                    }
                )
            if not waiting:
                continue  # look again: nothing may have appeared meanwhile
            for rec, _pids in waiting:
                if rec.get("pid") not in announced:
                    announced.add(rec.get("pid"))
                    self.emit(
                        {
                            "event": "wait",
                            "for": "server",
                            "run_id": self.run_id,
                            "cell_id": rec.get("cell_id"),
                            "pid": rec.get("pid"),
                            "runner_pid": rec.get("runner_pid"),
                            "limit": round(self.wait_limit, 1),
                        }
                    )
            if now() >= deadline:
                rec, pids = waiting[0]
                raise StepFailed(
                    self.leftover_reason(
                        rec,
                        pids,
                        " and its runner (pid %s) has not stopped it after %gs"
                        % (rec.get("runner_pid"), round(self.wait_limit, 1)),
                    )
                )
            self.stop_event.wait(0.2)
            self.check()
        if stopped:
            detail["stopped_orphans"] = stopped

    def clear_orphans(self, detail: Dict[str, Any]) -> None:
        """Stop every process of this user that carries a cell marker of this workdir whose
        runner is dead (a server's worker, a daemon that double-forked away): listed in the
        detail. Another workdir's orphans are its own next preflight's to stop: its records may
        say to keep them (a server whose runner cannot be told)."""
        groups: Dict[str, Dict[int, int]] = {}
        own_tag = workdir_tag(self.workdir)
        for pid, marker in marked_processes().items():
            runner = marker_runner(marker)
            if runner is None or proc_alive(runner[0], runner[1]):
                continue  # a live run's, or one that cannot be told: not ours to stop
            if marker_workdir(marker) not in (None, own_tag):
                continue  # another workdir's (None: a runner that predates the tag)
            info = proc_info(pid)
            if info is not None and info.state not in ("Z", "X"):
                groups.setdefault(marker, {})[pid] = info.start
        orphans = []
        for marker, pids in sorted(groups.items()):
            cmdlines = {p: proc_cmdline(p)[:200] for p in pids}
            killed, leftover = sweep(pids, min(self.stop_grace, 10.0))
            run_id, cell_id = [*marker.split("/"), "", ""][:2]
            if leftover:
                raise StepFailed(
                    "processes left by run %s cell %s, whose runner died, survive SIGKILL: %s"
                    % (run_id, cell_id, ", ".join(str(p) for p in leftover))
                )
            orphans.append(
                {
                    "run_id": run_id,
                    "cell_id": cell_id,
                    "processes": [{"pid": p, "cmdline": c} for p, c in sorted(cmdlines.items())],
                    "killed": killed,
                }
            )
        if orphans:
            detail["orphan_processes"] = orphans
        self.clear_session_folders(detail)

    def clear_session_folders(self, detail: Dict[str, Any]) -> None:
        """Remove this run's session server folders (`.<cell>.server/`) that no live process
        carries the marker of: what a runner killed with -9 left behind."""
        live = set()
        for marker in marked_processes().values():
            run_id, cell_id = [*marker.split("/"), ""][:2]
            if run_id == self.run_id:
                live.add(cell_id)
        own = str(self.session.get("first_cell") or self.cell_id)
        removed = []
        try:
            names = sorted(os.listdir(self.run_dir))
        except OSError:
            return
        for name in names:
            if not (name.startswith(".") and name.endswith(SESSION_DIR_SUFFIX)):
                continue
            cell_id = name[1 : -len(SESSION_DIR_SUFFIX)]
            path = os.path.join(self.run_dir, name)
            if cell_id in live or cell_id == own or os.path.islink(path):
                continue
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(name)
        if removed:
            detail["stale_session_folders"] = removed
