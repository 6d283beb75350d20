"""Processes and ports as /proc shows them: process trees, signals, who holds a port, and the
records a runner leaves for each server it starts (`<workdir>/servers/<pid>.json`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from orchestrator.runner.protocol import POLL, now, read_json, unlink_quietly

# Inherited by every process a cell starts:
# `<run>/<cell>/<runner pid>-<runner start>-<nonce>-<workdir tag>`.
MARKER_VAR = "ORCH_CELL_MARKER"
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Any:
    """libc's prctl through ctypes, resolved once here: the forked child must not load it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.restype = ctypes.c_int
        prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    except (ImportError, OSError, AttributeError):
        return None
    return prctl


_PRCTL = _load_prctl()


def parent_death_signal() -> Optional[Callable[[], None]]:
    """A `preexec_fn` that makes the child get SIGKILL when the thread that started it dies
    (PR_SET_PDEATHSIG; survives exec), or None where the host has no prctl.

    Safe as a preexec_fn although the runner has threads: prctl is resolved before the fork, and
    the child only calls it and getppid/kill (no import, no lock another thread could hold). The
    runner starts processes from its main thread, whose end is the runner's. A runner that died
    before the signal was armed is caught by comparing the parent pid.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), kill)

    return arm


class ProcInfo:
    """One line of /proc/<pid>/stat that matters here."""

    __slots__ = ("pgid", "pid", "ppid", "sid", "start", "state")

    def __init__(self, pid: int, state: str, ppid: int, pgid: int, sid: int, start: int) -> None:
        self.pid = pid
        self.state = state
        self.ppid = ppid
        self.pgid = pgid
        self.sid = sid
        self.start = start


def proc_info(pid: int) -> Optional[ProcInfo]:
    """Parse /proc/<pid>/stat; None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return ProcInfo(pid, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[19]))
    except (IndexError, ValueError):
        return None


def proc_table() -> Dict[int, ProcInfo]:
    """Every process on the host."""
    table: Dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = proc_info(int(name))
            if info is not None:
                table[info.pid] = info
    return table


def proc_alive(pid: int, start: Optional[int] = None) -> bool:
    """The process exists, is not a zombie and (when given) started at `start`."""
    info = proc_info(pid)
    if info is None or info.state in ("Z", "X"):
        return False
    return start is None or info.start == start


def proc_cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ("" when unreadable)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            raw = fh.read()
    except OSError:
        return ""
    return " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)


REWRITTEN = "unreadable (process title rewritten)"


class EnvironRewritten(OSError):
    """/proc/PID/environ is there but overwritten (`parse_environ`): the process moved its
    environment away to make room for a longer title (setproctitle, as vLLM's and SGLang's
    workers do), so what it was started with cannot be read, which is not "missing"."""

    def __init__(self, pid: int, size: int) -> None:
        super().__init__("%s: /proc/%d/environ (%d bytes) was overwritten" % (REWRITTEN, pid, size))
        self.pid = pid


_NAME_START = re.compile(rb"^[A-Za-z_][A-Za-z0-9_.-]*=")


def parse_environ(raw: bytes) -> Optional[Dict[str, str]]:
    """NAME=value entries of an environ block; None when a re-titling overwrote it. An empty
    block is an empty environment.

    The kernel lays the environment out as strings each ended by one NUL, from the block's first
    byte: a block that starts with NUL or holds two NULs in a row was overwritten. setproctitle
    zeroes it, but not always all of it (vLLM's EngineCore kept the few variables its parent
    added last and lost every inherited one), so what is left is no account of what the process
    was started with.
    """
    if raw and (raw[:1] == b"\0" or b"\0\0" in raw):
        return None
    env: Dict[str, str] = {}
    entries = 0
    for item in raw.split(b"\0"):
        if not item:
            continue
        if _NAME_START.match(item):
            entries += 1
        key, _sep, value = item.decode("utf-8", "surrogateescape").partition("=")
        env.setdefault(key, value)
    if raw and not entries:
        return None
    return env


def proc_environ(pid: int) -> Dict[str, str]:
    """The environment `pid` was started with (raises OSError when unreadable, and
    EnvironRewritten when a rewritten title took its place)."""
    with open("/proc/%d/environ" % pid, "rb") as fh:
        raw = fh.read()
    env = parse_environ(raw)
    if env is None:
        raise EnvironRewritten(pid, len(raw))
    return env


