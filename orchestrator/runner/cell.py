"""A cell's life, top to bottom: take the cell lock, run the steps, stop the server whatever
happened, take the last snapshot, then write cell.json, redact, rename, archive and say `done`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import stat
import sys
import tarfile
import traceback
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from orchestrator.runner.bench import BenchStep
from orchestrator.runner.envcheck import EnvCheckStep
from orchestrator.runner.layout import (
    CELL_JSON,
    EVENTS,
    LINKS_FILE,
    SERVER_LOG,
    SNAPSHOT_POST,
    SNAPSHOT_PRE,
)
from orchestrator.runner.node import NodeSteps
from orchestrator.runner.protocol import (
    RUNNER_PATH,
    SCHEMA_VERSION,
    Interrupted,
    StepFailed,
    display_path,
    exit_code,
    now,
    read_json,
    runner_version,
    write_json,
)
from orchestrator.runner.redaction import REDACTED
from orchestrator.runner.repo import RepoSteps
from orchestrator.runner.session import SessionSteps
from orchestrator.runner.snapshot import SnapshotStep
from orchestrator.runner.stop import StopStep
from orchestrator.runner.telemetry import TelemetryStep

StepAction = Callable[[], Optional[Dict[str, Any]]]


class Role(NamedTuple):
    """The actions that differ with how a cell takes part in its server (CellRunner.role)."""

    name: str
    preflight: StepAction
    server_start: StepAction
    server_shared: bool  # the session's first cell started it: recorded as skipped, with why
    ready: StepAction
    bench: StepAction
    captures: bool
    joins: bool = False  # the head of a server over several hosts: waits for its nodes


class Step(NamedTuple):
    """One row of the step table: its name, what it does, whether it applies to this cell."""

    name: str
    action: StepAction
    applies: bool
    skipped: bool = False
    before: Optional[Callable[[], None]] = None


class CellRunner(
    RepoSteps,
    SessionSteps,
    NodeSteps,
    BenchStep,
    EnvCheckStep,
    SnapshotStep,
    StopStep,
    TelemetryStep,
):
    """Runs one cell: the steps of ARCHITECTURE.md, then the cell directory and its archive."""

    def execute(self) -> int:
        """Run the cell to the end; returns the process exit status."""
        os.makedirs(self.run_dir, exist_ok=True)
        self.start_watchers()
        try:
            self.acquire_cell_lock()
        except StepFailed as exc:
            return self.done_without_dir("failed", exc.reason)
        except Interrupted as exc:
            return self.done_without_dir("interrupted", str(exc))
        previous = self.finished_result()
        if previous is not None and self.rerun_failed and previous.get("status") == "failed":
            previous = None  # the controller set the failed attempt aside: this one replaces it
        if self.rerun:
            previous = None
        if previous is not None:
            # Finished by an earlier runner after the controller's collect: not run twice.
            status = str(previous["status"])
            self.emit(
                {
                    "event": "done",
                    "status": status,
                    "step": previous.get("failed_step"),
                    "reason": previous.get("reason") or "",
                    "archive": display_path(self.archive),
                    "reused": True,
                },
                to_file=False,
            )
            self.sent_archive = self.archive
            return exit_code(status)
        if self.previous is not None:
            self.adopt(self.previous)
        self.prepare_dir()
        role = self.role()
        try:
            for step in self.steps_of(role):
                if step.before is not None:
                    step.before()
                if step.skipped:  # done by the session's first cell: recorded with why
                    self.skipped_step(step.name, step.action() or {})
                else:
                    self.step(step.name, step.action, step.applies)
        except StepFailed as exc:
            self.status, self.reason, self.failed_step = "failed", exc.reason, self.current_step
        except Interrupted as exc:
            self.status, self.reason, self.failed_step = "interrupted", str(exc), self.current_step
        except BaseException as exc:
            self.status = "failed"
            self.reason = "runner error: %s: %s\n%s" % (
                type(exc).__name__,
                exc,
                traceback.format_exc(),
            )
            self.failed_step = self.current_step or None
        self.cleaning = True
        self.stop_telemetry()  # this cell's time ends here, whether its server stops or is kept
        self.keep_server = self.hand_over()
        if self.keep_server:
            self.skipped_step("stop", {"kept_for": "next cell of the session"})
        else:
            # Also without a server: a bench or setup may have left a daemon with the marker.
            self.cleanup_step(
                "stop", self.do_stop, self.proc is not None or bool(self.marked_members())
            )
        log = self.server_log_path
        self.cleanup_step(
            "snapshot_post",
            lambda: self.do_snapshot(SNAPSHOT_POST, log if os.path.exists(log) else None),
            True,
        )
        return self.finish()

    def role(self) -> "Role":
        """How this cell takes part in its server, chosen once: its own server (solo), the next
        cell of a session whose server is already up, or a node's part of a server over several
        hosts (which may itself follow a session)."""
        part = self.node_role is not None
        follower = self.adopted
        if part and follower:
            name = "node part, session follower"
        else:
            name = "node part" if part else ("session follower" if follower else "solo")
        start = self.do_server_shared if follower else None
        return Role(
            name=name,
            preflight=self.do_preflight_shared if follower else self.do_preflight,
            server_start=start or (self.do_server_start_part if part else self.do_server_start),
            server_shared=follower,
            ready=self.do_ready_part
            if part
            else (self.do_ready_shared if follower else self.do_ready),
            bench=self.do_hold if part else self.do_bench,
            captures=not part,  # the head captures what its server answers
            # a runner started without the controller's invocation has nobody to say who joined
            joins=not part and bool(self.cell.get("nodes")) and bool(self.invocation),
        )

    def steps_of(self, role: "Role") -> List["Step"]:
        """The cell's steps in the order it lives (ARCHITECTURE.md, the cell's steps)."""
        server, repo = self.server, self.repo
        verify = bool(server and server.get("verify_env", "strict") != "off")
        return [
            Step("repo", self.do_repo, bool(repo)),
            Step("setup", self.do_setup, bool(repo and repo.get("setup"))),
            Step("preflight", role.preflight, True),
            Step("snapshot_pre", lambda: self.do_snapshot(SNAPSHOT_PRE, None), True),
            Step(
                "server_start",
                role.server_start,
                bool(server),
                skipped=role.server_shared,
                before=self.start_telemetry,  # the cell's time starts with its server
            ),
            Step("ready", role.ready, bool(server)),
            Step(
                "capture_ready",
                lambda: self.capture("ready"),
                bool(server and server.get("captures") and role.captures),
            ),
            Step("verify_env", self.do_verify_env, verify),
            # no measured request before every node's part is up and checked (issue 23 item 14)
            Step("nodes", self.do_nodes_joined, role.joins),
            Step("bench", role.bench, True),
            Step(
                "profile",
                self.do_profile,
                bool(server and self.cell.get("profile")) and role.captures,
            ),
        ]

    def restart_server(self, start: int) -> Dict[str, Any]:
        """`bench.starts`: stop the cell's server and start it again for its next group of
        repeats, ready and its env verified as the first start was; the log runs on."""
        began = now()
        stopped = self.do_stop()
        startup_end = self.startup_end
        self.log_append = True
        self.do_server_start()
        ready = self.do_ready()
        if self.adopted:  # its server.log keeps the session's start-up once, then its own part
            self.startup_end = startup_end
        server = self.server or {}
        if server.get("verify_env", "strict") != "off":
            self.do_verify_env()
        assert self.proc is not None
        return {
            "start": start,
            "pid": self.proc.pid,
            "stop_seconds": stopped.get("seconds"),
            "ready_seconds": ready.get("seconds"),
            "seconds": round(now() - began, 3),
        }

    def cleanup_step(
        self, name: str, fn: Callable[[], Optional[Dict[str, Any]]], applies: bool
    ) -> None:
        """A step that runs whatever happened before; its failure fails only a passing cell."""
        try:
            self.step(name, fn, applies)
        except StepFailed as exc:
            if self.status == "passed":
                self.status, self.reason, self.failed_step = "failed", exc.reason, name
        except Exception:
            pass

    def finish(self) -> int:
        """Write cell.json, redact, rename, archive, and emit `done`."""
        end = now()
        if self.server_log_fh is not None and not self.keep_server:
            self.server_log_fh.close()
            self.server_log_fh = None
        try:
            self.write_server_log()
        except OSError as exc:
            self.emit({"event": "warning", "what": SERVER_LOG, "detail": str(exc)})
        self.end_session_log()
        cell_out = dict(self.cell)
        cell_out["env"] = self.redacted_env()
        axes = cell_out.get("axes")
        if isinstance(axes, dict):  # a matrix axis of secrets: hidden by name, as env is
            cell_out["axes"] = {k: (REDACTED if self.is_secret(k) else v) for k, v in axes.items()}
        nodes = cell_out.get("nodes")
        if isinstance(nodes, list):  # every other node's part: its env hidden by name too
            cell_out["nodes"] = [self.redacted_part(n) for n in nodes]
        write_json(
            self.path(CELL_JSON),
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": self.run_id,
                "cell": cell_out,
                "status": self.status,
                "reason": self.reason,
                "failed_step": self.failed_step,
                "steps": self.steps,
                "started": round(self.t0, 3),
                "finished": round(end, 3),
                "seconds": round(end - self.t0, 3),
                "ready": self.ready_info,
                "stop": self.stop_info,
                "captures": self.captures,
                "session": self.session or None,
                "telemetry": self.telemetry_info,
                "runner": {
                    "python": sys.executable,
                    "python_version": sys.version.split()[0],
                    "hostname": socket.gethostname(),
                    "pid": os.getpid(),
                    "version": runner_version(),
                    "path": RUNNER_PATH,
                },
            },
        )
        done: Dict[str, Any] = {
            "event": "done",
            "status": self.status,
            "step": self.failed_step,
            "reason": self.reason,
            "archive": display_path(self.archive),
        }
        self.emit(dict(done), to_stdout=False)
        with self.lock:
            if self.events_fh is not None:
                self.events_fh.close()
                self.events_fh = None
        try:
            record_links(self.partial)
            self.redactor.tree(self.partial, skip_errors=True)
            if os.path.isdir(self.final):
                shutil.rmtree(self.final)
            os.replace(self.partial, self.final)
            self.dir = self.final
            make_archive(self.final, self.archive)
        except Exception as exc:
            done["archive"] = None
            done["archive_error"] = "%s: %s" % (type(exc).__name__, exc)
        self.emit(done, to_file=False)
        if done["archive"]:
            self.sent_archive = self.archive
        return exit_code(self.status)

    def release_cell_lock(self) -> None:
        """Let go of the cell lock (a queue's next cell must not find this one's held)."""
        if self.lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.lock_fd)
            self.lock_fd = None

    def lock_holder(self) -> str:
        """The pid the cell lock's holder wrote into it ('unknown' before it has)."""
        try:
            with open(self.lock_path, encoding="utf-8") as fh:
                pid = fh.read().strip()
        except OSError:
            pid = ""
        return pid if pid.isdigit() else "unknown"

    def acquire_cell_lock(self) -> None:
        """Take <run>/.<cell>.lock (flock) for the runner's life before touching the cell dir.

        Another runner of the same cell (one still stopping its server after its controller
        went away) is waited for, up to stop_grace + the wait margin.
        """
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = now() + self.wait_limit
        announced = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                holder = self.lock_holder()
                if not announced:
                    announced = True
                    self.emit(
                        {
                            "event": "wait",
                            "for": "cell lock",
                            "pid": int(holder) if holder.isdigit() else None,
                            "limit": round(self.wait_limit, 1),
                        },
                        to_file=False,
                    )
                if self.stop_event.is_set():
                    raise Interrupted(self.stop_reason)
                if now() >= deadline:
                    raise StepFailed(
                        "another runner of this cell is still running (pid %s); waited %gs for it"
                        % (holder, round(self.wait_limit, 1))
                    )
                self.stop_event.wait(0.2)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, ("%d\n" % os.getpid()).encode())
        self.lock_fd = fd

    def finished_result(self) -> Optional[Dict[str, Any]]:
        """cell.json of a passed or failed copy of this cell already finished, else None.

        The runner that left it finished after the controller's `collect`; a copy renamed but
        not yet archived is archived now.
        """
        info: Any = None
        try:
            if os.path.isfile(os.path.join(self.final, CELL_JSON)):
                info = read_json(os.path.join(self.final, CELL_JSON))
                if not isinstance(info, dict) or info.get("status") not in ("passed", "failed"):
                    return None
                if archived_cell_json(self.archive, self.cell_id) != info:
                    make_archive(self.final, self.archive)
            elif os.path.isfile(self.archive):
                info = archived_cell_json(self.archive, self.cell_id)
        except (OSError, ValueError):
            return None
        if not isinstance(info, dict) or info.get("status") not in ("passed", "failed"):
            return None
        return info

    def done_without_dir(self, status: str, reason: str) -> int:
        """`done` for a cell this runner could not start (no cell directory, no archive)."""
        done = {"event": "done", "status": status, "step": None, "reason": reason, "archive": None}
        self.emit(done, to_file=False)
        with contextlib.suppress(OSError, ValueError):
            # Older controllers show stderr when a runner ends without an archive.
            sys.stderr.write(self.redactor.text(reason) + "\n")
            sys.stderr.flush()
        return exit_code(status)

    def prepare_dir(self) -> None:
        """A fresh .<cell>.partial directory (an old partial or finished copy is replaced)."""
        os.makedirs(self.run_dir, exist_ok=True)
        if os.path.isdir(self.partial):
            shutil.rmtree(self.partial)
        os.makedirs(self.partial)
        # Appended to as events happen, so even a killed runner leaves its events behind.
        self.events_fh = open(self.path(EVENTS), "a", encoding="utf-8")  # noqa: SIM115


