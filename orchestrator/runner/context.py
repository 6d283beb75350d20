"""A cell's state while it runs: its paths, deadline, events, watchers and subprocesses.

`CellContext` is what every step works with; the steps themselves live in repo, server,
envcheck, snapshot, bench and stop, and `cell.CellRunner` strings them together.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import traceback
from typing import IO, Any, Callable, Dict, List, Optional, Tuple

from orchestrator.runner.control import Control
from orchestrator.runner.guard import GUARD
from orchestrator.runner.layout import SERVER_LOG
from orchestrator.runner.procs import (
    MARKER_VAR,
    kill_group,
    parent_death_signal,
    proc_info,
    proc_table,
    workdir_tag,
)
from orchestrator.runner.protocol import (
    POLL,
    STEPS,
    Interrupted,
    StepFailed,
    now,
    resolve_path,
    wait_margin,
    with_errors_and_tail,
)
from orchestrator.runner.redaction import (
    REDACTED,
    Redactor,
    env_secret_values,
    is_secret_name,
)

# Event keys that belong to the protocol, sent to the controller as they are (never redacted):
# a secret value that happens to be part of a path must not turn the archive path into one
# that does not exist. Their copy in events.jsonl is redacted like every file of the cell.
PROTOCOL_KEYS = ("archive",)


END_SUFFIX = ".end"  # runs/<run>/.<cell>.end: the controller asks the cell to end (node.py)
# runs/<run>/.<cell>.joined: the controller tells a head which of its nodes are up (node.py)
JOINED_SUFFIX = ".joined"
# runs/<run>/.<part>.head_ready: the controller tells a node's part its head is ready (node.py)
HEAD_READY_SUFFIX = ".head_ready"
# runs/<run>/.<first cell>.server/: the cwd orch makes for a session's server (no repo, no cwd)
SESSION_DIR_SUFFIX = ".server"


class CellContext:
    """One cell's state: the payload, where its files go, its deadline and its event stream."""

    def __init__(
        self, payload: Dict[str, Any], out: IO[bytes], control: Optional["Control"] = None
    ) -> None:
        # One Control per runner process: a queue's cells share its stdout, watchers and stop.
        self.control = control if control is not None else Control(out)
        self.out = self.control.out
        self.lock = self.control.lock
        self.stop_event = self.control.stop_event
        self.finished = self.control.finished
        self.t0 = now()

        self.run_id = str(payload["run_id"])
        self.cell: Dict[str, Any] = payload["cell"]
        self.cell_id = str(self.cell["id"])
        # `apply --retry-failed`: a failed copy of these cells here is run again, not reused
        self.rerun_failed = self.cell_id in (payload.get("rerun_failed") or ())
        # a node of a multi-node cell: never reuse an earlier copy (the others run it again)
        self.rerun = self.cell_id in (payload.get("rerun") or ())
        self.env: Dict[str, str] = {str(k): str(v) for k, v in self.cell.get("env", {}).items()}
        self.secret_names = set(str(s) for s in self.cell.get("secrets", ()))
        secret_values = [v for k, v in self.env.items() if self.is_secret(k)]
        for part in self.cell.get("nodes") or ():  # the other nodes' own values (node_key)
            if isinstance(part, dict) and isinstance(part.get("env"), dict):
                secret_values += [str(v) for k, v in part["env"].items() if self.is_secret(str(k))]
        # Secret values that are not env values (vars, -e values): absent from older controllers.
        extra = payload.get("secret_values")
        if isinstance(extra, list):
            secret_values += [
                str(v)
                for v in extra
                if isinstance(v, (str, int, float)) and not isinstance(v, bool)
            ]
        # Secret-named variables of the environment processes start with (GITHUB_TOKEN in the
        # login environment): the runner knows them even when the controller never did.
        secret_values += env_secret_values(dict(os.environ), self.secret_names)
        self.redactor = Redactor(secret_values)
        self.repo: Optional[Dict[str, Any]] = self.cell.get("repo")
        self.server: Optional[Dict[str, Any]] = self.cell.get("server")
        self.stop_grace = float(self.server.get("stop_grace", 15.0)) if self.server else 15.0
        # How long to wait for another runner of this run (cell lock, its live server).
        self.wait_limit = self.stop_grace + wait_margin()
        self.bench: Dict[str, Any] = self.cell["bench"]
        self.deadline = self.t0 + float(self.cell.get("cell_timeout", 4 * 3600.0))

        self.workdir_arg = str(payload.get("workdir") or ".orch")
        self.workdir = resolve_path(self.workdir_arg)
        self.run_dir = os.path.join(self.workdir, "runs", self.run_id)
        self.partial = os.path.join(self.run_dir, "." + self.cell_id + ".partial")
        self.final = os.path.join(self.run_dir, self.cell_id)
        self.archive = self.final + ".tar.gz"
        self.servers_dir = os.path.join(self.workdir, "servers")
        self.lock_path = os.path.join(self.run_dir, "." + self.cell_id + ".lock")
        # Which runner invocation this is: the controller's end requests name it (node.py).
        self.invocation = str(payload.get("invocation") or "")
        self.lock_fd: Optional[int] = None  # held (flock) for the runner's whole life
        self.dir = self.partial  # where files go now; becomes self.final after the rename

        self.steps: Dict[str, Dict[str, Any]] = {s: {"status": "not_run"} for s in STEPS}
        self.current_step = ""
        self.status = "passed"
        self.reason = ""
        self.failed_step: Optional[str] = None
        self.cleaning = False
        self.events_fh: Optional[IO[str]] = None

        # Every process the cell starts inherits this marker, so a daemon that left the
        # server's tree is still found (stop), and an orphan tells which runner it outlived.
        own = proc_info(os.getpid())
        self.marker = "%s/%s/%d-%d-%s-%s" % (
            self.run_id,
            self.cell_id,
            os.getpid(),
            own.start if own else 0,
            os.urandom(4).hex(),
            workdir_tag(self.workdir),
        )
        self.repo_dest: Optional[str] = None
        self.repo_sha: Optional[str] = None
        self.force_setup = False
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.server_pgid = 0
        self.server_start_time: Optional[int] = None
        self.server_record: Optional[str] = None
        self.server_log_fh: Optional[IO[bytes]] = None
        self.captures: List[Dict[str, Any]] = []
        self.server_doc: Dict[str, Any] = {}
        self.stop_info: Dict[str, Any] = {}
        self.ready_info: Dict[str, Any] = {}

        # Server sessions (session.py): cells of one queue with an equal key share one server.
        self.session_key = str(payload.get("session") or self.cell_id)
        self.next_session_key: Optional[str] = payload.get("next_session")
        self.reset: Dict[str, Any] = payload.get("reset") or {}
        # The server writes here, outside the cell folder, so the next cell of its session can
        # go on appending; each cell's server.log is copied from it when the cell finishes.
        self.server_log_path = os.path.join(self.run_dir, "." + self.cell_id + ".server.log")
        self.session: Dict[str, Any] = {}  # cell.json's "session" block, once a server runs
        self.log_start = 0  # where this cell's part of the server log begins
        self.startup_end = 0  # the start-up part (up to readiness) every cell's server.log holds
        self.keep_server = False  # the next cell of the queue takes the running server over
        self.previous: Any = None  # the queue's cell whose running server this one takes over
        self.sent_archive: Optional[str] = None  # the archive the `done` event announced

    # -- events and control ----------------------------------------------------------------

    def path(self, *parts: str) -> str:
        """A path inside the cell directory."""
        return os.path.join(self.dir, *parts)

    def emit(self, event: Dict[str, Any], to_file: bool = True, to_stdout: bool = True) -> None:
        """Send one event to stdout and events.jsonl (secrets redacted)."""
        event.setdefault("t", round(now(), 3))
        event.setdefault("cell", self.cell_id)  # a queue's events are told apart by their cell
        raw = event
        event = self.redactor.data(event)
        # The copy on stdout carries the protocol's values (paths) as they are.
        sent = dict(event)
        sent.update((k, raw[k]) for k in PROTOCOL_KEYS if k in raw)
        with self.lock:
            if to_file and self.events_fh is not None:
                try:
                    self.events_fh.write(json.dumps(event, ensure_ascii=False, default=str) + "\n")
                    self.events_fh.flush()
                except (OSError, ValueError):
                    pass
            if to_stdout:
                self.control.write_line(json.dumps(sent, default=str))

    def is_secret(self, name: str) -> bool:
        """Whether an env name of this cell holds a secret (the rule, or the cell's list)."""
        return is_secret_name(name, self.secret_names)

    def redacted_env(self) -> Dict[str, str]:
        """cell.env with the values of secret names replaced."""
        return {k: (REDACTED if self.is_secret(k) else v) for k, v in self.env.items()}

    def redacted_part(self, part: Any) -> Any:
        """A node part of the cell (`nodes[]`) with its env's secret values replaced."""
        if not isinstance(part, dict) or not isinstance(part.get("env"), dict):
            return part
        env = {k: (REDACTED if self.is_secret(str(k)) else v) for k, v in part["env"].items()}
        return dict(part, env=env)

    def server_exit_reason(self, rc: int, when: str) -> str:
        """'server exited <when> (rc N)' with the log tail."""
        return with_errors_and_tail(
            "server exited %s (rc %s)" % (when, rc), self.server_log_path, SERVER_LOG
        )

    @property
    def stop_reason(self) -> str:
        """Why the runner was asked to stop ('' while it was not)."""
        return self.control.stop_reason

    def interrupt(self, reason: str) -> None:
        """Ask the cell (and the rest of a queue) to stop (first reason wins)."""
        self.control.interrupt(reason)

    def check(self) -> None:
        """Raise when interrupted or past the cell timeout (not during cleanup)."""
        if self.cleaning:
            return
        if self.stop_event.is_set():
            raise Interrupted(self.stop_reason)
        aborted = self.aborted()
        if aborted:
            raise StepFailed(aborted)
        if now() > self.deadline:
            raise StepFailed(
                "cell timeout (%gs) reached during step %s"
                % (self.deadline - self.t0, self.current_step)
            )

    def end_path(self) -> str:
        """Where the controller asks this cell to end."""
        return os.path.join(self.run_dir, "." + self.cell_id + END_SUFFIX)

    def end_request(self) -> Optional[Dict[str, Any]]:
        """The controller's end request for this invocation of the cell, if it made one."""
        if not self.invocation or not (self.cell.get("nodes") or self.cell.get("node")):
            return None  # only the cells of a server over several hosts are ended this way
        try:
            with open(self.end_path(), encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("invocation") != self.invocation:
            return None
        return data

    def aborted(self) -> Optional[str]:
        """Why the controller aborted this cell (a node of its server failed), else None."""
        request = self.end_request()
        if request is not None and request.get("kind") == "abort":
            return str(request.get("reason") or "ended by the controller")
        return None

    def remaining(self) -> float:
        """Seconds left before the cell timeout (at least 1)."""
        return max(1.0, self.deadline - now())

    def start_watchers(self) -> None:
        """Watch stdin, the parent process and signals for 'controller gone' (once a process)."""
        self.control.start_watchers()

    # -- subprocesses ------------------------------------------------------------------------

    def base_env(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """The host environment with the cell's env and the orch markers on top."""
        env = dict(os.environ)
        env.update(self.env)
        env["ORCH_RUN_ID"] = self.run_id
        env["ORCH_CELL_ID"] = self.cell_id
        env[MARKER_VAR] = self.marker
        if extra:
            env.update(extra)
        return env

    def env_defaults(self) -> Dict[str, str]:
        """The adapter's variables for the server that `env:` does not name (SPT_NOENV=1)."""
        raw = (self.server or {}).get("env_defaults") or {}
        return {str(k): str(v) for k, v in raw.items() if str(k) not in self.env}

    def server_env(self) -> Dict[str, str]:
        """The server's environment: `base_env` with the adapter's defaults (never above a
        variable `env:` declares)."""
        env = self.base_env()
        env.update(self.env_defaults())
        return env

    def expected_env(self) -> Dict[str, str]:
        """What every server process must carry: the cell's env and the adapter's defaults."""
        expected = self.env_defaults()
        expected.update(self.env)
        return expected

    def adapter_env_note(self) -> Dict[str, Any]:
        """What the adapter set in the server's environment, for the record (why is the
        adapter's business: adapters/base.py says it for SPT_NOENV)."""
        defaults = self.env_defaults()
        if not defaults:
            return {}
        return {"set": defaults, "by": "the server's adapter; a value under env: wins"}

    def spawn(self, argv: List[str], **kwargs: Any) -> "subprocess.Popen[bytes]":
        """Popen in a new session, with a parent-death signal where the host has one: a process
        the cell starts does not outlive a runner killed with SIGKILL."""
        proc = subprocess.Popen(
            argv, start_new_session=True, preexec_fn=parent_death_signal(), **kwargs
        )
        # The signal reaches only this child: the guard stops its whole session (workers that
        # re-titled themselves and were re-parented to init) if the runner is killed.
        info = proc_info(proc.pid)
        GUARD.watch(proc.pid, info.start if info else None, self.stop_grace, self.marker)
        return proc

    def release_session(self, sid: int) -> None:
        """Tell the guard a session it watches is over, once no process of it is left."""
        if not GUARD.watching(sid):
            return
        if not any(i.sid == sid and i.state not in ("Z", "X") for i in proc_table().values()):
            GUARD.release(sid)

    def wait_proc(
        self,
        proc: subprocess.Popen[bytes],
        timeout: float,
        also: Optional[Callable[[], Optional[str]]] = None,
    ) -> Tuple[Optional[int], bool, Optional[str]]:
        """Wait for a process started in its own session: (rc, timed_out, why aborted).

        On timeout, interruption or when `also()` returns a reason, the whole process group is
        killed. Interruption re-raises after the kill.
        """
        deadline = now() + timeout
        why: Optional[str] = None
        timed_out = False
        while True:
            rc = proc.poll()
            if rc is not None:
                self.release_session(proc.pid)
                return rc, False, None
            if self.stop_event.is_set() and not self.cleaning:
                why = "interrupted"
            elif now() > self.deadline and not self.cleaning:
                why = "cell timeout"
            elif now() > deadline:
                timed_out = True
            elif not self.cleaning and self.aborted():
                why = "aborted"
            elif also is not None:
                why = also()
            if why or timed_out:
                break
            # wait() rather than sleep(): a short command returns as soon as it exits.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(POLL)
        kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_group(proc.pid, signal.SIGKILL)
        self.release_session(proc.pid)
        if why == "interrupted":
            raise Interrupted(self.stop_reason)
        if why in ("cell timeout", "aborted"):
            self.check()  # raises StepFailed("cell timeout ..." or the abort's reason)
        return proc.returncode, timed_out, why

    def run_cmd(
        self, argv: List[str], cwd: str, timeout: float, env: Optional[Dict[str, str]] = None
    ) -> Tuple[Optional[int], str, str, bool]:
        """Run a short command and capture its output: (rc, stdout, stderr, timed_out)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as exc:
                return 127, "", "cannot run %s: %s" % (argv[0], exc), False
            rc, timed_out, _why = self.wait_proc(proc, timeout)
            out.seek(0)
            err.seek(0)
            return (
                rc,
                out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"),
                timed_out,
            )

    def git(self, args: List[str], cwd: str, check: bool = True) -> str:
        """Run git; StepFailed with its stderr when `check` and it fails."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"  # a credential prompt would hang the cell
        rc, out, err, timed_out = self.run_cmd(["git", *args], cwd, self.remaining(), env)
        if check and (rc != 0 or timed_out):
            raise StepFailed(
                "git %s failed (%s) in %s: %s"
                % (
                    " ".join(args),
                    "timed out" if timed_out else "rc %s" % rc,
                    cwd,
                    (err.strip() or out.strip())[-2000:],
                )
            )
        return out if rc == 0 else ""

    def git_ok(self, args: List[str], cwd: str) -> Tuple[bool, str]:
        """Run git within the cell's time left; (succeeded, stdout). RepoChecks' own has no
        deadline: `check-origin` runs outside any cell."""
        env = dict(os.environ)
        env["GIT_TERMINAL_PROMPT"] = "0"
        rc, out, _err, _t = self.run_cmd(["git", *args], cwd, self.remaining(), env)
        return rc == 0, out

    # -- steps -------------------------------------------------------------------------------

    def skipped_step(self, name: str, detail: Dict[str, Any]) -> None:
        """A step this cell did not need to run, with why (a server its session started)."""
        self.steps[name].update(status="skipped", detail=detail)
        self.emit({"event": "step", "step": name, "status": "skipped", "detail": detail})

    def step(self, name: str, fn: Callable[[], Optional[Dict[str, Any]]], applies: bool) -> None:
        """Run one step with its events and timings; failures propagate."""
        rec = self.steps[name]
        if not applies:
            rec["status"] = "skipped"
            self.emit({"event": "step", "step": name, "status": "skipped"})
            return
        self.current_step = name
        rec.update(status="running", start=round(now(), 3))
        self.emit({"event": "step", "step": name, "status": "start"})
        try:
            self.check()
            detail = fn() or {}
        except StepFailed as exc:
            rec.update(status="failed", end=round(now(), 3), reason=exc.reason)
            self.emit({"event": "step", "step": name, "status": "failed", "reason": exc.reason})
            raise
        except Interrupted as exc:
            rec.update(status="interrupted", end=round(now(), 3), reason=str(exc))
            self.emit({"event": "step", "step": name, "status": "interrupted", "reason": str(exc)})
            raise
        except Exception as exc:
            reason = "runner error in step %s: %s: %s\n%s" % (
                name,
                type(exc).__name__,
                exc,
                traceback.format_exc(),
            )
            rec.update(status="failed", end=round(now(), 3), reason=reason)
            self.emit({"event": "step", "step": name, "status": "failed", "reason": reason})
            raise StepFailed(reason) from exc
        rec.update(status="ok", end=round(now(), 3))
        event: Dict[str, Any] = {"event": "step", "step": name, "status": "ok"}
        if detail:
            event["detail"] = detail
            rec["detail"] = detail  # cell.json keeps it (orphans stopped, processes swept)
        self.emit(event)
