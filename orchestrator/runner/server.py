"""The server's life up to the bench: start, readiness (one back-off for every wait loop), and
the captures taken from its HTTP endpoints; preflight, before it, is runner/preflight.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from typing import Any, Dict, Optional, Tuple

from orchestrator.runner.container_steps import container_moved_warning, engine_env
from orchestrator.runner.context import SESSION_DIR_SUFFIX
from orchestrator.runner.layout import CAPTURES_DIR, SERVER_JSON, SERVER_LOG
from orchestrator.runner.preflight import PreflightSteps
from orchestrator.runner.procs import proc_info
from orchestrator.runner.protocol import (
    StepFailed,
    now,
    resolve_path,
    with_errors_and_tail,
    write_json,
)

# A server with no `ready:` check counts as ready once it has stayed up this long: one that exits
# at once (a bad flag, a missing model) fails at `ready` instead of passing a quick bench.
UNCHECKED_SETTLE_SECONDS = 1.0

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


def http_post(url: str, timeout: float, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """POST `body` as JSON (None: an empty body): {"status", "body"} or {"error"}; never raises."""
    if body is None:
        request = urllib.request.Request(url, data=b"", method="POST")
    else:
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            return {"status": int(resp.status), "body": resp.read(500).decode("utf-8", "replace")}
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(500).decode("utf-8", "replace")
        except Exception:
            text = ""
        return {"status": int(exc.code), "body": text}
    except Exception as exc:
        return {"error": "%s: %s" % (type(exc).__name__, getattr(exc, "reason", exc))}


def generate_once(url: str, body: Dict[str, Any], timeout: float) -> Tuple[bool, str]:
    """POST one completion request: (it generated, what was wrong when it did not)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            answer = resp.read(65536)
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(300).decode("utf-8", "replace")
        except Exception:
            text = ""
        return False, "HTTP %d from %s %s" % (exc.code, url, text.strip())
    except Exception as exc:
        reason = getattr(exc, "reason", None)
        return False, "%s: %s" % (type(exc).__name__, reason if reason is not None else exc)
    try:
        doc = json.loads(answer.decode("utf-8"))
    except ValueError:
        return False, "200 from %s but not JSON" % url
    if isinstance(doc, dict) and isinstance(doc.get("choices"), list) and doc["choices"]:
        return True, ""
    return False, "200 from %s without choices" % url


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


class ServerSteps(PreflightSteps):
    """Steps 5, 6 and 7 of a cell: server_start, ready, capture_ready (after preflight)."""

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
            default = os.path.join(self.run_dir, "." + self.cell_id + SESSION_DIR_SUFFIX)
            os.makedirs(default, exist_ok=True)
        cwd = self.server.get("cwd")
        return resolve_path(str(cwd), default) if cwd else default

    log_append = False  # `bench.starts`: a restart appends to the log its earlier starts wrote
    log_from = 0  # where this start's part of the log begins (its readiness is looked for there)

    def do_server_start(self) -> Dict[str, Any]:
        server = self.server
        assert server is not None
        argv = [str(a) for a in server["argv"]]
        cwd = self.server_cwd()
        if not os.path.isdir(cwd):
            raise StepFailed("server cwd %s does not exist" % cwd)
        self.log_from = file_size(self.server_log_path) if self.log_append else 0
        env = self.server_env()
        container: Optional[Dict[str, Any]] = None
        if self.container_spec_doc() is not None:  # pulled here: `run` starts it at once
            argv, container = self.container_start_argv(argv, env)
            env = engine_env(container, env)
        # Kept open for the server's whole life (its session); closed in do_stop/finish.
        self.server_log_fh = open(self.server_log_path, "ab" if self.log_append else "wb")  # noqa: SIM115
        try:
            self.proc = self.spawn(
                argv,
                cwd=cwd,
                env=env,
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
            "env_defaults": self.adapter_env_note(),
            "markers": {"ORCH_RUN_ID": self.run_id, "ORCH_CELL_ID": self.cell_id},
            "started": now(),
        }
        if container is not None:
            self.server_doc["container"] = container  # before the check: stop finds it
            write_json(self.path(SERVER_JSON), self.server_doc)
            self.container_started(container, pid)
        write_json(self.path(SERVER_JSON), self.server_doc)
        self.session = {
            "key": self.session_key,
            "index": 0,
            "first_cell": self.cell_id,
            "started_server": True,
            "server_pid": pid,
        }
        if container is not None and container.get("tag_moved_to"):
            return {"pid": pid, "warning": container_moved_warning(container)}
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
                scanner.pos = self.log_from
            except re.error as exc:
                raise StepFailed("server.ready.log is not a valid regex: %s" % exc) from exc
        start = now()
        deadline = min(start + timeout, self.deadline)
        url_ok = not url
        log_ok = scanner is None
        gen_url = ready.get("generate_url")
        gen_body = ready.get("generate_body")
        generated = not gen_url
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
            if url_ok and log_ok and not generated and gen_url:
                per_request = max(1.0, min(60.0, deadline - now()))
                generated, why = generate_once(gen_url, dict(gen_body or {}), per_request)
                if not generated:
                    last = "one-token completion failed: %s" % why
                    if self.proc.poll() is not None:
                        continue  # the engine died on its first request: say so, with its log
            if url_ok and log_ok and generated and now() >= settle_until:
                break
            if now() >= deadline:
                parts = []
                if not url_ok or not generated:
                    parts.append(last)
                if not log_ok:
                    parts.append("log pattern %r not seen" % ready.get("log"))
                raise StepFailed(
                    with_errors_and_tail(
                        "server not ready after %gs (%s)"
                        % (round(now() - start, 1), "; ".join(parts)),
                        self.server_log_path,
                        SERVER_LOG,
                    )
                )
            self.stop_event.wait(interval)
            interval = next_poll(interval, declared, now() - start)
        self.startup_end = file_size(self.server_log_path)
        self.ready_info = {"seconds": round(now() - start, 3), "url": url, "log": ready.get("log")}
        if gen_url:
            self.ready_info["generate"] = gen_url
        self.container_inside_snapshot()  # up and answering: its imports are what it serves
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
                    os.makedirs(self.path(CAPTURES_DIR), exist_ok=True)
                    with open(self.path(CAPTURES_DIR, "%s.%s.json" % (name, moment)), "wb") as fh:
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
