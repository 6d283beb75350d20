"""The server's life up to the bench: preflight (no leftover server, a free port), start,
readiness, and the captures taken from its HTTP endpoints."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

from orchestrator.runner.context import CellContext
from orchestrator.runner.probe import Absent, gpu_occupancy
from orchestrator.runner.procs import (
    live_server_records,
    marked_processes,
    marker_runner,
    port_in_use,
    port_owner,
    proc_alive,
    proc_cmdline,
    proc_info,
    reap_server,
    record_runner_state,
    signal_server,
    sweep,
)
from orchestrator.runner.protocol import (
    StepFailed,
    now,
    resolve_path,
    stop_all_command,
    tail_lines,
    with_tail,
    write_json,
)

# A server with no `ready:` check counts as ready once it has stayed up this long: one that exits
# at once (a bad flag, a missing model) fails at `ready` instead of passing a quick bench.
UNCHECKED_SETTLE_SECONDS = 1.0

# A GPU with more memory in use than this and no process listed on it is busy all the same (a
# process of another container, which nvidia-smi cannot name): an idle GPU shows a few MiB.
BUSY_MEMORY_MIB = 1024

# The first readiness poll's wait; each next one waits 1.5x longer, up to ready.interval.
FIRST_POLL = 0.02
# A readiness poll never waits longer than this share of the time waited so far: a server ready
# after 0.4 s is seen by 0.44 s, not at the next step of the back-off (0.64 s).
POLL_SHARE = 0.1


def next_poll(interval: float, declared: float, waited: float) -> float:
    """The wait before the next readiness poll: 1.5x the last, at most `declared` and at most
    POLL_SHARE of the time waited so far (but never under FIRST_POLL)."""
    return min(declared, interval * 1.5, max(FIRST_POLL, waited * POLL_SHARE))


# Never send loopback readiness checks through a host's HTTP proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def file_size(path: str) -> int:
    """Bytes in `path` now (0 when it is not there)."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def http_get(url: str, timeout: float) -> Tuple[Optional[int], bytes, str]:
    """GET `url`: (status or None, body, error text)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read(), ""
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read()
        except Exception:
            body = b""
        return int(exc.code), body, ""
    except Exception as exc:
        reason = getattr(exc, "reason", None)
        return None, b"", "%s: %s" % (type(exc).__name__, reason if reason is not None else exc)


def check_port_free(port: int, what: str, why_this_port: str = "") -> None:
    """Fail preflight when `port` is taken, naming it and, when it can be told, its owner."""
    why = port_in_use(port)
    if why:
        owner = port_owner(port)
        raise StepFailed(
            "%s %s%s is already in use: %s%s"
            % (what, port, why_this_port, why, "; held by " + owner if owner else "")
        )


class LogScanner:
    """Searches a growing log file for a regex, reading only what was appended."""

    def __init__(self, path: str, pattern: str) -> None:
        self.path = path
        self.regex = re.compile(pattern, re.MULTILINE)
        self.pos = 0
        self.keep = ""

    def found(self) -> bool:
        """True once the pattern has appeared in the file."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.pos)
                data = fh.read()
        except OSError:
            return False
        self.pos += len(data)
        text = self.keep + data.decode("utf-8", "replace")
        if self.regex.search(text):
            return True
        self.keep = text[-16384:]
        return False


