"""Server sessions: the cells of one queue whose server identity is equal share one server start.

The first cell starts the server as always; when the next cell of the queue has the same session
key (the controller's hash of everything that can change what the server is), the server is kept
running and that cell takes it over (`adopt`): it skips preflight's leftover checks and the start,
resets what could carry over (the controller's `reset` request, the playbook's `server.between`
command), checks readiness again and runs its own bench. The last cell of a session, or one that
fails before its bench or loses the server, stops it; a later cell then starts it anew.

The server writes one log for the whole session (outside every cell folder). Each cell's
`server.log` holds the start-up part (up to readiness) and then its own part: the bytes the server
wrote while that cell had it. cell.json's `session` block says which cell started the server,
this cell's place in the session, and the byte ranges copied.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import Any, Dict, List

from orchestrator.runner.context import SESSION_DIR_SUFFIX
from orchestrator.runner.layout import BETWEEN_LOG, SERVER_JSON, SERVER_LOG
from orchestrator.runner.protocol import (
    StepFailed,
    now,
    tail_lines,
    unlink_quietly,
    with_tail,
    write_json,
)
from orchestrator.runner.server import (
    FIRST_POLL,
    ServerSteps,
    file_size,
    http_get,
    http_post,
    next_poll,
)

ANSWER_POLL = 0.5  # the longest wait between asking a reset server whether it answers again


class SessionSteps(ServerSteps):
    """A cell's part in a server session: taking a running server over, and handing it on."""

    adopted = False

    def adopt(self, previous: "SessionSteps") -> None:
        """Take over the server `previous` (the queue's last cell) kept running for this one."""
        self.adopted = True
        self.proc = previous.proc
        self.server_pgid = previous.server_pgid
        self.server_start_time = previous.server_start_time
        self.server_record = previous.server_record
        self.server_log_path = previous.server_log_path
        self.server_log_fh = previous.server_log_fh
        previous.server_log_fh = None
        self.marker = previous.marker  # the session's processes carry its first cell's marker
        self.server_doc = dict(previous.server_doc)
        self.startup_end = previous.startup_end
        self.log_start = int(previous.session.get("log", {}).get("to", previous.startup_end))
        self.repo_dest = previous.repo_dest
        self.session = {
            "key": self.session_key,
            "after_cell": previous.cell_id,
            "index": int(previous.session.get("index", 0)) + 1,
            "first_cell": previous.session.get("first_cell", previous.cell_id),
            "started_server": False,
            "server_pid": self.proc.pid if self.proc is not None else None,
            "start_ready_seconds": previous.session.get(
                "start_ready_seconds", previous.ready_info.get("seconds")
            ),
        }

    def hand_over(self) -> bool:
        """Whether this cell leaves its server running for the next cell of the queue."""
        server = self.server or {}
        return bool(
            self.proc is not None
            and self.proc.poll() is None
            and self.status in ("passed", "failed")
            and self.failed_step in (None, "bench")
            and not self.stop_event.is_set()
            and server.get("restart", "per_config") != "per_cell"
            and self.next_session_key is not None
            and self.next_session_key == self.session_key
        )

    # preflight, server_start and ready of a cell that took a running server over
    def do_preflight_shared(self) -> Dict[str, Any]:
        """Orphans of dead runners are still stopped; the port is ours, the server too."""
        detail: Dict[str, Any] = {"session": self.session.get("first_cell")}
        self.clear_orphans(detail)
        return detail

    def do_server_shared(self) -> Dict[str, Any]:
        """No start: server.json is the session's, with a pointer to the cell that started it."""
        doc = dict(self.server_doc)
        doc["session"] = dict(self.session)
        write_json(self.path(SERVER_JSON), doc)
        return {"shared_with": self.session.get("first_cell"), "pid": doc.get("pid")}

    def do_ready_shared(self) -> Dict[str, Any]:
        """The server still runs; reset what could carry over; it still answers."""
        assert self.proc is not None
        start = now()
        self.raise_if_server_gone()
        detail: Dict[str, Any] = {"shared_with": self.session.get("first_cell")}
        between = (self.server or {}).get("between")
        if between:
            detail["between"] = self.run_between([str(a) for a in between])
            self.raise_if_server_gone()  # it may have died while `between` ran
        if self.reset.get("url"):
            detail["reset"] = self.reset_server(str(self.reset["url"]))
        url = ((self.server or {}).get("ready") or {}).get("url")
        if url:
            ready = (self.server or {}).get("ready") or {}
            self.wait_answering(str(url), float(ready.get("timeout", 60.0)))
        self.ready_info = {
            "seconds": round(now() - start, 3),
            "url": url,
            "shared": True,
            "start_ready_seconds": self.session.get("start_ready_seconds"),
        }
        self.container_inside_snapshot()  # the session's container, read once by its first cell
        detail["seconds"] = self.ready_info["seconds"]
        self.session["reset"] = {k: v for k, v in detail.items() if k in ("between", "reset")}
        return detail

    def raise_if_server_gone(self) -> None:
        """Fail this cell when the session's server exited since the previous cell, and tell
        the controller: the previous cell's record says its server did not survive it."""
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is not None:
            previous = str(self.session.get("after_cell") or "?")
            # the previous cell passed with this server: its record says it did not survive
            note = "its session's server exited (rc %s) after it, before cell %s started" % (
                rc,
                self.cell_id,
            )
            self.emit({"event": "note", "cell": previous, "note": note}, to_file=False)
            raise StepFailed(
                self.server_exit_reason(rc, "between cells of its session, after cell " + previous)
            )

    def run_between(self, argv: List[str]) -> Dict[str, Any]:
        """The playbook's `server.between` command, in the server's cwd with the cell's env."""
        log = self.path(BETWEEN_LOG)
        with open(log, "wb") as fh:
            try:
                proc = self.spawn(
                    argv,
                    cwd=self.server_cwd(),
                    env=self.base_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=fh,
                )
            except OSError as exc:
                raise StepFailed("cannot run server.between %r: %s" % (argv[0], exc)) from exc
            rc, timed_out, _why = self.wait_proc(proc, min(600.0, self.remaining()))
        if timed_out or rc != 0:
            raise StepFailed(
                with_tail(
                    "server.between %s failed (%s)"
                    % (" ".join(shlex.quote(a) for a in argv), "timed out" if timed_out else rc),
                    tail_lines(log),
                    BETWEEN_LOG,
                )
            )
        return {"argv": argv, "rc": rc}

    def reset_server(self, url: str) -> Dict[str, Any]:
        """POST the adapter's reset (SGLang /flush_cache, vLLM /reset_prefix_cache).

        A server that does not offer it (vLLM answers 404 outside its dev mode) is noted, not
        failed: the cell still runs, and its record says the cache was not reset.
        """
        result = http_post(url, 30.0)
        result["url"] = url
        result["ok"] = 200 <= int(result.get("status") or 0) < 300
        if not result["ok"]:
            self.emit({"event": "warning", "what": "reset", "detail": result})
        return result

    def wait_answering(self, url: str, timeout: float) -> None:
        """The readiness URL answers as declared again (a reset may take a moment)."""
        want = int(((self.server or {}).get("ready") or {}).get("status", 200))
        start = now()
        deadline = min(start + timeout, self.deadline)
        wait = FIRST_POLL
        last = ""
        while True:
            self.check()
            status, _body, err = http_get(url, max(0.5, min(5.0, deadline - now())))
            if status == want:
                return
            last = "HTTP %s" % status if status is not None else err
            if self.proc is not None and self.proc.poll() is not None:
                raise StepFailed(self.server_exit_reason(self.proc.returncode, "after a reset"))
            if now() >= deadline:
                raise StepFailed("the shared server stopped answering %s (%s)" % (url, last))
            self.stop_event.wait(wait)
            wait = next_poll(wait, ANSWER_POLL, now() - start)

    def write_server_log(self) -> None:
        """The cell's server.log: the start-up part, then this cell's part of the session's log."""
        if not os.path.exists(self.server_log_path):
            return
        end = file_size(self.server_log_path)
        start = self.log_start if self.adopted else 0
        with open(self.server_log_path, "rb") as src, open(self.path(SERVER_LOG), "wb") as out:
            if self.adopted:
                _copy_range(src, out, 0, self.startup_end)
                note = (
                    "[orch] start-up above (server started by cell %s); this cell's part of the "
                    "server log below (bytes %d-%d of the session's log)\n"
                    % (self.session.get("first_cell"), start, end)
                )
                out.write(note.encode("utf-8"))
            _copy_range(src, out, start, end)
        self.session["log"] = {"startup_bytes": self.startup_end, "from": start, "to": end}

    def end_session_log(self) -> None:
        """Remove the session's log once its server is stopped (every cell has its copy)."""
        if not self.keep_server and (self.proc is None or self.proc.poll() is not None):
            unlink_quietly(self.server_log_path)
            # and the folder the session's server ran in, when orch made it (server_cwd)
            first = str(self.session.get("first_cell") or self.cell_id)
            folder = os.path.join(self.run_dir, "." + first + SESSION_DIR_SUFFIX)
            if os.path.isdir(folder) and not os.path.islink(folder):
                shutil.rmtree(folder, ignore_errors=True)


def _copy_range(src: Any, out: Any, start: int, end: int) -> None:
    src.seek(start)
    left = max(0, end - start)
    while left > 0:
        chunk = src.read(min(left, 1 << 20))
        if not chunk:
            break
        out.write(chunk)
        left -= len(chunk)
