"""The session guard: a small process of its own that outlives a killed runner just long enough
to stop every process session the runner's cells started.

Why not the parent-death signal alone: it reaches only the direct child. A real engine's workers
(vLLM's `VLLM::EngineCore`, SGLang's `sglang::scheduler`) are grandchildren that re-title
themselves (setproctitle zeroes /proc/PID/environ, so the cell marker is gone too) and are
re-parented to init when the runner dies. They stay in the session the runner gave the server
(start_new_session), so the session is what is stopped. Why not a cgroup: an unprivileged user
has none to create on most hosts (no delegation), and Slurm owns the job's.

The runner starts one guard lazily (`SessionGuard.watch`) with a pipe on its stdin and tells it
`watch SID START GRACE MARKER` for each session it starts and `release SID` once a session is
empty. The guard does nothing until its stdin ends: EOF means the runner is gone (killed, or
exited with sessions still watched), and every watched session and every process that still
carries a watched marker gets SIGTERM, then SIGKILL after its grace (at most MAX_GRACE).

A session id cannot be reused while any process is in that session; the guard still skips one
whose leader (pid == sid) is alive with another start time than the recorded one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO, Dict, List, Optional, Tuple

from orchestrator.runner.procs import marked_processes, proc_info, proc_table, sweep

MAX_GRACE = 10.0  # a killed runner's servers get at most this long to stop on SIGTERM


class Watched:
    """A session the guard stops if the runner dies: its id, the leader's start time, the grace
    its server asked for and the cell marker its processes inherited."""

    __slots__ = ("grace", "marker", "sid", "start")

    def __init__(self, sid: int, start: Optional[int], grace: float, marker: str) -> None:
        self.sid = sid
        self.start = start
        self.grace = grace
        self.marker = marker


class WatchedContainer:
    """A container the guard stops by name if the runner dies: its engine, name and
    containers.conf (the name alone is not enough: the engine keeps it, not the kernel)."""

    __slots__ = ("conf", "name", "runtime", "sid")

    def __init__(self, sid: int, runtime: str, name: str, conf: str) -> None:
        self.sid = sid
        self.runtime = runtime
        self.name = name
        self.conf = conf


def parse_container_line(line: str) -> Optional[WatchedContainer]:
    """`container SID RUNTIME NAME [CONF]`, or None."""
    words = line.strip().split(" ", 4)
    if len(words) < 4 or words[0] != "container" or not words[1].isdigit():
        return None
    return WatchedContainer(int(words[1]), words[2], words[3], words[4] if len(words) > 4 else "")


def stop_containers(containers: List[WatchedContainer], grace: float) -> None:
    """`RUNTIME stop NAME` for each: the engine's conmon keeps a container whose client died."""
    for c in containers:
        env = dict(os.environ)
        if c.conf:
            env["CONTAINERS_CONF"] = c.conf
        try:
            subprocess.run(
                [c.runtime, "stop", "--time", str(int(grace)), c.name],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=grace + 60,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue


def parse_line(line: str) -> Tuple[str, Optional[Watched]]:
    """One line of the runner's words: ("watch", Watched), ("release", Watched with only the
    sid) or ("", None) for anything else."""
    words = line.strip().split(" ", 4)
    try:
        if words[0] == "watch" and len(words) >= 4:
            start = None if words[2] == "-" else int(words[2])
            marker = words[4] if len(words) > 4 else ""
            return "watch", Watched(int(words[1]), start, float(words[3]), marker)
        if words[0] == "release" and len(words) == 2:
            return "release", Watched(int(words[1]), None, 0.0, "")
    except ValueError:
        pass
    return "", None


def marker_holders(markers: List[str]) -> Dict[int, int]:
    """Live processes of this user whose environment carries one of `markers`: pid -> start
    (the stop step's `marked_processes`, with start times)."""
    wanted = {m for m in markers if m}
    found: Dict[int, int] = {}
    for pid, marker in marked_processes().items() if wanted else ():
        info = proc_info(pid)
        if marker in wanted and info is not None and info.state not in ("Z", "X"):
            found[pid] = info.start
    return found


def session_members(watched: List[Watched]) -> Dict[int, int]:
    """Live processes in the watched sessions (pid -> start time), a session whose id was taken
    by a new leader skipped."""
    table = proc_table()
    sids = set()
    for w in watched:
        leader = table.get(w.sid)
        reused = (
            leader is not None
            and w.start is not None
            and leader.start != w.start
            and leader.sid == w.sid
        )
        if not reused:
            sids.add(w.sid)
    me = os.getpid()
    return {
        pid: info.start
        for pid, info in table.items()
        if info.sid in sids and pid != me and info.state not in ("Z", "X")
    }


def stop_all(watched: List[Watched]) -> List[int]:
    """SIGTERM every process of the watched sessions and markers, SIGKILL what outlives the
    grace (`procs.sweep`), then the same for what was forked meanwhile; the pids still alive."""
    if not watched:
        return []
    markers = [w.marker for w in watched]

    def members() -> Dict[int, int]:
        found = session_members(watched)
        found.update(marker_holders(markers))
        return found

    targets = members()
    _killed, alive = sweep(targets, min(MAX_GRACE, max(w.grace for w in watched)))
    late = {p: s for p, s in members().items() if p not in targets}  # forked while stopping
    if late:
        alive += sweep(late, 0.0)[1]
    return alive


def serve(stdin: IO[bytes]) -> int:
    """The guard's life: read the runner's words until EOF, then stop what is still watched."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # the runner's terminal or link going is not ours
    watched: Dict[int, Watched] = {}
    containers: Dict[int, WatchedContainer] = {}
    for raw in iter(stdin.readline, b""):
        text = raw.decode("utf-8", "replace")
        container = parse_container_line(text)
        if container is not None:
            containers[container.sid] = container
            continue
        verb, item = parse_line(text)
        if verb == "watch" and item is not None:
            watched[item.sid] = item
        elif verb == "release" and item is not None:
            watched.pop(item.sid, None)
            containers.pop(item.sid, None)
    if containers:
        grace = min(MAX_GRACE, max([w.grace for w in watched.values()] + [1.0]))
        stop_containers(list(containers.values()), grace)
    return 1 if stop_all(list(watched.values())) else 0


def _package_root() -> str:
    """The folder or zipapp that holds the `orchestrator` package (runner.pyz on a host)."""
    here = os.path.abspath(__file__)
    for _ in range(3):  # orchestrator/runner/guard.py
        here = os.path.dirname(here)
    return here


_MAIN = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from orchestrator.runner.guard import serve; sys.exit(serve(sys.stdin.buffer))"
)


class SessionGuard:
    """The runner's side: starts the guard on first use and tells it what to watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._watched: Dict[int, str] = {}  # sid -> its watch line, to tell a restarted guard
        self._containers: Dict[int, str] = {}  # sid -> its container line

    def _started(self) -> Optional["subprocess.Popen[bytes]"]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        try:
            # Its own session: a signal to the runner's group or a hung-up link never reaches it.
            # Nothing of the runner's stdout: the controller's stream must end with the runner.
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _MAIN, _package_root()],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError:
            self._proc = None
            return None
        for line in [*self._watched.values(), *self._containers.values()]:
            self._send(self._proc, line)  # a guard that died is replaced, watching it all
        return self._proc

    @staticmethod
    def _send(proc: "subprocess.Popen[bytes]", line: str) -> bool:
        assert proc.stdin is not None
        try:
            proc.stdin.write(line.encode("utf-8") + b"\n")
            proc.stdin.flush()
        except (OSError, ValueError):
            return False
        return True

    def watch(self, sid: int, start: Optional[int], grace: float, marker: str) -> bool:
        """Stop session `sid` (and `marker`'s holders) if this runner dies; False when no guard
        could be started (the parent-death signal and the next preflight still apply)."""
        line = "watch %d %s %g %s" % (sid, "-" if start is None else start, grace, marker)
        with self._lock:
            self._watched[sid] = line
            proc = self._started()
            return proc is not None and self._send(proc, line)

    def watch_container(self, sid: int, runtime: str, name: str, conf: Optional[str]) -> bool:
        """Stop container `name` if this runner dies while session `sid` (its client's) is
        watched; False when no guard could be started (the next preflight still stops it)."""
        line = "container %d %s %s %s" % (sid, runtime, name, conf or "")
        with self._lock:
            self._containers[sid] = line.rstrip()
            proc = self._started()
            return proc is not None and self._send(proc, line.rstrip())

    def watching(self, sid: int) -> bool:
        """Whether session `sid` is watched."""
        with self._lock:
            return sid in self._watched

    def release(self, sid: int) -> None:
        """Session `sid` is empty: nothing of it to stop any more."""
        with self._lock:
            self._containers.pop(sid, None)
            if self._watched.pop(sid, None) is None:
                return
            if self._proc is not None and self._proc.poll() is None:
                self._send(self._proc, "release %d" % sid)

    def pid(self) -> Optional[int]:
        """The guard's pid while it runs (for records and tests)."""
        with self._lock:
            return self._proc.pid if self._proc is not None and self._proc.poll() is None else None


GUARD = SessionGuard()  # one per runner process