class ServerSteps(CellContext):
    """Steps 3, 5, 6 and 7 of a cell: preflight, server_start, ready, capture_ready."""

    # step 3: preflight
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
        """Stop every process of this user that carries a cell marker whose runner is dead
        (a server's worker, a daemon that double-forked away): listed in the detail."""
        groups: Dict[str, Dict[int, int]] = {}
        for pid, marker in marked_processes().items():
            runner = marker_runner(marker)
            if runner is None or proc_alive(runner[0], runner[1]):
                continue  # a live run's, or one that cannot be told: not ours to stop
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

    # step 5: server_start
    def server_cwd(self) -> str:
        """Where the server runs: server.cwd, else the repo's clone, else the cell folder, or,
        for a server its session's next cells will share, a folder of the session's own (a cell
        folder is renamed and archived when its cell ends)."""
        assert self.server is not None
        if self.server_doc.get("cwd"):
            return str(self.server_doc["cwd"])  # a server this cell took over: its own cwd
        default = self.repo_dest or self.dir
        if not self.repo_dest and self.next_session_key == self.session_key:
            default = os.path.join(self.run_dir, "." + self.cell_id + ".server")
            os.makedirs(default, exist_ok=True)
        cwd = self.server.get("cwd")
        return resolve_path(str(cwd), default) if cwd else default

    def do_server_start(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None
        argv = [str(a) for a in server["argv"]]
        cwd = self.server_cwd()
        if not os.path.isdir(cwd):
            raise StepFailed("server cwd %s does not exist" % cwd)
        # Kept open for the server's whole life (its session); closed in do_stop/finish.
        self.server_log_fh = open(self.server_log_path, "wb")  # noqa: SIM115
        try:
            self.proc = self.spawn(
                argv,
                cwd=cwd,
                env=self.base_env(),
                stdin=subprocess.DEVNULL,
                stdout=self.server_log_fh,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            raise StepFailed("cannot start server %r: %s" % (argv[0], exc)) from exc
        pid = self.proc.pid
        self.server_pgid = pid  # start_new_session: the server leads its own group and session
        info = proc_info(pid)
        self.server_start_time = info.start if info else None
        own = proc_info(os.getpid())
        os.makedirs(self.servers_dir, exist_ok=True)
        self.server_record = os.path.join(self.servers_dir, "%d.json" % pid)
        write_json(
            self.server_record,
            {
                "pid": pid,
                "pgid": self.server_pgid,
                "port": server.get("port"),
                "run_id": self.run_id,
                "cell_id": self.cell_id,
                "start_time": self.server_start_time,
                "runner_pid": os.getpid(),
                "runner_start_time": own.start if own else None,
                "stop_grace": float(server.get("stop_grace", 15.0)),
                "started": now(),
            },
        )
        self.server_doc = {
            "argv": argv,
            "cwd": cwd,
            "pid": pid,
            "pgid": self.server_pgid,
            "port": server.get("port"),
            "env_declared": self.redacted_env(),
            "markers": {"ORCH_RUN_ID": self.run_id, "ORCH_CELL_ID": self.cell_id},
            "started": now(),
        }
        write_json(self.path("server.json"), self.server_doc)
        self.session = {
            "key": self.session_key,
            "index": 0,
            "first_cell": self.cell_id,
            "started_server": True,
            "server_pid": pid,
        }
        return {"pid": pid}

    # step 6: ready
    def do_ready(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None and self.proc is not None
        ready = server.get("ready") or {}
        url = ready.get("url")
        want = int(ready.get("status", 200))
        timeout = float(ready.get("timeout", 600.0))
        # Poll fast first and back off to the declared interval: a server ready in 100 ms is
        # seen within tens of ms, one that takes minutes is asked every `interval`.
        declared = max(0.01, float(ready.get("interval", 0.5)))
        interval = min(FIRST_POLL, declared)
        scanner = None
        if ready.get("log"):
            try:
                scanner = LogScanner(self.server_log_path, str(ready["log"]))
            except re.error as exc:
                raise StepFailed("server.ready.log is not a valid regex: %s" % exc) from exc
        start = now()
        deadline = min(start + timeout, self.deadline)
        url_ok = not url
        log_ok = scanner is None
        settle_until = (
            min(start + UNCHECKED_SETTLE_SECONDS, deadline) if url_ok and log_ok else start
        )
        if url_ok and log_ok:
            interval = declared = 0.05  # nothing to ask: only watch the process settle
        last = "no HTTP request made yet"
        while True:
            self.check()
            rc = self.proc.poll()
            if rc is not None:
                raise StepFailed(self.server_exit_reason(rc, "during startup"))
            if not url_ok:
                per_request = max(0.5, min(5.0, deadline - now()))
                status, _body, err = http_get(str(url), per_request)
                if status == want:
                    url_ok = True
                elif status is not None:
                    last = "last HTTP status %s from %s" % (status, url)
                else:
                    last = "last error from %s: %s" % (url, err)
            if not log_ok and scanner is not None:
                log_ok = scanner.found()
            if url_ok and log_ok and now() >= settle_until:
                break
            if now() >= deadline:
                parts = []
                if not url_ok:
                    parts.append(last)
                if not log_ok:
                    parts.append("log pattern %r not seen" % ready.get("log"))
                raise StepFailed(
                    with_tail(
                        "server not ready after %gs (%s)"
                        % (round(now() - start, 1), "; ".join(parts)),
                        tail_lines(self.server_log_path),
                        "server.log",
                    )
                )
            self.stop_event.wait(interval)
            interval = next_poll(interval, declared, now() - start)
        self.startup_end = file_size(self.server_log_path)
        self.ready_info = {"seconds": round(now() - start, 3), "url": url, "log": ready.get("log")}
        if not url and scanner is None:
            # Recorded so a reader of cell.json knows "ready" only meant "still running".
            return {
                "seconds": self.ready_info["seconds"],
                "check": "none",
                "settle_seconds": UNCHECKED_SETTLE_SECONDS,
            }
        return {"seconds": self.ready_info["seconds"]}

    # captures
    def capture(self, moment: str) -> Dict[str, str]:
        """Fetch each capture's URLs in order; the first 200 JSON answer is saved."""
        server = self.server
        if not server:
            return {}
        result: Dict[str, str] = {}
        for cap in server.get("captures") or ():
            name = str(cap["name"])
            tried = []
            saved = False
            for url in cap.get("urls") or ():
                status, body, err = http_get(str(url), 10.0)
                if status == 200:
                    try:
                        json.loads(body.decode("utf-8"))
                    except ValueError:
                        tried.append("%s: 200 but not JSON" % url)
                        continue
                    os.makedirs(self.path("captures"), exist_ok=True)
                    with open(self.path("captures", "%s.%s.json" % (name, moment)), "wb") as fh:
                        fh.write(body)
                    saved = True
                    result[name] = str(url)
                    break
                tried.append("%s: %s" % (url, "HTTP %s" % status if status is not None else err))
            entry: Dict[str, Any] = {"name": name, "moment": moment, "ok": saved}
            if saved:
                entry["url"] = result[name]
            else:
                entry["tried"] = tried
                result[name] = "missing: " + "; ".join(tried)
            self.captures.append(entry)
        return result