def has_marker(pid: int, run_id: str, cell_id: str) -> bool:
    """`pid` carries the ORCH_RUN_ID/ORCH_CELL_ID markers a runner gives its server."""
    try:
        env = proc_environ(pid)
    except OSError:
        return False
    return _marked(env, run_id, cell_id)


def _marked(env: Dict[str, str], run_id: str, cell_id: str) -> bool:
    return env.get("ORCH_RUN_ID") == run_id and env.get("ORCH_CELL_ID") == cell_id


def marked_processes() -> Dict[int, str]:
    """Live processes of this user (this one aside) that carry a cell marker: pid -> marker.

    Found by the environment they inherited, so a daemon that double-forked out of the server's
    tree, group and session is found too (one that dropped its environment is not).
    """
    uid = os.getuid()
    me = os.getpid()
    key = (MARKER_VAR + "=").encode()
    found: Dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if os.stat("/proc/" + name).st_uid != uid:
                continue
            with open("/proc/%s/environ" % name, "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        for item in raw.split(b"\0"):
            if item.startswith(key):
                found[int(name)] = item[len(key) :].decode("utf-8", "replace")
                break
    return found


def marker_runner(marker: str) -> Optional[Tuple[int, int]]:
    """(pid, start time) of the runner that gave out `marker`, None when it does not say."""
    parts = marker.rsplit("/", 1)[-1].split("-")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def workdir_tag(workdir: str) -> str:
    """A short tag of a runner workdir, put in the markers its runners give out: another
    workdir's runners (another controller, as the same user) then leave its orphans alone."""
    path = os.path.realpath(workdir).encode("utf-8", "surrogateescape")
    return hashlib.sha1(path).hexdigest()[:8]


def marker_workdir(marker: str) -> Optional[str]:
    """The workdir tag in `marker` (None in a marker of a runner that predates it)."""
    parts = marker.rsplit("/", 1)[-1].split("-")
    return parts[3] if len(parts) > 3 else None


def sweep(pids: Dict[int, int], grace: float) -> Tuple[List[int], List[int]]:
    """SIGTERM each process (pid -> start time), SIGKILL what outlives `grace`, wait up to 5 s
    more: (the processes that needed SIGKILL, those still alive)."""
    for pid, start in pids.items():
        if proc_alive(pid, start):
            kill_pid(pid, signal.SIGTERM)
    deadline = now() + grace
    while now() < deadline and any(proc_alive(p, s) for p, s in pids.items()):
        time.sleep(POLL)
    killed = [p for p, s in sorted(pids.items()) if proc_alive(p, s)]
    for pid in killed:
        kill_pid(pid, signal.SIGKILL)
    deadline = now() + 5.0
    while now() < deadline and any(proc_alive(p, pids[p]) for p in killed):
        time.sleep(POLL)
    return killed, [p for p in killed if proc_alive(p, pids[p])]


def tree_members(table: Dict[int, ProcInfo], root: int, pgid: int, sid: int) -> List[int]:
    """`root`, its descendants, and every process in its process group or session."""
    children: Dict[int, List[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found = set()
    stack = [root] if root in table else []
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, []))
    for info in table.values():
        if info.pgid == pgid or info.sid == sid:
            found.add(info.pid)
    found.discard(os.getpid())
    return sorted(p for p in found if table[p].state not in ("Z", "X"))


def kill_group(pgid: int, sig: int) -> None:
    """Signal a process group, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_pid(pid: int, sig: int) -> None:
    """Signal one process, ignoring one that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# ---------------------------------------------------------------------------------------------
# ports


def port_in_use(port: int) -> Optional[str]:
    """Why `port` cannot be bound on 127.0.0.1 / 0.0.0.0, or None when it is free."""
    for addr in ("127.0.0.1", "0.0.0.0"):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR ignores TIME_WAIT leftovers but still fails on a listening socket.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
        except OSError as exc:
            return "cannot bind %s:%d (%s)" % (addr, port, exc.strerror or exc)
        finally:
            sock.close()
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return "something accepts connections on 127.0.0.1:%d" % port
    except OSError:
        pass
    finally:
        probe.close()
    return None


def port_owner(port: int) -> str:
    """Best effort: 'pid N (cmdline)' of whoever listens on `port`, or ''."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    parts = line.split()
                    listening = len(parts) > 9 and parts[3] == "0A"
                    if listening and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % parts[9])
        except (OSError, ValueError):
            continue
    if not inodes:
        return ""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fd_dir = "/proc/%s/fd" % name
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(os.path.join(fd_dir, fd)) in inodes:
                    return "pid %s (%s)" % (name, proc_cmdline(int(name))[:200])
            except OSError:
                continue
    return ""


# ---------------------------------------------------------------------------------------------
# server records


def live_server_records(servers_dir: str) -> List[Tuple[Dict[str, Any], List[int]]]:
    """Server records whose processes still run; stale records are removed."""
    live: List[Tuple[Dict[str, Any], List[int]]] = []
    try:
        names = sorted(os.listdir(servers_dir))
    except OSError:
        return live
    table: Optional[Dict[int, ProcInfo]] = None
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(servers_dir, name)
        try:
            rec = read_json(path)
            pid = int(rec["pid"])
            pgid = int(rec.get("pgid") or pid)
        except (OSError, ValueError, KeyError, TypeError):
            unlink_quietly(path)
            continue
        if table is None:
            table = proc_table()
        run_id, cell_id = str(rec.get("run_id")), str(rec.get("cell_id"))
        pids = []
        for info in table.values():
            if info.state in ("Z", "X"):
                continue
            same_leader = info.pid == pid and (
                info.start == rec.get("start_time") or has_marker(pid, run_id, cell_id)
            )
            in_group = info.pgid == pgid and _group_member(info, pgid, rec, run_id, cell_id)
            if same_leader or in_group:
                pids.append(info.pid)
        if pids:
            live.append((rec, sorted(pids)))
        else:
            unlink_quietly(path)
    return live


def _group_member(
    info: ProcInfo, pgid: int, rec: Dict[str, Any], run_id: str, cell_id: str
) -> bool:
    """A process of a recorded server's group (`pgid`, its session too) is the server's when it
    carries its markers, or, a worker that re-titled itself and lost them with its environ, when
    it is in the server's session (no other process can take it while it lives) and started
    after the server. One read of its environ answers both."""
    try:
        env = proc_environ(info.pid)
    except EnvironRewritten:
        start = rec.get("start_time")
        return info.sid == pgid and (not isinstance(start, int) or info.start >= start)
    except OSError:
        return False
    return _marked(env, run_id, cell_id)


def record_runner_state(rec: Dict[str, Any]) -> str:
    """Whether the runner that wrote a server record still runs: alive, dead or unknown."""
    pid = rec.get("runner_pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return "unknown"  # a record from a runner that did not say who it was
    if pid == os.getpid():
        return "dead"  # the pid was reused by this very runner
    start = rec.get("runner_start_time")
    if isinstance(start, int):
        return "alive" if proc_alive(pid, start) else "dead"
    # Records of runners that predate runner_start_time: "runner.py" matches runner.pyz too.
    return "alive" if proc_alive(pid) and "runner.py" in proc_cmdline(pid) else "dead"


def signal_server(rec: Dict[str, Any], pids: List[int], sig: int) -> None:
    """Signal a recorded server: its process group and each of its live processes."""
    kill_group(int(rec.get("pgid") or rec["pid"]), sig)
    for pid in pids:
        kill_pid(pid, sig)


def reap_server(
    servers_dir: str, rec: Dict[str, Any], pids: List[int]
) -> Tuple[List[int], List[int]]:
    """After SIGTERM: wait the record's stop_grace, SIGKILL what is left, wait up to 5 s more.

    Returns (the processes that needed SIGKILL, those still alive); the record is removed when
    none is left.
    """
    grace = float(rec.get("stop_grace", 15.0))
    deadline = now() + grace
    while now() < deadline and any(proc_alive(p) for p in pids):
        time.sleep(POLL)
    killed = [p for p in pids if proc_alive(p)]
    if killed:
        signal_server(rec, killed, signal.SIGKILL)
        deadline = now() + 5.0
        while now() < deadline and any(proc_alive(p) for p in killed):
            time.sleep(POLL)
    leftover = [p for p in pids if proc_alive(p)]
    if not leftover:
        unlink_quietly(os.path.join(servers_dir, "%s.json" % rec["pid"]))
    return killed, leftover