def record_links(root: str) -> List[Dict[str, str]]:
    """Replace every symlink (and fifo, socket or device) under `root` by an entry in a
    `links.json` of its folder: [{"name", "target"} | {"name", "kind"}]. Nothing is followed, so
    a link out of the cell folder (to /etc/hostname) costs nothing but itself; what is recorded
    is returned."""
    recorded: List[Dict[str, str]] = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        entries: List[Dict[str, str]] = []
        for name in sorted(dirnames + files):
            path = os.path.join(dirpath, name)
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    entries.append({"name": name, "target": os.readlink(path)})
                elif stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                    continue
                else:
                    entries.append({"name": name, "kind": _special_kind(mode)})
                os.unlink(path)
            except OSError:
                continue
        dirnames[:] = [d for d in dirnames if os.path.isdir(os.path.join(dirpath, d))]
        if entries:
            links = os.path.join(dirpath, LINKS_FILE)
            if os.path.lexists(links):  # the bench wrote its own: keep it beside ours
                os.replace(links, links + ".bench")
            write_json(links, entries)
            rel = os.path.relpath(dirpath, root)
            recorded += [
                dict(e, name=os.path.normpath(os.path.join(rel, e["name"]))) for e in entries
            ]
    return recorded


def _special_kind(mode: int) -> str:
    for kind, test in (("fifo", stat.S_ISFIFO), ("socket", stat.S_ISSOCK)):
        if test(mode):
            return kind
    return "device"


def _regular_only(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
    """The archive holds regular files and directories only (the controller refuses the rest)."""
    return info if info.isfile() or info.isdir() else None


def make_archive(cell_dir: str, archive: str) -> None:
    """<cell>.tar.gz holding one top-level directory named after the cell (tmp + rename)."""
    tmp = os.path.join(
        os.path.dirname(archive), "." + os.path.basename(archive) + ".%d.tmp" % os.getpid()
    )
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(cell_dir, arcname=os.path.basename(cell_dir), filter=_regular_only)
    os.replace(tmp, archive)


def archived_cell_json(archive: str, cell_id: str) -> Any:
    """cell.json inside a cell archive (None when absent or unreadable)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.extractfile(cell_id + "/" + CELL_JSON)
            return json.loads(member.read().decode("utf-8")) if member else None
    except (OSError, ValueError, KeyError, tarfile.TarError):
        return None
